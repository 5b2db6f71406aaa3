-- Register the blocked acquirer ``token`` as a waiter in ``zkey`` for ``wait`` ms (score: when
-- the registration lapses), so that a release hands the lock to waiters first (0: none).
local function enqueue(zkey, token, wait)
  if wait > 0 then
    redis.call('ZADD', zkey, clock() + wait, token)
    keep_alive(zkey, wait)
  end
end
