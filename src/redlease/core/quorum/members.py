"""The node set's membership (restart rule; sans-I/O, docs/quorum.md "Bringing nodes back"):
which nodes count toward quorums now, marking a brand-new set or nodes on a birth list, and
re-seeding the fence counters of a node that lost its data before it counts again. Decisions
come from :mod:`redlease.core.restart`; the flows yield :mod:`.protocol` requests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from redlease.core import scripts
from redlease.core.intents import RaiseFence
from redlease.core.quorum import _probe
from redlease.core.quorum.protocol import (
    NODE_READ,
    Batch,
    Command,
    FanOut,
    Marked,
    ProbesFlow,
    QFlow,
    Settings,
)
from redlease.core.requests import Call
from redlease.core.restart import (
    REJOINING,
    Probe,
    birth_list,
    births,
    born_members,
    brand_new,
    clock_seed,
    may_rejoin,
    membership,
    standing,
)
from redlease.core.rules import Down, Reply, Result, reseed_sources

FENCE_PATTERN = "redlease:{*}:fence"
# why a node that has not answered its first probe does not count: it may be slow or hung as
# well as unreachable (a refused or failed connect is reported with its own error instead)
STILL_CONNECTING = "no answer yet (connecting: handshake and probe not answered)"


def ensure_members(cfg: Settings, replies: Sequence[Probe | Down | None]) -> QFlow:
    """The nodes that count toward quorums now; mark new nodes or re-seed fresh ones first.

    A node without a valid marker lost its data (or is new). A brand-new set is marked at once
    (:func:`_bootstrap`), and so is a fresh node whose server is on a birth list
    (:func:`~redlease.core.restart.born_members`): both are race-free among any number of
    clients. Any other fresh node counts again only after it has been up for ``restart_delay``
    and its fence counters were raised (below, then marked): by default to the maximum the
    reachable intact nodes hold and the seed its server clock gives, however few intact nodes
    answer; in the strict restart mode to the maximum found on
    :func:`~redlease.core.rules.reseed_sources` intact nodes, and not at all with fewer. While
    too few nodes count to serve a quorum, the markers are read again first (an operator may
    have vouched for a node or reset the set: docs/quorum.md, "Bringing nodes back").
    """
    if all(type(p) is Probe and membership(p) == "member" for p in replies):
        if cfg.outside:  # the common case, kept cheap: every node counts
            cfg.outside = {}
        return tuple(range(len(replies)))
    # None: a node still connecting (handshake, probe) when the operation's deadline came
    reasons = [p.error.message if isinstance(p, Down) else STILL_CONNECTING for p in replies]
    probes = [p if isinstance(p, Probe) else None for p in replies]
    states = [membership(p) for p in probes]
    if "fresh" in states:
        new_set = brand_new(probes)  # read again below anyway
        # an operator may have acted
        if states.count("member") < cfg.members_quorum and not new_set:
            probes = yield from _refresh(cfg, probes)
            new_set = brand_new(probes)
        if new_set:
            probes = yield from _bootstrap(cfg, probes)
        born = born_members(probes)
        if born:
            probes = yield from _mark(cfg, probes, born, births(probes))
        states = [membership(p) for p in probes]
    members = tuple(i for i, s in enumerate(states) if s == "member")
    fresh = [i for i, s in enumerate(states) if s == "fresh"]
    now = cfg.clock()
    why = standing(probes, cfg.members_quorum, cfg.restart_delay, now, cfg.strict_restart)
    cfg.outside = {
        i: reasons[i] if s == "unknown" else (w.why if (w := why[i]) else "not marked")
        for i, s in enumerate(states)
        if s != "member"
    }
    if not fresh:
        return members
    due = [  # the nodes the rule lets rejoin by themselves, once up for restart_delay
        i
        for i in fresh
        if (w := why[i]) is not None
        and w.kind == REJOINING
        and may_rejoin(probes[i], now, cfg.restart_delay)  # type: ignore[arg-type]
        and cfg.reseed_state.get(cfg.names[i], 0.0) <= now
    ]
    if not due:
        return members
    for i in due:
        cfg.reseed_state[cfg.names[i]] = now + 0.5  # at most twice a second per node
    seeds: dict[int, int] = {}
    if cfg.strict_restart:
        maxima = yield from _collect_fences(cfg, members, reseed_sources(cfg.n, cfg.members_quorum))
    else:
        # every counter the intact nodes and the restarted nodes themselves hold (a node
        # restored from a backup keeps counters that are behind: they are raised too), and
        # each restarted node's own clock: the fewer intact nodes, the more the clock carries
        maxima = yield from _collect_fences(cfg, (*members, *due), 0)
        times = yield FanOut({i: Command(("TIME",)) for i in due}, max(1.0, cfg.node_timeout))
        seeds = {i: clock_seed(r.value) for i, r in times.items() if _is_time(r)}
        due = [i for i in due if i in seeds]
    if maxima is None:
        return members
    added = []
    for i in due:
        probe = probes[i]
        assert probe is not None
        floor = seeds.get(i, 0)
        raises: Batch = tuple(
            Call(
                scripts.RAISE_FENCE,
                (key, key[: -len(":fence")]),
                (target, ""),
                intent=RaiseFence(target),
            )
            for key, value in sorted(maxima.items())
            if (target := max(value, floor))
        )
        batch = (*raises, Command(_probe.mark(probe.run_id)))
        done = yield FanOut({i: batch}, max(1.0, cfg.node_timeout))
        if isinstance(done.get(i), Reply):
            yield Marked(i, replace(probe, marker=probe.run_id))
            added.append(i)
            cfg.outside.pop(i, None)
    return tuple(sorted((*members, *added)))


def _bootstrap(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """Mark a brand-new set, if it is still brand new: read every node again first.

    The probes were taken when each connection was made, at different times. Reading the
    server and the marker again over the same connections (all made before these reads were
    sent; the run id shows that each read reached the process that was probed) shows every
    node fresh at one instant: then there is no history to keep, and every server is written
    on the birth list. If another client has marked some node meanwhile, its marker (and birth
    list) is taken instead.
    """
    now = yield from _reread_all(cfg, probes)
    if brand_new(now):
        return (yield from _mark(cfg, now, range(cfg.n), birth_list(now)))
    return (yield from _remember(probes, now))


def _refresh(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """``probes`` with every node's marker read again over the same connections: the markers
    an operator changed by hand (docs/quorum.md, "Bringing nodes back") are seen without a
    reconnect. Only while too few nodes count to serve a quorum."""
    now = yield from _reread_all(cfg, probes)
    return (yield from _remember(probes, now))


def _reread_all(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """Every node's server and marker read again (None: no answer, or another server)."""
    reads = yield FanOut(dict.fromkeys(range(cfg.n), NODE_READ), max(1.0, cfg.node_timeout))
    at = cfg.clock()
    return [_reread(p, reads.get(i), at) for i, p in enumerate(probes)]


