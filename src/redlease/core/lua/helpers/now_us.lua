local function now_us()  -- server time in microseconds as a string
  if not now_cache then server_now() end
  return now_us_cache
end
