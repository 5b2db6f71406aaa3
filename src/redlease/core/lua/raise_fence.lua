-- Raise a lock's fence counter to at least a minimum (RedLock: a quorum holder's token must be
-- on a quorum of counters before it is granted; also used to re-seed a node restarted empty).
-- KEYS[1] fence counter  KEYS[2] lease hash (KEYS[3..]: a counting semaphore's other slots; the
--   owner's lease record is found in any of them)
-- ARGV[1] minimum fence  ARGV[2] owner token ('' : counter only)
-- ARGV[3] ttl + forget_after ms (absent: none): a raised counter then expires as a granted one
--   does (forget_at); absent, SET leaves it without a TTL
-- Returns {counter after, 1 if the owner's lease record now carries the fence else 0}
--@prelude
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local min = tonumber(ARGV[1])
if cur < min then
  redis.call('SET', KEYS[1], ARGV[1])  -- the text as given: a Lua number may print inexactly
  cur = min
  if ARGV[3] then forget_at(KEYS[1], nil, ARGV[1], tonumber(ARGV[3])) end
end
local updated = 0
if ARGV[2] ~= '' then
  for i = 2, #KEYS do
    if redis.call('HGET', KEYS[i], 'owner') == ARGV[2] then
      redis.call('HSET', KEYS[i], 'fence', ARGV[1])
      updated = 1
      break
    end
  end
end
return {cur, updated}
