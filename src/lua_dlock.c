/* SPDX-License-Identifier: MIT
 * lua_dlock.c: the module table, and what the binding's files share:
 * errors that point at the user's line, argument checks, durations, and
 * the helpers tests, examples and benchmarks use. The Client class is in
 * lua_client.c, connect's options in lua_connect.c, the Lock class in
 * lua_lock.c, the `dlock` command's process plumbing in lua_process.c.
 */
#define _GNU_SOURCE
#include "lua_dlock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DLOCK_VERSION "dlock 1.0.0"

int dlua_fail(lua_State *L, dl_status st, const char *detail)
{
    const char *code = dl_strerror(st);
    size_t n = strlen(code);
    luaL_pushfail(L);
    if (!detail || !*detail)
        lua_pushstring(L, code);
    else if (strncmp(detail, code, n) == 0)
        lua_pushstring(L, detail);
    else
        lua_pushfstring(L, "%s: %s", code, detail);
    return 2;
}

/* Raise msg (formatted) with the position of the user's call: frames of
 * the module's Lua half (dlock.lua) are skipped, so the error points at
 * the line that called the public function, as luaL_error would had the
 * user called the C function directly. */
int dlua_error(lua_State *L, const char *fmt, ...)
{
    lua_Debug ar;
    int level = 1;
    for (; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "S", &ar);
        size_t n = strlen(ar.source);
        if (strcmp(ar.what, "tail") == 0)       /* Lua 5.1: a tail call's trace */
            continue;
        if (!(n >= 10 && strcmp(ar.source + n - 10, "/dlock.lua") == 0) &&
            strcmp(ar.source, "@dlock.lua") != 0)
            break;
    }
    luaL_where(L, level);
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

int dlua_opt_error(lua_State *L, const char *fname, const char *what,
                   const char *msg)
{
    if (what[0] == '#')
        return dlua_error(L, "bad argument %s to '%s' (%s)", what, fname,
                          msg);
    return dlua_error(L, "bad option '%s' to '%s' (%s)", what, fname, msg);
}

int dlua_arg_error(lua_State *L, int arg, const char *fname, const char *msg)
{
    return dlua_error(L, "bad argument #%d to '%s' (%s)", arg, fname, msg);
}

void *dlua_self(lua_State *L, int idx, const char *mt, const char *fname)
{
    void *p = luaL_testudata(L, idx, mt);
    if (!p)
        dlua_error(L, "calling '%s' on bad self (%s expected, got %s)",
                   fname, mt, luaL_typename(L, idx));
    return p;
}

void dlua_new_class(lua_State *L, const char *name, const luaL_Reg *meta,
                    const luaL_Reg *methods)
{
    luaL_newmetatable(L, name);         /* mt */
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);                    /* mt, methods */
    if (methods)
        luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "methods");     /* mt */
    lua_pop(L, 1);
}

void dlua_check_keys(lua_State *L, int t, const char *fname,
                     const char *const *keys)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; keys[i] && !known; i++)
                known = strcmp(lua_tostring(L, -1), keys[i]) == 0;
        if (!known) {
            const char *k = lua_type(L, -1) == LUA_TSTRING
                                ? lua_tostring(L, -1)
                                : luaL_typename(L, -1);
            dlua_opt_error(L, fname, k, "unknown option");
        }
    }
}

/* opts[name] as a string, or NULL when absent; raises on another type. */

/* ---- durations ------------------------------------------------------ */

static double check_seconds(lua_State *L, int idx, const char *fname,
                            const char *what)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        dlua_opt_error(L, fname, what, lua_pushfstring(L,
                       "number of seconds expected, got %s",
                       luaL_typename(L, idx)));
    double s = lua_tonumber(L, idx);
    if (s != s)
        dlua_opt_error(L, fname, what, "NaN is not a duration");
    if (s < 0)
        dlua_opt_error(L, fname, what, "negative duration");
    return s;
}

int64_t dlua_wait_us(lua_State *L, int idx, const char *fname,
                     const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s * 1e6 >= 9e15)                /* math.huge, or ~285 years */
        return -1;
    return (int64_t)ceil(s * 1e6);
}

int64_t dlua_lease_ms(lua_State *L, int idx, const char *fname,
                      const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s == 0)
        dlua_opt_error(L, fname, what, "a lease must be positive");
    if (!(s * 1e3 <= (double)DL_MAX_LEASE_MS))
        dlua_opt_error(L, fname, what, "lease too large");
    return (int64_t)ceil(s * 1e3);
}

int64_t dlua_seconds_us(lua_State *L, int idx, const char *fname,
                        const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s == 0)
        dlua_opt_error(L, fname, what, "must be positive");
    if (!(s <= 86400.0 * 365))
        dlua_opt_error(L, fname, what, "too large");
    return (int64_t)ceil(s * 1e6);
}

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

/* dlock.core.key_slot(key) -> the Cluster hash slot of key (tests). */
static int module_key_slot(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)dl_key_slot(key, len));
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
        { "slot_tag", module_slot_tag },
        { "sleep", module_sleep },
        { NULL, NULL }
    };
    dlua_client_open(L);                        /* methods */

    luaL_newlib(L, funcs);                      /* methods, M */
    lua_insert(L, -2);                          /* M, methods */
    lua_setfield(L, -2, "Client");              /* M */
    dlua_lock_open(L);                          /* M, lock methods */
    lua_setfield(L, -2, "Lock");
    lua_pushliteral(L, DLOCK_VERSION);
    lua_setfield(L, -2, "_VERSION");
    lua_pushboolean(L, dl_tls_built());         /* rediss:// works */
    lua_setfield(L, -2, "tls_built");
    dlua_process_open(L);                       /* for bin/dlock only */
    lua_setfield(L, -2, "process");
    return 1;
}
