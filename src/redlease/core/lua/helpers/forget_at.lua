-- ``forget_after`` (docs/safety.md, "Forgotten counters"): the fence counter expires at server
-- time now + ``keep`` ms + the counter's lead over the clock (its value minus the clock in us,
-- when positive), so it is forgotten only after the server clock has passed its value: an
-- absent counter is seeded from the clock, above it. PEXPIREAT from TIME, not PEXPIRE: Redis
-- bases a relative expiry on the script's start, which may be earlier than TIME's reading.
-- ``history``: the history hash, expired ``keep`` ms from now (nil: none).
local function forget_at(fence_key, history, fence, keep)
  local lead = math.ceil((fence - now_us()) / 1000)
  if lead > 0 then keep = keep + lead end
  redis.call('PEXPIREAT', fence_key, string.format('%d', now_ms() + keep))
  if history then redis.call('PEXPIRE', history, keep) end
end
