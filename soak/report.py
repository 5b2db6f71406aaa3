"""docs/soak.md from a soak report (:func:`markdown`), and what failed in it (:func:`failures`,
the exit status of `make soak`)."""

from __future__ import annotations

from typing import Any

from soak.common import growth

PARTS = (("single_node", "one redis-server"), ("redlock_set", "5-node RedLock set"))


def failures(report: dict[str, Any]) -> list[str]:
    """One line per failed check; empty when the run passed."""
    out = []
    s = report["redlock_set"]
    op = report["operator"]
    wrong = op["statuses_not_naming_the_leader_at_the_end"]
    for what, items in (
        ("failovers", report["failed_failovers"]),
        ("hand-offs", report["failed_handoffs"]),
        ("RedLock set restarts", s["failed_restarts"]),
        ("node-set changes", s["failed_node_changes"]),
        ("RedLock set sidecars that exited by themselves", s["sidecars_exited"]),
        ("statuses not naming the leader at the end", wrong),
    ):
        if items:
            out.append(f"{what}: {items}")
    if op["exit_status"] != 0:
        out.append(f"operator exit status {op['exit_status']}")
    for part, name in PARTS:
        h = report["history"][part]
        for key in ("overlaps", "token_regressions", "dual_leader_samples",
                    "leader_answers_without_acquired_at"):  # fmt: skip
            if h[key]:
                out.append(f"{name}: {key} {h[key]}")
    return out


def _row(*cells: object) -> str:
    return "| " + " | ".join("" if c is None else str(c) for c in cells) + " |"


def _history(report: dict[str, Any]) -> list[str]:
    lines = [
        "## Overlaps and fencing tokens (every sidecar, the whole run)",
        "",
        "| part | terms | overlapping pairs | smallest gap s | token regressions "
        "| dual-leader answers |",
        "|---|---|---|---|---|---|",
    ]
    for part, name in PARTS:
        h = report["history"][part]
        lines.append(_row(name, h["terms"], len(h["overlaps"]), h["smallest_gap_s"],
                          h["token_regressions"], h["dual_leader_samples"]))  # fmt: skip
    lines += [
        "",
        "Every sidecar's `/status` is long-polled for the whole run (answered at once when what "
        "it says changes). A term is one sidecar process leading with one fencing token, from "
        "its `acquired_at` (the Redis server's time of the grant: it claims to lead only after "
        "that) to the first of: an answer of that process no longer claiming it received, "
        "its own log line saying that the term ended (written before that answer), its SIGKILL "
        "sent, the end of the run (it stopped claiming before each). Two terms of "
        "different processes whose intervals intersect are an overlapping pair; the smallest "
        "gap is the closest a term started after another one ended. A token regression is a "
        "term whose token is not above that of every term of its lock acquired before it; a "
        "dual-leader answer claims a term after another answer of a newer term had arrived "
        "(chaos/checker.py).",
        "",
    ]
    return lines


