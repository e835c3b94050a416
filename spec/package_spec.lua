-- The Debian package (debian/, `make deb`), as a user of it meets it: built
-- in a copy of the checkout by `make deb`, then unpacked with `dpkg -x` into
-- a scratch root (not installed: nothing of the machine changes), where
-- Lua finds the module under the paths Debian's lua5.4 searches, the
-- package's `dlock` command runs a command under a lock, and its man page
-- renders. lintian, where it is installed, finds no error. Pending, with
-- what to install, where dpkg-dev or the build dependencies are missing.
local helper = require "helper"

local root, q, run, must = helper.root, helper.q, helper.run_sh, helper.must_sh

local VERSION = assert(assert(helper.read_file(root .. "/src/binding/lua_dlock.c"))
  :match('#define DLOCK_VERSION "dlock ([^"]+)"'))

-- A shell as a user's: no LUA_PATH or LUA_CPATH (make test points them at
-- the checkout), no MAKEFLAGS of the make that runs the suite.
local function clean_env()
  return ("env -i PATH=%s HOME=%s TMPDIR=%s LC_ALL=C.UTF-8"):format(q(os.getenv("PATH")),
    q(helper.tmp), q(helper.tmp))
end

local box          -- { dir, copy, deb, changes, root, arch, multiarch }, once built
local why_not      -- the reason the package cannot be built here

--- Build the package once, in a copy of the checkout (the files git lists,
--- in a fresh git repository of their own, so that what .gitignore does
--- not cover shows), and unpack it.
local function built()
  if box or why_not then return box end
  if not run("command -v dpkg-buildpackage && command -v dpkg-checkbuilddeps && command -v dpkg-deb") then
    why_not = "needs dpkg-dev and debhelper (Debian: apt-get install -y dpkg-dev debhelper)"
    return nil
  end
  local ok, unmet = run("cd " .. q(root) .. " && dpkg-checkbuilddeps")
  if not ok then
    why_not = "the build dependencies of debian/control are missing: " .. unmet:gsub("%s+$", "")
    return nil
  end
  local b = { dir = ("%s/package-%d"):format(helper.tmp, math.random(1, 1e9)) }
  b.copy = b.dir .. "/dlock"
  must(("mkdir -p %s"):format(q(b.copy)))
  if run("git -C " .. q(root) .. " rev-parse --is-inside-work-tree >/dev/null 2>&1") then
    must(("cd %s && { git ls-files --cached --others --exclude-standard; git ls-files --deleted; } "
      .. "| sort | uniq -u >%s/files"):format(q(root), q(b.dir)))
  else
    must(("cd %s && find . -path ./build -prune -o -path ./dist -prune -o -type f ! -name '*.o' "
      .. "! -name '*.so' -print >%s/files"):format(q(root), q(b.dir)))
  end
  must(("cd %s && tar -cf - -T %s/files | tar -xf - -C %s && rm %s/files"):format(q(root), q(b.dir),
    q(b.copy), q(b.dir)))
  must(("cd %s && git init -q . && git ls-files -co --exclude-standard | sort >../baseline"):format(q(b.copy)))
  b.arch = must("dpkg-architecture -qDEB_HOST_ARCH"):match("%S+")
  b.multiarch = must("dpkg-architecture -qDEB_HOST_MULTIARCH"):match("%S+")
  local out
  ok, out = run(("cd %s && %s make deb"):format(q(b.copy), clean_env()))
  assert(ok, "make deb failed:\n" .. out)
  b.out = out
  b.deb = ("%s/dist/lua-dlock_%s-1_%s.deb"):format(b.copy, VERSION, b.arch)
  b.changes = b.deb:gsub("%.deb$", ".changes")
  b.root = b.dir .. "/root"
  must(("mkdir %s && dpkg -x %s %s"):format(q(b.root), q(b.deb), q(b.root)))
  box = b
  return b
end

