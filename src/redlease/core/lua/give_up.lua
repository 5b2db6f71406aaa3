-- The listener of a lock's waiters in one process gives up for those whose deadlines passed
-- (core/waiting.py): read the lease's owner and holder (what their last attempts would have
-- been told) and, when another owner holds it, take every one of them off the queue here, as
-- LEAVE would (the lock is held: nothing to pass on). So they are gone before their LockTimeout
-- is raised: nothing their process sends afterwards (it may close its client or exit at once)
-- is needed, and no release can grant the lease to a waiter that left. A waiter that the lease
-- was granted to meanwhile is the owner: it stays, and its own last attempt takes the lease.
-- KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
-- KEYS[5] writers-waiting zset  KEYS[6] direct hand-off hash (absent: no direct hand-off)
-- ARGV[1] handoff ms  ARGV[2..] the waiters' owner tokens
-- Returns {owner, holder, fence} (nils: free). On a RedLock set it runs on every node, and the
-- lock view's quorum rule judges the replies (owner, holder and fence, as the view reads them).
--@prelude
local cur = redis.call('HMGET', KEYS[1], 'owner', 'holder', 'fence')
if not cur[1] then return cur end
local gone = {}
for i = 2, #ARGV do
  if ARGV[i] ~= cur[1] then gone[#gone + 1] = ARGV[i] end
end
local was_writer = false
for i = 1, #gone, 1000 do  -- unpack in parts: Lua's C stack takes a few thousand values
  local j = math.min(i + 999, #gone)
  redis.call('ZREM', KEYS[2], unpack(gone, i, j))
  if KEYS[6] then redis.call('HDEL', KEYS[6], unpack(gone, i, j)) end
  was_writer = redis.call('ZREM', KEYS[5], unpack(gone, i, j)) > 0 or was_writer
end
if #gone > 0 then
  left(KEYS[1], {KEYS[1]}, KEYS[2], KEYS[3], KEYS[4], KEYS[5], was_writer, tonumber(ARGV[1]))
end
return cur
