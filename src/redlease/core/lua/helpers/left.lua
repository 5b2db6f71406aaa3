-- After waiters left the queue of the lock ``lease`` (``slots``: every lease key of the lock, a
-- semaphore's too): readers queued behind the last waiting writer may go now; a wake token the
-- leavers may have taken goes to the next waiter when the lock is free and reserved for
-- waiters; no reservation without live waiters. Returns the live waiters.
local function left(lease, slots, waiters, handoff, wake, writers, was_writer, handoff_ms)
  local n = live(waiters)
  if was_writer and live(writers) == 0 then
    -- readers queued behind this writer may go now
    notify(waiters, handoff, wake, handoff_ms, true)
  elseif n > 0 and redis.call('EXISTS', lease, unpack(slots, 2)) < #slots
      and redis.call('EXISTS', handoff) == 1 then
    redis.call('RPUSH', wake, '1')
    redis.call('PEXPIRE', wake, 1000)
  elseif n == 0 then
    redis.call('DEL', handoff)
  end
  return n
end
