/* SPDX-License-Identifier: MIT
 * lua_aux.c: what every file of the binding uses: failures as nil, err;
 * errors raised at the user's line; checks of self, arguments, options
 * and durations; classes. (LuaSocket's auxiliar.c, for dlock.) It calls
 * nothing else of the binding.
 */
#include "binding/lua_aux.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

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

/* Whether a chunk's source is a file of the module's Lua half: dlock.lua,
 * or dlock/NAME.lua beside it. */
static int lua_half(const char *source)
{
    size_t n = strlen(source);
    if (n < 5 || strcmp(source + n - 4, ".lua") != 0)
        return 0;
    if ((n >= 10 && strcmp(source + n - 10, "/dlock.lua") == 0) ||
        strcmp(source, "@dlock.lua") == 0)
        return 1;
    const char *base = strrchr(source, '/');    /* .../dlock/NAME.lua */
    if (!base)
        return 0;
    if (base - source >= 6 && strncmp(base - 6, "/dlock", 6) == 0)
        return 1;
    return base - source == 6 && strncmp(source, "@dlock", 6) == 0;
}

/* Raise msg (formatted) with the position of the user's call: frames of
 * the module's Lua half are skipped, so the error points at the line
 * that called the public function, as luaL_error would had the user
 * called the C function directly. */
int dlua_error(lua_State *L, const char *fmt, ...)
{
    lua_Debug ar;
    int level = 1;
    for (; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "S", &ar);
        if (strcmp(ar.what, "tail") == 0)       /* Lua 5.1: a tail call's trace */
            continue;
        if (!lua_half(ar.source))
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

/* The i-th of dlua_check_keys' keys. */
static const char *key_at(const char *const *keys, size_t stride, int i)
{
    return *(const char *const *)(const void *)
        ((const char *)keys + (size_t)i * stride);
}

void dlua_check_keys(lua_State *L, int t, const char *fname,
                     const char *const *keys, size_t stride)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; key_at(keys, stride, i) && !known; i++)
                known = strcmp(lua_tostring(L, -1),
                               key_at(keys, stride, i)) == 0;
        if (!known) {
            const char *k = lua_type(L, -1) == LUA_TSTRING
                                ? lua_tostring(L, -1)
                                : luaL_typename(L, -1);
            dlua_opt_error(L, fname, k, "unknown option");
        }
    }
    /* Each option read once: an __index may answer every read anew and
     * let the string it gave before be collected while C still points
     * into it. A plain table of what it answered takes t's place, and
     * keeps those values alive while t is on the stack. */
    lua_createtable(L, 0, 4);           /* (a plain table: no metamethod) */
    for (int i = 0; key_at(keys, stride, i); i++) {
        lua_getfield(L, t, key_at(keys, stride, i));
        lua_setfield(L, -2, key_at(keys, stride, i));
    }
    lua_replace(L, t);
}

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

/* Seconds at idx in units of 1/per s (rounded up): positive, and at most
 * max of those units; a lease's errors say "lease". */
static int64_t positive(lua_State *L, int idx, const char *fname,
                        const char *what, double per, double max, int lease)
{
    double s = check_seconds(L, idx, fname, what);
    if (s == 0)
        dlua_opt_error(L, fname, what, lease ? "a lease must be positive"
                                             : "must be positive");
    if (!(s * per <= max))
        dlua_opt_error(L, fname, what, lease ? "lease too large"
                                             : "too large");
    return (int64_t)ceil(s * per);
}

int64_t dlua_lease_ms(lua_State *L, int idx, const char *fname,
                      const char *what)
{
    return positive(L, idx, fname, what, 1e3, (double)DL_MAX_LEASE_MS, 1);
}

int64_t dlua_seconds_us(lua_State *L, int idx, const char *fname,
                        const char *what)
{
    return positive(L, idx, fname, what, 1e6, 86400e6 * 365, 0);
}
