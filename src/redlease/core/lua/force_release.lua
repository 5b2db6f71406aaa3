-- Administrative release (operator's force-release): remove the writer/holder lease and every
-- reader, keep the fence counter, wake all waiters.
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] waiters zset  KEYS[4] handoff flag
-- KEYS[5] wake list  KEYS[6..] a counting semaphore's slots after slot 0 (removed too)
-- ARGV[1] handoff ms
-- Returns {leases removed (slots included), readers removed}
--@prelude
local had = redis.call('DEL', KEYS[1], unpack(KEYS, 6))
local readers = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2])
notify(KEYS[3], KEYS[4], KEYS[5], tonumber(ARGV[1]), true)
return {had, readers}
