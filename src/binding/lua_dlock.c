/* SPDX-License-Identifier: MIT
 * lua_dlock.c: the module's entry point, luaopen_dlock_core: it opens each
 * class, which registers its own methods (the Client, lua_client.h; the
 * Lock, lua_lock.h), adds dlock.connect (lua_connect.h) and the module
 * functions that tests, examples and benchmarks use. What every file of
 * the binding shares is in lua_aux.c. (The `dlock` command's process
 * plumbing is dlock.process, lua_process.c.)
 */
#define _GNU_SOURCE
#include "binding/lua_client.h"
#include "binding/lua_connect.h"
#include "binding/lua_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DLOCK_VERSION "dlock 2.0.0"

/* ---- module helpers for tests, examples and benchmarks ------------- */

/* dlock.core.parse_url(url) -> { host, port, path, db, username,
 * password, tls } or nil, err. No I/O: lets tests probe the parser. */
static int module_parse_url(lua_State *L)
{
    size_t len;
    const char *url = luaL_checklstring(L, 1, &len);
    char err[DL_ERRLEN];
    dl_endpoint ep;
    if (dl_endpoint_parse(&ep, url, len, err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_createtable(L, 0, 6);
    const char *names[4] = { "host", "path", "username", "password" };
    const char *vals[4] = { ep.host, ep.path, ep.username, ep.password };
    for (int i = 0; i < 4; i++)
        if (vals[i]) {
            lua_pushstring(L, vals[i]);
            lua_setfield(L, -2, names[i]);
        }
    if (ep.host) {
        lua_pushinteger(L, ep.port);
        lua_setfield(L, -2, "port");
    }
    lua_pushinteger(L, ep.db);
    lua_setfield(L, -2, "db");
    if (ep.tls) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "tls");
    }
    dl_endpoint_free(&ep);
    return 1;
}

/* dlock.core.scripts() -> { acquire = source, release = ..., ... }: the
 * Redis-side scripts, so tests can drive them step by step. */
static int module_scripts(lua_State *L)
{
    lua_createtable(L, 0, DL_S_COUNT);
    for (int i = 0; i < DL_S_COUNT; i++) {
        const char *name;
        lua_pushstring(L, dl_script_source((dl_script_id)i, &name));
        lua_setfield(L, -2, name);
    }
    return 1;
}

/* dlock.core.library() -> the function library's text, and { acquire =
 * its function's name, ... } (tests load it by hand). */
static int module_library(lua_State *L)
{
    lua_pushstring(L, dl_script_library_text());
    lua_createtable(L, 0, DL_S_COUNT);
    for (int i = 0; i < DL_S_COUNT; i++) {
        const char *name;
        (void)dl_script_source((dl_script_id)i, &name);
        lua_pushstring(L, dl_script_function((dl_script_id)i));
        lua_setfield(L, -2, name);
    }
    return 2;
}

/* dlock.core.key_slot(key) -> the Cluster hash slot of key (tests). */
static int module_key_slot(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)dl_slot_of(key, len));
    return 1;
}

/* dlock.core.slot_tag(slot) -> the hash tag dlock uses for slot's
 * fencing counter (tests). */
static int module_slot_tag(lua_State *L)
{
    char buf[16];
    lua_Integer slot = luaL_checkinteger(L, 1);
    luaL_argcheck(L, slot >= 0 && slot < DL_SLOTS, 1, "slot in [0, 16383]");
    dl_slot_tag((unsigned)slot, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

/* dlock.core.jitter() -> a Redlock retry nap in microseconds (tests). */
static int module_jitter(lua_State *L)
{
    lua_pushinteger(L, 1000 + (lua_Integer)(dl_random_u32() % 10000));
    return 1;
}

static int module_now(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)dl_now_us() / 1e6);
    return 1;
}

static int module_sleep(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TNUMBER)
        dlua_arg_error(L, 1, "dlock.sleep", lua_pushfstring(L, "number of "
                       "seconds expected, got %s", luaL_typename(L, 1)));
    double s = lua_tonumber(L, 1);
    if (!(s >= 0 && s <= 86400))
        dlua_arg_error(L, 1, "dlock.sleep", "seconds from 0 to 86400 "
                       "expected");
    dl_wait_fds(NULL, 0, dl_now_us() + (int64_t)(s * 1e6));
    return 0;
}

/* dlock.core._socket_copy(fd) -> a copy of socket fd (dup, close-on-exec)
 * that the caller watches for its event loop, or nil, message. The loop
 * watches the copy, not the core's fd: when the core replaces a broken
 * socket, often under the same number, the copy stays the old socket
 * until the loop has let go of it (cqueues and libuv must be told before
 * a watched descriptor is closed; dlock/sched.lua). copy:fd() its number,
 * copy:close() closes it (again: nothing); so does its collection. */
#define SOCKET_COPY_MT "dlock.SocketCopy"
static int copy_close(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, SOCKET_COPY_MT);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return 0;
}

static int copy_fd(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, SOCKET_COPY_MT);
    if (*fd < 0)
        return luaL_error(L, "dlock: socket copy closed");
    lua_pushinteger(L, *fd);
    return 1;
}

static int module_socket_copy(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= INT_MAX, 1, "a file descriptor");
    int *fd = lua_newuserdatauv(L, sizeof *fd, 0);
    *fd = -1;
    if (luaL_newmetatable(L, SOCKET_COPY_MT)) {
        static const luaL_Reg m[] = {
            { "close", copy_close }, { "fd", copy_fd }, { NULL, NULL }
        };
        luaL_newlib(L, m);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, copy_close);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if ((*fd = fcntl((int)n, F_DUPFD_CLOEXEC, 0)) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, strerror(errno));
        return 2;
    }
    return 1;
}

int luaopen_dlock_core(lua_State *L);

__attribute__((visibility("default")))
int luaopen_dlock_core(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        { "connect", dlua_connect },
        { "now", module_now },
        { "jitter", module_jitter },
        { "key_slot", module_key_slot },
        { "parse_url", module_parse_url },
        { "scripts", module_scripts },
        { "library", module_library },
        { "slot_tag", module_slot_tag },
        { "sleep", module_sleep },
        { "_socket_copy", module_socket_copy },
        { NULL, NULL }
    };
    dlua_client_open(L);                        /* methods */

    luaL_newlib(L, funcs);                      /* methods, M */
    lua_insert(L, -2);                          /* M, methods */
    lua_setfield(L, -2, "Client");              /* M */
    lua_getfield(L, -1, "Client");              /* M, methods */
    dlua_lock_open(L, -1);                      /* M, methods, lock methods */
    lua_setfield(L, -3, "Lock");
    lua_pop(L, 1);                              /* M */
    lua_pushliteral(L, DLOCK_VERSION);
    lua_setfield(L, -2, "_VERSION");
    lua_pushboolean(L, dl_tls_built());         /* rediss:// works */
    lua_setfield(L, -2, "tls_built");
    return 1;
}
