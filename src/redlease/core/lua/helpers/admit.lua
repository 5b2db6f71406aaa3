-- May the caller ``token`` take a free lock (its ``waiters`` and reservation ``handoff``)?
-- admissible(); when it may, the reservation is lifted if it was admitted through it, and its
-- own registration (and enlistment in ``direct``, nil: none) is dropped.
local function admit(waiters, handoff, direct, token, registered)
  local ok, waiting, reserved = admissible(waiters, handoff, token, registered)
  if not ok then return false end
  if reserved then redis.call('DEL', handoff) end
  if waiting then
    redis.call('ZREM', waiters, token)
    if direct then redis.call('HDEL', direct, token) end
  end
  return true
end
