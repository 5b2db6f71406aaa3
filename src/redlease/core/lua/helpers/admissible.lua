-- May the caller take a free lock? True when there is no reservation, or it is a live
-- registered waiter, or every registered waiter has lapsed (then the third result says the
-- reservation must go). The second result tells whether the caller may be registered (so its
-- registration may need removing): ``registered`` says so when there is no reservation.
local function admissible(waiters, handoff, token, registered)
  if redis.call('EXISTS', handoff) == 0 then return true, registered, false end
  local s = redis.call('ZSCORE', waiters, token)
  if (s and tonumber(s) >= clock()) or live(waiters) == 0 then return true, true, true end
  return false, true, false
end
