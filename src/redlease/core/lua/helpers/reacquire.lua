-- The caller ``token`` already owns ``lease`` (a lock's, or a semaphore's slot). A lease handed
-- over directly after the caller stopped waiting (it passes its grant list ``grants``, and its
-- enlistment in ``direct`` is gone) is taken with a fresh TTL; a ``reentrant`` hold counts one
-- more; anything else is {2, fence, count}, already held. Returns the acquire's reply.
local function reacquire(lease, history, waiters, direct, grants, token, ttl, reentrant)
  local cur = redis.call('HMGET', lease, 'fence', 'count')
  local fence, count = cur[1], cur[2] or '1'
  if grants and redis.call('HEXISTS', direct, token) == 0 then
    redis.call('ZREM', waiters, token)
    redis.call('DEL', grants)
    redis.call('HSET', lease, 'renewed_ms', now_ms(), 'ttl_ms', ttl)
    redis.call('PEXPIRE', lease, ttl)
    local t = redis.call('HGET', history, 'transitions') or '0'
    return fence .. ' ' .. count .. ' ' .. now_ms() .. ' ' .. t
  end
  if reentrant then
    count = string.format('%d', tonumber(count) + 1)
    redis.call('HSET', lease, 'count', count, 'renewed_ms', now_ms(), 'ttl_ms', ttl)
    redis.call('PEXPIRE', lease, ttl)
    return fence .. ' ' .. count .. ' ' .. now_ms() .. ' -1'
  end
  return {2, tonumber(fence), tonumber(count)}
end
