{{/* Chart name, truncated to 63 characters. */}}
{{- define "redlease.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "redlease.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "redlease.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "redlease.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "redlease.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redlease.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "redlease.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "redlease.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespaces the operator manages (the release namespace when none are given). */}}
{{- define "redlease.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces }}
{{- toJson .Values.operator.watchNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/* The restricted Pod Security container context. */}}
{{- define "redlease.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Operator RBAC rules (namespaced or cluster-wide). */}}
{{/* The operator's rules; Secrets only when asked (readSecrets) and, cluster-wide, only with
operator.secretsClusterWide (else Roles in operator.secretNamespaces: rbac.yaml). */}}
{{- define "redlease.operatorRules" -}}
- apiGroups: ["redlease.dev"]
  resources: ["distributedlocks"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["redlease.dev"]
  resources: ["distributedlocks/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]  # kopf posts core/v1 Events (events.k8s.io is not used)
  resources: ["events"]
  verbs: ["create"]
- apiGroups: [""]  # the redlease.dev/shared-keys label (in a Role: that namespace only)
  resources: ["namespaces"]
  verbs: ["get"]
{{- if and .Values.operator.readSecrets (or (not .Values.operator.watchAllNamespaces) .Values.operator.secretsClusterWide) }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* An image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "redlease.imageRef" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}

{{/* The operator's image. */}}
{{- define "redlease.image" -}}
{{- include "redlease.imageRef" (dict "repository" .Values.image.repository "tag" (.Values.image.tag | default .Chart.AppVersion) "digest" .Values.image.digest) }}
{{- end }}

{{/* Sidecar injection: names shared by the webhook objects and the operator Deployment. */}}
{{- define "redlease.webhookName" -}}
{{- printf "%s-webhook" (include "redlease.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "redlease.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "redlease.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image of injected sidecars (the chart's image unless injection.sidecarImage says). */}}
{{- define "redlease.sidecarImage" -}}
{{- $own := .Values.injection.sidecarImage }}
{{- $repo := $own.repository | default .Values.image.repository }}
{{- $tag := $own.tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- $digest := $own.digest | default (ternary .Values.image.digest "" (and (not $own.repository) (not $own.tag))) }}
{{- include "redlease.imageRef" (dict "repository" $repo "tag" $tag "digest" $digest) }}
{{- end }}

{{/* Which namespaces the webhook sees: the value, else the operator's namespaces (its RBAC
covers exactly those), else (cluster-wide) all but the control plane's. */}}
{{- define "redlease.injectionNamespaceSelector" -}}
{{- if .Values.injection.namespaceSelector }}
{{- toYaml .Values.injection.namespaceSelector }}
{{- else if .Values.operator.watchAllNamespaces }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: ["kube-system", "kube-node-lease"]
{{- else }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values: {{ include "redlease.watchNamespaces" . }}
{{- end }}
{{- end }}
