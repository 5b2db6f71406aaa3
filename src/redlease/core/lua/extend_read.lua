-- Extend a reader lease.
-- KEYS[1] readers zset
-- ARGV[1] owner token  ARGV[2] new ttl ms
-- Returns {1, 0, now_ms} extended  {0, 0, now_ms} not a reader (or its share expired)
--@prelude
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not s) or tonumber(s) < clock() then return {0, 0, clock()} end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', clock() + ttl, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
keep_alive(KEYS[1], tonumber(last[2]) - clock())
return {1, 0, clock()}
