"""The pure election state machine, the spec mapping and the waiter's check (no I/O)."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from redlease.cli.wait import is_leader
from redlease.core.connect import validate_target
from redlease.core.lease import Lease
from redlease.core.state import Holder, LockState
from redlease.core.term import classify
from redlease.core.timing import validate_timing
from redlease.core.view import LockView, lock_view
from redlease.election.campaign import Defer
from redlease.errors import ConfigError, LockUnavailable, NotOwned
from redlease.kube.names import CREDENTIALS_LABEL
from redlease.kube.secretspec import SecretRef, credentials_from_secret
from redlease.kube.spec import parse_spec
from redlease.operator.reader import targets_for
from redlease.sidecar.config import ElectionConfig, election_from_spec
from redlease.sidecar.election import Candidate, Transition
from redlease.sidecar.status import document

CONSENT = {"metadata": {"labels": {CREDENTIALS_LABEL: "true"}}}
CFG = ElectionConfig(
    keys=("L",),
    identity="me",
    target=validate_target(["redis://127.0.0.1:7000/0"]),
    timing=validate_timing(15, 10, 2),
)


def grant(
    e: Candidate,
    *,
    fencing_token: int,
    server_ms: int,
    transitions: int,
    sent_at: float,
    lease_deadline: float,
    received_at: float | None = None,
) -> Transition | None:
    """What the campaign does with a grant of an acquire sent at ``sent_at`` (in hand at
    ``received_at``, default the send): the term machine takes it, the lease its record, and
    when it starts a term the sidecar announces it (the hook ``started``)."""
    lease = Lease("L", fencing_token, 15.0, lease_deadline, server_ms, transitions=transitions,
                  sent_at=sent_at, renewed_ms=server_ms)  # fmt: skip
    now = sent_at if received_at is None else received_at
    return e.acquired(now) if e.timer.succeeded(sent_at, now, lease_deadline, lease) else None


def renewed(
    e: Candidate,
    *,
    sent_at: float,
    server_ms: int,
    lease_deadline: float,
    received_at: float | None = None,
) -> None:
    """What the campaign does with a renewal's grant: the term machine takes it (the term's
    one state; the sidecar shows what it holds)."""
    assert e.timer.observed is not None
    lease = dataclasses.replace(
        e.timer.observed, deadline=lease_deadline, sent_at=sent_at, renewed_ms=server_ms
    )
    now = sent_at if received_at is None else received_at
    e.timer.succeeded(sent_at, now, lease_deadline, lease)


def elected(e: Candidate, at: float = 100.0, token: int = 5) -> None:
    t = grant(e, fencing_token=token, server_ms=1, transitions=3, sent_at=at,
              lease_deadline=at + 15 - 0.152)  # fmt: skip
    assert t is not None and t.kind == "elected" and t.fencing_token == token


def renewal_failed(e: Candidate, sent: float, exc: BaseException) -> Transition | None:
    """What the campaign (election/campaign.py) does with a renewal sent at ``sent`` that failed
    with ``exc``: the one rule (``classify``) decides, retried a retry period after the send;
    a loss ends the term at the next check."""
    e.timer.failed(sent, classify(exc))
    return e.check(sent)


def renews(e: Candidate, now: float, at: float, budget: float) -> None:
    """Leading at ``now``, no step-down: the term machine the campaign asks renews at ``at``,
    the renewal sent then may take ``budget`` seconds (up to the term's deadline)."""
    assert e.step_down(now) is None
    assert e.timer.next(now).at == at and e.timer.budget(at) == budget


def leader() -> Candidate:
    """An election whose term was granted to an acquire sent at 100 (deadline 110)."""
    e = Candidate(CFG)
    elected(e)
    assert e.term is not None
    return e


def state(holder: str | None, candidates: tuple[str, ...] = ()) -> LockView:
    """A one-node lock view of ``holder`` (token 7, 9 s left)."""
    one = LockState(name="L", now_ms=0, holder=holder, fencing_token=7 if holder else None,
                    expires_in_ms=9000 if holder else None, candidates=candidates)  # fmt: skip
    return lock_view(["L"], {"n": {"L": one}}, 1)


def test_candidate_acquires_then_renews_every_retry_period() -> None:
    e = Candidate(CFG)
    assert e.candidate(0.0) == 2.0
    elected(e)
    assert e.leading(100.0)
    renews(e, 101.0, 102.0, 8.0)
    renews(e, 102.0, 102.0, 8.0)


def test_leader_steps_down_at_renew_deadline_not_at_ttl() -> None:
    e = Candidate(CFG)
    elected(e)
    term = e.term
    assert term is not None
    assert renewal_failed(e, 102.0, LockUnavailable("L", "down")) is None  # outage: keep trying
    assert e.leading(109.999) and e.check(109.999) is None
    assert not e.leading(110.0)  # renew deadline: 10 s after the last successful send
    t = e.check(110.0)
    assert t is not None and t.kind == "lost" and t.fencing_token == 5
    assert document(e, 110.0, 0.0)["leader"] is False


def test_late_renewal_never_revives_an_ended_term() -> None:
    e = Candidate(CFG)
    elected(e)
    term = e.term
    assert term is not None and e.check(111.0) is not None
    renewed(e, sent_at=109.0, server_ms=2, lease_deadline=124.0)
    assert not e.leading(111.0)


def test_refused_renewal_is_lost_at_once() -> None:
    e = Candidate(CFG)
    elected(e)
    assert e.term is not None
    t = renewal_failed(e, 101.0, NotOwned("L", "gone"))
    assert t is not None and t.kind == "lost" and not e.leading(101.0)


def test_paused_and_preferred_holder() -> None:
    e = Candidate(dataclasses.replace(CFG, paused=True))
    assert e.candidate(0.0) == Defer(2.0, "paused")
    e.update(dataclasses.replace(CFG, preferred_holder="other"))
    e.observe(state(None, ("me", "other")), 0.0)
    assert isinstance(e.candidate(0.0), Defer)  # defer while the preferred one is alive
    assert e.candidate(16.0) == 2.0  # ...as last seen (a stale read does not count)
    elected(e, at=20.0, token=7)  # the token the view below shows
    e.observe(state("me", ("me", "other")), 21.0)
    assert e.step_down(21.0) is None  # hand-off happens at the next renewal
    assert e.step_down(22.0) == "hand-off to preferred holder 'other'"
    t = e.stepped_down("hand-off")
    assert t is not None and t.kind == "stepped_down"


def slots(*holders: tuple[str, int], candidates: tuple[str, ...] = ()) -> LockView:
    """A one-node view of a semaphore of 2 held by ``holders`` ((identity, token) each)."""
    listed = tuple(Holder(who, token, 9000) for who, token in holders)
    first = listed[0] if listed else None
    one = LockState(name="L", now_ms=0, holder=first.identity if first else None,
                    fencing_token=first.fencing_token if first else None,
                    expires_in_ms=9000 if first else None, candidates=candidates,
                    holders=listed)  # fmt: skip
    return lock_view(["L"], {"n": {"L": one}}, 1)


def test_several_holders_a_term_ends_only_when_its_own_slot_is_gone() -> None:
    e = Candidate(dataclasses.replace(CFG, holders=2))
    elected(e, at=20.0, token=8)
    assert e.observe(slots(("other", 7), ("me", 8)), 21.0) is None  # another holder first
    assert e.leading(21.0)
    doc = document(e, 21.0, 0.0)
    assert doc["leader"] and doc["fencing_token"] == 8 and doc["holders_limit"] == 2
    assert [(h["holder"], h["fencing_token"]) for h in doc["holders"]] == [("other", 7), ("me", 8)]
    t = e.observe(slots(("other", 7), ("third", 9)), 22.0)  # our slot is gone from Redis
    assert t is not None and t.kind == "lost" and "holders 'other' (token 7)" in t.reason
    assert [h["holder"] for h in document(e, 22.0, 0.0)["holders"]] == ["other", "third"]


def test_a_new_holder_never_lists_more_holders_than_the_limit() -> None:
    """Its view was read before its grant and lists the slots' former holders: one whose
    slot expired since (aged to 0) is not listed; if the view still lists as many as the
    limit, one of them released since, unknown which: none of them is listed until the next
    read."""
    e = Candidate(dataclasses.replace(CFG, holders=2))
    crashed = (Holder("other", 7, 9000), Holder("gone", 8, 400))
    e.observe(lock_view(["L"], {"n": {"L": LockState(name="L", now_ms=0, holder="other",
              fencing_token=7, expires_in_ms=9000, holders=crashed)}}, 1), 20.0)  # fmt: skip
    elected(e, at=20.5, token=9)  # the slot of "gone" expired at 20.4
    doc = document(e, 20.6, 0.0)
    assert [(h["holder"], h["fencing_token"]) for h in doc["holders"]] == [("other", 7), ("me", 9)]
    e = Candidate(dataclasses.replace(CFG, holders=2))
    e.observe(slots(("other", 7), ("gone", 8)), 20.0)
    elected(e, at=20.5, token=9)  # "gone" released its slot at 20.2
    assert [(h["holder"], h["fencing_token"]) for h in document(e, 20.6, 0.0)["holders"]] == [
        ("me", 9)
    ]
    e.observe(slots(("other", 7), ("me", 9)), 20.7)  # read after the grant
    assert [h["holder"] for h in document(e, 20.7, 0.0)["holders"]] == ["other", "me"]


def test_several_holders_only_the_newest_makes_room_for_the_preferred_one() -> None:
    cfg = dataclasses.replace(CFG, holders=2, preferred_holder="boss")
    newest, oldest = Candidate(cfg), Candidate(dataclasses.replace(cfg, identity="old"))
    elected(newest, at=20.0, token=8)
    elected(oldest, at=20.0, token=7)
    view = slots(("old", 7), ("me", 8), candidates=("boss", "me", "old"))
    for e in (newest, oldest):
        e.observe(view, 21.0)
    assert newest.step_down(22.0) is not None  # the newest holder yields
    assert oldest.step_down(22.0) is None and oldest.leading(22.0)  # one slot is enough
    waiting = Candidate(dataclasses.replace(cfg, identity="third"))
    waiting.observe(view, 21.0)
    assert isinstance(waiting.candidate(21.0), Defer)  # deferring to the preferred one
    held = slots(("boss", 9), ("old", 7), candidates=("boss", "me", "old", "third"))
    for e in (newest, oldest, waiting):
        e.observe(held, 23.0)
    assert oldest.step_down(24.0) is None  # the preferred one holds a slot
    assert waiting.candidate(23.0) == 2.0


def test_outage_backoff_grows_and_is_capped() -> None:
    e = Candidate(CFG)
    delays = [e.failed_attempt(0.0) for _ in range(8)]
    assert delays[0] == 2.0 and delays == sorted(delays) and max(delays) == 10.0
    assert isinstance(e.candidate(1.0), Defer)
    e.reachable()
    assert e.candidate(1.0) == 2.0


def test_snapshot_of_a_follower_shows_the_holder() -> None:
    e = Candidate(CFG)
    t = e.observe(state("boss", ("me", "boss")), 50.0)
    assert t is not None and t.kind == "observed" and t.holder == "boss"
    assert e.observe(state("boss", ("me", "boss")), 51.0) is None  # logged once
    doc = document(e, 52.0, 1_000.0)
    assert doc["leader"] is False and doc["holder"] == "boss" and doc["fencing_token"] == 7
    assert doc["expires_in_ms"] == 8000 and doc["candidates"] == 2
    assert doc["nodes"] == {"total": 1, "healthy": 1, "quorum": 1}
    assert document(e, 60.0, 1_000.0)["holder"] is None  # its lease has run out since the read


def test_node_health_has_one_writer_the_view() -> None:
    e = Candidate(CFG)
    assert document(e, 0.0, 0.0)["nodes"]["healthy"] == 0  # nothing read yet
    e.observe(state(None), 1.0)
    assert document(e, 1.0, 0.0)["nodes"] == {"total": 1, "healthy": 1, "quorum": 1}
    elected(e, at=2.0)  # a successful acquire or renewal does not touch node health
    e.observe(lock_view(["L"], {"n": OSError("down")}, 1), 3.0)
    doc = document(e, 3.0, 0.0)
    assert doc["nodes"]["healthy"] == 0 and doc["leader"] is True  # leads until its deadline
    assert e.connected(3.0)  # its renewals reach a quorum until they don't
    assert not e.connected(13.0)  # deadline passed, and the last read saw no node


@pytest.mark.parametrize(
    ("args", "field"),
    [((0.01,), "--ttl"), ((15, 15), "--renew-deadline"), ((15, 10, 10), "--retry-period")],
)
def test_timing_validation_names_the_flag(args: tuple[float, ...], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_timing(*args)
    assert err.value.field == field


SPEC = {
    "keys": ["orders", "billing"],
    "ttlSeconds": 9,
    "renewDeadlineSeconds": 6,
    "retryPeriodSeconds": 1,
    "nodes": [{"url": "redis://redis-0:6379/0"}],
    "auth": {"secretRef": {"name": "redis-auth"}},
    "paused": True,
    "preferredHolder": "pod-b",
}


def test_spec_maps_to_election_settings() -> None:
    spec = parse_spec(SPEC)
    assert spec.secret_ref == SecretRef("redis-auth")
    secret = {**CONSENT, "data": {"password": base64.b64encode(b"pw-9").decode()}}
    cfg = election_from_spec(spec, "me", credentials_from_secret(secret, spec.secret_ref))
    assert cfg.lock == "orders" and cfg.keys == ("orders", "billing") and cfg.identity == "me"
    assert (cfg.timing.ttl, cfg.timing.renew_deadline, cfg.timing.retry_period) == (9, 6, 1)
    assert cfg.target.urls == ("redis://redis-0:6379/0",) and cfg.target.password == "pw-9"
    assert cfg.target.username is None
    assert cfg.paused and cfg.preferred_holder == "pod-b"
    assert "pw-9" not in repr(cfg)


def test_secret_decoding_names_the_field() -> None:
    ref = SecretRef("s", password_key="pw")
    plain = credentials_from_secret(
        {**CONSENT, "stringData": {"pw": "hunter2", "username": "u"}}, ref
    )
    assert (plain.username, plain.password) == ("u", "hunter2")
    with pytest.raises(ConfigError) as err:
        credentials_from_secret({**CONSENT, "data": {"other": "eA=="}}, ref)
    assert err.value.field == "spec.auth.secretRef.passwordKey" and "pw" in str(err.value)
    with pytest.raises(ConfigError) as err:
        credentials_from_secret({**CONSENT, "data": {"pw": "not base64!"}}, ref)
    assert err.value.field == "spec.auth.secretRef.passwordKey"


def test_secrets_only_by_consent() -> None:
    ref = SecretRef("s")
    data = {"stringData": {"password": "hunter2"}}
    with pytest.raises(ConfigError) as err:
        credentials_from_secret(data, ref)
    assert err.value.field == "spec.auth.secretRef.name" and "hunter2" not in str(err.value)
    nodes_note = {"annotations": {"redlease.dev/allowed-nodes": "redis://r0:6379, r1:6379"}}
    allowed = {"metadata": {**CONSENT["metadata"], **nodes_note}}
    creds = credentials_from_secret({**allowed, **data}, ref, ["redis://r0", "rediss://r1:6379"])
    assert creds.password and creds.consent is not None
    spec = parse_spec({"keys": ["k"], "nodes": [{"url": "redis://r0:6379"}]})
    # the consent travels with the credentials to the client (Sentinel masters are checked)
    assert election_from_spec(spec, "me", creds).target.consent == creds.consent
    assert targets_for(spec, creds)[0].consent == creds.consent
    for urls in (["redis://r0:6379", "redis://evil:6379"], ["redis://r1:6379"]):
        with pytest.raises(ConfigError) as err:
            credentials_from_secret({**allowed, **data}, ref, urls)
        assert err.value.field == "spec.nodes" and urls[-1] in str(err.value)
        assert "r0" not in str(err.value).replace(urls[0], "")  # never what the Secret allows


def test_waiter_trusts_leadership_only_until_leader_until() -> None:
    doc = {"leader": True, "leader_until": "2030-01-01T00:00:00.000Z"}
    assert is_leader(doc, now=1_800_000_000.0)
    assert not is_leader(doc, now=1_900_000_000.0)
    assert not is_leader({"leader": False}) and not is_leader(None)
    # a claim without an expiry promises nothing
    assert not is_leader({"leader": True}) and not is_leader({"leader": True, "leader_until": None})


def _held_by(holder: str | None, token: int) -> LockView:
    one = LockState(name="L", now_ms=0, holder=holder, fencing_token=token if holder else None,
                    expires_in_ms=9000 if holder else None)  # fmt: skip
    return lock_view(["L"], {"n": {"L": one}}, 1)


@pytest.mark.parametrize(
    ("holder", "token"), [(None, 0), ("other", 9), ("me", 6)], ids=["free", "other", "other-token"]
)
def test_a_view_read_after_the_grant_without_this_lease_ends_the_term(
    holder: str | None, token: int
) -> None:
    e = Candidate(CFG)
    grant(e, fencing_token=5, server_ms=1, transitions=1, sent_at=100.0,
               lease_deadline=114.8, received_at=100.01)  # fmt: skip
    t = e.observe(_held_by(holder, token), 101.0)
    assert t is not None and t.kind == "lost" and "Redis lost this lease" in t.reason
    assert not e.leading(101.0) and document(e, 101.0, 0.0)["leader"] is False


def test_a_view_read_before_the_grant_or_showing_it_changes_nothing() -> None:
    e = Candidate(CFG)
    grant(e, fencing_token=5, server_ms=1, transitions=1, sent_at=100.0,
               lease_deadline=114.8, received_at=100.01)  # fmt: skip
    assert e.observe(_held_by(None, 0), 100.005) is None  # the read started before the grant
    assert e.observe(_held_by("me", 5), 101.0) is None
    assert e.leading(101.0)


def test_a_grant_void_on_arrival_begins_no_term() -> None:
    e = Candidate(CFG)
    t = grant(e, fencing_token=5, server_ms=1, transitions=1, sent_at=100.0,
                   lease_deadline=114.8, received_at=110.0)  # fmt: skip
    assert t is None and e.term is None and not e.leading(110.0)
    assert e.candidate(110.0) == 2.0


def test_a_renewal_in_hand_after_the_deadline_ends_the_term() -> None:
    e = leader()
    renewed(e, sent_at=109.0, server_ms=2, lease_deadline=123.8, received_at=110.5)
    assert not e.leading(110.5)
    t = e.check(110.5)
    assert t is not None and t.kind == "lost" and e.term is None


def test_a_slow_failed_renewal_is_retried_a_retry_period_after_its_send() -> None:
    e = leader()
    assert renewal_failed(e, 102.0, TimeoutError()) is None  # in hand at 103.5
    renews(e, 103.5, 104.0, 6.0)
    renewal_failed(e, 104.0, LockUnavailable("L", "down"))
    assert e.timer.next(107.0).at == 107.0  # due at 106: at once
    assert e.timer.budget(107.0) == 3.0


def test_drain_publishes_not_leader_renews_then_steps_down_when_the_app_is_done() -> None:
    e = leader()
    assert not e.app_drained(101.0)  # nothing to drain: POST /drained answers 409
    assert not e.begin_drain(101.0, 0.0, "shutting down")  # drain off
    assert e.begin_drain(101.0, 5.0, "shutting down")
    assert not e.begin_drain(101.5, 5.0, "shutting down")  # already draining
    doc = document(e, 101.0, 0.0)
    assert doc["leader"] is False and doc["draining"] is True
    assert doc["holder"] is None and doc["leader_until"] is None
    assert e.leading(101.0)  # the term runs on: renewed, so nobody else is granted the lease
    renews(e, 101.0, 102.0, 8.0)  # renewed on while draining
    assert e.drain_end() == 106.0  # the elector steps down then at the latest
    renewed(e, sent_at=102.0, server_ms=2, lease_deadline=117.0)
    renews(e, 103.0, 104.0, 8.0)  # the next renewal, within the drain
    assert e.app_drained(103.0)
    assert e.step_down(103.0) == "shutting down: the app drained"
    t = e.stepped_down("shutting down: the app drained")
    assert t is not None and t.kind == "stepped_down" and e.drain is None
    assert document(e, 103.0, 0.0)["draining"] is False


def test_drain_ends_at_its_timeout() -> None:
    e = leader()
    assert e.begin_drain(101.0, 0.5, "hand-off")
    assert e.drain_end() == 101.5  # the elector wakes then
    assert e.step_down(101.25) is None
    assert e.step_down(101.5) == "hand-off: drain timed out (0.5s)"


def test_drain_ends_before_the_lease_deadline_when_renewals_fail() -> None:
    """A drain longer than the term can run: renewals failing, it ends one retry period before
    the term's deadline (110), so the lease is released, never lost."""
    e = leader()
    assert e.begin_drain(101.0, 60.0, "shutting down")
    assert e.drain_end() == 108.0  # one retry period before the term's deadline
    for at in (102.0, 104.0, 106.0):
        renews(e, at, at, 110.0 - at)
        assert renewal_failed(e, at, LockUnavailable("L", "down")) is None
    assert e.step_down(107.0) is None
    reason = "shutting down: drain ended before the lease's deadline (60s)"
    assert e.step_down(108.0) == reason
    assert e.leading(108.0)


def test_a_lost_term_ends_the_drain() -> None:
    e = leader()
    assert e.begin_drain(101.0, 5.0, "shutting down")
    assert renewal_failed(e, 101.0, NotOwned("L", "gone")) is not None
    assert e.drain is None and not e.app_drained(101.0)
    assert document(e, 101.0, 0.0)["draining"] is False
