-- docs.lua: the pages a user reads (README.md, CONTRIBUTING.md, the guides
-- in doc/), checked as a user meets them: every ```lua and ```sh block
-- runs as written, against servers the spec starts on loopback; links
-- lead to files and headings that exist; addresses are loopback ones.
-- spec/readme_spec.lua and spec/docs_spec.lua use it.
--
-- ```lua blocks. Each runs in a process of its own (spec/support/docrun.lua).
-- A block that connects to redis://127.0.0.1:6379/0, or to
-- os.getenv("REDIS_URL"), runs against a server the spec started; a Redlock
-- block (servers = {...}) against as many fresh servers as it names ports;
-- a Sentinel or Cluster block against the sentinels or nodes of a topology
-- from spec/support/topology.lua (tagged #slow: they take a few seconds to
-- start); a TLS block (rediss://) against a TLS-only server that wants
-- client certificates, made by helper.tls_certs, whose files stand in for
-- the block's /etc/redis/tls/ ones. Before a block runs, each of its
-- loopback ports is replaced by the port of a server started here, and
-- dlock.connect refuses any other address. A block may require dlock, luv
-- and cqueues. A block is pending where this Lua cannot run it: it uses
-- <close> (Lua 5.4), requires luv or cqueues that this Lua lacks, or says
-- that it yields across pcall ("cannot yield across pcall", in a comment)
-- and this is plain Lua 5.1.
-- A line `print(...)  --> text` must print exactly `text` (whitespace
-- collapsed; a number with a fraction may be off by 5%) every time it
-- runs, and must run at least once.
--
-- ```sh blocks run with `sh -e` in a scratch directory, with REDIS_URL
-- naming a server the spec started, every redis://127.0.0.1:6379 in the
-- block replaced by that server's address, and `dlock` on PATH (this
-- tree's bin/dlock). A block of `make` commands only (they build, or run
-- the whole suite) is not run: its targets must be the Makefile's.
-- Other fences (```text, ```crontab, ...) are shown, not run: keep them
-- for output, fragments and lines that need root or another host.
local helper = require "helper"
local assert = assert

local docs = {}

