"""The TTL-expiry baseline: a plain leader elector, as the classic sidecars do it.

    python -m bench.plain_elector --port P --lock NAME --ttl S --retry S --identity ID

Every ``retry`` seconds: take the key with ``SET NX PX`` or, if held by us, extend it. It never
releases: a stopped leader (SIGTERM or SIGKILL, same thing here) is replaced only once its key
expires and a standby's next retry comes round. Prints ``LEADER <monotonic time>`` when it
becomes leader, so the benchmark reads the take-over time without polling.
"""

from __future__ import annotations

import argparse
import sys
import time

import redis

EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--ttl", type=float, required=True)
    ap.add_argument("--retry", type=float, required=True)
    ap.add_argument("--identity", required=True)
    args = ap.parse_args()
    client = redis.Redis(host="127.0.0.1", port=args.port)
    extend = client.register_script(EXTEND)
    ttl_ms = round(args.ttl * 1000)
    leader = False
    print("READY", flush=True)
    while True:
        if leader:
            leader = bool(extend(keys=[args.lock], args=[args.identity, ttl_ms]))
        elif client.set(args.lock, args.identity, nx=True, px=ttl_ms):
            leader = True
            print(f"LEADER {time.monotonic():.6f}", flush=True)
        time.sleep(args.retry)
    return 0  # pragma: no cover - runs until killed


if __name__ == "__main__":
    sys.exit(main())
