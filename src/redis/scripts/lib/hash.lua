--#include lib/short_view.lua
-- read_hash(k): the whole hash k as a table, field -> value (of a lock in
-- its short form: of the hash it stands for).
local function read_hash(k)
  local all, h = redis.pcall('hgetall', k), {}
  if all.err then all = short_view(k) end
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  return h
end
