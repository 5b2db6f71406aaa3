"""Every Kubernetes call redlease makes (besides kopf's own), one module per verb, one function
per kind it is used on, as kopf's ``_cogs/clients`` (``fetching``, ``patching`` ...) are:
:mod:`.get`, :mod:`.watch`, :mod:`.patch`, :mod:`.create`. Each is one attempt through
:class:`~redlease.kube.client.KubeClient` (a :class:`~redlease.errors.KubeError` says what went
wrong; the caller decides whether to try again), on a path from :mod:`redlease.kube.paths`.

Read as ``get.lock(client, namespace, name)``, ``patch.pod(...)``, ``create.event(...)``.
"""
