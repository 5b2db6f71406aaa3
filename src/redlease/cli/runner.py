"""How `redlease run` runs COMMAND only while this process leads (:mod:`redlease.cli.run`
parses it).

The election is the sidecar's (:class:`~redlease.sidecar.elector.SidecarElector`: the one campaign
loop with the sidecar's rules; `run` declines every acquire after its one term). Once elected,
COMMAND starts in its own process group with ``REDLEASE_FENCING_TOKEN`` set. When the lease is
lost (at the local renew deadline) the group gets SIGTERM, then SIGKILL after ``grace`` seconds;
the default grace ends half-way between the renew deadline and the TTL, so COMMAND is gone
before the lease can be granted to anyone else. The exit status is COMMAND's (128 + N when a
signal N ended it); SIGTERM/SIGINT to `redlease run` are passed on to COMMAND the same way.
Its own exit statuses are :mod:`redlease.cli.run`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from redlease.cli.runspec import LEASE_LOST, NOT_EXECUTABLE, NOT_FOUND, UNAVAILABLE, RunConfig
from redlease.core.timing import call_timeout, safe_grace
from redlease.kube.auth import required
from redlease.sidecar.config import ElectionConfig
from redlease.sidecar.election import Transition
from redlease.sidecar.elector import Hooks, SidecarElector

if TYPE_CHECKING:
    from redlease.sidecar.lockref import LockRefFollower

log = structlog.get_logger("redlease.run")


# The environment `redlease run` reads its Redis credentials from (URLs may carry them too).
CREDENTIAL_ENV = ("REDLEASE_PASSWORD", "REDLEASE_USERNAME", "REDLEASE_REDIS")


def child_environment(environ: Mapping[str, str], keep_credentials: bool) -> dict[str, str]:
    """COMMAND's environment: ours without the Redis credentials, unless asked to keep them."""
    if keep_credentials:
        return dict(environ)
    return {k: v for k, v in environ.items() if k not in CREDENTIAL_ENV}


class _Hooks(Hooks):
    def __init__(self, lock: str, wait: float | None) -> None:
        self.lock = lock
        self.wait = wait
        self.elected = asyncio.Event()
        self.lost = asyncio.Event()
        self.refusals = asyncio.Event()  # an attempt found the lock held
        self.failures = asyncio.Event()  # an attempt failed (outage)
        self.last: str | None = None  # the last attempt's outcome: "refused" or "failed"
        self.error_kind = ""
        self.token: int | None = None
        self.holder: str | None = None
        self.told = False
        self.news = asyncio.Event()  # anything happened: an attempt ended, a view was read

    def changed(self) -> None:
        self.news.set()

    def transition(self, transition: Transition) -> None:
        if transition.kind == "elected":
            self.token = transition.fencing_token
            self.elected.set()
        elif transition.kind in ("lost", "stepped_down"):
            self.lost.set()
        elif transition.kind == "observed" and transition.holder != self.holder:
            self.holder = transition.holder
            if self.told and self.holder is not None:
                self._tell()

    def check_durability(self) -> bool:
        return False  # a normal run logs nothing above info; nothing in flight at its exit

    def acquire_timeout(self, planned: float) -> float | None:
        if self.lost.is_set() or self.elected.is_set():
            return None  # one term per run: never take the lease again while stopping
        return 0.0 if self.wait == 0 else planned

    def refused(self, holder: str | None = None) -> None:
        self.last = "refused"
        self.news.set()
        if holder is not None:
            self.holder = holder
        self.refusals.set()
        if not self.told and self.wait != 0:
            self.told = True
            self._tell()

    def error(self, kind: str) -> None:
        self.error_kind = kind
        if not self.elected.is_set():
            self.last = "failed"
            self.failures.set()
            self.news.set()

    def _tell(self) -> None:
        log.info(
            "waiting for the lease",
            lock=self.lock,
            holder=self.holder or "unknown",
            timeout="none" if self.wait is None else self.wait,
        )


def gave_up(last: str | None, reachable: bool | None) -> bool:
    """Whether a run that was not elected gave up for an outage (pure): its last attempt failed,
    or none ended and the latest lock view did not reach a quorum (or none was read). Otherwise
    the lease was held by another."""
    if last is not None:
        return last == "failed"
    return not reachable


def _say(line: str) -> None:
    """The one line a CronJob's log needs when COMMAND did not run."""
    print(f"redlease: {line}", file=sys.stderr, flush=True)  # noqa: T201


