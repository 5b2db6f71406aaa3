-- A refused acquire of one lock (ACQUIRE, ACQUIRE_SLOT; ``argv``: their ARGV, token, ttl,
-- identity and registration 'ms' or 'ms box'): the caller registers in ``waiters`` (enqueue)
-- and, with the direct hand-off hash ``direct``, enlists there (enlist; ``limit``: a
-- semaphore's). A last attempt (ms -1) refused by a holder (``reply[1]`` 0) leaves instead,
-- its grant list ``grants`` too. Returns ``reply``.
local function refuse(argv, waiters, direct, grants, limit, reply)
  local token, wait, box = argv[1], argv[4], nil
  local sep = string.find(wait, ' ', 1, true)
  if sep then wait, box = string.sub(wait, 1, sep - 1), string.sub(wait, sep + 1) end
  wait = tonumber(wait)
  enqueue(waiters, token, wait)
  if direct then enlist(direct, token, wait, argv[2], limit, argv[3], box) end
  if wait < 0 and reply[1] == 0 and grants then
    redis.call('ZREM', waiters, token)
    redis.call('HDEL', direct, token)
    redis.call('DEL', grants)
  end
  return reply
end
