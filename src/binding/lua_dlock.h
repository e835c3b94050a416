/* SPDX-License-Identifier: MIT
 * lua_dlock.h: what the classes of the Lua binding export, to each other
 * and to the module's entry point (lua_dlock.c): the Client (lua_client.c),
 * connect (lua_connect.c) and the Lock (lua_lock.c). Calls go one way: the
 * entry point opens the classes, the Lock calls the Client, every file
 * calls lua_aux.c. (The command's process plumbing, lua_process.c, is a
 * module of its own: dlock.process.) */
#ifndef DLOCK_LUA_H
#define DLOCK_LUA_H

#include "binding/lua_aux.h"
#include "core/client.h"

#pragma GCC visibility push(hidden)

#define CLIENT_MT "dlock.Client"
#define LOCK_MT   "dlock.Lock"
#define OWNER_MT  "dlock.Owner"
#define STEP_MT   "dlock.AcquireStep"

/* User values of a client userdata. */
enum { UV_ONLOST = 1, UV_REFS, UV_OWNERS, UV_SCHED, UV_LOG,
       UV_COUNT = UV_LOG };

typedef struct lua_client {
    dl_client *c;               /* NULL once closed */
    int dispatching;            /* inside an on_lost callback */
    unsigned warned;            /* DLUA_WARN_*: told once, through log */
} lua_client;

enum { DLUA_WARN_LEASE = 1, DLUA_WARN_LOOP = 2 };

/* The open client at idx, or raise ("closed", "forked"). */
lua_client *dlua_client(lua_State *L, int idx, const char *fname);

/* Run queued on_lost callbacks of the client at ci; returns how many. */
int dlua_dispatch(lua_State *L, int ci);

/* Owner number of the running coroutine for the client at ci. */
uint64_t dlua_owner(lua_State *L, int ci);

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

/* dlock.connect(url | opts): a Client, or nil and an error. */
int dlua_connect(lua_State *L);

/* Register the Client and Owner classes; leaves the Client methods table
 * on the stack. */
void dlua_client_open(lua_State *L);

/* Register the Lock class, and the Client's constructors of locks
 * (client:lock, :rwlock, :fair_lock, :_permit) in the Client methods
 * table at client_methods; leaves the Lock methods table on the stack. */
void dlua_lock_open(lua_State *L, int client_methods);

#pragma GCC visibility pop
#endif
