-- Acquire a slot of a counting semaphore of m + 1 slots (each a lease like the mutex's): the
-- caller's own slot if it holds one, else the first free one that the hand-off rules admit.
-- KEYS[1] slot 0's lease hash  KEYS[2] fence counter  KEYS[3] history hash
-- KEYS[4] waiters zset  KEYS[5] handoff flag
-- With the direct hand-off, as ACQUIRE's: KEYS[6] direct hand-off hash (and with ARGV[6] '1'
--   KEYS[7] the caller's own grant list)
-- The last m KEYS: the lease hashes of slots 1..m (LockKeys.slot)
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity
-- ARGV[4] waiter registration ('ms' or 'ms box', as ACQUIRE's)
-- ARGV[5] minimum fence ('0': none; -1: a node of a RedLock set, see grant)
-- ARGV[6] '1': the owner may be registered as a waiter ('0': it is registered nowhere)
-- ARGV[7] m, the number of slots after slot 0
-- ARGV[8] forget_after ms (absent: the counter and history keep no TTL; see grant)
-- Returns 'fence 1 now_ms transitions' granted (a string)
--         {0, soonest pttl_ms, a holder, 1} every slot held
--         {3, pttl_ms, '', 1} a slot is free but reserved for waiters
--         {2, fence, count} a slot is already held by this owner
-- A refused caller with KEYS[6] enlists to be handed a slot below its limit (see pass_on).
--@prelude
local token, ttl, registered = ARGV[1], ARGV[2], ARGV[6] == '1'
local m = tonumber(ARGV[7])
local direct, grants = nil, nil
if #KEYS - m > 5 then direct = KEYS[6] end
if #KEYS - m > 6 then grants = KEYS[7] end
local lease, owner, holder, hint = slot_of({KEYS[1], unpack(KEYS, #KEYS - m + 1)}, token)
if owner == token then
  return reacquire(lease, KEYS[3], KEYS[4], direct, grants, token, ttl, false)
end
if owner then
  return refuse(ARGV, KEYS[4], direct, grants, m + 1, {0, hint, holder, 1})
end
if not admit(KEYS[4], KEYS[5], direct, token, registered) then
  return refuse(ARGV, KEYS[4], direct, grants, m + 1, {3, redis.call('PTTL', KEYS[5]), '', 1})
end
local fence, transitions = grant(lease, KEYS[2], KEYS[3], token, ARGV[3], ttl,
  tonumber(ARGV[5]), 'x', ARGV[8])
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
