-- README.md as a newcomer meets it: every ```lua block compiles, and runs as
-- written against servers this spec starts on loopback.
--
-- A block that connects to "redis://127.0.0.1:6379/0" runs against a
-- server this spec starts; a Redlock block (servers = {...}) runs against as many
-- fresh servers as it names ports; a Sentinel or Cluster block against the
-- sentinels or nodes of a topology from spec/support/topology.lua (tagged #slow: they
-- take a few seconds to start); a TLS block (rediss://) against a TLS-only
-- server that wants client certificates, made by helper.tls_certs, whose
-- files stand in for the block's /etc/redis/tls/ ones. Before a block runs, each of its loopback
-- ports is replaced by the port of a server started here, and dlock.connect
-- refuses any other address, so a block never reaches a server this spec did
-- not start, and never one off this machine.
--
-- A line `print(...)  --> text` must print exactly `text` (whitespace
-- collapsed) every time it runs, and must run at least once.
local dlock = require "dlock"
local helper = require "helper"

local here = debug.getinfo(1, "S").source:match("^@(.*)$") or ""
local root = here:match("^(.*)/spec/[^/]*$") or "."
local README = root .. "/README.md"
local text = assert(helper.read_file(README), "cannot read " .. README)

local LOOPBACK = "rediss?://127%.0%.0%.1:(%d+)"
local CERTS = "/etc/redis/tls/"

--- The ```lua blocks of a Markdown text: { line = first code line, src = code }.
local function lua_blocks(md, name)
  local blocks, cur, n = {}, nil, 0
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    elseif line:match("^```lua%s*$") then
      cur = { line = n + 1, lines = {} }
    end
  end
  assert(not cur, name .. ": the ```lua block at line " .. (cur and cur.line or 0)
    .. " is not closed")
  for _, b in ipairs(blocks) do b.src = table.concat(b.lines, "\n") .. "\n" end
  return blocks
end

local function kind(src)
  if src:find("sentinels%s*=") then return "sentinel" end
  if src:find("cluster%s*=") then return "cluster" end
  if src:find("servers%s*=") then return "redlock" end
  if src:find("rediss://", 1, true) then return "tls" end
  return "single"
end

