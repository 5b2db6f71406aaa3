-- Register (or refresh) a candidate for leadership of a lock.
-- KEYS[1] candidates zset
-- ARGV[1] identity  ARGV[2] heartbeat ttl ms (0: withdraw the candidate)
-- Returns {live candidates, now_ms}
--@prelude
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('ZADD', KEYS[1], clock() + ttl, ARGV[1])
  keep_alive(KEYS[1], ttl)
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return {live(KEYS[1]), clock()}
