-- Extend an exclusive lease held by the owner: one lock, or every lock of a multi-key lease
-- (all or none: a lease that lost one of its locks is lost, and is not kept alive in part).
-- KEYS[1] lease hash (KEYS[2..n]: those of the other locks of a multi-key lease)
-- ARGV[1] owner token  ARGV[2] new ttl ms
-- ARGV[3] present and not '': a counting semaphore; KEYS are the lease keys of its slots, and
--   the one the owner holds is extended
-- ARGV[4] forget_after ms (one lock; absent: none): the last two KEYS are then the lock's fence
--   counter and history hash, whose expiries (see grant) move to at least ttl + forget from now
--   (only ever later, so the counter's rule holds; a counter without a TTL keeps none)
-- Returns {1, fence, now_ms} extended  {0, 0, now_ms} not the owner (or expired); fence and
--   now_ms as strings
--@prelude
local leases = KEYS
if ARGV[4] then leases = {unpack(KEYS, 1, #KEYS - 2)} end
if ARGV[3] and ARGV[3] ~= '' then
  local mine = owned_slot(leases, ARGV[1])
  if not mine then return {0, 0, now_ms()} end
  leases = {mine}
end
local fence = 0
for i = 1, #leases do
  local cur = redis.call('HMGET', leases[i], 'owner', 'fence')
  if cur[1] ~= ARGV[1] then return {0, 0, now_ms()} end
  fence = cur[2]
end
for i = 1, #leases do
  redis.call('HSET', leases[i], 'renewed_ms', now_ms(), 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', leases[i], ARGV[2])
end
if ARGV[4] then
  local keep = ARGV[2] + ARGV[4]
  local p = redis.call('PTTL', KEYS[#KEYS - 1])
  if p >= 0 and p < keep then redis.call('PEXPIRE', KEYS[#KEYS - 1], keep) end
  keep_alive(KEYS[#KEYS], keep)
end
return {1, fence, now_ms()}