--- Distinct loopback ports of src, in order of appearance.
local function ports(src)
  local list, seen = {}, {}
  for p in src:gmatch(LOOPBACK) do
    if not seen[p] then seen[p] = true; list[#list + 1] = p end
  end
  return list
end

local function squash(s)
  s = s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  if not math.tointeger then                 -- Lua 5.1 prints 1.0 as 1
    s = s:gsub("(%d)%.0%f[^%d]", "%1")
  end
  return s
end

--- A printed line matches its comment: word for word, except that a
--- number with a fraction (a remaining TTL) may be off by 5% (a slow run,
--- under valgrind say, prints 0.998 for 1.0).
local function same(got, want)
  if got == want then return true end
  local g, w = {}, {}
  for t in got:gmatch("%S+") do g[#g + 1] = t end
  for t in want:gmatch("%S+") do w[#w + 1] = t end
  if #g ~= #w then return false end
  for i = 1, #w do
    local a, b = tonumber(g[i]), tonumber(w[i])
    if g[i] ~= w[i] and not (a and b and w[i]:find(".", 1, true)
                             and math.abs(a - b) <= 0.05 * math.max(1, math.abs(b))) then
      return false
    end
  end
  return true
end

--- Every URL connect(arg) would use (the default when none is given).
local function urls_of(arg)
  local urls = {}
  if type(arg) == "string" then return { arg } end
  if type(arg) == "table" then
    if arg.url ~= nil then urls[#urls + 1] = arg.url end
    for _, k in ipairs({ "servers", "sentinels", "cluster" }) do
      if type(arg[k]) == "table" then
        for _, u in ipairs(arg[k]) do urls[#urls + 1] = u end
      elseif arg[k] ~= nil then
        urls[#urls + 1] = arg[k]
      end
    end
  end
  if #urls == 0 then urls[1] = "redis://127.0.0.1:6379/0" end
  return urls
end

--- Run block b with its loopback ports mapped by portmap (README port ->
--- port of a server started here), and its certificate files by certdir.
--- Raises on an error in the block or on a print that does not match its
--- `-->` comment.
local function run(b, portmap, certdir)
  local src = b.src:gsub("(rediss?://127%.0%.0%.1:)(%d+)", function(head, p)
    return head .. assert(portmap[p], "no server for port " .. p)
  end)
  if certdir then
    local from, to = CERTS:gsub("%p", "%%%0"), (certdir .. "/"):gsub("%%", "%%%%")
    src = src:gsub(from, to)
  end
  local allowed = {}
  for _, to in pairs(portmap) do allowed[tostring(to)] = true end

  local guarded = setmetatable({
    connect = function(arg)
      for _, u in ipairs(urls_of(arg)) do
        local p = type(u) == "string" and u:match("^" .. LOOPBACK .. "%f[^%d]")
        if not (p and allowed[p]) then
          error(("readme_spec: README.md:%d connects to %s, not to a server "
            .. "this spec started"):format(b.line, tostring(u)), 2)
        end
      end
      -- Through pcall, so that an error raised by connect reads as it
      -- does when a block calls dlock.connect itself (no position added).
      local res = table.pack(pcall(dlock.connect, arg))
      if not res[1] then error(res[2], 0) end
      return table.unpack(res, 2, res.n)
    end,
  }, { __index = dlock })

  local chunkname = "@README.md"
  local printed = {}
  local env = setmetatable({}, { __index = _G })
  env.require = function(name)
    if name == "dlock" then return guarded end
    error("readme_spec: README.md:" .. b.line .. " requires " .. tostring(name)
      .. "; only dlock is available to README blocks", 2)
  end
  env.print = function(...)
    local info = debug.getinfo(2, "Sl")
    local line = info and info.source == chunkname and info.currentline or -1
    local out = {}
    for i = 1, select("#", ...) do out[i] = tostring((select(i, ...))) end
    printed[line] = printed[line] or {}
    table.insert(printed[line], table.concat(out, "\t"))
  end
  -- Leading newlines: line numbers in errors and prints are README lines.
  local fn = assert(load(("\n"):rep(b.line - 1) .. src, chunkname, "t", env))
  fn()
  collectgarbage(); collectgarbage()   -- a client the block left open closes

  local n = b.line - 1
  for line in b.src:gmatch("([^\n]*)\n") do
    n = n + 1
    local want = line:match("%-%->(.*)$")
    if want then
      want = squash(want)
      local got = printed[n]
      assert(got, ("README.md:%d: this line never printed (expected %q)"):format(n, want))
      for _, g in ipairs(got) do
        assert(same(squash(g), want), ("README.md:%d printed %q, the comment says %q")
          :format(n, squash(g), want))
      end
    end
  end
end

local blocks = lua_blocks(text, "README.md")

describe("README.md", function()
  it("has Lua examples, every fence closed", function()
    assert.is_true(#blocks >= 5)
    local opened = select(2, text:gsub("\n```lua%s*\n", "\n"))
    assert.equals(opened, #blocks)
  end)

  it("uses only loopback addresses", function()
    for host in text:gmatch("://%[?([%w%.%-:]-)%]?:%d+") do
      assert.is_truthy(host == "127.0.0.1" or host == "localhost" or host == "::1",
        "non-loopback address in README.md: " .. host)
    end
    for ip in text:gmatch("%f[%d]%d+%.%d+%.%d+%.%d+%f[^%d%.]") do
      assert.is_truthy(ip:match("^127%."), "non-loopback address in README.md: " .. ip)
    end
  end)

  it("links only to files in the repository that exist", function()
    assert.is_falsy(text:find("../shared", 1, true))
    local links = 0
    for target in text:gmatch("%]%(([^)%s]+)%)") do
      if not target:match("^%a[%w+.-]*:") then           -- not http: and the like
        local path = target:gsub("#.*$", "")
        if path ~= "" then
          links = links + 1
          assert.is_falsy(path:match("^%.%./") or path:match("^/"),
            "link leaves the repository: " .. target)
          assert.is_truthy(helper.read_file(root .. "/" .. path),
            "link to a missing file: " .. target)
        end
      end
    end
    assert.is_true(links >= 1)
    assert.is_truthy(text:find("(doc/reference.md)", 1, true))
  end)

  it("links to a reference whose Lua blocks compile", function()
    local ref = assert(helper.read_file(root .. "/doc/reference.md"))
    local rblocks = lua_blocks(ref, "doc/reference.md")
    assert.is_true(#rblocks >= 1)
    for _, b in ipairs(rblocks) do
      assert(load(("\n"):rep(b.line - 1) .. b.src, "@doc/reference.md", "t", {}))
    end
    for _, code in ipairs({ "timeout", "not held", "lost", "connection", "quorum", "redis" }) do
      assert.is_truthy(ref:find("| `" .. code .. "` |", 1, true), "error code " .. code)
    end
  end)

  it("says what Cluster needs and lists the quorum error", function()
    assert.is_truthy(text:find("Redis 7", 1, true))
    assert.is_truthy(text:find("\n| `quorum` |", 1, true))
  end)
end)

describe("README.md ```lua blocks", function()
  local srv, extra = nil, {}

  -- A server of its own, emptied before each block, so that blocks do not
  -- see each other's keys and the suite's shared server is left alone.
  setup(function()
    srv = helper.start_redis()
    extra[#extra + 1] = srv
  end)

  before_each(function()
    srv.cli("flushall")
  end)

  teardown(function()   -- no waiting for them to exit: tools/with-tmp.sh reaps
    for _, s in ipairs(extra) do
      if s.pid then s.signal("KILL") end
    end
  end)

  for _, b in ipairs(blocks) do
    local where = ("README.md:%d (%s)"):format(b.line, kind(b.src))
    local needs54 = b.src:find("<close>", 1, true) and _VERSION < "Lua 5.4"

    it("compile: " .. where, function()
      if needs54 then return pending("uses <close>: Lua 5.4") end
      local fn, err = load(("\n"):rep(b.line - 1) .. b.src, "@README.md", "t", {})
      assert(fn, err)
    end)

    local k = kind(b.src)
    if k == "single" then
      it("run: " .. where .. " against a server this spec starts", function()
        if needs54 then return pending("uses <close>: Lua 5.4") end
        local ps = ports(b.src)
        assert.same({ "6379" }, ps, "a single-server block connects to "
          .. "redis://127.0.0.1:6379/0 and nowhere else")
        run(b, { ["6379"] = srv.port })
      end)
    elseif k == "sentinel" or k == "cluster" then
      -- Starting these topologies takes a few seconds: tagged #slow.
      it("run: " .. where .. " against a topology this spec starts #slow", function()
        if needs54 then return pending("uses <close>: Lua 5.4") end
        local topology = require "topology"
        local ps, map, pool = ports(b.src), {}, nil
        if k == "sentinel" then
          local t = topology.sentinel()
          extra[#extra + 1] = t.master
          extra[#extra + 1] = t.replica
          pool = t.sentinels
        else
          pool = topology.cluster().nodes
        end
        for _, h in ipairs(pool) do extra[#extra + 1] = h end
        assert.is_true(#ps >= 1 and #ps <= #pool, "the example names 1 to "
          .. #pool .. " addresses")
        for i, p in ipairs(ps) do map[p] = pool[i].port end
        run(b, map)
      end)
    elseif k == "tls" then
      it("run: " .. where .. " against a TLS server this spec starts", function()
        if not require("dlock.core").tls_built then
          error("this dlock was built without TLS (make TLS=0, or no libssl-dev)")
        end
        local certs = helper.tls_certs()
        local s = helper.start_redis(nil, { tls = certs, tls_auth_clients = true })
        extra[#extra + 1] = s
        local ps = ports(b.src)
        assert.same({ "6380" }, ps, "a TLS block connects to rediss://127.0.0.1:6380/0")
        run(b, { ["6380"] = s.port }, certs.dir)
      end)
    elseif k == "redlock" then
      it("run: " .. where .. " against servers this spec starts", function()
        if needs54 then return pending("uses <close>: Lua 5.4") end
        local ps, map = ports(b.src), {}
        assert.is_true(#ps >= 3, "a Redlock example names three or more masters")
        for _, p in ipairs(ps) do
          local s = helper.start_redis()
          extra[#extra + 1] = s
          map[p] = s.port
        end
        run(b, map)
      end)
    end
  end
end)

-- "## The dlock command": its ```sh blocks run with `sh -e`, with `dlock`
-- on PATH (this tree's bin/dlock) and the block's redis://127.0.0.1:6379
-- replaced by a server this spec starts; its plain ``` block is the shape
-- of what `dlock status` prints.
describe("README.md's dlock command section", function()
  local section = assert(text:match("\n## The dlock command\n(.-)\n## "), "no section")
  local function fenced(lang)                  -- the bodies of ```lang blocks
    local t, cur, open = {}, nil, nil
    for line in (section .. "\n"):gmatch("([^\n]*)\n") do
      if open then
        if line:match("^```%s*$") then
          if open == lang then t[#t + 1] = table.concat(cur, "\n") end
          open = nil
        else
          cur[#cur + 1] = line
        end
      elseif line:match("^```") then
        open, cur = line:match("^```(%S*)"), {}
      end
    end
    return t
  end

  it("runs its shell examples as written", function()
    local sh_blocks = fenced("sh")
    assert.is_true(#sh_blocks >= 1)
    local srv = helper.start_redis()
    local bin = helper.tmp .. "/readme-bin"
    local p0 = assert(io.popen("cd '" .. root .. "' && pwd"))
    local top = p0:read("*l")                 -- the checkout, absolute
    p0:close()
    assert(os.execute("mkdir -p '" .. bin .. "'"))
    local w = assert(io.open(bin .. "/dlock", "wb"))
    w:write(("#!/bin/sh\nexec env %s '%s/bin/dlock' \"$@\"\n"):format(helper.lua_cmd(), top))
    w:close()
    assert(os.execute("chmod +x '" .. bin .. "/dlock'"))
    local out = ""
    for i, b in ipairs(sh_blocks) do
      local src = b:gsub("redis://127%.0%.0%.1:6379", "redis://127.0.0.1:" .. srv.port)
      local file = ("%s/readme-dlock-%d.sh"):format(helper.tmp, i)
      local f = assert(io.open(file, "wb"))
      f:write(src, "\n")
      f:close()
      local p = assert(io.popen(("cd '%s' && PATH='%s':\"$PATH\" sh -e '%s' 2>&1; echo \"exit=$?\"")
        :format(helper.tmp, bin, file)))
      local o = p:read("*a")
      p:close()
      assert.truthy(o:match("exit=0%s*$"), "README dlock block " .. i .. ":\n" .. b .. "\n---\n" .. o)
      out = out .. o
    end
    srv.stop()
    assert.truthy(out:match("reporting, fencing token %d+\n"), out)
    assert.truthy(out:find("deploying\n", 1, true), out)
    assert.truthy(out:find("backup was free\n", 1, true), out)
    -- what status printed has the shape the README shows
    local function shape(s)
      return (s:gsub("%x%x%x%x%x%x%x%x+", "ID"):gsub("%d+%.?%d*", "N"):gsub("%s+$", ""))
    end
    local sample = assert(fenced("")[1], "no sample of dlock status")
    local got = assert(out:match("(backup: held.-)\n[^ ]"), out)
    assert.equals(shape(sample), shape(got))
  end)
end)
