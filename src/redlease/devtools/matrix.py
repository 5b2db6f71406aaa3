"""`make test-matrix`: the core behaviour and quorum suites on every server flavour this machine
has (Redis 7, Redis 6.2, Valkey 8; docs/servers.md), then a RedLock set mixing all three.

Usage: python -m redlease.devtools.matrix [--markdown PATH] [--others] [--features]
[PYTEST_ARGS...]. Each cell is one pytest run with ``--server=FLAVOUR``; a flavour that cannot
be had is reported, not failed. ``--others`` (used by ``make test``) leaves out what the main
pytest run of ``make test`` already covers: the default server's flavour and the mixed set.
Prints a Markdown table (server x suite x result x time); exit status 1 if any run failed.
``--features`` instead asks every server about the behaviours that differ between them and
prints that table (the one in docs/servers.md).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

import redis

from redlease.devtools.localredis import RedisServer
from redlease.devtools.redisbinary import (
    FLAVOURS,
    ServerBinary,
    available_flavours,
    describe,
    find_redis_server,
)
from redlease.devtools.tlsprobe import tls_unsupported

ROOT = Path(__file__).resolve().parents[3]
# tests/core/quorum is a suite of its own
SUITES = {
    "core": ["tests/core", "--ignore=tests/core/quorum"],
    "quorum": ["tests/core/quorum"],
}
MIXED = "tests/core/quorum/test_servers.py"
SUMMARY = re.compile(r"^=* ?(\d+ (passed|failed|skipped|error|errors|deselected).*?)(?: =*)?$")


TOTALS = {"passed": 0, "failed": 0, "skipped": 0}


def _count(summary: str) -> None:
    """Add pytest's counts (``3 passed, 1 skipped``) to TOTALS; errors count as failures."""
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary):
        TOTALS["failed" if word.startswith("error") else word] += int(number)


def run(args: list[str]) -> tuple[str, float, bool]:
    """(pytest's summary line, seconds, passed) of one pytest run in the repository root."""
    start = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    lines = proc.stdout.splitlines()
    summary = next(
        (m.group(1) for line in reversed(lines) if (m := SUMMARY.match(line.strip()))),
        f"exit status {proc.returncode}",
    )
    if proc.returncode not in (0, 5):
        sys.stdout.write("\n".join(lines[-40:]) + "\n")
    _count(summary)
    if proc.returncode not in (0, 1, 5):  # interrupted, internal or usage error: no counts
        TOTALS["failed"] += 1
    return re.sub(r" in [\d.]+s.*$", "", summary), seconds, proc.returncode in (0, 5)


def _try(call: object) -> str:
    """A probe's answer, or ``no`` with the server's error."""
    try:
        answer = call() if callable(call) else call
    except redis.ResponseError as exc:
        return f"no ({str(exc).split(',')[0][:50]})"
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return str(answer)


def _cluster_info(binary: ServerBinary) -> str:
    """Start it with ``cluster-enabled yes`` and read ``cluster_enabled`` from INFO."""
    with RedisServer(binary=binary.path, cluster=True) as server:
        c = server.client(decode_responses=True)
        try:
            return "yes" if c.info("cluster").get("cluster_enabled") == 1 else "no"
        finally:
            c.close()


def features(binary: ServerBinary) -> dict[str, str]:
    """What this server does where servers differ (each answer comes from the live server)."""
    server = RedisServer(binary=binary.path).start()
    c = server.client(decode_responses=True)
    out: dict[str, str] = {}
    try:
        info = c.info("server")
        out["INFO redis_version"] = info["redis_version"]
        out["EVAL with TIME, then a write"] = _try(
            lambda: (
                c.eval("local t = redis.call('TIME') redis.call('SET', KEYS[1], t[1])", 1, "k")
                is None
            )
        )
        first = hashlib.sha1(b"return 0").hexdigest()  # noqa: S324 - Redis names scripts so
        c.eval("return 0", 0)
        loaded = c.script_load("return 'loaded'")
        for i in range(1, 600):
            c.eval(f"return {i}", 0)
        out["EVAL'd script still cached after 600 more"] = _try(c.script_exists(first)[0])
        out["SCRIPT LOAD'ed one still cached"] = _try(c.script_exists(loaded)[0])
        out["script flags (#!lua)"] = _try(lambda: c.eval("#!lua flags=no-writes\nreturn 1", 0))
        out["EVAL_RO"] = _try(lambda: c.execute_command("EVAL_RO", "return 1", 0))
        out["FUNCTION"] = _try(lambda: c.execute_command("FUNCTION", "LIST") == [])
        out["WAIT 0 0"] = _try(lambda: c.execute_command("WAIT", 0, 0))
        out["WAITAOF"] = _try(lambda: c.execute_command("WAITAOF", 0, 0, 0))
        out["EXPIRE ... GT"] = _try(lambda: c.execute_command("EXPIRE", "k", 100, "GT") in (0, 1))
        out["cluster mode"] = _try(lambda: _cluster_info(binary))
        why = tls_unsupported(binary.path)
        out["TLS"] = f"no: {why.split(': ', 1)[-1]}" if why else "yes"
    finally:
        c.close()
        server.stop()
    return out


def feature_table() -> str:
    found = available_flavours()
    per = {name: features(b) for name, b in found.items()}
    head = [f"{name}: {b.label}" for name, b in found.items()]
    rows = ["| | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for key in next(iter(per.values()), {}):
        rows.append(f"| {key} | " + " | ".join(per[n][key] for n in found) + " |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(prog="test-matrix")
    ap.add_argument("--markdown", help="also write the table here")
    ap.add_argument("--features", action="store_true", help="the server feature table only")
    ap.add_argument("--others", action="store_true", help="skip the default server and mixed set")
    args, extra = ap.parse_known_args()
    if args.features:
        print(feature_table())
        return 0
    found = available_flavours()
    default = describe(find_redis_server()).flavour
    rows = ["| server | suite | result | time |", "|---|---|---|---|"]
    ok = True
    for name, flavour in FLAVOURS.items():
        binary = found.get(name)
        if args.others and name == default:
            rows.append(f"| {name} | all | in the main run (the default server) | |")
            print(rows[-1], flush=True)
            continue
        if binary is None:
            rows.append(f"| {name} | all | not available here ({flavour.install}) | |")
            print(rows[-1], flush=True)
            continue
        for suite, paths in SUITES.items():
            result, seconds, passed = run([f"--server={name}", *paths, f"--ignore={MIXED}", *extra])
            ok &= passed
            rows.append(f"| {name}: {binary.label} | {suite} | {result} | {seconds:.0f} s |")
            print(rows[-1], flush=True)
    labels = " + ".join(found[n].label for n in FLAVOURS if n in found)
    if args.others:
        rows.append(f"| mixed: {labels} | quorum | in the main run | |")
    else:
        result, seconds, passed = run([MIXED, *extra])
        ok &= passed
        rows.append(f"| mixed: {labels} | quorum | {result} | {seconds:.0f} s |")
    table = "\n".join(rows) + "\n"
    print("\n" + table)
    n_passed, n_failed, n_skipped = TOTALS.values()
    print(
        f"matrix: {n_passed} passed, {n_failed} failed, {n_skipped} skipped"
    )  # a CI-readable last line
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
