"""The protected resource: a separate redis-server that accepts a write only with a fencing token
at least as high as the highest it has seen, and records every attempt."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

# KEYS[1] resource hash (field max = highest accepted token)  KEYS[2] attempt log (list)
# ARGV[1] token  ARGV[2] client id  ARGV[3] client monotonic time  ARGV[4] fenced '1'|'0'
# Returns 1 accepted, 0 refused (stale token)
FENCED_WRITE = """
local t = redis.call('TIME')
local token = tonumber(ARGV[1])
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '-1')
local ok = 1
if ARGV[4] == '1' and token < max then ok = 0 end
if ok == 1 and token > max then redis.call('HSET', KEYS[1], 'max', token) end
redis.call('RPUSH', KEYS[2], cjson.encode({client = ARGV[2], token = token, accepted = ok,
  mono = tonumber(ARGV[3]), wall = tonumber(t[1]) + tonumber(t[2]) / 1e6, max_before = max}))
return ok
"""


@dataclass
class Resource:
    client: redis.Redis
    fenced: bool = True

    def __post_init__(self) -> None:
        self._script = self.client.register_script(FENCED_WRITE)

    def write(self, token: int, who: str, mono: float) -> bool:
        reply = self._script(
            keys=["resource", "attempts"],
            args=[token, who, repr(mono), "1" if self.fenced else "0"],
        )
        return bool(reply)

    def attempts(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.client.lrange("attempts", 0, -1)]
