-- Delete every key of a lock that nobody uses any more (`redlease retire`): the fence counter
-- and history included, which otherwise never expire. Refused while the lease is held, a
-- reader or a waiter is live, or a candidate is alive (a running sidecar would take it again).
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] waiters zset  KEYS[4] candidates zset
-- KEYS[5..] the lock's other keys (fence, history, handoff, wake, writers-waiting, direct,
--   and last the slots of a counting semaphore after slot 0)
-- ARGV[1] the number of slot keys at the end of KEYS (absent: none); refused while one is held
-- Returns {1, keys deleted} retired   {0, reason} refused: 'held' | 'readers' | 'waiters' |
--   'candidates'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 'held'} end
local s = tonumber(ARGV[1] or '0')
if s > 0 and redis.call('EXISTS', unpack(KEYS, #KEYS - s + 1)) > 0 then return {0, 'held'} end
if redis.call('ZCOUNT', KEYS[2], now, '+inf') > 0 then return {0, 'readers'} end
if redis.call('ZCOUNT', KEYS[3], now, '+inf') > 0 then return {0, 'waiters'} end
if redis.call('ZCOUNT', KEYS[4], now, '+inf') > 0 then return {0, 'candidates'} end
return {1, redis.call('DEL', unpack(KEYS))}
