-- dlock inside a host that cannot yield: Debian's lighttpd 1.4
-- runs examples/lighttpd/lock.lua through mod_magnet (Lua 5.4). A magnet
-- script runs to completion on the server's one event thread, so the
-- recipe never waits: a busy lock is answered at once with 503 and a
-- Retry-After of the holder's TTL, and the server goes on serving.
local dlock = require "dlock"
local helper = require "helper"

local root, sh = helper.root, helper.host_sh

describe("lighttpd mod_magnet with the recipe", function()
  it("answers a busy lock at once with 503 and Retry-After, and takes a free one #lighttpd", function()
    if not (sh("command -v lighttpd && command -v curl && test -f /usr/lib/lighttpd/mod_magnet.so")) then
      pending("needs lighttpd, lighttpd-modules-lua and curl")
      return
    end
    -- A plain build for the host (never with the flags of an enclosing
    -- make asan or tsan: lighttpd has no sanitizer runtime).
    local build = helper.tmp .. "/lighttpd-build"
    local ok, out = sh(("cd %s && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s LUA=lua5.4 BUILD=%s %s/dlock/core.so")
      :format(root, build, build))
    assert(ok, out)
    local srv = helper.start_redis()
    local name = helper.unique_name("lighttpd")
    local port = helper.free_port()
    local dir = helper.tmp .. "/lighttpd"
    assert(sh("mkdir -p " .. dir))
    local cfg = dir .. "/lighttpd.conf"
    local f = assert(io.open(cfg, "w"))
    f:write(([[
server.modules = ( "mod_magnet" )
server.bind = "127.0.0.1"
server.port = %d
server.document-root = "%s"
server.errorlog = "%s/error.log"
server.pid-file = "%s/lighttpd.pid"
magnet.attract-raw-url-to = ( "%s/examples/lighttpd/lock.lua" )
]]):format(port, dir, dir, dir, root))
    f:close()
    ok, out = sh(("cd %s && REDIS_URL=%s DLOCK_DEMO_LOCK=%s LUA_PATH='%s/lua/?.lua;;' "
      .. "LUA_CPATH='%s/?.so;;' lighttpd -f %s"):format(dir, srv.url, name, root, build, cfg))
    assert(ok, out)
    local c                             -- (busted keeps one finally per test)
    finally(function()
      sh(("kill $(cat %s/lighttpd.pid) 2>/dev/null"):format(dir))
      if c then c:close() end
    end)
    local url = ("http://127.0.0.1:%d/work"):format(port)
    local function get()
      local _, r = sh("curl -s -i " .. url)
      return tonumber(r:match("^HTTP/1%.1 (%d+)")), r
    end
    assert.truthy(helper.wait_for(function() return get() end, 5, 0.05), "lighttpd did not answer")

    local code, r = get()
    assert.equals(200, code, r)
    local first = tonumber(r:match("done with token (%d+)"))
    assert.truthy(first, r)

    -- Held elsewhere: every request is answered, 503 with the holder's TTL.
    c = assert(dlock.connect(srv.url))
    local lock = c:lock(name)
    assert(lock:acquire{ expire = 5 })
    for _ = 1, 3 do
      code, r = get()
      assert.equals(503, code, r)
      local after = tonumber(r:match("Retry%-After: (%d+)"))
      assert.truthy(after and after >= 1 and after <= 5, r)
    end
    assert.truthy(lock:held())            -- the host never took it

    -- Free again: the next request takes it, with a newer token.
    assert(lock:release())
    code, r = get()
    assert.equals(200, code, r)
    assert.is_true(tonumber(r:match("done with token (%d+)")) > first, r)
    local log = helper.read_file(dir .. "/error.log") or ""
    assert.is_nil(log:match("%(mod_magnet[^\n]*"), log)
  end)
end)