def _remember(probes: list[Probe | None], now: list[Probe | None]) -> ProbesFlow:
    """Record the markers that changed between ``probes`` and ``now``; the merged probes."""
    for i, (p, old) in enumerate(zip(now, probes, strict=True)):
        if p is not None and old is not None and (p.marker, p.born) != (old.marker, old.born):
            yield Marked(i, p)
    return [p or old for p, old in zip(now, probes, strict=True)]


def _reread(old: Probe | None, result: Result | None, at: float) -> Probe | None:
    """``old`` updated by a :data:`NODE_READ` of the same server process (else None)."""
    if old is None or not isinstance(result, Reply):
        return None
    new = _probe.node(old, result.value, at)  # type: ignore[arg-type]
    return new if new.run_id == old.run_id else None


def _mark(
    cfg: Settings, probes: list[Probe | None], nodes: Sequence[int], born: frozenset[str]
) -> ProbesFlow:
    """Mark ``nodes`` as intact (with the birth list ``born``); count those that confirm."""
    calls = {i: Command(_probe.mark(p.run_id, born)) for i in nodes if (p := probes[i])}
    done = yield FanOut(calls, max(1.0, cfg.node_timeout))
    probes = list(probes)
    for i in calls:
        p = probes[i]
        if p is not None and isinstance(done.get(i), Reply):
            probes[i] = p = replace(p, marker=p.run_id, born=p.born | born)
            yield Marked(i, p)
    return probes


def _is_time(result: Result | None) -> bool:
    """A ``TIME`` reply: seconds and microseconds."""
    return isinstance(result, Reply) and isinstance(result.value, list | tuple)


def _collect_fences(cfg: Settings, members: Sequence[int], need: int) -> QFlow:
    """Max fence counter per lock over ``members`` (None if fewer than ``need`` answered)."""
    cursors: dict[int, str] = dict.fromkeys(members, "0")
    keys: dict[int, set[str]] = {i: set() for i in members}
    started = False
    while cursors and (not started or any(c != "0" for c in cursors.values())):
        started = True
        calls = {
            i: Command(("SCAN", c, "MATCH", FENCE_PATTERN, "COUNT", 1000))
            for i, c in cursors.items()
        }
        replies = yield FanOut(calls, max(1.0, cfg.node_timeout))
        nxt: dict[int, str] = {}
        for i in cursors:
            r = replies.get(i)
            if not isinstance(r, Reply) or not isinstance(r.value, list | tuple):
                keys.pop(i, None)
                continue
            cursor, found = r.value[0], r.value[1]
            keys[i].update(_text(k) for k in found)
            if _text(cursor) != "0":
                nxt[i] = _text(cursor)
        cursors = nxt
    if len(keys) < need:
        return None
    maxima: dict[str, int] = {}
    calls2 = {i: Command(("MGET", *sorted(ks))) for i, ks in keys.items() if ks}
    if calls2:
        replies = yield FanOut(calls2, max(1.0, cfg.node_timeout))
        for i, ks in keys.items():
            if not ks:
                continue
            r = replies.get(i)
            if not isinstance(r, Reply) or not isinstance(r.value, list):
                return None
            for key, value in zip(sorted(ks), r.value, strict=False):
                if value is not None:
                    maxima[key] = max(maxima.get(key, 0), int(_text(value)))
    return maxima


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
