/* SPDX-License-Identifier: MIT
 * compat.h: the few Lua 5.4 API calls dlock uses, for Lua 5.3, 5.1 and
 * LuaJIT 2.1 (not 5.2). Included by the binding only.
 *
 * The binding is written against 5.4; each older Lua gets the missing
 * calls here, with 5.4's meaning: lua_getfield and friends return the
 * type they pushed, a userdata has numbered user values, and an integer
 * argument must be a number (or numeric string) with an exact integer
 * value that lua_Integer holds. */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 502
/* ---- Lua 5.1 and LuaJIT ------------------------------------------------ */

#include <stdint.h>

#ifndef LUA_OK
#define LUA_OK 0
#endif
#ifndef LUA_LOADED_TABLE                /* (5.1: the same registry field) */
#define LUA_LOADED_TABLE "_LOADED"
#endif

static inline int dl_compat_absindex(lua_State *L, int idx)
{
    return idx > 0 || idx <= LUA_REGISTRYINDEX ? idx : lua_gettop(L) + idx + 1;
}

/* The getters return the type they pushed, as from 5.3 on. */
static inline int dl_compat_getfield(lua_State *L, int idx, const char *k)
{
    lua_getfield(L, idx, k);
    return lua_type(L, -1);
}
static inline int dl_compat_rawget(lua_State *L, int idx)
{
    lua_rawget(L, idx);
    return lua_type(L, -1);
}
static inline int dl_compat_rawgeti(lua_State *L, int idx, lua_Integer n)
{
    lua_rawgeti(L, idx, (int)n);
    return lua_type(L, -1);
}

static inline void dl_compat_setfuncs(lua_State *L, const luaL_Reg *l, int nup)
{
    if (nup != 0)                                /* dlock passes 0 */
        luaL_error(L, "dlock: compat setfuncs takes no upvalues");
    for (; l->name; l++) {
        lua_pushcfunction(L, l->func);
        lua_setfield(L, -2, l->name);
    }
}

static inline void dl_compat_setmetatable(lua_State *L, const char *tname)
{
    luaL_getmetatable(L, tname);
    lua_setmetatable(L, -2);
}

static inline void *dl_compat_testudata(lua_State *L, int idx, const char *tname)
{
    void *p = lua_touserdata(L, idx);
    if (!p || !lua_getmetatable(L, idx))
        return NULL;
    luaL_getmetatable(L, tname);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same ? p : NULL;
}

/* n is whole and in range of lua_Integer (ptrdiff_t: 32 bits on some
 * targets) and of exact doubles; only then is the cast defined. */
static inline int dl_compat_whole(lua_Number n)
{
    lua_Number lim = (lua_Number)PTRDIFF_MAX < 9007199254740992.0
                         ? (lua_Number)PTRDIFF_MAX : 9007199254740992.0;
    return n >= -lim && n <= lim && (lua_Number)(lua_Integer)n == n;
}

static inline int dl_compat_isinteger(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TNUMBER && dl_compat_whole(lua_tonumber(L, idx));
}

static inline lua_Integer dl_compat_checkinteger(lua_State *L, int arg)
{
    if (!lua_isnumber(L, arg))
        luaL_typerror(L, arg, "number");
    lua_Number n = lua_tonumber(L, arg);
    if (!dl_compat_whole(n))
        luaL_argerror(L, arg, "number has no integer representation");
    return (lua_Integer)n;
}

/* A userdata's numbered user values live in a table: its environment
 * (a fresh table, never the globals). The accessors are shared below. */
#define dl_compat_getuvtable(L, idx)  lua_getfenv(L, (idx))
#define dl_compat_setuvtable(L, idx)  lua_setfenv(L, (idx))

#define lua_absindex(L, i)            dl_compat_absindex(L, (i))
#define lua_getfield(L, i, k)         dl_compat_getfield(L, (i), (k))
#define lua_rawget(L, i)              dl_compat_rawget(L, (i))
#define lua_rawgeti(L, i, n)          dl_compat_rawgeti(L, (i), (n))
#define lua_rawlen(L, i)              lua_objlen(L, (i))
#define luaL_setfuncs(L, l, n)        dl_compat_setfuncs(L, (l), (n))
#define luaL_setmetatable(L, t)       dl_compat_setmetatable(L, (t))
#define luaL_testudata(L, i, t)       dl_compat_testudata(L, (i), (t))
#undef luaL_newlib
#define luaL_newlib(L, l)             (lua_newtable(L), luaL_setfuncs(L, (l), 0))
#define lua_isinteger(L, i)           dl_compat_isinteger(L, (i))
#undef luaL_checkinteger
#define luaL_checkinteger(L, a)       dl_compat_checkinteger(L, (a))

#elif LUA_VERSION_NUM == 502
#error "dlock builds for Lua 5.1, LuaJIT 2.1, 5.3 and 5.4; not 5.2"

#elif LUA_VERSION_NUM < 504
/* ---- Lua 5.3 ---------------------------------------------------- */

/* One user value per userdata: a table holding the numbered ones. */
#define dl_compat_getuvtable(L, idx)  lua_getuservalue(L, (idx))
#define dl_compat_setuvtable(L, idx)  lua_setuservalue(L, (idx))
#endif

#if LUA_VERSION_NUM < 504
/* Numbered user values, in the table set up with the userdata (only
 * userdata made with nuv > 0 have one). */
static inline void *dl_compat_newuserdatauv(lua_State *L, size_t size, int nuv)
{
    void *p = lua_newuserdata(L, size);
    if (nuv > 0) {
        lua_createtable(L, nuv, 0);
        dl_compat_setuvtable(L, -2);
    }
    return p;
}
static inline int dl_compat_getiuv(lua_State *L, int idx, int n)
{
    dl_compat_getuvtable(L, idx);
    if (!lua_istable(L, -1))
        return LUA_TNIL;                        /* (that nil is the value) */
    lua_rawgeti(L, -1, n);
    lua_remove(L, -2);
    return lua_type(L, -1);
}
static inline int dl_compat_setiuv(lua_State *L, int idx, int n)
{
    idx = lua_absindex(L, idx);
    dl_compat_getuvtable(L, idx);
    lua_insert(L, -2);
    lua_rawseti(L, -2, n);
    lua_pop(L, 1);
    return 1;
}
#define lua_newuserdatauv(L, sz, nuv) dl_compat_newuserdatauv(L, (sz), (nuv))
#define lua_getiuservalue(L, idx, n)  dl_compat_getiuv(L, (idx), (n))
#define lua_setiuservalue(L, idx, n)  dl_compat_setiuv(L, (idx), (n))

#define luaL_pushfail(L)              lua_pushnil(L)
#define luaL_typeerror(L, arg, tname) \
    luaL_argerror(L, (arg), lua_pushfstring(L, "%s expected, got %s", \
                  (tname), luaL_typename(L, (arg))))
#define lua_warning(L, msg, tocont)   ((void)(L), (void)(msg), (void)(tocont))
#endif

#endif
