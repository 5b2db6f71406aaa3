"""The protected resource: a separate redis-server that accepts a write only with a fencing token
at least as high as the highest it has seen, and records every attempt.

For a counting semaphore of limit N (``limit``) the rule is the same one generalised: a write
is accepted only with a token among the N highest it has seen (at least the N-th highest), so
at most N tokens can write at any time and a holder that N newer ones have overtaken is
refused. N = 1 is the mutex's rule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

# KEYS[1] resource hash (field max = highest accepted token)  KEYS[2] attempt log (list)
# KEYS[3] the N highest accepted tokens (zset; limit > 1 only)
# ARGV[1] token  ARGV[2] client id  ARGV[3] client monotonic time  ARGV[4] fenced '1'|'0'
# ARGV[5] limit N (absent: 1)
# Returns 1 accepted, 0 refused (stale token). ``max_before`` in the log: the lowest token that
# could write before this attempt (N = 1: the highest seen; N > 1: the N-th highest seen).
FENCED_WRITE = """
local t = redis.call('TIME')
local token = tonumber(ARGV[1])
local n = tonumber(ARGV[5] or '1')
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '-1')
if n > 1 then
  max = -1
  if redis.call('ZCARD', KEYS[3]) >= n then
    max = tonumber(redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2])
  end
end
local ok = 1
if ARGV[4] == '1' and token < max then ok = 0 end
if n > 1 and ok == 1 then
  redis.call('ZADD', KEYS[3], token, ARGV[1])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(n + 1))
elseif ok == 1 and token > max then
  redis.call('HSET', KEYS[1], 'max', token)
end
redis.call('RPUSH', KEYS[2], cjson.encode({client = ARGV[2], token = token, accepted = ok,
  mono = tonumber(ARGV[3]), wall = tonumber(t[1]) + tonumber(t[2]) / 1e6, max_before = max}))
return ok
"""


@dataclass
class Resource:
    client: redis.Redis
    fenced: bool = True
    limit: int = 1  # a counting semaphore's: tokens among the N highest seen may write

    def __post_init__(self) -> None:
        self._script = self.client.register_script(FENCED_WRITE)

    def write(self, token: int, who: str, mono: float) -> bool:
        reply = self._script(
            keys=["resource", "attempts", "current"],
            args=[token, who, repr(mono), "1" if self.fenced else "0", self.limit],
        )
        return bool(reply)

    def attempts(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.client.lrange("attempts", 0, -1)]
