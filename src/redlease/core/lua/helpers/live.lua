-- The live members of a zset scored by expiry (waiters, readers); the lapsed ones go.
local function live(zkey)
  if redis.call('EXISTS', zkey) == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', clock() - 1)
  return redis.call('ZCARD', zkey)
end
