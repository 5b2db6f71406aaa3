"""How an asynchronous Sentinel failover can lose a lease, and how ``replicas=1`` closes that.

One trial: a fresh Sentinel deployment (master, one replica behind a TCP proxy, three
Sentinels); the replica is ``lag`` seconds behind (the proxy delays the replication stream).
Client A acquires on the master (with ``replicas`` WAIT, or none). Right after A's acquire
returns or fails, the replication link is cut (what the replica had not received is gone, as
when a master dies with its output buffer) and the master is SIGKILLed; with ``lag=0`` nothing
is cut (the natural loopback race). The Sentinels promote the replica. Client B then tries
to acquire (non-blocking, every 20 ms) until A's local deadline has passed. If A believed it
held the lease and B got it before A's deadline, the lease was **lost**: two holders, for
``overlap_ms`` (A's local deadline minus the moment B's acquire returned).

``python bench/sentinel_window.py --trials 10`` prints the table of docs/safety.md.
"""

from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import dataclass

from redlease import Lock, LockContention, LockUnavailable
from redlease.core.connect import connect
from redlease.devtools.localsentinel import SentinelDeployment


@dataclass(frozen=True)
class Mode:
    name: str
    lag: float  # seconds the replica is behind (0: no proxy delay, no cut)
    replicas: int  # WAIT for this many replicas (0: none)
    replica_timeout: float = 0.1


MODES = (
    Mode("no WAIT, loopback (no lag)", 0.0, 0),
    Mode("no WAIT, replica 200 ms behind", 0.2, 0),
    Mode("replicas=1, WAIT 1 s, replica 200 ms behind", 0.2, 1, 1.0),
    Mode("replicas=1, WAIT 0.1 s, replica 200 ms behind", 0.2, 1, 0.1),
)


@dataclass
class Trial:
    mode: Mode
    held: bool  # A's acquire returned a lease
    error: str  # why A's acquire failed ("" when it held)
    token_a: int | None
    token_b: int | None  # B's token, if B got the lock before A's deadline
    overlap_ms: float  # > 0: B held while A still believed it held (a lost lease)
    failover_s: float  # master killed -> the Sentinels name the promoted replica

    @property
    def lost(self) -> bool:
        return self.held and self.overlap_ms > 0


def trial(mode: Mode, ttl: float = 8.0) -> Trial:
    name = f"window-{uuid.uuid4().hex[:8]}"
    with SentinelDeployment(link_proxy=True) as deployment:
        (link,) = deployment.links
        link.delay = mode.lag
        a_client = connect([deployment.url], socket_timeout=2.0)
        b_client = connect([deployment.url], socket_timeout=2.0)
        try:
            a = Lock(
                a_client,
                name,
                ttl=ttl,
                identity="a",
                replicas=mode.replicas,
                replica_timeout=mode.replica_timeout,
            )
            held, error, token_a, deadline = False, "", None, time.monotonic() + ttl
            try:
                lease = a.acquire(blocking=False)
                held, token_a, deadline = True, lease.fencing_token, lease.deadline
            except LockUnavailable as exc:
                error = type(exc).__name__
            old = deployment.current_master()
            if mode.lag:
                link.cut()
            old.kill()
            killed = time.monotonic()
            deployment.wait_failover(old, timeout=60)
            failover = time.monotonic() - killed
            b = Lock(b_client, name, ttl=ttl, identity="b")
            token_b, overlap = None, 0.0
            while time.monotonic() < deadline:
                try:
                    got = b.acquire(blocking=False)
                except (LockContention, LockUnavailable):
                    time.sleep(0.02)  # a retry period, not synchronisation
                    continue
                token_b, overlap = got.fencing_token, (deadline - time.monotonic()) * 1000
                break
            return Trial(mode, held, error, token_a, token_b, max(0.0, overlap), failover)
        finally:
            a_client.close()
            b_client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    print("| mode | trials | A held | lost leases | overlap ms (max) | token reused | failover s |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        trials = [trial(mode) for _ in range(args.trials)]
        lost = [t for t in trials if t.lost]
        reused = sum(
            1 for t in lost if t.token_b is not None and t.token_a is not None
            and t.token_b <= t.token_a
        )  # fmt: skip
        overlap = max((t.overlap_ms for t in lost), default=0.0)
        failovers = sorted(t.failover_s for t in trials)
        errors = {t.error for t in trials if t.error}
        held = sum(t.held for t in trials)
        print(
            f"| {mode.name} | {len(trials)} | {held}"
            + (f" (else {', '.join(sorted(errors))})" if errors else "")
            + f" | {len(lost)} | {overlap:.0f} | {reused} | "
            f"{failovers[0]:.1f}-{failovers[-1]:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