def _redlock(report: dict[str, Any]) -> list[str]:
    s = report["redlock_set"]
    st = s["setup"]
    lines = [
        "## RedLock set: majority restarts",
        "",
        "| restart | nodes up again after s | each lock led again after s "
        "| later terms not above the tokens before | failed |",
        "|---|---|---|---|---|",
    ]
    for r in s["restarts"]:
        led = ", ".join(f"{v}" for v in r["led_again_after"].values())
        lines.append(_row(r["kind"], r["restart_seconds"], led, r.get("terms_after_not_above"),
                          r.get("failed", "no")))  # fmt: skip
    lines += [
        "",
        f"{st['locks']} locks x {st['sidecars_per_lock']} `redlease sidecar --lock-ref` "
        f"processes on {st['nodes']} persistent redis-servers (`appendonly yes`, `appendfsync "
        "always`). SIGKILLed nodes restarted from their AOF, or empty (AOF and RDB deleted), "
        'are fresh to redlease either way (docs/quorum.md, "The restart rule"): the set has '
        f"no quorum until they have been up for `restart_delay` ({st['restart_delay_s']:g} s, "
        "the default; the sidecar has no flag for it) and then comes back by itself. "
        "Led again: from the restart to the `acquired_at` of the first term with a token above "
        "every token of the lock before the kill; failed beyond "
        f"{st['led_again_bound_s']:g} s (`restart_delay`, 1 s of uptime rounding, the "
        "sidecar's back-off after an outage of at most min(ttl, 10 s), 5 s of margin). The "
        f"first majority restart comes {st['first_at_s']:g} s after the start, the three "
        "kinds back to back, then a node-set change; then a restart and a node-set change in "
        f"turn, each {st['between_s']:g} s after the previous fault ended.",
        "",
        "## RedLock set: node-set changes",
        "",
        "| node replaced by a fresh one | operator's status on the new set after s "
        "| sidecars led on it after s | operator named the new leaders after s "
        "| Invalid statuses | slowest KMock GET s | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in s["node_changes"]:
        lines.append(_row(f"{c['replaced']} -> {c['by']}", _worst(c["operator_followed_after"]),
                          c["sidecars_led_again_after"],
                          _worst(c["operator_named_the_leaders_after"]),
                          len(c["invalid_statuses"]), c["emulator_slowest_get_s"],
                          c.get("failed", "no")))  # fmt: skip
    lines += [
        "",
        "One node's URL in every DistributedLock of the set replaced by a fresh redis-server "
        "(merge patches of `spec.nodes`); the sidecars follow the change (`--lock-ref`: they "
        "step down, reconnect and one leads on the new set). Times from the patches' answers, "
        "the slowest lock: until the operator's status names the new `nodeSet` for the new "
        f"generation (failed beyond {st['follow_bound_s']:g} s, or on an Invalid status), "
        "until a sidecar of every lock leads with a token above every token before (failed "
        f"beyond {st['lead_bound_s']:g} s); from then, until the operator's status names that "
        f"holder and token (failed beyond {st['follow_bound_s']:g} s). The operator's statuses "
        "are read from KMock, whose latency counts in these times (its slowest answer is "
        "shown). The replaced server is stopped afterwards.",
        "",
    ]
    return lines


def _worst(seconds: dict[str, float | None]) -> float | None:
    values = list(seconds.values())
    return None if None in values or not values else max(v for v in values if v is not None)


def _processes(report: dict[str, Any]) -> list[str]:
    op = report["operator"]
    lives = report["sidecar_lives"]
    rss_g = [g for g in (growth(x["first"], x["last"], "rss_kib") for x in lives) if g is not None]
    fds_g = [g for g in (growth(x["first"], x["last"], "fds") for x in lives) if g is not None]
    lines = [
        "## Processes",
        "",
        "| process | RSS start KiB | RSS end KiB | growth | fds start | fds end | growth "
        "| asyncio tasks start / end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("operator", op["start"], op["end"],
         f"{op['asyncio_tasks_start']} / {op['asyncio_tasks_end']}"),
        ("redis-server", report["redis"]["start"], report["redis"]["end"], "n/a"),
    ]  # fmt: skip
    for server in report["redlock_set"]["servers"]:
        how = "replaced" if server["replaced"] else f"{server['lives']} lives"
        rows.append((f"set redis-server :{server['url'].rsplit(':', 1)[1].split('/')[0]} "
                     f"({how})", server["first"], server["last"], "n/a"))  # fmt: skip
    for name, a, b, tasks in rows:
        a, b = a or {}, b or {}
        lines.append(_row(name, a.get("rss_kib"), b.get("rss_kib"),
                          f"{growth(a, b, 'rss_kib')} %", a.get("fds"), b.get("fds"),
                          f"{growth(a, b, 'fds')} %", tasks))  # fmt: skip
    if lives:
        lines.append(
            f"| sidecars ({len(lives)} lives, each from its first sample to its SIGKILL) "
            f"| | | max {max(rss_g, default=0)} % | | | max {max(fds_g, default=0)} % | n/a |"
        )
    return lines


