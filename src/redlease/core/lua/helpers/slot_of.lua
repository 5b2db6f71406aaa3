-- A semaphore's slots (``leases``: the lease keys of slots 0 .. limit-1, see LockKeys.slot):
-- the slot ``token`` owns, else the first free one, else (every slot held) the first; then its
-- owner (``token``, nil when free), and when every slot is held a holder and the soonest
-- expiry (ms). The owner token names the slot: nobody outside the scripts tracks slot numbers.
local function slot_of(leases, token)
  local free, holder, hint = nil, '', -1
  for _, key in ipairs(leases) do
    local cur = redis.call('HMGET', key, 'owner', 'holder')
    if cur[1] == token then return key, token, '', -1 end
    if not cur[1] then
      free = free or key
    else
      if holder == '' then holder = cur[2] end
      hint = soonest(hint, redis.call('PTTL', key))
    end
  end
  if free then return free, nil, '', -1 end
  return leases[1], 'held', holder, hint
end
