"""`python -m chaos [--quick] [--report PATH]`: run the scenarios, print a summary, write JSON.

Exit status 1 if a scenario that must be safe accepted a stale write, saw a token regression or
two leaders; its histories are then kept beside the report (``<report>-<scenario>.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from chaos.runner import SCENARIOS, remove_orphaned_workdirs, run_scenario

COLUMNS = (
    ("clients", "clients"),
    ("critical_sections", "CS"),
    ("writes", "writes"),
    ("sections_overlapped", "CS overlapped"),
    ("overlapping_pairs", "overlap pairs"),
    ("stale_writes_refused", "stale refused"),
    ("stale_writes_accepted", "stale ACCEPTED"),
    ("token_regressions", "token regress."),
    ("leader_samples", "status samples"),
    ("dual_leader_samples", "2 leaders"),
    ("frozen_claims", "frozen claims"),
    ("stale_claim_samples", "led before claim ran out"),
)


def markdown(results: list[dict[str, object]]) -> str:
    """The results as a Markdown table (for docs/safety.md)."""
    head = ["scenario", "faults", *(label for _key, label in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['name']} | skipped: {r['skipped']} |" + " |" * len(COLUMNS))
            continue
        faults = r["faults"]
        assert isinstance(faults, dict)
        text = ", ".join(f"{k} {v}" for k, v in faults.items()) or "none"
        cells = [str(r["name"]), text, *(str(r[key]) for key, _label in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so every scenario's cleanup runs."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> int:
    ap = argparse.ArgumentParser(prog="chaos")
    ap.add_argument("--quick", action="store_true", help="the < 60 s subset run by make test")
    ap.add_argument("--report", default="chaos-report.json")
    ap.add_argument("--only", action="append", help="run only these scenarios")
    ap.add_argument("--markdown", help="also write the results as a Markdown table here")
    args = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    remove_orphaned_workdirs()
    report = Path(args.report)
    chosen = [
        s
        for s in SCENARIOS
        if (not args.quick or s.quick) and (not args.only or s.name in args.only)
    ]
    seconds = 5.0 if args.quick else 20.0
    results = []
    for sc in chosen:
        print(f"== {sc.name}: {sc.description}", flush=True)
        evidence = report.with_name(f"{report.stem}-{sc.name}.jsonl")
        res = run_scenario(sc, args.quick, seconds, evidence)
        results.append(res)
        if "skipped" in res:
            print(f"   skipped: {res['skipped']}")
            continue
        faults = ", ".join(f"{k} {v}" for k, v in res["faults"].items()) or "none"
        print(f"   faults: {faults}")
        print("   " + "  ".join(f"{label} {res[key]}" for key, label in COLUMNS))
        if "led_again_s" in res:
            print(f"   led again after a restart (s): {res['led_again_s']}  stuck {res['stuck']}")
    report.write_text(json.dumps({"quick": args.quick, "scenarios": results}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
    bad = [r["name"] for r in results if r.get("expected_safe") and not r.get("safe", True)]
    stuck = [r["name"] for r in results if r.get("stuck")]  # a set that did not come back
    if bad:
        print(f"UNSAFE: {', '.join(bad)} (histories kept beside {report})")
    if stuck:
        print(f"DID NOT LEAD AGAIN after a restart: {', '.join(stuck)}")
    if bad or stuck:
        return 1
    print(f"all {len(results)} scenarios as expected; report in {args.report}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # every scenario has cleaned up on the way out
        print(f"interrupted ({exc or 'SIGINT'}): no report written", file=sys.stderr)
        sys.exit(130)
