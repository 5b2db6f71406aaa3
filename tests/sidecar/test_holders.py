"""`redlease sidecar --holders N`: N active replicas of M, with real sidecars on real Redis.

Four sidecars with ``--holders 2``: exactly two lead, with distinct tokens, and every
``/status`` lists the same two holders; a SIGTERM hands a slot to a standby at once, a SIGKILL
after the TTL; the observer never proves three terms active at once (real-time order).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Observer, Sample, Sidecar, env, wait_until

TTL, DEADLINE, RETRY = 3.0, 2.0, 0.1
N = 2


def start(start: Callable[..., Sidecar], urls: Sequence[str], lock: str, m: int) -> list[Sidecar]:
    scs = [start(f"pod-{i}", lock, list(urls), ttl=TTL, renew_deadline=DEADLINE,
                 retry_period=RETRY, extra=["--holders", str(N)]) for i in range(m)]  # fmt: skip
    for sc in scs:
        sc.wait_up()
    return scs


def settled(scs: list[Sidecar], timeout: float = 20.0) -> list[Sidecar]:
    """The N leaders, once exactly N lead with distinct tokens and every sidecar's /status
    lists those N as the holders."""

    def check() -> list[Sidecar] | None:
        docs = {sc.identity: sc.status() for sc in scs}
        if any(d is None for d in docs.values()):
            return None
        leaders = [sc for sc in scs if docs[sc.identity]["leader"]]  # type: ignore[index]
        if len(leaders) != N:
            return None
        own = sorted((sc.identity, docs[sc.identity]["fencing_token"]) for sc in leaders)  # type: ignore[index]
        if len({token for _, token in own}) != N:
            return None
        for doc in docs.values():
            assert doc is not None
            listed = sorted((h["holder"], h["fencing_token"]) for h in doc["holders"])
            if listed != own or doc["holders_limit"] != N:
                return None
        return leaders

    found: list[Sidecar] = wait_until(check, timeout=timeout, step=0.05)
    return found


def takeover(obs: Observer, standbys: list[Sidecar], since: float, timeout: float) -> float:
    """Seconds from ``since`` until the observer saw one of ``standbys`` lead."""
    elapsed: float = wait_until(lambda: obs.led_after(since, standbys), timeout=timeout, step=0.005)
    return elapsed


@pytest.mark.slow
def test_two_of_four_lead_and_sigterm_hands_a_slot_over_at_once(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    scs = start(sidecars, [redis_server.url], lock_name, 4)
    with Observer(scs) as obs:
        leaders = settled(scs)
        standbys = [sc for sc in scs if sc not in leaders]
        gone = leaders[0]
        t0 = time.monotonic()
        gone.signal(signal.SIGTERM)
        elapsed = takeover(obs, standbys, t0, timeout=TTL * 3)
        assert gone.wait() == 0
        now = settled([sc for sc in scs if sc is not gone])
        assert leaders[1] in now  # the other holder kept its slot
        time.sleep(0.2)  # a few more samples after the hand-off
    print(f"SIGTERM: a standby led {elapsed * 1000:.1f} ms later")  # shown with -s
    assert elapsed < TTL / 2, f"SIGTERM hand-off took {elapsed:.3f}s (TTL {TTL}s)"
    assert obs.violations(holders=N) == []
    assert sum(s.leader for s in obs.samples) > 0


@pytest.mark.slow
def test_sigkill_of_a_holder_frees_its_slot_after_the_ttl(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    scs = start(sidecars, [redis_server.url], lock_name, 3)
    with Observer(scs) as obs:
        leaders = settled(scs)
        standby = next(sc for sc in scs if sc not in leaders)
        gone = leaders[0]
        t0 = time.monotonic()
        gone.signal(signal.SIGKILL)
        elapsed = takeover(obs, [standby], t0, timeout=TTL * 4)
        settled([sc for sc in scs if sc is not gone])
    # the dead holder's slot expires with its lease, not at once: a leading sidecar renewed
    # within its renew deadline, so its slot lived at least TTL - DEADLINE past the kill
    print(f"SIGKILL: the standby led {elapsed:.3f} s later (TTL {TTL} s)")  # shown with -s
    assert elapsed > TTL - DEADLINE, f"took over after {elapsed:.3f}s, before the slot expired"
    assert obs.violations(holders=N) == []


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
def test_two_holders_on_a_redlock_set_of_three(
    redis_nodes: list[RedisServer], sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """On 3 nodes a semaphore of 2 needs every node per grant (floor(2*3/3) + 1 = 3)."""
    scs = start(sidecars, [s.url for s in redis_nodes], lock_name, 3)
    with Observer(scs) as obs:
        leaders = settled(scs)
        doc = leaders[0].status()
        assert doc is not None and doc["nodes"]["quorum"] == 3
        gone = leaders[0]
        t0 = time.monotonic()
        gone.signal(signal.SIGTERM)
        elapsed = takeover(obs, [sc for sc in scs if sc not in leaders], t0, timeout=TTL * 3)
        assert gone.wait() == 0
    print(f"RedLock SIGTERM: a standby led {elapsed * 1000:.1f} ms later")  # shown with -s
    assert elapsed < TTL / 2
    assert obs.violations(holders=N) == []


def test_the_observer_proves_three_active_only_from_real_time_order() -> None:
    """The check the tests above rely on: spans from the first arrival of a claim to the last
    request answered with one; three spans covering one instant are three active terms."""
    obs = Observer([])

    def claim(who: str, token: int, sent: float) -> None:
        obs.samples.append(Sample(who, sent, sent + 0.01, True, token))

    for t in (0.0, 1.0):
        claim("a", 1, t)
        claim("b", 2, t)
    claim("c", 3, 1.02)  # arrived after a's and b's last claims were sent: a hand-over
    assert obs.overlaps(2) == []
    claim("a", 1, 1.5)  # a still claimed token 1 while b and c did: 3 at once
    claim("b", 2, 1.5)
    claim("c", 3, 1.6)
    (why,) = obs.overlaps(2)
    assert "3 terms active at once" in why
    claim("d", 3, 2.0)
    assert obs.overlaps(2) == ["token 3 claimed by c and d"]


def _pairs(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return sorted((h["holder"], h["fencing_token"]) for h in doc["holders"])


def _file_says(sc: Sidecar, holders: list[tuple[str, int]], leader: bool) -> bool:
    written = json.loads(sc.state_file.read_text())
    return _pairs(written) == holders and written["leader"] == leader


@pytest.mark.slow
def test_status_state_file_and_cli_name_the_same_holders(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """One view, three surfaces: each sidecar's /status and state file, and `redlease status`
    read from Redis, list the same N holders with the same tokens, also after a holder was
    killed and its slot went to the standby."""
    scs = start(sidecars, [redis_server.url], lock_name, 3)
    leaders = settled(scs)
    for gone in (None, leaders[0]):
        if gone is not None:
            gone.signal(signal.SIGKILL)
            gone.wait()
        live = [sc for sc in scs if sc is not gone]
        now = settled(live, timeout=TTL * 4)
        expected = sorted((sc.identity, sc.status()["fencing_token"]) for sc in now)  # type: ignore[index]
        for sc in live:
            doc = sc.status()
            assert doc is not None and _pairs(doc) == expected
            # the file is written by the same publication; poll it rather than assume the order
            wait_until(partial(_file_says, sc, expected, doc["leader"]), timeout=10)
        proc = subprocess.run(
            [sys.executable, "-m", "redlease", "status", "--lock", lock_name, "--json",
             "--redis", redis_server.url, "--holders", str(N)],
            env=env(), cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert _pairs(json.loads(proc.stdout)) == expected
