-- read_hash(k): the whole hash k as a table, field -> value.
local function read_hash(k)
  local all, h = redis.call('hgetall', k), {}
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  return h
end
