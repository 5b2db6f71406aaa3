local function clock()  -- now_ms() as a number (for arithmetic and comparisons)
  return tonumber(now_ms())
end
