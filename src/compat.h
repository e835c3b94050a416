/* SPDX-License-Identifier: MIT
 * compat.h: the few Lua 5.4 API calls dlock uses, for Lua 5.3.
 * Included by the binding only. */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 503
#error "dlock needs Lua 5.3 or later (5.4 is the target)"
#endif

#if LUA_VERSION_NUM < 504
/* 5.3 has one user value per userdata: dlock keeps a table there and
 * stores its numbered values in it. */
static inline int dl_compat_getiuv(lua_State *L, int idx, int n)
{
    lua_getuservalue(L, idx);
    if (lua_isnil(L, -1))
        return LUA_TNIL;
    int t = lua_rawgeti(L, -1, n);
    lua_remove(L, -2);
    return t;
}
static inline int dl_compat_setiuv(lua_State *L, int idx, int n)
{
    idx = lua_absindex(L, idx);
    lua_getuservalue(L, idx);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setuservalue(L, idx);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, n);
    lua_pop(L, 1);
    return 1;
}
#define lua_newuserdatauv(L, sz, nuv) lua_newuserdata(L, (sz))
#define lua_getiuservalue(L, idx, n)  dl_compat_getiuv(L, (idx), (n))
#define lua_setiuservalue(L, idx, n)  dl_compat_setiuv(L, (idx), (n))
#define luaL_pushfail(L)              lua_pushnil(L)
#define luaL_typeerror(L, arg, tname) \
    luaL_argerror(L, (arg), lua_pushfstring(L, "%s expected, got %s", \
                  (tname), luaL_typename(L, (arg))))
#define lua_warning(L, msg, tocont)   ((void)(L), (void)(msg), (void)(tocont))
#endif

#endif
