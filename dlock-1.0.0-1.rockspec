rockspec_format = "3.0"
package = "dlock"
version = "1.0.0-1"
source = {
  -- The release tarball `make dist` writes next to this rockspec (top
  -- directory dlock-1.0.0/); dist/dlock-1.0.0-1.src.rock holds both.
  -- `luarocks make` in a checkout builds from the checkout instead.
  url = "dlock-1.0.0.tar.gz",
  dir = "dlock-1.0.0",
}
description = {
  summary = "Reentrant distributed locks on Redis for plain Lua",
  detailed = [[
    A C core over hiredis with a watchdog thread that renews leases,
    reentrancy per coroutine, fencing tokens and event-driven waiting
    (pub/sub on release), with lock:with(fn) and Lua 5.4 <close>.
    Lua 5.1, LuaJIT 2.1, 5.3 and 5.4 (not 5.2). TLS (rediss://) over
    OpenSSL; without OpenSSL, build with `make TLS=0` instead.
  ]],
  license = "MIT",
}
dependencies = { "lua >= 5.1, < 5.5, ~= 5.2" }
external_dependencies = {
  HIREDIS = { header = "hiredis/hiredis.h", library = "hiredis" },
  OPENSSL = { header = "openssl/ssl.h", library = "ssl" },
}
build = {
  type = "builtin",
  modules = {
    ["dlock.core"] = {
      sources = { "src/util.c", "src/log.c", "src/tls.c", "src/endpoint.c", "src/conn.c", "src/script.c",
                  "src/lockid.c", "src/registry.c", "src/wait.c", "src/topology.c", "src/op.c",
                  "src/exec.c", "src/batch.c", "src/state.c", "src/watchdog.c", "src/pending.c",
                  "src/client.c", "src/inspect.c", "src/call.c", "src/acquire.c", "src/release.c",
                  "src/lua_aux.c", "src/lua_dlock.c", "src/lua_client.c", "src/lua_connect.c",
                  "src/lua_lock.c" },
      defines = { "DL_WITH_TLS" },
      libraries = { "hiredis", "ssl", "crypto", "pthread", "dl", "m" },
      incdirs = { "src", "$(HIREDIS_INCDIR)", "$(OPENSSL_INCDIR)" },
      libdirs = { "$(HIREDIS_LIBDIR)", "$(OPENSSL_LIBDIR)" },
    },
    -- the `dlock` command's process plumbing (signals, spawning, reaping)
    ["dlock.process"] = { sources = { "src/lua_process.c", "src/util.c" }, incdirs = { "src" } },
    dlock = "lua/dlock.lua",
    ["dlock.sched"] = "lua/dlock/sched.lua",
    ["dlock.multi"] = "lua/dlock/multi.lua",
    ["dlock.semaphore"] = "lua/dlock/semaphore.lua",
  },
  -- The `dlock` command: luarocks puts a wrapper for it in the tree's bin/.
  install = { bin = { dlock = "bin/dlock" } },
  -- The guides and the man page (doc/dlock.1) go to the rock's doc/
  -- (`luarocks doc dlock`): luarocks installs no man pages.
  copy_directories = { "doc" },
}
test = { type = "busted" }
