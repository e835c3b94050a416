-- mint(counter, t): a new tenancy's fencing token from the slot's
-- counter, above t (the lock's last token): the counter is raised to it
-- if it was behind (lost, restored from an older copy).
local function mint(counter, t)
  local c = redis.call('incr', counter)
  if c <= t then
    c = t + 1
    redis.call('set', counter, string.format('%d', c))
  end
  return c
end
