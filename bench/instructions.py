"""Server instructions per uncontended pair, load-independent: ``python -m bench.instructions``.

Each contender of the floor comparison (:func:`bench.profile.floor_pairs`: redlease's Lock,
the contract floor, the 7-call floor, a string lease, redis-py's Lock) runs on a
redis-server of its own under valgrind's callgrind, with instrumentation switched on only
around the measured pairs (after a warm-up): every instruction the server spends on them
counts, request parsing and replies included, and nothing else does. Unlike ``INFO
commandstats`` time, the count does not move with the machine's load or speed, so the ratios
to the floors (DESIGN.md's "Performance anchors") can be compared across runs. Needs
``valgrind`` (Debian package) and a ``redis-server`` on PATH; a few seconds per contender.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.profile import CONTRACT_FLOOR, FLOOR_LIBRARY, floor_pairs
from redlease.devtools.localredis import free_port

FLOOR = "floor (fenced lease, 7 calls)"
GOAL = 1.15  # DESIGN.md's "Performance anchors": redlease's pair against the contract floor
WARM_UP = 50


def count(name: str, pairs: int, out_dir: str) -> float:
    """Server instructions per pair of contender ``name`` (a key of ``floor_pairs``)."""
    port = free_port()
    out = os.path.join(out_dir, f"callgrind.{port}")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + 120  # valgrind starts slowly
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server under valgrind did not start") from None
                time.sleep(0.1)
        client.function_load(FLOOR_LIBRARY, replace=True)
        pair = floor_pairs(client)[name]
        for _ in range(WARM_UP):
            pair()
        control = ["callgrind_control", "-i"]
        subprocess.run([*control, "on", str(server.pid)], check=True, capture_output=True)
        for _ in range(pairs):
            pair()
        subprocess.run([*control, "off", str(server.pid)], check=True, capture_output=True)
        subprocess.run(
            ["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True
        )
    finally:
        client.close()
        server.terminate()
        server.wait(60)
    total = 0
    for path in glob.glob(out + "*"):
        with open(path) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total = max(total, int(line.split()[1]))
    if not total:
        raise RuntimeError(f"no instruction count for {name!r} in {out}*")
    return total / pairs


NAMES = (CONTRACT_FLOOR, FLOOR, "redlease Lock", "redis-py Lock")
TOOLS = ("valgrind", "callgrind_control", "redis-server")


def scenario(pairs: int = 1000, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``make bench``'s server figure: instructions per pair of each of :data:`NAMES`, or why
    it was not measured (the tools missing)."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        return {"skipped": f"needs {', '.join(missing)} on PATH"}
    log(f"server instructions per pair under callgrind ({pairs} pairs each) ...")
    with tempfile.TemporaryDirectory() as tmp:
        per = {name: count(name, pairs, tmp) for name in NAMES}
    return {"pairs": pairs, "goal": GOAL, "contract_floor": CONTRACT_FLOOR, "per_pair": per}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.instructions")
    ap.add_argument("--pairs", type=int, default=1000, help="measured pairs per contender")
    args = ap.parse_args()
    found = scenario(args.pairs, log=lambda _: None)
    if "skipped" in found:
        sys.exit(f"bench.instructions {found['skipped']}")
    per = found["per_pair"]
    ours = per["redlease Lock"]
    print(f"server instructions per uncontended pair ({args.pairs} pairs, callgrind):")
    for name, n in per.items():
        ratio = "" if name == "redlease Lock" else f"  redlease is {ours / n:.2f}x this"
        print(f"  {name:58s} {n / 1000:7.1f}k{ratio}")
    print(f"  contract floor / floor: {per[CONTRACT_FLOOR] / per[FLOOR]:.2f}x")
    times = ours / per[CONTRACT_FLOOR]
    met = "met" if times <= GOAL else "MISSED"
    print(f"  goal (DESIGN.md): redlease <= {GOAL}x the contract floor: {times:.2f}x, {met}")


if __name__ == "__main__":
    main()
