-- The lease record is compact: owner, holder, fence, acquired_ms, ttl_ms; 'count' only once a
-- reentrant hold is re-entered, 'mode' only for a writer, 'renewed_ms' only once extended
-- (absent: the defaults 1, 'x' and acquired_ms). The transitions count lives in the history.
-- ``ttl``: ms, a string. Returns the fence and the transitions count, as strings (the grant
-- reply is built from strings: Lua turns a number into text with printf).
-- The fencing token is the larger of the counter + 1 and the server clock in microseconds (and
-- of ``min_fence``); the counter keeps it. So a token stays above every earlier one also when
-- the counter was lost or is behind (a restart without data, an old snapshot, a promoted
-- replica that lagged), as long as the server clock does not step back (docs/safety.md).
-- ``min_fence`` -1: a node of a RedLock set. The token is the counter + 1, seeded from the clock
-- only when the counter is absent: the set's nodes stay in step, so a grant needs no second
-- round to raise the others to the highest token, and a counter that is behind (restored,
-- lagging) is the set's restart rule's to catch (docs/quorum.md).
-- ``forget``: nil, or forget_after in ms: the counter and the history then expire (forget_at)
-- ttl + forget ms after this grant (DESIGN's "no TTL" counter is the default, nil).
local function grant(lease, fence_key, history, token, identity, ttl, min_fence, mode, forget)
  local fence
  if min_fence < 0 then
    fence = redis.call('INCR', fence_key)
    if fence == 1 then  -- no counter: seeded from the clock, as on one node
      fence = now_us()
      redis.call('SET', fence_key, fence)
    else
      fence = string.format('%d', fence)
    end
  else
    fence = now_us()
    local prev = redis.call('SET', fence_key, fence, 'GET')
    if prev and prev - fence >= 0 then  -- the counter is ahead of the clock
      fence = string.format('%d', prev + 1)
      redis.call('SET', fence_key, fence)
    end
    if min_fence > 0 and fence - min_fence < 0 then
      fence = string.format('%d', min_fence)
      redis.call('SET', fence_key, fence)
    end
  end
  local h = redis.call('HMGET', history, 'holder', 'transitions')
  local transitions = h[2] or '0'
  if h[1] ~= identity then
    transitions = string.format('%d', tonumber(transitions) + 1)
    redis.call('HSET', history, 'holder', identity, 'transitions', transitions,
      'changed_ms', now_ms())
  end
  if mode == 'x' then
    redis.call('HSET', lease, 'owner', token, 'holder', identity, 'fence', fence,
      'acquired_ms', now_ms(), 'ttl_ms', ttl)
  else
    redis.call('HSET', lease, 'owner', token, 'holder', identity, 'fence', fence,
      'acquired_ms', now_ms(), 'ttl_ms', ttl, 'mode', mode)
  end
  redis.call('PEXPIRE', lease, ttl)
  if forget then forget_at(fence_key, history, fence, ttl + forget) end
  return fence, transitions
end