def exit_code(returncode: int) -> int:
    """A process's exit status as a shell reports it (signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


async def _first(*aws: asyncio.Future[Any]) -> None:
    await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)


async def stop_process(proc: asyncio.subprocess.Process, grace: float) -> int:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds; returns the exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            await proc.wait()
    except TimeoutError:
        log.warning("command ignored SIGTERM, sending SIGKILL", pid=proc.pid, grace=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group
    assert proc.returncode is not None
    return exit_code(proc.returncode)


async def run_async(config: RunConfig) -> int:
    terminate = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, terminate.set)
    if config.lock_ref is None:
        assert config.election is not None
        return await _run(config, config.election, terminate, None)
    # only --lock-ref talks to the Kubernetes API: the HTTP stack is imported for it alone
    from redlease.kube.client import KubeClient
    from redlease.sidecar.lockref import LockRefFollower

    kube = KubeClient(required(config.kube))
    try:
        holder: list[SidecarElector] = []  # the elector, once the first read made it

        def reconfigure(election: ElectionConfig) -> None:
            for elector in holder:
                elector.reconfigure(election)

        follower = LockRefFollower(kube, config.lock_ref, config.identity, reconfigure)
        initial = asyncio.ensure_future(follower.initial())
        stop = asyncio.ensure_future(terminate.wait())
        await _first(initial, stop)
        stop.cancel()
        if not initial.done():
            initial.cancel()
            return 128 + signal.SIGTERM
        return await _run(config, initial.result(), terminate, (follower, holder))
    finally:
        await kube.close()


async def _run(
    config: RunConfig,
    election_cfg: ElectionConfig,
    terminate: asyncio.Event,
    follow: tuple[LockRefFollower, list[SidecarElector]] | None,
) -> int:
    safe = safe_grace(election_cfg.timing)
    grace = safe if config.grace is None else config.grace
    if grace > safe:
        log.warning(
            "grace period is longer than the safety margin: COMMAND may still run when "
            "another holder starts",
            grace=grace,
            safe=safe,
        )
    hooks = _Hooks(election_cfg.lock, config.wait)
    elector = SidecarElector(election_cfg, hooks)
    election = asyncio.create_task(elector.run())
    following = None
    if follow is not None:
        follow[1].append(elector)
        following = asyncio.create_task(follow[0].run())
    term_wait = asyncio.ensure_future(terminate.wait())
    try:
        if not await _elected(hooks, config.wait, term_wait, election):
            if term_wait.done():
                return 128 + signal.SIGTERM
            # a --timeout shorter than the first attempt or read: learn which it was first
            await _first_word(hooks, elector, call_timeout(election_cfg.timing) + 1.0)
            observed = elector.election.observed
            reachable = None if observed is None else observed.view.nodes.reachable
            if gave_up(hooks.last, reachable):
                errors = {} if observed is None else observed.view.errors
                seen = "; ".join(f"{node}: {error}" for node, error in errors.items())
                why = elector.last_outage or seen or hooks.error_kind or "no quorum answered"
                why = why.removeprefix(f"lock {election_cfg.lock!r}: ")
                _say(f"lease {election_cfg.lock!r}: Redis not reached ({why}): COMMAND not run")
                return UNAVAILABLE
            holder = hooks.holder
            if holder is None and observed is not None:
                holder = observed.view.holder
            _say(
                f"lease {election_cfg.lock!r} is held by {holder or 'another holder'}: "
                "COMMAND not run"
            )
            return config.conflict_exit
        env = child_environment(os.environ, config.keep_credentials)
        env["REDLEASE_FENCING_TOKEN"] = str(hooks.token)
        try:
            proc = await asyncio.create_subprocess_exec(
                *config.command, env=env, start_new_session=True
            )
        except OSError as exc:
            code = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
            print(f"redlease: COMMAND {config.command[0]!r}: {exc.strerror}", file=sys.stderr)
            return code
        log.info(
            "command started",
            lock=elector.config.lock,
            fencing_token=hooks.token,
            pid=proc.pid,
        )
        exited = asyncio.ensure_future(proc.wait())
        lost = asyncio.ensure_future(hooks.lost.wait())
        await _first(exited, lost, term_wait)
        lost.cancel()
        if exited.done() and not hooks.lost.is_set():
            code = exit_code(exited.result())
            log.info("command exited", lock=elector.config.lock, code=code)
            return code
        if hooks.lost.is_set():
            # no new attempt while the command winds down (the hooks refuse one, too)
            if following is not None:
                following.cancel()
            elector.reconfigure(dataclasses.replace(elector.config, paused=True))
            log.warning("lease lost: stopping the command", lock=elector.config.lock)
        code = await stop_process(proc, grace)
        log.info("command stopped", lock=elector.config.lock, code=code)
        return LEASE_LOST if hooks.lost.is_set() else code
    finally:
        term_wait.cancel()
        if following is not None:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        elector.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await election


async def _first_word(hooks: _Hooks, elector: SidecarElector, limit: float) -> None:
    """Wait until an attempt ended or a lock view was read (at most ``limit`` seconds, the
    observer's read timeout and a margin): held and outage are told apart by what was seen."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(limit):
            while hooks.last is None and elector.election.observed is None:
                hooks.news.clear()
                await hooks.news.wait()


async def _elected(
    hooks: _Hooks,
    wait: float | None,
    term_wait: asyncio.Future[Any],
    election: asyncio.Task[None],
) -> bool:
    """Wait until elected (True), or until ``wait`` ran out, a ``--try`` attempt was refused or
    failed, SIGTERM, or the election ended (False)."""
    events = [hooks.elected]
    if wait == 0:
        events += [hooks.refusals, hooks.failures]
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        async with asyncio.timeout(wait if wait else None):
            await _first(*waiters, term_wait, election)
    except TimeoutError:
        pass
    finally:
        for w in waiters:
            w.cancel()
    return hooks.elected.is_set()


def run_command(config: RunConfig) -> int:
    return asyncio.run(run_async(config))
