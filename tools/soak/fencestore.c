/* SPDX-License-Identifier: MIT
 * fencestore.c: the "storage" of `make soak`: a counter in a file that
 * honours fencing tokens, shared by processes. Not part of dlock.
 *
 * The file holds two integers: the highest token seen and the counter.
 * read(token) and write(token, value) are each atomic (flock) and refuse
 * a token lower than the highest seen, which both of them record; so a
 * holder whose lease ran out while it was paused can neither read nor
 * write behind a newer holder's back, and read-increment-write under the
 * lock loses no update as long as tokens increase.
 *   local fs = require "fencestore"
 *   fs.init(path)                    -- token 0, counter 0
 *   fs.read(path, token)  -> counter | nil, "fenced"
 *   fs.write(path, token, value) -> true | nil, "fenced"
 *   fs.peek(path) -> max_token, counter */
#define _GNU_SOURCE
#include <lauxlib.h>
#include <lua.h>

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <unistd.h>

typedef struct { long long token, counter; } state;

static int with_file(lua_State *L, const char *path, int *fd)
{
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0 || flock(*fd, LOCK_EX) != 0)
        return luaL_error(L, "fencestore: cannot open %s", path);
    return 0;
}

static void get(int fd, state *s)
{
    s->token = s->counter = 0;
    if (pread(fd, s, sizeof *s, 0) != (ssize_t)sizeof *s)
        s->token = s->counter = 0;
}

static void put(lua_State *L, int fd, const state *s)
{
    if (pwrite(fd, s, sizeof *s, 0) != (ssize_t)sizeof *s)
        luaL_error(L, "fencestore: write failed");
}

static int done(int fd, int nret)
{
    flock(fd, LOCK_UN);
    close(fd);
    return nret;
}

static int l_init(lua_State *L)
{
    int fd;
    state s = { 0, 0 };
    with_file(L, luaL_checkstring(L, 1), &fd);
    put(L, fd, &s);
    return done(fd, 0);
}

/* Open path, read it, and admit token: record it unless it is lower than
 * the highest seen. Returns 1 with the file locked, or 0 after pushing
 * nil, "fenced" (the file closed). */
static int admit(lua_State *L, int *fd, state *s)
{
    long long token = luaL_checkinteger(L, 2);
    with_file(L, luaL_checkstring(L, 1), fd);
    get(*fd, s);
    if (token < s->token) {
        lua_pushnil(L);
        lua_pushliteral(L, "fenced");
        done(*fd, 2);
        return 0;
    }
    s->token = token;
    return 1;
}

static int l_read(lua_State *L)
{
    int fd;
    state s;
    if (!admit(L, &fd, &s))
        return 2;
    put(L, fd, &s);
    lua_pushinteger(L, s.counter);
    return done(fd, 1);
}

static int l_write(lua_State *L)
{
    int fd;
    state s;
    long long value = luaL_checkinteger(L, 3);
    if (!admit(L, &fd, &s))
        return 2;
    s.counter = value;
    put(L, fd, &s);
    lua_pushboolean(L, 1);
    return done(fd, 1);
}

static int l_peek(lua_State *L)
{
    int fd;
    state s;
    with_file(L, luaL_checkstring(L, 1), &fd);
    get(fd, &s);
    lua_pushinteger(L, s.token);
    lua_pushinteger(L, s.counter);
    return done(fd, 2);
}

int luaopen_fencestore(lua_State *L);

__attribute__((visibility("default")))
int luaopen_fencestore(lua_State *L)
{
    static const luaL_Reg f[] = {
        { "init", l_init }, { "read", l_read }, { "write", l_write },
        { "peek", l_peek }, { NULL, NULL }
    };
    lua_newtable(L);
    luaL_setfuncs(L, f, 0);
    return 1;
}
