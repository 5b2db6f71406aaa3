local function soonest(a, b)  -- the earlier of two expiry hints in ms (-1: none known)
  if a < 0 then return b end
  if b < 0 or a < b then return a end
  return b
end
