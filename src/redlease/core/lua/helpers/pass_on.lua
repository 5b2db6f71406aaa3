-- After a release of an exclusive lease with a direct hand-off: if the head waiter (the
-- registration that lapses first) is enlisted, grant it the lease here and push the grant
-- 'fence now_ms transitions' onto its own list (wake .. ':' .. token, same slot), or
-- 'fence now_ms transitions token' onto its process's mailbox (wake .. ':' .. box) when it
-- enlisted with one; its process BLPOPs that list. The grant is the TTL the waiter enlisted
-- with (at most HANDED_MS, see enlist), which it extends when it picks the grant up. Otherwise
-- wake waiters (notify). A grant to a waiter that died meanwhile expires with that provisional
-- TTL; one that gave up is released by LEAVE.
-- The caller found ``waiters`` (one EXISTS: none wait in the uncontended case, and then it
-- calls nothing). The head is read first: when it is live, no registration has lapsed (it
-- lapses first), so the common hand-off reads the queue once.
local function pass_on(lease, fence_key, history, waiters, handoff, wake, direct, handoff_ms,
    forget)
  local first = redis.call('ZRANGE', waiters, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  local head = first[1]
  if tonumber(first[2]) < clock() then
    -- enlistments of registrations that lapsed (waiters that died) go with them
    local lapsed = redis.call('ZRANGEBYSCORE', waiters, '-inf', clock() - 1)
    redis.call('HDEL', direct, unpack(lapsed))
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', clock() - 1)
    head = redis.call('ZRANGE', waiters, 0, 0)[1]
    if not head then return 0 end
  end
  local info = redis.call('HGET', direct, head)
  if not info then return notify(waiters, handoff, wake, handoff_ms, false) end
  local sep = string.find(info, ' ', 1, true)
  local ttl = string.sub(info, 1, sep - 1)
  local colon = string.find(ttl, ':', 1, true)
  if colon then  -- a semaphore's waiter ('ttl:limit'): only a slot below its own limit
    local limit = tonumber(string.sub(ttl, colon + 1))
    ttl = string.sub(ttl, 1, colon - 1)
    if tonumber(string.match(lease, ':slot:(%d+)$') or '0') >= limit then
      return notify(waiters, handoff, wake, handoff_ms, false)
    end
  end
  local identity = string.sub(info, sep + 1)
  local sep2 = string.find(identity, ' ', 1, true)
  local box, item = wake .. ':' .. head, ''
  if sep2 then
    box, item = wake .. ':' .. string.sub(identity, sep2 + 1), ' ' .. head
    identity = string.sub(identity, 1, sep2 - 1)
  end
  redis.call('ZREM', waiters, head)
  redis.call('HDEL', direct, head)
  local fence, transitions = grant(lease, fence_key, history, head, identity, ttl, 0, 'x',
    forget)
  redis.call('RPUSH', box, fence .. ' ' .. now_ms() .. ' ' .. transitions .. item)
  keep_alive(box, tonumber(ttl))
  redis.call('DEL', handoff)
  return 1
end
