-- Acquire a shared (reader) lease of a read-write lock. Refused while a writer holds the lock
-- or while a writer waits (writer preference: a stream of readers cannot starve a writer).
-- KEYS[1] lease hash (the writer)  KEYS[2] readers zset  KEYS[3] writers-waiting zset
-- KEYS[4] waiters zset  KEYS[5] handoff flag  KEYS[6] fence counter
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] waiter registration ms (0: do not register)
-- Returns {1, fence, readers, now_ms} granted  {0, wait hint ms (-1 unknown), holder} refused
--         {2, fence, readers} already a reader  {3, pttl ms, ''} reserved for waiters
--@prelude
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local wait = tonumber(ARGV[3])
local fence = tonumber(redis.call('GET', KEYS[6]) or '0')
local mine = redis.call('ZSCORE', KEYS[2], token)
if mine and tonumber(mine) >= clock() then
  return {2, fence, redis.call('ZCARD', KEYS[2])}
end
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder then
  enqueue(KEYS[4], token, wait)
  return {0, redis.call('PTTL', KEYS[1]), holder}
end
if live(KEYS[3]) > 0 then
  enqueue(KEYS[4], token, wait)
  return {0, -1, ''}
end
if not admit(KEYS[4], KEYS[5], nil, token, true) then
  enqueue(KEYS[4], token, wait)
  return {3, redis.call('PTTL', KEYS[5]), ''}
end
redis.call('ZADD', KEYS[2], clock() + ttl, token)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
keep_alive(KEYS[2], tonumber(last[2]) - clock())
return {1, fence, live(KEYS[2]), clock()}
