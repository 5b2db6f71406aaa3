-- The key among ``leases`` (a semaphore's slots) whose lease ``token`` owns (nil: none).
local function owned_slot(leases, token)
  for _, key in ipairs(leases) do
    if redis.call('HGET', key, 'owner') == token then return key end
  end
  return nil
end
