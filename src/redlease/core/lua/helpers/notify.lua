-- After a release: if live waiters exist, reserve the free lock for them for ``handoff_ms``
-- and push wake tokens that they BLPOP (one; ``wake_all``: one each, at most 1000). Returns
-- the live waiters.
local function notify(waiters, handoff, wake, handoff_ms, wake_all)
  local n = live(waiters)
  if n > 0 then
    redis.call('SET', handoff, '1', 'PX', handoff_ms)
    redis.call('DEL', wake)
    local k = 1
    if wake_all then k = math.min(n, 1000) end
    for _ = 1, k do redis.call('RPUSH', wake, '1') end
    redis.call('PEXPIRE', wake, math.max(handoff_ms, 1000))
  end
  return n
end
