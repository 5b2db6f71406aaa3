"""The sidecar's ``/status`` document (and state file): the lock view, with this process's
own term as its term machine knows it (pure)."""

from __future__ import annotations

from typing import Any

from redlease.core import view as lockview
from redlease.sidecar.election import Candidate


def document(e: Candidate, now: float, wall: float) -> dict[str, Any]:
    """The ``/status`` document (and state file) as of monotonic ``now`` / epoch ``wall``.

    The lock part is the lock view (:func:`redlease.core.view.document`); while this
    process leads, its own term supplies holder, token and times (it knows them first
    hand, and the view agrees once the next read comes in): the term machine's latest grant
    (:attr:`Candidate.term`) and deadlines, nothing kept beside them.
    """
    cfg = e.config
    draining = e.draining(now)
    term = e.term if e.leading(now) and not draining else None
    obs = e.observed
    view = e.view()
    age_ms = int((now - obs.at) * 1000) if obs is not None else 0
    left = None if view.expires_in_ms is None else max(0, view.expires_in_ms - age_ms)
    doc: dict[str, Any] = {
        "lock": cfg.lock,
        "keys": list(cfg.keys),
        "identity": cfg.identity,
        "leader": term is not None,
        "draining": draining,
        **lockview.document(view, expires_in_ms=left, age_ms=age_ms),
        "holders_limit": cfg.holders,
        "candidates": len(view.candidates),
        "leader_until": None,
        "paused": cfg.paused,
        "preferred_holder": cfg.preferred_holder,
        "conflict": e.conflict(now),
    }
    if doc["holder"] is not None and left == 0:
        doc.update(holder=None, fencing_token=None, expires_in_ms=None)
    if term is not None:
        doc.update(
            holder=cfg.identity,
            fencing_token=term.fencing_token,
            expires_in_ms=max(0, int((e.timer.lease_deadline - now) * 1000)),
            acquired_at=lockview.iso_ms(term.acquired_at_ms),
            renewed_at=lockview.iso_ms(term.renewed_ms),
            transitions=max(doc["transitions"], term.transitions),
            leader_until=lockview.iso_ms(int((wall + e.timer.deadline - now) * 1000)),
            holder_unknown=None,
        )
        # the view may not list this term yet: it knows it first hand
        own = {"holder": cfg.identity, "fencing_token": term.fencing_token,
               "expires_in_ms": doc["expires_in_ms"]}  # fmt: skip
        others = [h for h in doc["holders"] if h["fencing_token"] != term.fencing_token]
        if len(others) >= cfg.holders:
            # read before this grant, and one of them released its slot since (an expired
            # one is not listed): which one, only the next read says (it follows a grant at
            # once); name none of them rather than more holders than ever held at once
            others = []
        doc["holders"] = sorted([*others, own], key=lambda h: h["fencing_token"])
    elif doc["holder"] == cfg.identity:
        # Redis still shows our last lease, but we no longer lead (deadline passed or
        # stepped down, draining): never present ourselves as the holder while leader is
        # false.
        doc.update(holder=None, fencing_token=None, expires_in_ms=None)
    if term is None:  # nor among the holders
        doc["holders"] = [h for h in doc["holders"] if h["holder"] != cfg.identity]
    return doc
