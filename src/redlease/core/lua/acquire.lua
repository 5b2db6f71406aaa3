-- Acquire the exclusive lease of one lock (mutex or reentrant) on one node, or on one node of
-- a RedLock set: its fencing token is above every earlier token of the lock (see grant).
-- KEYS[1] lease hash  KEYS[2] fence counter  KEYS[3] history hash  KEYS[4] waiters zset
-- KEYS[5] handoff flag
-- With the direct hand-off (see pass_on): KEYS[6] direct hand-off hash, and with ARGV[6] '1'
--   KEYS[7] the caller's own grant list (wake list .. ':' .. owner token)
-- ARGV[1] owner token  ARGV[2] ttl ms  ARGV[3] holder identity
-- ARGV[4] waiter registration: 'ms' or 'ms box', read only when refused. ms 0: do not
--   register; -1, direct hand-off only: the caller's last attempt, which, refused by a holder,
--   also drops its registration (no LEAVE after it). box: the caller's process mailbox for a
--   direct hand-off (none: its own list)
-- Every later one may be left out from the end (the common acquire sends none), absent meaning:
-- ARGV[5] minimum fence ('0', absent: none; -1: a node of a RedLock set, see grant)
-- ARGV[6] '1': the owner may be registered as a waiter ('0', absent: it is registered nowhere)
-- ARGV[7] '1': reentrant ('0', absent: not)
-- ARGV[8] forget_after ms (absent: the counter and history keep no TTL; see grant)
-- Returns 'fence count now_ms transitions' granted (a string; transitions -1 on re-entry)
--         {0, pttl_ms, holder, 1} held  {3, pttl_ms, '', 1} reserved for waiters
--         {2, fence, count} already held by this owner
-- A refused caller with KEYS[6] enlists for a direct hand-off (see enlist); a lease handed
-- over that way is popped as 'fence now_ms transitions' from its grant list, or taken by its
-- next ACQUIRE if it stopped waiting first (see reacquire).
--@prelude
local token, ttl, registered = ARGV[1], ARGV[2], ARGV[6] == '1'
-- The uncontended case first: free and not reserved (one EXISTS for both keys), the caller
-- registered nowhere: granted without the waiter bookkeeping below.
if not registered and redis.call('EXISTS', KEYS[1], KEYS[5]) == 0 then
  local fence, transitions = grant(KEYS[1], KEYS[2], KEYS[3], token, ARGV[3], ttl,
    ARGV[5] and tonumber(ARGV[5]) or 0, 'x', ARGV[8])
  return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
end
local direct, grants = KEYS[6], KEYS[7]
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == token then
  return reacquire(KEYS[1], KEYS[3], KEYS[4], direct, grants, token, ttl, ARGV[7] == '1')
end
if owner then
  local holder = redis.call('HGET', KEYS[1], 'holder')
  return refuse(ARGV, KEYS[4], direct, grants, nil, {0, redis.call('PTTL', KEYS[1]), holder, 1})
end
if not admit(KEYS[4], KEYS[5], direct, token, registered) then
  return refuse(ARGV, KEYS[4], direct, grants, nil, {3, redis.call('PTTL', KEYS[5]), '', 1})
end
local fence, transitions = grant(KEYS[1], KEYS[2], KEYS[3], token, ARGV[3], ttl,
  tonumber(ARGV[5] or 0), 'x', ARGV[8])
return fence .. ' 1 ' .. now_ms() .. ' ' .. transitions
