-- Register ``token`` for a direct hand-off: a release grants the lease to the head waiter itself
-- if it is enlisted here (``direct`` hash: token -> 'ttl_ms identity [box]'; a semaphore's
-- waiter, ``limit`` not nil: 'ttl_ms:limit identity [box]', handed only a slot below its limit).
-- ``ttl`` (ms, a string) is the waiter's; a hand-off grants at most HANDED_MS ms of it, which
-- the waiter extends to its TTL when it picks the grant up: a waiter that died meanwhile holds the
-- lock that long, not its TTL. ``box``: the mailbox that the waiter's process listens on for
-- every waiter of this lock ('': its own list).
local function enlist(direct, token, wait, ttl, limit, identity, box)
  if wait > 0 then
    if ttl - HANDED_MS > 0 then ttl = 'HANDED_MS' end
    if limit then ttl = ttl .. ':' .. limit end
    if box and box ~= '' then
      redis.call('HSET', direct, token, ttl .. ' ' .. identity .. ' ' .. box)
    else
      redis.call('HSET', direct, token, ttl .. ' ' .. identity)
    end
    keep_alive(direct, wait)
  end
end
