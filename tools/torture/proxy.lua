-- A TCP proxy in front of one redis-server that can lose or delay replies,
-- the fault a client sees when the network drops a packet after Redis has
-- run the command (or lose requests, before it runs them).
--   lua proxy.lua LISTEN_PORT TARGET_PORT CONTROL_FILE
-- CONTROL_FILE holds the mode, read every 50 ms:
--   pass          forward both ways
--   delay S       hold each reply back S seconds
--   drop          swallow replies (the commands still run); a connection
--                 that lost a reply is closed at its next one, as TCP
--                 never delivers the bytes after a gap
--   cut           close the connection instead of forwarding a reply
--   lose          swallow requests (the commands never run): a request
--                 lost on the way; the connection is closed at its next
--                 request, as above
local cqueues = require "cqueues"
local socket = require "cqueues.socket"

local listen_port, target_port, ctl = tonumber(arg[1]), tonumber(arg[2]), arg[3]
local mode, delay = "pass", 0

local function read_mode()
  local f = io.open(ctl, "r")
  if not f then return end
  local s = f:read("*l") or "pass"
  f:close()
  local m, d = s:match("^(%a+)%s*([%d.]*)")
  mode, delay = m or "pass", tonumber(d) or 0
end

local cq = cqueues.new()
local srv = assert(socket.listen({ host = "127.0.0.1", port = listen_port, reuseaddr = true }))
srv:listen()

local function pump1(from, to, replies, conn)
  while not conn.closed do
    local data, err = from:read(-65536)
    if not data then break end
    if replies then
      if mode == "delay" and delay > 0 then cqueues.sleep(delay) end
      if mode == "cut" then break end
      if mode == "drop" then
        conn.gap = true
      elseif conn.gap then
        break     -- a reply after a lost one: never a later reply in its place
      elseif not to:write(data) or not to:flush() then
        break
      end
    elseif mode == "lose" then
      conn.lost = true
    elseif conn.lost then
      break       -- a request after a lost one: never run out of order
    elseif not to:write(data) or not to:flush() then
      break
    end
    if err then break end
  end
end

-- A socket the other direction closed raises in cqueues: that ends the
-- pair too.
local function pump(from, to, replies, conn)
  pcall(pump1, from, to, replies, conn)
  conn.closed = true
  pcall(from.close, from)
  pcall(to.close, to)
end

cq:wrap(function()
  while true do
    read_mode()
    cqueues.sleep(0.05)
  end
end)

cq:wrap(function()
  for client in srv:clients() do
    -- (a refused connect raises: the server is down, a restart; this
    -- client is turned away, and the accept loop must go on)
    local upstream = socket.connect({ host = "127.0.0.1", port = target_port })
    local ok, up = pcall(upstream.connect, upstream, 1)
    if ok and up then
      client:setmode("b", "b")
      upstream:setmode("b", "b")
      local conn = {}
      cq:wrap(pump, client, upstream, false, conn)
      cq:wrap(pump, upstream, client, true, conn)
    else
      pcall(upstream.close, upstream)
      client:close()
    end
  end
end)

-- An error in one connection's coroutine must not end the proxy.
while true do
  local ok, err = cq:loop()
  if ok then break end
  io.stderr:write("proxy: ", tostring(err), "\n")
end
