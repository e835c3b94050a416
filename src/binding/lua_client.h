/* SPDX-License-Identifier: MIT
 * lua_client.h: the Client class (lua_client.c) as the rest of the
 * binding uses it: a client userdata and its user values, the check that
 * opens it for a call, the owner of the running coroutine, the warnings
 * told once, and the user's commands and their replies.
 */
#ifndef DLOCK_LUA_CLIENT_H
#define DLOCK_LUA_CLIENT_H

#include "binding/lua_aux.h"
#include "core/client.h"

#pragma GCC visibility push(hidden)

#define CLIENT_MT "dlock.Client"
#define OWNER_MT  "dlock.Owner"

/* User values of a client userdata. */
enum { UV_ONLOST = 1, UV_REFS, UV_OWNERS, UV_SCHED, UV_LOG,
       UV_COUNT = UV_LOG };

typedef struct lua_client {
    dl_client *c;               /* NULL once closed */
    int dispatching;            /* inside an on_lost callback */
    unsigned warned;            /* DLUA_WARN_*: told once, through log */
} lua_client;

enum { DLUA_WARN_LEASE = 1, DLUA_WARN_LOOP = 2 };

/* The open client at idx, or raise "calling 'fname' on bad self (...)"
 * (closed, or opened by another process). Runs the queued on_lost and
 * log callbacks first: "at the next call into the library". */
lua_client *dlua_client(lua_State *L, int idx, const char *fname);

/* Run the queued log and on_lost callbacks of the client at ci (nothing
 * from inside one of them); returns how many on_lost callbacks ran. */
int dlua_dispatch(lua_State *L, int ci);

/* Owner number of the running coroutine for the client at ci. */
uint64_t dlua_owner(lua_State *L, int ci);

/* Log msg through lc's log function, the first time only that the flag
 * what (DLUA_WARN_*) is told. */
void dlua_warn_once(lua_client *lc, unsigned what, const char *msg);

/* A user's command, read from the Lua arguments first..first+n-1 (each a
 * string or a number; raises on misuse). The arrays are userdata pushed
 * on the stack, and the strings stay in their stack slots: both live as
 * long as the call. */
typedef struct dlua_command {
    int argc;
    const char **argv;
    size_t *lens;
} dlua_command;
void dlua_command_args(lua_State *L, int first, int n, const char *fname,
                       dlua_command *cmd);

/* Push the reply r (freeing it) as Lua values, or nil, err for st. */
int dlua_push_reply(lua_State *L, dl_status st, redisReply *r,
                    const char *err);

/* Register the Client and Owner classes; leaves the Client methods table
 * on the stack. */
void dlua_client_open(lua_State *L);

#pragma GCC visibility pop
#endif
