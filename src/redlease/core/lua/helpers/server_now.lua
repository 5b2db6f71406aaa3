-- Server time, read with TIME at most once per call and only on demand: now_ms() in ms as a
-- string, clock() the same as a number, now_us() in us. Hot paths keep values as strings: Lua
-- turns a number into text with printf, which costs more than most of the commands they call,
-- and text into a number with strtod (``tonumber`` twice; arithmetic on the strings, as grant
-- compares them, once).
local now_cache, now_us_cache = nil, nil  -- server time in ms and in us, as strings
local function server_now()  -- reads TIME (once per call: now_cache is reset), returns ms
  local t = redis.call('TIME')  -- seconds and microseconds, as strings
  local us = t[2]
  if #us < 6 then us = string.sub('00000' .. us, -6) end
  now_us_cache = t[1] .. us
  now_cache = string.sub(now_us_cache, 1, -4)
  return now_cache
end