def markdown(report: dict[str, Any]) -> str:
    op = report["operator"]
    fo = report["failover_seconds"]
    ho = report["handoff_dead_seconds"]
    s = report["setup"]
    lines = [
        f"# Soak: {report['minutes']:g} minutes",
        "",
        "Written by `make soak` (soak/soak.py, 20 minutes; `SOAK_MINUTES=N` shortens it) "
        "with the figures of its last run on this machine (2 cores shared with other work).",
        "",
        f"{s['locks']} locks x {s['sidecars_per_lock']} `redlease sidecar` processes (ttl "
        f"{s['ttl_s']:g} s) on one persistent redis-server, and beside them a 5-node RedLock "
        "set (below); `redlease operator` refreshing "
        f"{s['distributed_locks']} DistributedLocks every {s['operator_refresh_s']:g} s in KMock. "
        f"Each lock's leader SIGKILLed every {s['kill_every_s']:g} s (restarted after the "
        f"take-over); redis-server restarted every {s['redis_restart_every_s']:g} s (the first "
        f"time after half of that); every {s['handoff_every_s']:g} s a library waiter (TTL "
        f"{s['handoff_ttl_s']:g} s) SIGKILLed at a hand-off. "
        f'"Start" figures are taken {s["warmup_s"]:g} s after the start; RSS and open fds are '
        "the median of 10 reads of /proc 0.5 s apart, asyncio tasks from the operator's "
        "`redlease_operator_asyncio_tasks` (the sidecars do not expose theirs).",
        "",
        "## Failover (SIGKILL of the leader to the heir's `acquired_at`)",
        "",
        "| transitions | min s | p50 s | max s | failed | kills skipped (no leader) |",
        "|---|---|---|---|---|---|",
        _row(
            fo["n"],
            fo["min"],
            fo["p50"],
            fo["max"],
            len(report["failed_failovers"]),
            len(report["skipped_kills"]),
        ),
        "",
        "## Hand-off to a SIGKILLed waiter (the holder's release to a live waiter's grant)",
        "",
        "| hand-offs | min s | p50 s | max s | failed |",
        "|---|---|---|---|---|",
        _row(ho["n"], ho["min"], ho["p50"], ho["max"], len(report["failed_handoffs"])),
        "",
        "A waiter process enlists on a held lock and is SIGKILLed; the holder releases, which "
        "hands the lease to the dead waiter (its registration has not lapsed), provisionally "
        "(2 s, docs/safety.md); a live waiter queued behind it takes the lock at its next "
        f"attempt. Failed: not granted within {s['handoff_bound_s']:g} s, the lease not handed "
        "to the dead waiter, or a token that did not rise.",
        "",
        *_history(report),
        *_redlock(report),
        *_processes(report),
        "",
        "Limit of the harness: KMock matches every request against logs of the requests it "
        "has served (soak/api.py cuts the main one to its last 100 four times a second), so "
        "it gets slower as the run goes on, the more so on a loaded machine: at the end of "
        "one 5-minute run beside other "
        "test runs it no longer answered a GET within 10 s and the operator's statuses lagged "
        "behind the sidecars. The last line below says how fast it answered at the end of "
        "this run and which terms the operator had not seen; read the operator's end figures "
        "with that in mind. Its open descriptors follow its API connections (they went down "
        "in one run and up in another), not a leak of their own.",
        "",
        "Sidecar lives last one to two kill periods (each sidecar is the leader, hence killed, "
        "every other period), so their growth is per life, not over the whole run. The "
        "redis-server figures are of its last life when it was restarted during the run; a "
        "set redis-server's, of its first life (after the warm-up, or when it joined the set) "
        "and of its last one (at the end, or when it was replaced).",
        "",
        "## Redis restarts (the single redis-server)",
        "",
        "| down s | every lock led again after s | locks whose leader changed | without leader |",
        "|---|---|---|---|",
        *(
            _row(
                r["down_seconds"],
                r["all_locks_led_after"],
                r["leaders_changed"],
                r["without_leader"],
            )
            for r in report["redis_restarts"]
        ),
        "",
        "Locks whose current term (the leader's fencing token) the operator had not seen at the "
        "end ({lock: [leader, its token, token in the operator's status]}): "
        f"{op['statuses_not_naming_the_leader_at_the_end'] or 'none'}; operator exit status "
        f"{op['exit_status']}; the emulator answered a GET in "
        f"{op['emulator_get_seconds_at_the_end']} s at the end (None: not within 10 s); "
        "RedLock set sidecars that exited by themselves: "
        f"{report['redlock_set']['sidecars_exited'] or 'none'}.",
        "",
    ]
    return "\n".join(lines)
