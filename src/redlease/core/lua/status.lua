-- Read the live state of a lock in one round trip (read-only).
-- KEYS[1] lease hash  KEYS[2] fence counter  KEYS[3] history hash  KEYS[4] readers zset
-- KEYS[5] candidates zset  KEYS[6] waiters zset
-- KEYS[7..] a counting semaphore's slots after slot 0 (KEYS[1] is slot 0), if any
-- Returns {now_ms, lease pttl ms, {lease field, value, ...}, fence, {history field, value, ...},
--          live readers, {live candidate identities}, live waiters
--          [, {{slot pttl ms, {slot field, value, ...}}, ...} with slot keys]}

local t = redis.call('TIME')
local ms = string.sub('00000' .. t[2], -6, -4)  -- the milliseconds of the second, 3 digits
local now = t[1] .. ms  -- server time in ms as text: what Redis would print for the number
local reply = {t[1] * 1000 + ms, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[1]),
  tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HGETALL', KEYS[3]),
  redis.call('ZCOUNT', KEYS[4], now, '+inf'),
  redis.call('ZRANGEBYSCORE', KEYS[5], now, '+inf'),
  redis.call('ZCOUNT', KEYS[6], now, '+inf')}
if #KEYS > 6 then
  local slots = {}
  for i = 7, #KEYS do
    slots[#slots + 1] = {redis.call('PTTL', KEYS[i]), redis.call('HGETALL', KEYS[i])}
  end
  reply[9] = slots
end
return reply
