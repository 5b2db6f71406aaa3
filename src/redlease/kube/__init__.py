"""Everything Kubernetes that the sidecar and the operator share.

:mod:`.spec` (the DistributedLock model: API names, parsing, defaults, validation, Secret
decoding; pure), :mod:`.resolver` (from a DistributedLock to the spec a client connects with:
scope, credentials, TLS material), :mod:`.lease` (the ``coordination.k8s.io`` Lease record and
its compare-and-swap patch; pure), :mod:`.leasewriter` (the one Lease writer), :mod:`.events`
(the ``v1`` Event builder; pure), :mod:`.paths` (every API path; pure), :mod:`.verbs` (every
call, one module per verb) over :mod:`.client` (the asyncio API client). Below the sidecar and
the operator, above the core: the core imports nothing from here.
"""
