-- docrun.lua: runs one ```lua block of a Markdown page in a process of its
-- own, for spec/support/docs.lua (which writes the block, its loopback
-- ports already mapped to servers a spec started, to a file).
--
--   lua docrun.lua PAGE SOURCE RESULTS PORTS
--
-- PAGE names the page in chunk names (errors read "README.md:42: ...");
-- SOURCE is the block, after as many newlines as put its first line on
-- its line of the page; RESULTS is the file to write what happened to,
-- one record a line: "print\tLINE\tTEXT" for each print (LINE: the page's
-- line that called print), "pending\t0\tWHY" when the block needs a module
-- this Lua does not have (luv, cqueues), "error\t0\tTRACEBACK", and
-- "done\t0\t" at the end of a block that ran through. PORTS is the
-- comma-separated list of the ports the block may connect to: dlock.connect
-- refuses any other address, so that a block never reaches a server the
-- spec did not start.
require "compat"
local dlock = require "dlock"

local page, source, results, ports = arg[1], arg[2], arg[3], arg[4] or ""
local out = assert(io.open(results, "wb"))
out:setvbuf("line")
local function record(kind, line, text)
  text = tostring(text):gsub("\\", "\\\\"):gsub("\n", "\\n")
  out:write(kind, "\t", line, "\t", text, "\n")
end

local allowed = {}
for p in ports:gmatch("%d+") do allowed[p] = true end
local LOOPBACK = "^rediss?://127%.0%.0%.1:(%d+)%f[^%d]"

--- Every URL connect(arg) would use (the default when none is given).
local function urls_of(o)
  if type(o) == "string" then return { o } end
  local urls = {}
  if type(o) == "table" then
    if o.url ~= nil then urls[#urls + 1] = o.url end
    for _, k in ipairs({ "servers", "sentinels", "cluster" }) do
      if type(o[k]) == "table" then
        for _, u in ipairs(o[k]) do urls[#urls + 1] = u end
      elseif o[k] ~= nil then
        urls[#urls + 1] = o[k]
      end
    end
  end
  if #urls == 0 then urls[1] = "redis://127.0.0.1:6379/0" end
  return urls
end

local chunkname = "@" .. page
local guarded = setmetatable({
  connect = function(o)
    for _, u in ipairs(urls_of(o)) do
      local p = type(u) == "string" and u:match(LOOPBACK)
      if not (p and allowed[p]) then
        local info = debug.getinfo(2, "Sl")
        error(("docrun: %s:%s connects to %s, not to a server the spec started")
          :format(page, info and info.currentline or "?", tostring(u)), 2)
      end
    end
    -- Through pcall, so that an error raised by connect reads as it does
    -- when a block calls dlock.connect itself (no position added).
    local res = table.pack(pcall(dlock.connect, o))
    if not res[1] then error(res[2], 0) end
    return table.unpack(res, 2, res.n)
  end,
}, { __index = dlock })

local env = setmetatable({}, { __index = _G })
env.require = function(name)
  if name == "dlock" then return guarded end
  if name == "luv" or name == "cqueues" or tostring(name):match("^cqueues%.") then
    local ok, m = pcall(require, name)
    if not ok then
      record("pending", 0, name .. " is not installed for " .. _VERSION)
      out:close()
      os.exit(0)
    end
    return m
  end
  error(("docrun: %s requires %s; a block may require dlock, luv and cqueues")
    :format(page, tostring(name)), 2)
end
env.print = function(...)
  local info = debug.getinfo(2, "Sl")
  local line = info and info.source == chunkname and info.currentline or -1
  local t = {}
  for i = 1, select("#", ...) do t[i] = tostring((select(i, ...))) end
  record("print", line, table.concat(t, "\t"))
end

local f = assert(io.open(source, "rb"))
local src = f:read("*a")
f:close()
local fn, err = load(src, chunkname, "t", env)
if not fn then
  record("error", 0, err)
  os.exit(1)
end
local ok, why = xpcall(fn, debug.traceback)
collectgarbage()
collectgarbage()                  -- a client the block left open closes
if not ok then
  record("error", 0, why)
  os.exit(1)
end
record("done", 0, "")
out:close()
