-- Release an exclusive lease (mutex, reentrant, the writer of a read-write lock, or every lock
-- of a multi-key lease).
-- KEYS, four per lock (KEYS[1..4] the first lock, KEYS[5..8] the second, ...):
--   KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- With one lock, three more keys may follow for a direct hand-off (see pass_on): KEYS[5] fence
-- counter  KEYS[6] history hash  KEYS[7] direct hand-off hash. The head waiter's own grant list
-- (KEYS[4] .. ':' .. its token, same slot) is the one key not passed: only the script knows it.
-- The short form, KEYS[1] lease hash  KEYS[2] waiters zset alone (one lock, every count, sent
-- when no waiter is expected): the lease is released only if nobody waits, else nothing is
-- done and -2 asks for the full form (the waiters are then passed the lock).
-- ARGV[1] owner token; every later one may be left out from the end (the common release sends
--   the token alone), absent meaning:
-- ARGV[2] handoff ms (absent: HANDOFF_MS)  ARGV[3] '0' release one reentrant count ('1', absent:
--   every count)  ARGV[4] '1' wake every waiter ('0', absent: one)
-- ARGV[5] a counting semaphore (one lock, every count): m, the number of its slots after slot 0,
--   whose lease keys are the last m KEYS ('0', absent: a mutex). The slot the owner holds is
--   freed and passed on to the head waiter.
-- ARGV[6] forget_after ms of the lease handed on (absent: none; see grant)
-- Returns the remaining reentrant count (0 = lease gone) when released, -1 when not the owner
--   (of at least one lock; the owner's other locks are released), -2 (the short form only)
--   when waiters are registered: nothing done
--@prelude
if #KEYS == 2 then  -- the short form
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return -1 end
  if redis.call('EXISTS', KEYS[2]) == 1 then return -2 end
  redis.call('DEL', KEYS[1])
  return 0
end
local m, handoff_ms, wake_all = 0, ARGV[2] or 'HANDOFF_MS', ARGV[4] == '1'
if ARGV[5] then m = tonumber(ARGV[5]) end
local direct, n = nil, 1  -- with one lock's direct hand-off, its hash
if #KEYS - m == 7 then direct = KEYS[7] else n = math.floor((#KEYS - m) / 4) end
local full = ARGV[3] ~= '0'
local owned, count = 0, 0
for i = 1, 4 * n, 4 do
  local lease, owner, held = KEYS[i], nil, nil
  if m > 0 then  -- a semaphore: the slot the owner holds
    lease = owned_slot({KEYS[1], unpack(KEYS, #KEYS - m + 1)}, ARGV[1])
    if lease then owner = ARGV[1] end
  elseif full then
    owner = redis.call('HGET', lease, 'owner')
  else
    local cur = redis.call('HMGET', lease, 'owner', 'count')
    owner, held = cur[1], cur[2]
  end
  if owner == ARGV[1] then
    owned = owned + 1
    if held and tonumber(held) > 1 then
      count = redis.call('HINCRBY', lease, 'count', -1)
    else
      redis.call('DEL', lease)
      if not direct or wake_all then
        notify(KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], handoff_ms, wake_all)
      elseif redis.call('EXISTS', KEYS[2]) == 1 then
        pass_on(lease, KEYS[5], KEYS[6], KEYS[2], KEYS[3], KEYS[4], direct, handoff_ms, ARGV[6])
      end
    end
  end
end
if owned < n then return -1 end
return count
