/* SPDX-License-Identifier: MIT
 * forktest.c: fork(), waitpid() and getpid() for the fork specs only
 * (Debian has no lua-posix for Lua 5.4). Not part of dlock. */
#include <lua.h>
#include <lauxlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int l_fork(lua_State *L)
{
    lua_pushinteger(L, fork());
    return 1;
}

static int l_wait(lua_State *L)
{
    int status = 0;
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    if (waitpid(pid, &status, 0) != pid)
        return luaL_error(L, "waitpid failed");
    lua_pushinteger(L, WIFEXITED(status) ? WEXITSTATUS(status) : 128);
    return 1;
}

static int l_getpid(lua_State *L)
{
    lua_pushinteger(L, getpid());
    return 1;
}

int luaopen_forktest(lua_State *L) __attribute__((visibility("default")));
int luaopen_forktest(lua_State *L)
{
    static const luaL_Reg f[] = {
        { "fork", l_fork }, { "wait", l_wait }, { "getpid", l_getpid },
        { NULL, NULL }
    };
    lua_newtable(L);                   /* (no luaL_newlib on Lua 5.1) */
    for (const luaL_Reg *r = f; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, -2, r->name);
    }
    return 1;
}
