-- Acquire the exclusive (writer) lease of a read-write lock: no writer and no live reader.
-- A refused writer registers as waiting, which stops new readers from entering.
-- KEYS[1] lease hash  KEYS[2] readers zset  KEYS[3] writers-waiting zset  KEYS[4] waiters zset
-- KEYS[5] handoff flag  KEYS[6] fence counter  KEYS[7] history hash
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity
-- ARGV[4] waiter registration ms (0: do not register)
-- Returns 'fence 1 now_ms transitions' granted  {0, wait hint ms, holder} refused
--         {2, fence, count} already the writer  {3, pttl ms, ''} reserved for waiters
--@prelude
local token = ARGV[1]
local wait = tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'holder', 'fence', 'count')
if cur[1] == token then return {2, tonumber(cur[3]), tonumber(cur[4] or '1')} end
if cur[1] then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  return {0, redis.call('PTTL', KEYS[1]), cur[2]}
end
if live(KEYS[2]) > 0 then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  return {0, tonumber(last[2]) - clock(), ''}
end
if not admit(KEYS[4], KEYS[5], nil, token, true) then
  enqueue(KEYS[4], token, wait)
  enqueue(KEYS[3], token, wait)
  return {3, redis.call('PTTL', KEYS[5]), ''}
end
redis.call('ZREM', KEYS[3], token)
local fence, transitions = grant(KEYS[1], KEYS[6], KEYS[7], token, ARGV[3], ARGV[2], 0, 'w')
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
