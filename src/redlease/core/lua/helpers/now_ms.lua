local function now_ms()  -- server time in ms as a string
  return now_cache or server_now()
end
