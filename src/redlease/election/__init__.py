"""Leader election over a lock: the layer between the core (Redis leases, the pure term
machine in :mod:`redlease.core.term`, the timing rules in :mod:`redlease.core.timing`) and
Kubernetes.

:mod:`.campaign` runs the term machine against a lock backend (client-go's ``LeaderElector``
over ``resourcelock.Interface``: one typed method per verb, ``acquire`` / ``renew`` /
``release``, answered with ``Granted`` or ``Refused``); a Redis lease is one backend
(:class:`~redlease.election.campaign.RedisLease`), the Kubernetes Lease another
(``redlease.kube.leaselock``). :mod:`.elector` is the public elector (``redlease.Elector``,
``redlease.aio.Elector``). The sidecar (``redlease.sidecar``) and the operator
(``redlease.operator.leadership``) give the campaign their own rules and hooks.
"""
