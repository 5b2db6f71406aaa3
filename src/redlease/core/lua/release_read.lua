-- Release a reader lease; when the last reader leaves, wake the waiters (writers first in line).
-- KEYS[1] readers zset  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- ARGV[1] owner token  ARGV[2] handoff ms
-- Returns the readers left when released, -1 when not a reader (or its share expired)
--@prelude
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if (not s) or tonumber(s) < clock() then return -1 end
local left = live(KEYS[1])
if left == 0 then notify(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[2]), true) end
return left
