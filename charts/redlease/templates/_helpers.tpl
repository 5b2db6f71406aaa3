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
{{- if .Values.operator.readSecrets }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
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
{{- $repo := .Values.injection.sidecarImage.repository | default .Values.image.repository }}
{{- $tag := .Values.injection.sidecarImage.tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- printf "%s:%s" $repo $tag }}
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