describe("the Debian package", function()
  local srv
  setup(function() srv = helper.start_redis() end)
  teardown(function()
    if srv then srv.stop() end
    if box then os.execute("rm -rf " .. q(box.dir)) end
  end)

  it("make deb builds lua-dlock into dist/, and leaves the checkout as it was #slow", function()
    local b = built()
    if not b then return pending(why_not) end
    assert.truthy(helper.read_file(b.deb), "make deb wrote no " .. b.deb .. ":\n" .. b.out)
    assert.truthy(helper.read_file(b.changes), "no " .. b.changes)
    assert.truthy(helper.read_file(b.deb:gsub("%.deb$", ".buildinfo")), "no .buildinfo")
    -- the version and the dependencies
    local fields = must("dpkg-deb -f " .. q(b.deb) .. " Package Version Depends Provides")
    assert.truthy(fields:find("Package: lua-dlock\n", 1, true), fields)
    assert.truthy(fields:find("Version: " .. VERSION .. "-1\n", 1, true), fields)
    assert.truthy(fields:match("Depends: [^\n]*lua5%.4"), fields)
    assert.truthy(fields:match("Depends: [^\n]*libhiredis"), fields)
    assert.truthy(fields:find("Provides: lua5.4-dlock", 1, true), fields)
    -- nothing beside the copy (dpkg-buildpackage writes to ..), nothing in
    -- it that .gitignore does not cover, and no build left under build/
    assert.equals("baseline\ndlock\nroot\n", must("ls " .. q(b.dir)))
    assert.equals(helper.read_file(b.dir .. "/baseline"),
      must(("cd %s && git ls-files -co --exclude-standard | sort"):format(q(b.copy))),
      "make deb wrote files into the checkout that .gitignore does not cover")
    assert.falsy(run("test -e " .. q(b.copy .. "/build/deb")), "make deb left build/deb")
  end)

  it("holds the module where Debian's lua5.4 searches, the command, its man page and the docs #slow", function()
    local b = built()
    if not b then return pending(why_not) end
    local lua_dir, so_dir = "/usr/share/lua/5.4", "/usr/lib/" .. b.multiarch .. "/lua/5.4"
    for _, f in ipairs({ lua_dir .. "/dlock.lua", lua_dir .. "/dlock/sched.lua", lua_dir .. "/dlock/multi.lua",
        lua_dir .. "/dlock/semaphore.lua", so_dir .. "/dlock/core.so", so_dir .. "/dlock/process.so",
        "/usr/bin/dlock", "/usr/share/man/man1/dlock.1.gz", "/usr/share/doc/lua-dlock/README.md",
        "/usr/share/doc/lua-dlock/doc/cron.md", "/usr/share/doc/lua-dlock/doc/reference.md",
        "/usr/share/doc/lua-dlock/copyright" }) do
      assert.truthy(run("test -f " .. q(b.root .. f)), "not in the package: " .. f)
    end
    assert.truthy(run("test -x " .. q(b.root .. "/usr/bin/dlock")))
    -- the two directories are on lua5.4's own paths, with no LUA_PATH
    local paths = must(clean_env() .. " lua5.4 -e 'print(package.path); print(package.cpath)'")
    assert.truthy(paths:find(lua_dir .. "/?.lua;", 1, true), paths)
    assert.truthy(paths:find(so_dir .. "/?.so;", 1, true), paths)
    -- the man page is doc/dlock.1
    assert.equals(helper.read_file(root .. "/doc/dlock.1"),
      must("gzip -dc " .. q(b.root .. "/usr/share/man/man1/dlock.1.gz")))
    if run("command -v man >/dev/null") then
      local page = must(("%s MANWIDTH=80 man --warnings -l %s | col -bx"):format(clean_env(),
        q(b.root .. "/usr/share/man/man1/dlock.1.gz")))
      assert.truthy(page:find("dlock - hold a distributed lock on Redis while a command runs", 1, true), page)
      assert.truthy(page:find("\nEXIT STATUS\n", 1, true), page)
    end
  end)

  it("require 'dlock' and the dlock command run from the unpacked package #slow", function()
    local b = built()
    if not b then return pending(why_not) end
    local lua_dir, so_dir = b.root .. "/usr/share/lua/5.4", b.root .. "/usr/lib/" .. b.multiarch .. "/lua/5.4"
    local env = ("%s LUA_PATH=%s LUA_CPATH=%s REDIS_URL=%s"):format(clean_env(), q(lua_dir .. "/?.lua;;"),
      q(so_dir .. "/?.so;;"), q(srv.url))
    local out = must(("cd / && %s lua5.4 -e %s"):format(env, q([[
      local d = require "dlock"
      print(d._VERSION, package.searchpath("dlock", package.path), package.searchpath("dlock.core", package.cpath))
      print(require("dlock.core").tls_built and "tls" or "no tls")
      local c = assert(d.connect{ url = os.getenv("REDIS_URL") })
      local l = c:lock("package-spec")
      assert(l:acquire())
      print("token", l:token())
      assert(l:release())
      c:close()]])))
    assert.truthy(out:find(("dlock %s\t%s/dlock.lua\t%s/dlock/core.so\n"):format(VERSION, lua_dir, so_dir), 1, true), out)
    assert.truthy(out:find("\ntls\n", 1, true), out)
    assert.truthy(out:match("\ntoken%s+%d+\n"), out)
    -- the package's dlock: --help as the checkout's says it, and a lock
    -- held while a command runs
    local cmd = b.root .. "/usr/bin/dlock"
    assert.equals("#!/usr/bin/lua5.4\n", must("head -n 1 " .. q(cmd)))
    local help = must(("cd / && %s lua5.4 %s --help"):format(env, q(cmd)))
    local want = must(("%s LUA_PATH=%s LUA_CPATH=%s lua5.4 %s/bin/dlock --help"):format(clean_env(),
      q(root .. "/lua/?.lua;;"), q(root .. "/" .. (os.getenv("DLOCK_BUILD") or "build") .. "/?.so;;"), q(root)))
    assert.equals(want, help)
    if run("test -x /usr/bin/lua5.4") then
      assert.equals("dlock " .. VERSION .. "\n", must(("cd / && %s %s --version"):format(env, q(cmd))))
      out = must(("cd / && %s %s package-spec -- sh -c 'echo \"held $DLOCK_NAME $DLOCK_TOKEN\"'"):format(env, q(cmd)))
      assert.truthy(out:match("^held package%-spec %d+\n$"), out)
    end
  end)

  it("lintian finds no error in the .deb, the .changes and the .buildinfo #slow", function()
    local b = built()
    if not b then return pending(why_not) end
    if not run("command -v lintian >/dev/null") then
      return pending("needs lintian (Debian: apt-get install -y lintian)")
    end
    local _, out = run(("%s lintian %s"):format(clean_env(), q(b.changes)))
    local errors = {}
    for line in out:gmatch("[^\n]+") do
      if line:match("^E: ") then errors[#errors + 1] = line end
    end
    assert.same({}, errors, out)
    -- it did look at the package
    assert.falsy(out:find("[Nn]o such file"), out)
  end)

  it("make clean takes away what make deb made, and what dpkg-buildpackage leaves in debian/ #slow", function()
    local b = built()
    if not b then return pending(why_not) end
    -- what a dpkg-buildpackage run in the checkout itself leaves in debian/
    must(("cd %s && mkdir -p debian/.debhelper debian/lua-dlock/usr debian/tmp && "
      .. "touch debian/files debian/lua-dlock.substvars debian/lua-dlock.debhelper.log debian/debhelper-build-stamp")
      :format(q(b.copy)))
    assert.equals(helper.read_file(b.dir .. "/baseline"),
      must(("cd %s && git ls-files -co --exclude-standard | sort"):format(q(b.copy))),
      ".gitignore does not cover what dpkg-buildpackage leaves in debian/")
    must(("cd %s && %s make clean"):format(q(b.copy), clean_env()))
    for _, f in ipairs({ ".debhelper", "lua-dlock", "tmp", "files", "lua-dlock.substvars",
                         "lua-dlock.debhelper.log", "debhelper-build-stamp" }) do
      assert.falsy(run("test -e " .. q(b.copy .. "/debian/" .. f)), "make clean left debian/" .. f)
    end
    assert.truthy(run("test -f " .. q(b.copy .. "/debian/rules")), "make clean took debian/rules")
    assert.falsy(run("test -e " .. q(b.copy .. "/dist")), "make clean left dist/")
  end)
end)
