-- Acquire n locks on one node held together as one exclusive lease (a multi-key lease): all or
-- nothing, one fencing token above every earlier token of each lock (every counter and lease
-- record carries it).
-- KEYS, five per lock (KEYS[1..5] the first lock, KEYS[6..10] the second, ...):
--   KEYS[1] lease hash  KEYS[2] fence counter  KEYS[3] history hash  KEYS[4] waiters zset
--   KEYS[5] handoff flag
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity
-- ARGV[4] waiter registration ms (0: do not register)
-- ARGV[5] '1': the owner may be registered as a waiter (absent: it is registered nowhere)
-- Returns 'fence 1 now_ms transitions' granted (a string; the most transitions of the locks)
--         {0, pttl_ms, holder, i...} held   {3, pttl_ms, '', i...} reserved for waiters
--           (i...: positions of the locks that refused; the caller is registered there only;
--            pttl_ms: the soonest of their expiries)
--         {2, fence, count} already held by this owner (any of the locks)
--@prelude
local token, ttl, registered = ARGV[1], ARGV[2], ARGV[5] == '1'
local n = #KEYS / 5
local status, hint, holder, mine = 1, -1, '', nil
local refused, admitted = {}, {}  -- admitted[i]: 1 drop the caller's registration, +2 reservation
for i = 1, n do
  local lease = KEYS[5 * i - 4]
  local owner = redis.call('HGET', lease, 'owner')
  if owner == token then
    mine = lease
  elseif owner then
    status = 0
    holder = redis.call('HGET', lease, 'holder')
    hint = soonest(hint, redis.call('PTTL', lease))
    refused[#refused + 1] = i
  else
    local ok, waiting, reserved = admissible(KEYS[5 * i - 1], KEYS[5 * i], token, registered)
    if ok then
      admitted[i] = (waiting and 1 or 0) + (reserved and 2 or 0)
    else
      if status == 1 then status = 3 end
      hint = soonest(hint, redis.call('PTTL', KEYS[5 * i]))
      refused[#refused + 1] = i
    end
  end
end
if mine then
  local cur = redis.call('HMGET', mine, 'fence', 'count')
  return {2, tonumber(cur[1]), tonumber(cur[2] or '1')}
end
if #refused > 0 then
  for _, i in ipairs(refused) do enqueue(KEYS[5 * i - 1], token, tonumber(ARGV[4])) end
  for i, a in pairs(admitted) do  -- no stale registration where the lock was free
    if a % 2 == 1 then redis.call('ZREM', KEYS[5 * i - 1], token) end
  end
  return {status, hint, holder, unpack(refused)}
end
local floor = 0  -- one token for all: above every counter
for i = 1, n do
  floor = math.max(floor, tonumber(redis.call('GET', KEYS[5 * i - 3]) or '0') + 1)
end
local fence, transitions = nil, nil
for i = 1, n do
  if admitted[i] >= 2 then redis.call('DEL', KEYS[5 * i]) end
  if admitted[i] % 2 == 1 then redis.call('ZREM', KEYS[5 * i - 1], token) end
  local t
  fence, t = grant(KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2], token, ARGV[3], ttl,
    floor, 'x')
  if not transitions or tonumber(t) > tonumber(transitions) then transitions = t end
end
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
