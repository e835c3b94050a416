-- now_ms(): the server's clock in ms (TIME: never a client's clock).
local function now_ms()
  local tm = redis.call('time')
  return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
