rockspec_format = "3.0"
package = "dlock"
version = "2.0.0-1"
source = {
  -- The release tarball `make dist` writes next to this rockspec (top
  -- directory dlock-2.0.0/); dist/dlock-2.0.0-1.src.rock holds both.
  -- `luarocks make` in a checkout builds from the checkout instead.
  url = "dlock-2.0.0.tar.gz",
  dir = "dlock-2.0.0",
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
      sources = { "src/base/log.c", "src/base/util.c", "src/redis/batch.c",
                  "src/redis/cluster.c", "src/redis/conn.c",
                  "src/redis/endpoint.c", "src/redis/exec.c", "src/redis/lockid.c",
                  "src/redis/op.c", "src/redis/reply.c", "src/redis/script.c",
                  "src/redis/sentinel.c", "src/redis/slot.c",
                  "src/redis/tls.c", "src/redis/topology.c", "src/redis/wait.c",
                  "src/redis/wire.c",
                  "src/core/acquire.c", "src/core/client.c", "src/core/command.c",
                  "src/core/extend.c", "src/core/inspect.c", "src/core/lease.c",
                  "src/core/lost.c", "src/core/notice.c", "src/core/pending.c",
                  "src/core/registry.c", "src/core/release.c", "src/core/state.c",
                  "src/core/waiting.c", "src/core/watchdog.c",
                  "src/binding/lua_aux.c", "src/binding/lua_client.c",
                  "src/binding/lua_connect.c", "src/binding/lua_dlock.c",
                  "src/binding/lua_lock.c", "src/binding/lua_lockobj.c",
                  "src/binding/lua_acquire.c" },
      defines = { "DL_WITH_TLS" },
      libraries = { "hiredis", "ssl", "crypto", "pthread", "dl", "m" },
      incdirs = { "src", "$(HIREDIS_INCDIR)", "$(OPENSSL_INCDIR)" },
      libdirs = { "$(HIREDIS_LIBDIR)", "$(OPENSSL_LIBDIR)" },
    },
    -- the `dlock` command's process plumbing (signals, spawning, reaping)
    ["dlock.process"] = { sources = { "src/binding/lua_process.c", "src/base/util.c" }, incdirs = { "src" } },
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
