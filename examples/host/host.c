/* SPDX-License-Identifier: MIT
 * host.c: a program that embeds Lua the way a game or config server does.
 * One lua_State; the script returns a table of jobs; the host runs each
 * job as a coroutine and resumes every live one once per tick (1 ms), the
 * way a game loop does. dlock's table scheduler (see tick.lua) makes a job
 * that waits for a lock yield back here, so the loop never stops ticking.
 *
 *   make && LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;' \
 *       build/host examples/host/tick.lua redis://127.0.0.1:6379/0
 */
#define _POSIX_C_SOURCE 200809L
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stdio.h>
#include <time.h>

#if LUA_VERSION_NUM < 502                 /* Lua 5.1 and LuaJIT */
#ifndef LUA_OK
#define LUA_OK 0
#endif
#define lua_resume(co, from, n) ((void)(from), lua_resume((co), (n)))
#endif

#define MAX_JOBS 16
#define MAX_TICKS 100000            /* 100 s: a stuck job fails the run */

static int resume(lua_State *co, lua_State *from)
{
#if LUA_VERSION_NUM >= 504
    int nres;
    int st = lua_resume(co, from, 0, &nres);
#else
    int st = lua_resume(co, from, 0);
#endif
    if (st != LUA_OK && st != LUA_YIELD)
        fprintf(stderr, "host: job failed: %s\n", lua_tostring(co, -1));
    else if (st == LUA_YIELD)
        lua_settop(co, 0);          /* whatever it yielded: not ours */
    return st;
}

int main(int argc, char **argv)
{
    const char *script = argc > 1 ? argv[1] : "examples/host/tick.lua";
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_newtable(L);                        /* arg, for the script */
    for (int i = 2; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    if (luaL_loadfile(L, script) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK
        || !lua_istable(L, -1)) {
        fprintf(stderr, "host: %s: %s\n", script, lua_isstring(L, -1) ?
                lua_tostring(L, -1) : "must return a table of jobs");
        lua_close(L);
        return 1;
    }
    lua_State *jobs[MAX_JOBS];
    int n = 0, failed = 0;
    for (int i = 1; n < MAX_JOBS &&
                    (lua_rawgeti(L, 1, i), lua_type(L, -1)) == LUA_TFUNCTION; i++) {
        jobs[n] = lua_newthread(L);         /* anchored in the registry: */
        lua_pushvalue(L, -1);
        luaL_ref(L, LUA_REGISTRYINDEX);
        lua_pop(L, 1);
        lua_xmove(L, jobs[n++], 1);         /* the job's function */
    }
    long tick;
    int live = n;
    struct timespec ms = { 0, 1000000 };
    for (tick = 0; live > 0 && tick < MAX_TICKS; tick++) {
        lua_pushinteger(L, tick);           /* what the jobs see as now */
        lua_setglobal(L, "TICK");
        for (int i = 0; i < n; i++) {
            if (!jobs[i])
                continue;
            int st = resume(jobs[i], L);
            if (st != LUA_YIELD) {
                failed += st != LUA_OK;
                jobs[i] = NULL;
                live--;
            }
        }
        nanosleep(&ms, NULL);
    }
    printf("host: %d jobs, %d failed, %ld ticks\n", n, failed + live, tick);
    lua_close(L);                           /* closes the dlock client too */
    return failed || live ? 1 : 0;
}
