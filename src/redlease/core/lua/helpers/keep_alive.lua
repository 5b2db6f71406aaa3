-- ``key`` kept at least ``ms`` more: PEXPIRE only when its TTL is shorter.
local function keep_alive(key, ms)
  local p = redis.call('PTTL', key)
  if p < ms then redis.call('PEXPIRE', key, ms) end
end