-- busted's functions, which live in the spec file's environment: a spec
-- hands them over with docs.use{ describe = describe, it = it, ... }.
-- (assert too: luassert's, which also has assert.equals and the like).
local describe, it, setup, teardown, before_each, pending
function docs.use(t)
  describe, it, setup, teardown = t.describe, t.it, t.setup, t.teardown
  before_each, pending, assert = t.before_each, t.pending, t.assert or assert
  return docs
end

local here = debug.getinfo(1, "S").source:match("^@(.*)$") or ""
local root = here:match("^(.*)/spec/support/[^/]*$") or "."
do                                                 -- absolute
  local p = assert(io.popen("cd '" .. root .. "' && pwd"))
  root = p:read("*l")
  p:close()
end
docs.root = root

function docs.read(rel)
  return assert(helper.read_file(root .. "/" .. rel), "cannot read " .. rel)
end

--- The guides: doc/*.md but the reference (whose blocks are fragments of
--- the interface, compiled only), sorted.
function docs.guides()
  local p = assert(io.popen("cd '" .. root .. "' && ls doc/*.md"))
  local t = {}
  for f in p:lines() do
    if f ~= "doc/reference.md" then t[#t + 1] = f end
  end
  p:close()
  table.sort(t)
  return t
end

--- The fenced blocks of a Markdown text: { lang, line (of the first code
--- line), src, heading (the nearest "## " heading above it, or "") }.
function docs.fences(md, name)
  local blocks, cur, n, heading = {}, nil, 0, ""
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        cur.src = table.concat(cur.lines, "\n") .. "\n"
        blocks[#blocks + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    elseif line:match("^```") then
      cur = { lang = line:match("^```%s*(%S*)"), line = n + 1, lines = {}, heading = heading }
    elseif line:match("^## ") then
      heading = line:match("^## (.-)%s*$")
    end
  end
  assert(not cur, name .. ": the block at line " .. (cur and cur.line or 0) .. " is not closed")
  return blocks
end

function docs.of(blocks, lang)
  local t = {}
  for _, b in ipairs(blocks) do
    if b.lang == lang then t[#t + 1] = b end
  end
  return t
end

--- GitHub's anchor for a heading: lower case, punctuation but '-' and '_'
--- dropped, spaces as '-'.
function docs.slug(heading)
  return (heading:lower():gsub("[^%w%-_ ]", ""):gsub(" ", "-"))
end

--- The anchors of a Markdown text's headings (outside fenced blocks).
function docs.anchors(md)
  local set, seen, fenced = {}, {}, false
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^```") then
      fenced = not fenced
    elseif not fenced then
      local h = line:match("^#+%s+(.-)%s*$")
      if h then
        local s = docs.slug(h)
        local k = seen[s] or 0
        set[k == 0 and s or (s .. "-" .. k)] = true
        seen[s] = k + 1
      end
    end
  end
  return set
end

--- Every relative link of page `rel` leads to a file of the checkout, and
--- every #anchor to a heading of the page it names. Returns the number
--- of relative links.
function docs.check_links(rel, md)
  assert(not md:find("../shared", 1, true), rel .. " links outside the repository")
  local dir = rel:match("^(.*)/[^/]*$") or ""
  local n = 0
  for target in md:gmatch("%]%(([^)%s]+)%)") do
    if not target:match("^%a[%w+.-]*:") then           -- not http: and the like
      local path, anchor = target:match("^([^#]*)#?(.*)$")
      local file = rel
      if path ~= "" then
        n = n + 1
        assert(not path:match("^/"), rel .. ": a link leaves the repository: " .. target)
        file = (dir ~= "" and dir .. "/" or "") .. path
        while file:match("[^/]+/%.%./") do file = file:gsub("[^/]+/%.%./", "", 1) end
        assert(not file:match("^%.%./"), rel .. ": a link leaves the repository: " .. target)
        local isdir = os.execute("test -d '" .. root .. "/" .. file .. "'")
        assert(helper.read_file(root .. "/" .. file) or isdir == true or isdir == 0,
          rel .. ": a link to a missing file: " .. target)
      end
      if anchor ~= "" then
        assert(file:match("%.md$"), rel .. ": an anchor into a file that is not Markdown: " .. target)
        assert(docs.anchors(docs.read(file))[anchor],
          rel .. ": a link to a heading that " .. file .. " does not have: " .. target)
      end
    end
  end
  return n
end

--- Only loopback addresses.
function docs.check_loopback(rel, md)
  for host in md:gmatch("://%[?([%w%.%-:]-)%]?:%d+") do
    assert(host == "127.0.0.1" or host == "localhost" or host == "::1",
      "non-loopback address in " .. rel .. ": " .. host)
  end
  for ip in md:gmatch("%f[%d]%d+%.%d+%.%d+%.%d+%f[^%d%.]") do
    assert(ip:match("^127%."), "non-loopback address in " .. rel .. ": " .. ip)
  end
end

--- Whether a ```sh block is make commands only; then its targets must be
--- the Makefile's.
function docs.make_only(src)
  local any = false
  for line in src:gmatch("[^\n]+") do
    local cmd = line:gsub("#.*$", ""):match("^%s*(.-)%s*$")
    if cmd ~= "" then
      if not (cmd == "make" or cmd:match("^make%s")) then return false end
      any = true
    end
  end
  return any
end

function docs.check_make(rel, b)
  local mk = docs.read("Makefile")
  for line in b.src:gmatch("[^\n]+") do
    local cmd = line:gsub("#.*$", "")
    for word in cmd:gmatch("%S+") do
      if word ~= "make" and not word:find("=", 1, true) and not word:match("^%-") then
        assert(mk:find("\n" .. word:gsub("%p", "%%%0") .. ":"),
          ("%s:%d: make %s: the Makefile has no such target"):format(rel, b.line, word))
      end
    end
  end
end

local function kind(src)
  if src:find("sentinels%s*=") then return "sentinel" end
  if src:find("cluster%s*=") then return "cluster" end
  if src:find("servers%s*=") then return "redlock" end
  if src:find("rediss://", 1, true) then return "tls" end
  return "single"
end
docs.kind = kind

local LOOPBACK = "rediss?://127%.0%.0%.1:(%d+)"
local CERTS = "/etc/redis/tls/"

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
--- under valgrind say, prints 0.998 for 1.0, or 29.999 for 30.0). Lua 5.1
--- has lost the comment's fraction to squash (30.0 is 30 there): a
--- printed fraction says it.
local function same(got, want)
  if got == want then return true end
  local g, w = {}, {}
  for t in got:gmatch("%S+") do g[#g + 1] = t end
  for t in want:gmatch("%S+") do w[#w + 1] = t end
  if #g ~= #w then return false end
  for i = 1, #w do
    local a, b = tonumber(g[i]), tonumber(w[i])
    local frac = w[i]:find(".", 1, true) or (not math.tointeger and g[i]:find(".", 1, true))
    if g[i] ~= w[i] and not (a and b and frac
                             and math.abs(a - b) <= 0.05 * math.max(1, math.abs(b))) then
      return false
    end
  end
  return true
end

local runs = 0

--- Run ```lua block b of page rel in a process of its own, its loopback
--- ports mapped by portmap (page port -> port of a server started here),
--- its certificate files by certdir, REDIS_URL naming redis_url. Raises on
--- an error in the block or on a print that does not match its `-->`
--- comment.
local function run(rel, b, portmap, certdir, redis_url)
  local src = b.src:gsub("(rediss?://127%.0%.0%.1:)(%d+)", function(head, p)
    return head .. assert(portmap[p], "no server for port " .. p)
  end)
  if certdir then
    local from, to = CERTS:gsub("%p", "%%%0"), (certdir .. "/"):gsub("%%", "%%%%")
    src = src:gsub(from, to)
  end
  local allowed = {}
  for _, to in pairs(portmap) do allowed[#allowed + 1] = tostring(to) end
  runs = runs + 1
  local base = ("%s/docblock-%d-%d"):format(helper.tmp, runs, math.random(1, 1e9))
  local f = assert(io.open(base .. ".lua", "wb"))
  f:write(("\n"):rep(b.line - 1), src)
  f:close()
  local cmd = ("cd '%s' && REDIS_URL='%s' timeout 120 env %s '%s/spec/support/docrun.lua' '%s' '%s.lua' '%s.out' '%s' 2>&1")
    :format(helper.tmp, redis_url or "", helper.lua_cmd(), root, rel, base, base,
            table.concat(allowed, ","))
  local p = assert(io.popen(cmd))
  local output = p:read("*a")
  p:close()
  local printed, status, why = {}, nil, nil
  for line in (helper.read_file(base .. ".out") or ""):gmatch("[^\n]+") do
    local k, n, text = line:match("^(%a+)\t(%-?%d+)\t(.*)$")
    text = text and text:gsub("\\n", "\n"):gsub("\\\\", "\\")
    if k == "print" then
      n = tonumber(n)
      printed[n] = printed[n] or {}
      table.insert(printed[n], text)
    elseif k then
      status, why = k, text
    end
  end
  assert(status == "done", ("%s:%d: the block did not run through: %s\n%s")
    :format(rel, b.line, tostring(why), output))
  local n = b.line - 1
  for line in b.src:gmatch("([^\n]*)\n") do
    n = n + 1
    local want = line:match("%-%->(.*)$")
    if want then
      want = squash(want)
      local got = printed[n]
      assert(got, ("%s:%d: this line never printed (expected %q)"):format(rel, n, want))
      for _, g in ipairs(got) do
        assert(same(squash(g), want), ("%s:%d printed %q, the comment says %q")
          :format(rel, n, squash(g), want))
      end
    end
  end
end

--- busted tests for the ```lua blocks of page rel: each compiles, and runs
--- against the servers its kind needs.
function docs.describe_lua(rel)
  local md = docs.read(rel)
  local blocks = docs.of(docs.fences(md, rel), "lua")

  describe(rel .. " ```lua blocks #binding", function()
    local srv, extra = nil, {}

    -- A server of its own, emptied before each block, so that blocks do
    -- not see each other's keys and the suite's shared server is left alone.
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

    local plain51 = _VERSION == "Lua 5.1" and not rawget(_G, "jit")
    for _, b in ipairs(blocks) do
      local k = kind(b.src)
      local where = ("%s:%d (%s)"):format(rel, b.line, k)
      local why
      if b.src:gsub("%-%-[^\n]*", ""):find("<close>", 1, true) and _VERSION < "Lua 5.4" then
        why = "uses <close>: Lua 5.4"
      elseif plain51 and b.src:find("cannot yield across pcall", 1, true) then
        why = "yields across pcall: not on plain Lua 5.1"
      else
        for m in b.src:gmatch('require%s*%(?%s*"([^"]+)"') do
          if m ~= "dlock" and not pcall(require, m) then why = m .. " is not installed for " .. _VERSION end
        end
      end

      if why then
        pending(("%s: %s"):format(where, why))
      else
        it("compile: " .. where, function()
          local fn, err = load(("\n"):rep(b.line - 1) .. b.src, "@" .. rel, "t", {})
          assert(fn, err)
        end)
        if k == "single" then
          it("run: " .. where .. " against a server this spec starts", function()
            for _, p in ipairs(ports(b.src)) do
              assert.equals("6379", p, "a single-server block connects to "
                .. "redis://127.0.0.1:6379/0 (or $REDIS_URL) and nowhere else")
            end
            run(rel, b, { ["6379"] = srv.port }, nil, srv.url)
          end)
        elseif k == "sentinel" or k == "cluster" then
          -- Starting these topologies takes a few seconds: tagged #slow.
          it("run: " .. where .. " against a topology this spec starts #slow", function()
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
            run(rel, b, map)
          end)
        elseif k == "tls" then
          it("run: " .. where .. " against a TLS server this spec starts", function()
            if not require("dlock.core").tls_built then
              error("this dlock was built without TLS (make TLS=0, or no libssl-dev)")
            end
            local certs = helper.tls_certs()
            local s = helper.start_redis(nil, { tls = certs, tls_auth_clients = true })
            extra[#extra + 1] = s
            assert.same({ "6380" }, ports(b.src), "a TLS block connects to rediss://127.0.0.1:6380/0")
            run(rel, b, { ["6380"] = s.port }, certs.dir)
          end)
        elseif k == "redlock" then
          it("run: " .. where .. " against servers this spec starts", function()
            local ps, map = ports(b.src), {}
            assert.is_true(#ps >= 3, "a Redlock example names three or more masters")
            for _, p in ipairs(ps) do
              local s = helper.start_redis()
              extra[#extra + 1] = s
              map[p] = s.port
            end
            run(rel, b, map)
          end)
        end
      end
    end
  end)
  return blocks
end

--- The directory with a `dlock` that runs this tree's bin/dlock.
local bin
local function dlock_bin()
  if bin then return bin end
  bin = helper.tmp .. "/docs-bin"
  assert(os.execute("mkdir -p '" .. bin .. "'"))
  local w = assert(io.open(bin .. "/dlock", "wb"))
  w:write(("#!/bin/sh\nexec env %s '%s/bin/dlock' \"$@\"\n"):format(helper.lua_cmd(), root))
  w:close()
  assert(os.execute("chmod +x '" .. bin .. "/dlock'"))
  return bin
end

--- Run ```sh block b of page rel (see the top of this file) against server
--- srv; returns its output (stdout and stderr). Raises unless it exits 0.
function docs.run_sh(rel, b, srv)
  local src = b.src:gsub("redis://127%.0%.0%.1:6379", "redis://127.0.0.1:" .. srv.port)
  runs = runs + 1
  local dir = ("%s/docsh-%d-%d"):format(helper.tmp, runs, math.random(1, 1e9))
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  local f = assert(io.open(dir .. ".sh", "wb"))
  f:write(src, "\n")
  f:close()
  local p = assert(io.popen(("cd '%s' && PATH='%s':\"$PATH\" REDIS_URL='%s' timeout 120 sh -e '%s.sh' 2>&1; echo \"exit=$?\"")
    :format(dir, dlock_bin(), srv.url, dir)))
  local out = p:read("*a")
  p:close()
  assert(out:match("exit=0%s*$"), ("%s:%d: the ```sh block failed:\n%s\n--- output:\n%s")
    :format(rel, b.line, b.src, out))
  return (out:gsub("exit=0%s*$", ""))
end

--- busted tests for the ```sh blocks of page rel, but those skip(b) says
--- another spec runs. check(outputs, blocks), when given, looks at what
--- the blocks printed (outputs[i] is blocks[i]'s, make blocks excluded).
function docs.describe_sh(rel, skip, check)
  local md = docs.read(rel)
  local blocks = docs.of(docs.fences(md, rel), "sh")
  describe(rel .. " ```sh blocks #binding", function()
    local srv
    setup(function() srv = helper.start_redis() end)
    teardown(function() if srv and srv.pid then srv.signal("KILL") end end)

    local outputs, ran = {}, {}
    for _, b in ipairs(blocks) do
      if docs.make_only(b.src) then
        it(("make targets: %s:%d are the Makefile's"):format(rel, b.line), function()
          docs.check_make(rel, b)
        end)
      elseif not (skip and skip(b)) then
        ran[#ran + 1] = b
        it(("run: %s:%d with sh -e"):format(rel, b.line), function()
          srv.cli("flushall")
          outputs[b] = docs.run_sh(rel, b, srv)
        end)
      end
    end
    if check then
      it("prints what " .. rel .. " says", function()
        local t = {}
        for i, b in ipairs(ran) do
          t[i] = assert(outputs[b], ("%s:%d did not run"):format(rel, b.line))
        end
        check(t, ran)
      end)
    end
  end)
  return blocks
end

--- The checks every page gets: fences closed, loopback only, links that
--- resolve.
function docs.describe_page(rel)
  local md = docs.read(rel)
  describe(rel .. " #binding", function()
    it("closes every fence, uses loopback addresses only, and its links resolve", function()
      docs.fences(md, rel)
      docs.check_loopback(rel, md)
      docs.check_links(rel, md)
    end)
  end)
  return md
end

return docs
