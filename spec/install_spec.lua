-- A user's first ten minutes, run as a user would: the README's Install
-- section, literally, in a copy of the checkout; then the release that
-- `make dist` makes, installed offline into a fresh tree.
--
-- The ```sh blocks of "## Install" run with `sh -e` in a copy of the
-- checkout (the files git lists; build/ and the like are not copied), under
-- `env -i` with a fresh HOME, no LUA_PATH or LUA_CPATH (no REDIS_URL
-- either: the README's block that starts a redis-server sets it, and runs
-- here on a free port instead of 6379), and http(s) proxies on a loopback port where
-- nothing listens, so that a download attempt fails at once. LUA_INIT_5_4
-- runs a probe in every lua5.4 process that records where `require "dlock"`
-- and `require "dlock.core"` would load from: the module must come from the
-- tree the block installed under its HOME, never from the checkout or from
-- a tree already on the machine (`luarocks make` run as root, say).
local helper = require "helper"

local q, run, must = helper.q, helper.run_sh, helper.must_sh

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

local function starts(s, prefix) return s:sub(1, #prefix) == prefix end

local root = helper.root            -- the checkout, as an absolute path

-- The one version: DLOCK_VERSION in src/binding/lua_dlock.c, and the rockspec.
local VERSION = assert(assert(helper.read_file(root .. "/src/binding/lua_dlock.c"))
  :match('#define%s+DLOCK_VERSION%s+"dlock ([^"]+)"'), "no DLOCK_VERSION")
local ROCKSPECS = lines(must("cd " .. q(root) .. " && ls dlock-*.rockspec"))
local ROCKSPEC = ROCKSPECS[1]
local REL = ROCKSPEC:match("^dlock%-(.*)%.rockspec$")            -- "2.0.0-1"

--- The lines of README.md's "## Install" section, and its ```sh blocks.
local function install_section()
  local md = assert(helper.read_file(root .. "/README.md"))
  local inside, text, blocks, cur = false, {}, {}, nil
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    if not inside then
      inside = line:match("^## Install%s*$") ~= nil
    elseif cur then
      if line:match("^```%s*$") then
        blocks[#blocks + 1] = table.concat(cur, "\n") .. "\n"
        cur = nil
      else
        cur[#cur + 1] = line
      end
    elseif line:match("^## ") then
      break
    elseif line:match("^```sh%s*$") then
      cur = {}
    end
    if inside then text[#text + 1] = line end
  end
  assert(inside, "README.md has no '## Install' heading")
  assert(not cur, "README.md: a ```sh block of '## Install' is not closed")
  return table.concat(text, "\n"), blocks
end

-- What runs in every lua5.4 process of a user's shell here (LUA_INIT_5_4).
local PROBE = [[
local log = os.getenv("DLOCK_PROBE_LOG")
local f = log and io.open(log, "a")
if f then
  f:write(("%s\t%s\t%s\n"):format(arg and arg[0] or "?",
    package.searchpath("dlock", package.path) or "-",
    package.searchpath("dlock.core", package.cpath) or "-"))
  f:close()
end
]]

local box             -- the sandbox, made on first use: see sandbox()
local homes = 0

--- A temporary directory with a copy of the checkout in it (box.copy, a
--- fresh git repository in which every file is untracked, so that `git
--- ls-files -co --exclude-standard` lists what a fresh clone would not
--- ignore: box.baseline), the probe, and a dead proxy port.
local function sandbox()
  if box then return box end
  local b = { dir = ("%s/install-%d"):format(helper.tmp, math.random(1, 1e9)) }
  b.copy = b.dir .. "/dlock"
  b.tmp = b.dir .. "/tmp"
  must(("mkdir -p %s %s"):format(q(b.copy), q(b.tmp)))
  -- The files a clone has, with this working tree's edits: what git
  -- tracks or would track, less what is deleted.
  local list = b.dir .. "/files"
  if run("git -C " .. q(root) .. " rev-parse --is-inside-work-tree >/dev/null 2>&1") then
    must(("cd %s && { git ls-files --cached --others --exclude-standard; "
      .. "git ls-files --deleted; } | sort | uniq -u >%s"):format(q(root), q(list)))
  else                                   -- not a git checkout: all but outputs
    must(("cd %s && find . -path ./build -prune -o -path ./dist -prune -o -path ./dlock -prune "
      .. "-o -type f ! -name '*.o' ! -name '*.so' -print >%s"):format(q(root), q(list)))
  end
  must(("cd %s && tar -cf - -T %s | tar -xf - -C %s"):format(q(root), q(list), q(b.copy)))
  b.probe = b.dir .. "/probe.lua"
  write(b.probe, PROBE)
  b.proxy = helper.free_port()
  box = b
  must(("cd %s && git init -q ."):format(q(b.copy)))
  b.baseline = must(("cd %s && git ls-files -co --exclude-standard | sort"):format(q(b.copy)))
  return b
end

--- A fresh HOME, and the command prefix that runs a command as a user
--- whose shell has only PATH, HOME, REDIS_URL (no LUA_PATH, LUA_CPATH,
--- LD_PRELOAD, MAKEFLAGS, GIT_DIR...). Returns home, prefix, probe log.
local function user(redis_url)
  local b = sandbox()
  homes = homes + 1
  local home = ("%s/home-%d"):format(b.dir, homes)
  local log = home .. ".probe"
  must("mkdir -p " .. q(home))
  local proxy = "http://127.0.0.1:" .. b.proxy
  local env = { "timeout 600 env -i",
    "PATH=" .. q(os.getenv("PATH")), "HOME=" .. q(home), "TMPDIR=" .. q(b.tmp),
    "LUA_INIT_5_4=" .. q("@" .. b.probe), "DLOCK_PROBE_LOG=" .. q(log) }
  for _, k in ipairs({ "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                       "ftp_proxy", "all_proxy", "ALL_PROXY" }) do
    env[#env + 1] = k .. "=" .. q(proxy)
  end
  if redis_url then env[#env + 1] = "REDIS_URL=" .. q(redis_url) end
  return home, table.concat(env, " "), log
end

--- Records of the probe: { arg0, dlock.lua path, dlock/core.so path }.
local function probed(log, match)
  local found = {}
  for l in (helper.read_file(log) or ""):gmatch("[^\n]+") do
    local arg0, lua, so = l:match("^([^\t]*)\t([^\t]*)\t([^\t]*)$")
    if arg0 and match(arg0) then found[#found + 1] = { arg0 = arg0, lua = lua, so = so } end
  end
  return found
end

--- The module that the probed processes would load lies in `tree`.
local function assert_loaded_from(log, match, tree, what)
  local found = probed(log, match)
  assert(#found >= 1, what .. ": no lua5.4 process ran it (probe log: "
    .. tostring(helper.read_file(log)) .. ")")
  for _, p in ipairs(found) do
    assert(starts(p.lua, tree .. "/") and p.lua:match("/share/lua/5%.4/dlock%.lua$"),
      what .. ": require 'dlock' would load " .. p.lua .. ", not the copy in " .. tree)
    assert(starts(p.so, tree .. "/") and p.so:match("/lib/lua/5%.4/dlock/core%.so$"),
      what .. ": require 'dlock.core' would load " .. p.so .. ", not the copy in " .. tree)
  end
end

--- Nothing was written into the copy but what a clone ignores.
local function assert_copy_clean(b)
  local now = must(("cd %s && git ls-files -co --exclude-standard | sort"):format(q(b.copy)))
  assert.equals(b.baseline, now, "files written into the checkout that .gitignore does not cover")
end

describe("install", function()
  local srv

  setup(function() srv = helper.start_redis() end)
  teardown(function()
    if srv then srv.stop() end
    if box then os.execute("rm -rf " .. q(box.dir)) end
  end)

  it("LICENSE is MIT, and so says the rockspec", function()
    local license = assert(helper.read_file(root .. "/LICENSE"), "no LICENSE file")
    assert.truthy(license:match("^MIT License\n"))
    assert.truthy(license:find("Copyright (c) 2026 the dlock authors", 1, true))
    assert.truthy(license:find('THE SOFTWARE IS PROVIDED "AS IS"', 1, true))
    local t = {}
    assert(loadfile(root .. "/" .. ROCKSPEC, "t", t))()
    assert.equals("MIT", t.description.license)
  end)

  it("one version: DLOCK_VERSION, the rockspec, the README", function()
    assert.equals(1, #ROCKSPECS, "one rockspec, not: " .. table.concat(ROCKSPECS, " "))
    assert.truthy(REL and REL:match("^" .. VERSION:gsub("%p", "%%%0") .. "%-%d+$"),
      ROCKSPEC .. " is not named dlock-" .. VERSION .. "-N.rockspec")
    local t = {}
    assert(loadfile(root .. "/" .. ROCKSPEC, "t", t))()
    assert.equals("dlock", t.package)
    assert.equals(REL, t.version)
    assert.equals("dlock-" .. VERSION .. ".tar.gz", (t.source.url:gsub("^.*/", "")))
    assert.equals("dlock-" .. VERSION, t.source.dir)
    assert.same({ "lua >= 5.1, < 5.5, ~= 5.2" }, t.dependencies)
    assert.truthy(t.external_dependencies.HIREDIS)
    assert.truthy(t.build.modules["dlock.core"] and t.build.modules.dlock)
    -- Every version the Install section names is this one.
    local text = install_section()
    local n = 0
    for v in text:gmatch("dlock[ %-](%d+%.%d+%.%d+)") do
      n = n + 1
      assert.equals(VERSION, v, "README.md's Install section names version " .. v)
    end
    assert.is_true(n >= 1)
    assert.truthy(text:find("make dist", 1, true))
    assert.truthy(text:find("luarocks --lua-version=5.4 install dlock-" .. REL .. ".src.rock", 1, true),
      "the Install section shows how another project installs the .src.rock")
  end)

  --- The ```sh block of the Install section that contains `needle`.
  local function block(needle, what)
    local _, blocks = install_section()
    for _, b in ipairs(blocks) do
      if b:find(needle, 1, true) then return b end
    end
    error("README.md: no ```sh block of Install for " .. what .. " (with " .. needle .. ")")
  end

  --- Run script (README blocks, as written but for what the caller
  --- changed) in a fresh copy of the checkout with a fresh HOME; env holds
  --- REDIS_URL only when redis_url is given.
  local function run_script(script, what, redis_url)
    local b = sandbox()
    local home, env, log = user(redis_url)
    write(home .. ".sh", script)
    local ok, out = run(("cd %s && %s sh -e %s"):format(q(b.copy), env, q(home .. ".sh")))
    assert(ok, "the README's " .. what .. " failed:\n" .. script .. "\n--- output:\n" .. out)
    return b, home, log, out
  end

  it("README: the Redis and luarocks blocks of Install, five commands, take a lock from a fresh clone", function()
    -- The Redis block starts a redis-server on 6379: here on a free port,
    -- with a pidfile where tools/with-tmp.sh finds it.
    local redis, rocks = block("redis-server", "Redis"), block("make --tree", "luarocks")
    local commands = 0
    for line in (redis .. rocks):gmatch("[^\n]+") do
      if line:gsub("#.*$", ""):match("%S") then commands = commands + 1 end
    end
    assert.equals(5, commands, "the Install's Redis and luarocks blocks hold " .. commands .. " commands")
    assert.truthy(install_section():find("five commands", 1, true))
    local port = helper.free_port()
    local pidfile = ("%s/install-redis-%d.pid"):format(helper.tmp, port)
    assert.truthy(redis:find("--port 6379", 1, true) and redis:find("127.0.0.1:6379", 1, true), redis)
    local started = redis:gsub("%-%-port 6379", "--port " .. port)
      :gsub("127%.0%.0%.1:6379", "127.0.0.1:" .. port)
      :gsub("redis%-server ", "redis-server --pidfile " .. q(pidfile) .. " ", 1)
    -- Then, as the README says: the example at its top, saved as report.lua,
    -- runs from any directory; and the dlock command is on PATH.
    local md = assert(helper.read_file(root .. "/README.md"))
    local example = assert(md:match("\n```lua\n(.-)```\n"), "no example in the README")
    local script = started .. rocks
      .. "cat >\"$HOME/report.lua\" <<'EOF'\n" .. example .. "EOF\n"
      .. 'cd "$HOME" && lua5.4 report.lua\n'
      .. "dlock --version\n"
    local ok, b, home, log, out = pcall(run_script, script, "Install (Redis, luarocks)")
    local pid = tonumber(helper.read_file(pidfile) or "")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    if not ok then error(b, 0) end
    assert.truthy(pid, "the README's redis-server did not start")
    assert.truthy(out:match("holding stock:42, fencing token %d+"), out)
    assert.truthy(out:match("with:%s+true%s+42"), out)
    assert.truthy(out:match("holding it:%s+true\n"), out)
    assert.truthy(out:match("\ntrue%s+report done\n"), out)
    -- the dlock command, found on the PATH that `luarocks path` set
    assert.truthy(out:find("\ndlock " .. VERSION .. "\n", 1, true), out)
    -- luarocks installed this release under HOME, and the quickstart and
    -- the example loaded it from there.
    assert.truthy(must(("find %s -path '*/lib/luarocks/rocks-5.4/dlock/%s' -type d")
      :format(q(home), REL)):match("%S"), "no dlock " .. REL .. " rock under HOME")
    assert_loaded_from(log, function(a0) return a0:match("/examples/quickstart%.lua$") end,
      home, "quickstart")
    assert_loaded_from(log, function(a0) return a0 == "report.lua" end, home, "report.lua")
    -- luarocks' own build (no -fvisibility=hidden) exports only the entry
    -- point into the host's symbol space, not the core's dl_* functions.
    local so = must(("find %s -name core.so -path '*/dlock/*'"):format(q(home))):match("%S+")
    local syms = must("nm -D --defined-only " .. q(so))
    local exported = {}
    for kind, name in syms:gmatch("%x+ (%u) (%S+)") do
      if kind == "T" or kind == "D" or kind == "B" then exported[#exported + 1] = name end
    end
    assert.same({ "luaopen_dlock_core" }, exported)
    assert_copy_clean(b)
  end)

  it("README: the make install block of Install loads from the prefix", function()
    local b, home, log, out = run_script(block("make install", "make install"), "make install", srv.url)
    assert.truthy(out:find("\ndlock " .. VERSION .. "\n", 1, true) or starts(out, "dlock " .. VERSION .. "\n"), out)
    -- the dlock command too: twice the version line, and it runs from the prefix
    local _, versions = out:gsub("dlock " .. VERSION:gsub("%p", "%%%0") .. "\n", "")
    assert.equals(2, versions, out)
    assert.truthy(must("sed -n 4p " .. q(home .. "/.local/bin/dlock"))
      :find('package.path = "' .. home .. '/.local/share/lua/5.4/?.lua;"', 1, true))
    assert_loaded_from(log, function(a0) return a0 == "lua5.4" end, home, "lua5.4 -e")
    -- and the man page, where man finds it for a PATH with the prefix's bin/
    local page = home .. "/.local/share/man/man1/dlock.1"
    assert.equals(helper.read_file(root .. "/doc/dlock.1"), helper.read_file(page), "make install put no " .. page)
    if run("command -v man >/dev/null") then
      assert.equals(page .. "\n", must(("env -i HOME=%s PATH=%s man -w dlock"):format(q(home),
        q(home .. "/.local/bin:/usr/bin:/bin"))))
    end
    assert_copy_clean(b)
  end)

  it("make dist: the release installs offline into a fresh tree", function()
    local b = sandbox()
    local _, maker = user(nil)
    local ok, out = run(("cd %s && %s make dist"):format(q(b.copy), maker))
    assert(ok, "make dist failed:\n" .. out)
    local dist = b.copy .. "/dist/"
    local tarball, rock = "dlock-" .. VERSION .. ".tar.gz", "dlock-" .. REL .. ".src.rock"
    for _, f in ipairs({ tarball, rock, ROCKSPEC }) do
      assert.truthy(helper.read_file(dist .. f), "make dist wrote no dist/" .. f)
    end
    -- The tarball: everything under dlock-VERSION/, the sources and the
    -- license in it, no build outputs.
    local top = "dlock-" .. VERSION .. "/"
    local names = {}
    for _, name in ipairs(lines(must("tar -tzf " .. q(dist .. tarball)))) do
      assert.truthy(starts(name, top), "outside " .. top .. ": " .. name)
      assert.falsy(name:match("%.o$") or name:match("%.so$") or starts(name, top .. "build/")
        or starts(name, top .. "dist/"), "a build output in the tarball: " .. name)
      names[name] = true
    end
    for _, f in ipairs({ "LICENSE", "README.md", "Makefile", ROCKSPEC, "src/binding/lua_dlock.c",
                         "lua/dlock.lua", "examples/quickstart.lua", "doc/dlock.1" }) do
      assert.truthy(names[top .. f], "not in the tarball: " .. top .. f)
    end
    -- The .src.rock: the rockspec and the tarball.
    local zipped = must("unzip -Z1 " .. q(dist .. rock))
    assert.same({ ROCKSPEC, tarball }, (function()
      local t = lines(zipped); table.sort(t); return t end)())
    -- Another project: only the .src.rock, none of the checkout.
    local home, env, log = user(srv.url)
    must(("mkdir -p %s/vendor && cp %s %s/vendor/"):format(q(home), q(dist .. rock), q(home)))
    local script = table.concat({
      'cd "$HOME/vendor"',
      "luarocks --lua-version=5.4 install " .. rock .. ' --tree "$HOME/tree"',
      'eval "$(luarocks --lua-version=5.4 path --tree "$HOME/tree")"',
      'cd "$HOME" && lua5.4 -e \'print(require("dlock")._VERSION)\'',
    }, "\n") .. "\n"
    write(home .. ".sh", script)
    ok, out = run(("%s sh -e %s"):format(env, q(home .. ".sh")))
    assert(ok, "installing the .src.rock failed:\n" .. out)
    assert.truthy(out:find("\ndlock " .. VERSION .. "\n", 1, true), out)
    assert_loaded_from(log, function(a0) return a0 == "lua5.4" end, home .. "/tree", "the release")
    -- the man page is in the rock's doc/ (luarocks installs no man pages)
    assert.equals(helper.read_file(root .. "/doc/dlock.1"),
      helper.read_file(home .. "/tree/lib/luarocks/rocks-5.4/dlock/" .. REL .. "/doc/dlock.1"),
      "the installed rock has no doc/dlock.1")
    assert_copy_clean(b)
  end)

  it("make dist fails when the rockspec and DLOCK_VERSION disagree", function()
    local b = sandbox()
    local _, env = user(nil)
    local spec = b.copy .. "/" .. ROCKSPEC
    local orig = assert(helper.read_file(spec))
    local function dist_fails(what, pattern)
      local ok, out = run(("cd %s && %s make dist"):format(q(b.copy), env))
      assert.is_false(ok, "make dist passed with " .. what)
      assert.truthy(out:find(pattern), what .. ": " .. out)
    end
    local esc = REL:gsub("%p", "%%%0")
    write(spec, (orig:gsub('version = "' .. esc .. '"', 'version = "9.9.9-1"')))
    dist_fails("a version field that is not the file name's", "dist: .*version is 9%.9%.9%-1")
    write(spec, (orig:gsub("dlock%-" .. VERSION:gsub("%p", "%%%0") .. "%.tar%.gz", "dlock-9.9.9.tar.gz")))
    dist_fails("a source.url of another version", "dist: .*source%.url is dlock%-9%.9%.9%.tar%.gz")
    write(spec, orig)
    must(("cd %s && cp %s dlock-9.9.9-1.rockspec"):format(q(b.copy), q(ROCKSPEC)))
    dist_fails("two rockspecs", "dist: want one rockspec, named dlock%-")
    must(("cd %s && rm dlock-9.9.9-1.rockspec"):format(q(b.copy)))
    must(("cd %s && mv %s dlock-9.9.9-1.rockspec"):format(q(b.copy), q(ROCKSPEC)))
    dist_fails("a rockspec named for another version", "dist: want one rockspec, named dlock%-")
    must(("cd %s && mv dlock-9.9.9-1.rockspec %s"):format(q(b.copy), q(ROCKSPEC)))
    assert_copy_clean(b)
  end)
end)
