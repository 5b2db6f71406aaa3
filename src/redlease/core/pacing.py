"""The pacing of one acquisition: when it registers as a waiter, how long it waits, when it
gives up (honest timeouts). Shared by the single-lock and multi-key acquire flows."""

from __future__ import annotations

from typing import NoReturn

from redlease.core.clock import Clock
from redlease.core.primitives import Options
from redlease.core.replies import Outcome
from redlease.errors import LockContention, LockTimeout


class Pacing:
    """The timing of one acquisition: when it registers as a waiter, how long each wait for a
    wake token may last, when it gives up. Honest timeouts: it gives up only after an attempt
    made at or after the deadline. Shared by every acquire flow."""

    def __init__(
        self,
        opts: Options,
        *,
        blocking: bool,
        timeout: float | None,
        clock: Clock,
        socket_timeout: float | None,
    ) -> None:
        self.opts = opts
        self.blocking = blocking
        self.timeout = timeout
        self.clock = clock
        self.deadline = None if timeout is None else clock() + max(0.0, timeout)
        self.max_step = opts.max_wait_step
        if socket_timeout:  # one BLPOP must not outlast the socket timeout
            self.max_step = min(self.max_step, socket_timeout * 0.8)
        self.step = self.max_step
        self.registering = False

    def attempt(self) -> int:
        """Start an attempt: the waiter registration (ms) to send with it (0: do not register)."""
        remaining = None if self.deadline is None else self.deadline - self.clock()
        self.registering = self.blocking and (remaining is None or remaining > 0)
        self.step = self.max_step if remaining is None else min(self.max_step, max(remaining, 0.0))
        return round((self.step + self.opts.registration_grace) * 1000) if self.registering else 0

    def refused(self, lock: str, outcome: Outcome, what: str = "") -> float:
        """After a refused attempt: seconds to wait for a wake token, or raise LockTimeout
        (blocking, deadline reached) or LockContention (non-blocking). ``what`` names the lock
        that refused, when that is not ``lock`` itself."""
        if not self.registering:
            self.give_up(lock, outcome.holder, what)
        wait = self.step
        if self.deadline is not None:  # the reply took time: the wait still ends at the deadline
            wait = min(wait, self.deadline - self.clock())
        if outcome.wait_hint_ms >= 0:
            # wake at the holder's expiry even if nobody releases (crashed holder)
            wait = min(wait, outcome.wait_hint_ms / 1000 + 0.001)
        return max(wait, 0.001)

    def give_up(self, lock: str, holder: str | None, what: str = "") -> NoReturn:
        """Raise LockTimeout (blocking) or LockContention (non-blocking): ``holder`` held the
        lock at the last attempt."""
        self.registering = False
        where = f"{what} " if what else ""
        if self.blocking:
            raise LockTimeout(
                lock, f"{where}not acquired within {self.timeout:.3f}s", holder=holder
            )
        raise LockContention(lock, f"{where}held by another owner", holder=holder)
