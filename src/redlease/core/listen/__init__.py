"""The listeners of a lock's waiters in one process: one BLPOP per client and lock for all its
waiters (a thread: :mod:`._sync`; a task: :mod:`._async`), over the pure
:class:`~redlease.core.waiting.WaitList`."""
