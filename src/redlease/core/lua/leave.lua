-- A blocked acquirer gives up (timeout, cancellation): drop its registration and, if the lock is
-- free and reserved for waiters, pass the wake token on so no waiter sleeps in vain.
-- KEYS, five per lock (KEYS[1..5] the first lock, KEYS[6..10] the second, ...):
--   KEYS[1] lease hash  KEYS[2] waiters zset  KEYS[3] handoff flag  KEYS[4] wake list
--   KEYS[5] writers-waiting zset
-- With one lock, four more keys may follow for a direct hand-off: KEYS[6] fence counter
-- KEYS[7] history hash  KEYS[8] direct hand-off hash  KEYS[9] the caller's own grant list. A
-- lease handed over to the caller while it gave up is released and passed on.
-- ARGV[1] owner token  ARGV[2] handoff ms
-- ARGV[3] a counting semaphore (one lock): m, the number of its slots after slot 0, whose lease
--   keys are the last m KEYS (absent or '0': a mutex); a lease handed over is found in any slot,
--   and "free" means some slot is free
-- ARGV[4] forget_after ms of a lease passed on (absent: none; see grant)
-- Returns {live waiters, summed over the locks}
--@prelude
local s = tonumber(ARGV[3] or '0')
local m = 5 * math.floor((#KEYS - s) / 5)
local slots = {KEYS[1]}
if s > 0 then slots = {KEYS[1], unpack(KEYS, #KEYS - s + 1)} end
if #KEYS - s >= m + 3 then
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('DEL', KEYS[9])
  local lease = owned_slot(slots, ARGV[1])
  if lease then
    redis.call('DEL', lease)
    redis.call('ZREM', KEYS[2], ARGV[1])
    if redis.call('EXISTS', KEYS[2]) == 1 then
      pass_on(lease, KEYS[6], KEYS[7], KEYS[2], KEYS[3], KEYS[4], KEYS[8], tonumber(ARGV[2]),
        ARGV[4])
    end
    return {live(KEYS[2])}
  end
end
local total = 0
for i = 1, m, 5 do
  local waiters, writers = KEYS[i + 1], KEYS[i + 4]
  redis.call('ZREM', waiters, ARGV[1])
  local was_writer = redis.call('ZREM', writers, ARGV[1]) == 1
  total = total + left(KEYS[i], slots, waiters, KEYS[i + 2], KEYS[i + 3], writers, was_writer,
    tonumber(ARGV[2]))
end
return {total}
