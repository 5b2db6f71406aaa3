"""The issue's performance targets, checked against a results dict (reported, never asserted)."""

from __future__ import annotations

from typing import Any

from bench.checks import Check, _rate, _ratio_check


def _server_check(server: dict[str, Any]) -> Check:
    """Server instructions per uncontended pair (callgrind, ``bench/instructions.py``) at most
    ``goal`` (1.15) times the contract floor's, DESIGN.md's "Performance anchors": a count the
    load does not move (the Redis execution time it replaced did)."""
    label = "server instructions/pair <= 1.15x the contract floor"
    per = server.get("per_pair")
    if not per:
        return Check(label, server.get("skipped", "not measured (a quick run)"), None)
    ours, floor = per["redlease Lock"], per[server["contract_floor"]]
    r = ours / floor
    measured = f"{r:.2f}x ({ours / 1000:.1f}k vs {floor / 1000:.1f}k)"
    return Check(label, measured, r <= server["goal"])


def _quorum_fairness(results: dict[str, Any]) -> list[Check]:
    """HOOK for the quorum fairness row (max/min sections per process, 4 greedy processes,
    3 nodes, <= 1.5): ``bench/quorum_compare.py`` provides ``fairness_checks(results)`` and
    the results it reads; nothing is reported until it does."""
    from bench import quorum_compare

    checks = getattr(quorum_compare, "fairness_checks", None)
    return list(checks(results)) if checks is not None else []


def evaluate(results: dict[str, Any]) -> list[Check]:
    """Every target (issues 6 and 13), with the measured value and whether it was met."""
    out = [
        _ratio_check(
            "sync pairs/s >= 1.25x redis-py Lock",
            _rate(results, "redlease Lock"),
            _rate(results, "redis-py Lock"),
            1.25,
        ),
        _ratio_check(
            "asyncio pairs/s >= 1.25x redis.asyncio Lock",
            _rate(results, "redlease aio.Lock"),
            _rate(results, "redis.asyncio Lock"),
            1.25,
        ),
        *_client_checks(results.get("client", {})),
        _server_check(results.get("server", {})),
        *_quorum_fairness(results),
    ]
    from bench import waiters

    out += waiters.checks(results)
    rows = [r for r in results.get("handoff", {}).get("rows", []) if r["library"] == "redlease"]
    if rows:
        worst50 = max(rows, key=lambda r: r["p50_ms"])
        worst99 = max(rows, key=lambda r: r["p99_ms"])
        out.append(
            Check(
                "hand-off p50 <= 0.5 ms (every redlease run)",
                f"worst {worst50['p50_ms']:.2f} ms ({worst50['processes']} procs, "
                f"{worst50['mode']})",
                worst50["p50_ms"] <= 0.5,
            )
        )
        two = [r for r in rows if r["processes"] == 2]
        if two:
            w2 = max(two, key=lambda r: r["p50_ms"])
            out.append(
                Check(
                    "hand-off p50 <= 0.35 ms (2 processes)",
                    f"worst {w2['p50_ms']:.2f} ms ({w2['mode']})",
                    w2["p50_ms"] <= 0.35,
                )
            )
        out.append(
            Check(
                "hand-off p99 <= 2 ms (every redlease run)",
                f"worst {worst99['p99_ms']:.2f} ms ({worst99['processes']} procs, "
                f"{worst99['mode']})",
                worst99["p99_ms"] <= 2.0,
            )
        )
        greedy8 = [r for r in rows if r["processes"] == 8 and r["mode"] == "greedy"]
        if greedy8:
            w = greedy8[0]["worst_wait_ms"]
            out.append(Check("8 procs greedy: worst wait <= 50 ms", f"{w:.1f} ms", w <= 50))
    else:
        out.append(Check("hand-off p50/p99, worst wait", "not measured", None))
    fo = results.get("failover", {})
    if "sigterm" in fo:
        p50 = fo["sigterm"]["p50_ms"]
        out.append(Check("SIGTERM failover p50 <= 50 ms", f"{p50:.1f} ms", p50 <= 50))
    else:
        why = fo.get("sigterm_error") or fo.get("skipped", "not measured")
        out.append(Check("SIGTERM failover p50 <= 50 ms", why, None))
    label = "idle sidecar RSS <= its dependencies' + 8 MB"
    if "idle" in fo and fo["idle"].get("anchor_rss_mb"):
        rss, anchor = fo["idle"]["rss_mb"], fo["idle"]["anchor_rss_mb"]
        out.append(Check(label, f"{rss:.1f} MB vs {anchor:.1f} MB", rss <= anchor + 8))
    else:
        out.append(Check(label, fo.get("skipped", "not measured"), None))
    out.append(_longpoll_check(results.get("longpoll", {})))
    return out


def _client_checks(client: dict[str, Any]) -> list[Check]:
    """Client instructions per uncontended pair (callgrind, bench/client.py) at most 0.8x the
    redis-py lock's of the same flavour: the figure that does not move with the load."""
    per = client.get("per_pair", {})
    out = []
    for ours, theirs in (
        ("redlease Lock", "redis-py Lock"),
        ("redlease aio.Lock", "redis.asyncio Lock"),
    ):
        label = f"client instructions/pair <= 0.8x {theirs}'s"
        mine, peer = per.get(ours, {}).get("instructions"), per.get(theirs, {}).get("instructions")
        if not mine or not peer:
            calls = per.get(ours, {}).get("python_calls"), per.get(theirs, {}).get("python_calls")
            why = "not measured (no valgrind, or a quick run)"
            if all(calls):
                why += f"; Python calls {calls[0]:.0f} vs {calls[1]:.0f}"
            out.append(Check(label, why, None))
            continue
        r = mine / peer
        out.append(Check(label, f"{r:.2f}x ({mine / 1000:.0f}k vs {peer / 1000:.0f}k)", r <= 0.8))
    return out


def _longpoll_check(lp: dict[str, Any]) -> Check:
    """Push, not poll: a SIGTERM hand-off reaches a waiting ``GET /status?wait=`` within 50 ms
    of the new leader's view (p99; bench/measure_longpoll.py)."""
    target = "hand-off reaches a waiting GET /status?wait= p99 <= 50 ms"
    if "p99_ms" not in lp:
        return Check(target, lp.get("skipped", "not measured"), None)
    measured = f"p50 {lp['p50_ms']:.1f} ms, p99 {lp['p99_ms']:.1f} ms ({lp['reps']} hand-offs)"
    return Check(target, measured, lp["p99_ms"] <= 50)
