"""The quorum acquire flow without I/O: what it sends after each kind of per-node answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redlease.core import scripts
from redlease.core.intents import Extended, FenceRaised, Released
from redlease.core.keys import LockKeys
from redlease.core.primitives import Options, Primitive
from redlease.core.quorum.flows import run
from redlease.core.quorum.protocol import FanOut, QFlow, Ready, Settings
from redlease.core.replies import Outcome, decode_acquire
from redlease.core.requests import Call
from redlease.core.restart import Probe
from redlease.core.rules import LATE, Reply, Result

TOKEN = "t" * 32
GRANTED = [scripts.GRANTED, 7, 1, 1000, 1]
HELD = [scripts.HELD, 9000, "other"]
RESERVED = [scripts.RESERVED, 200, ""]


def settings(n: int = 3) -> Settings:
    prim = Primitive(LockKeys.for_name("flows"), Options(ttl=10), "mutex")
    return Settings(
        names=[f"node{i}" for i in range(n)],
        quorum=n // 2 + 1,
        node_timeout=0.25,
        restart_delay=30.0,
        prim=prim,
    )


def member(i: int) -> Probe:
    return Probe(run_id=f"r{i}", uptime=100.0, at=0.0, marker=f"r{i}", durable=False)


def acquire(cfg: Settings, answers: Mapping[int, Result]) -> tuple[Any, list[FanOut]]:
    """Run one blocking acquire attempt; the nodes answer ``answers``. Returns the flow's reply
    and the fan-outs it sent after the acquire itself."""
    call = cfg.prim.acquire(TOKEN, 5500)
    flow: QFlow = run(cfg, call)
    step = next(flow)
    assert isinstance(step, Ready)
    step = flow.send([member(i) for i in range(cfg.n)])
    assert isinstance(step, FanOut) and set(step.calls) == set(range(cfg.n))
    after: list[FanOut] = []
    try:
        step = flow.send(dict(answers))
        while True:
            assert isinstance(step, FanOut)
            after.append(step)
            step = flow.send({i: Reply([1]) for i in step.calls})
    except StopIteration as stop:
        return stop.value, after


def scripts_sent(fan: FanOut) -> set[str]:
    return {c.script.name for c in fan.calls.values() if isinstance(c, Call)}


def test_granted_leaves_the_nodes_that_refused() -> None:
    """Granted on a quorum: the registration the refusing (and the late) nodes made is dropped
    there, without waiting for the replies; nothing goes to the nodes that granted."""
    cfg = settings(5)
    answers = {0: Reply(GRANTED), 1: Reply(GRANTED), 2: Reply(GRANTED), 3: Reply(HELD), 4: LATE}
    reply, after = acquire(cfg, answers)
    assert decode_acquire(reply, "l").status == scripts.GRANTED
    assert len(after) == 1
    leave = after[0]
    assert set(leave.calls) == {3, 4} and scripts_sent(leave) == {"leave"}
    assert leave.timeout == 0.0


def test_granted_everywhere_sends_nothing_more() -> None:
    """The uncontended path stays one round trip."""
    reply, after = acquire(settings(), {i: Reply(GRANTED) for i in range(3)})
    assert decode_acquire(reply, "l").status == scripts.GRANTED and after == []


def test_refused_everywhere_waits_for_the_wake_up() -> None:
    """Held or reserved on every node: the wait hint is the soonest expiry named (the caller
    waits for a wake token on a node where it is registered), not a short retry jitter."""
    cfg = settings()
    reply, after = acquire(cfg, {0: Reply(RESERVED), 1: Reply(HELD), 2: Reply(RESERVED)})
    assert reply == Outcome(scripts.HELD, wait_hint_ms=200, holder="other")
    assert after == []
    assert cfg.wait_on == (1,)  # where the holder's lease is


def test_split_vote_undoes_and_retries_soon() -> None:
    """Granted on a minority: undone there, registered where refused, retry after the jitter."""
    cfg = settings()
    reply, after = acquire(cfg, {0: Reply(GRANTED), 1: Reply(RESERVED), 2: Reply(RESERVED)})
    assert reply.status == scripts.HELD and 5 <= reply.wait_hint_ms <= 50 and reply.holder is None
    assert [set(f.calls) for f in after] == [{0}] and scripts_sent(after[0]) == {"release"}
    assert cfg.wait_on == (1, 2)


# --- intent -> outcome: the flow answers with the intent's typed outcome, never a node reply ---


def answer(cfg: Settings, call: Call, answers: Mapping[int, Result]) -> Any:
    """Run ``call``'s quorum flow; the nodes answer ``answers`` (later fan-outs: no reply)."""
    flow: QFlow = run(cfg, call)
    step = next(flow)
    assert isinstance(step, Ready)
    try:
        step = flow.send([member(i) for i in range(cfg.n)])
        step = flow.send(dict(answers))
        while True:
            step = flow.send({})
    except StopIteration as stop:
        return stop.value


def test_already_held_is_a_typed_outcome() -> None:
    """A quorum saying 'already yours' answers ALREADY with the fence, as one node does."""
    cfg = settings()
    already = Reply([scripts.ALREADY, 4])
    reply = answer(cfg, cfg.prim.acquire(TOKEN, 0), dict.fromkeys(range(3), already))
    assert reply == Outcome(scripts.ALREADY, fence=4)


def test_extend_outcomes() -> None:
    """Extended on a quorum: the first node's clock reading; refused by a quorum: not extended
    (NotOwned), with no reading."""
    cfg = settings()
    call = cfg.prim.extend(TOKEN, 10000)
    ok = answer(cfg, call, dict.fromkeys(range(3), Reply([1, 10000, 1234])))
    assert ok == Extended(True, 1234)
    lost = answer(cfg, call, dict.fromkeys(range(3), Reply([0, 0, 99])))
    assert lost == Extended(False)


def test_release_outcomes() -> None:
    """Released anywhere: the highest count left; refused by enough nodes: not the owner."""
    cfg = settings()
    call = cfg.prim.release(TOKEN)
    assert answer(cfg, call, {0: Reply(1), 1: Reply(0), 2: Reply(-1)}) == Released(1)
    assert answer(cfg, call, dict.fromkeys(range(3), Reply(-1))) == Released(None)


def test_raise_fence_outcomes() -> None:
    """Confirmed by a quorum, or answered by a quorum whose lease was gone."""
    cfg = settings()
    call = cfg.prim.raise_fence(TOKEN, 9)
    assert answer(cfg, call, dict.fromkeys(range(3), Reply([9, 1]))) == FenceRaised(9, True)
    assert answer(cfg, call, dict.fromkeys(range(3), Reply([9, 0]))) == FenceRaised(9, False)


def test_the_intent_decides_not_the_script() -> None:
    """A call naming the acquire script but carrying no intent is run as a plain script (a
    quorum of replies, one node's reply back): the flow never infers intent from the Lua."""
    cfg = settings()
    plain = Call(scripts.ACQUIRE, ("k",), ("x",))
    assert answer(cfg, plain, dict.fromkeys(range(3), Reply(HELD))) == HELD
