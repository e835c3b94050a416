/* SPDX-License-Identifier: MIT
 * lua_dlock.h: what the two halves of the Lua binding share. Only the
 * binding (src/lua_*.c) includes lua.h. */
#ifndef DLOCK_LUA_H
#define DLOCK_LUA_H

#include "compat.h"
#include "client.h"

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
} lua_client;

/* Push nil and "code: detail" (detail alone if it already starts with
 * the code); returns 2. */
int dlua_fail(lua_State *L, dl_status st, const char *detail);

/* The open client at idx, or raise ("closed", "forked"). */
lua_client *dlua_client(lua_State *L, int idx, const char *fname);

/* Run queued on_lost callbacks of the client at ci; returns how many. */
int dlua_dispatch(lua_State *L, int ci);

/* Owner number of the running coroutine for the client at ci. */
uint64_t dlua_owner(lua_State *L, int ci);

/* Durations in seconds from the value at idx, raising on misuse with
 * `what` named. dlua_wait: <0 means forever. */
int64_t dlua_wait_us(lua_State *L, int idx, const char *fname,
                     const char *what);
int64_t dlua_lease_ms(lua_State *L, int idx, const char *fname,
                      const char *what);
int64_t dlua_seconds_us(lua_State *L, int idx, const char *fname,
                        const char *what);

/* Raise "bad option 'k' to 'fname' (unknown option)" for a key of the
 * table at t that is not in the NULL-terminated keys. */
void dlua_check_keys(lua_State *L, int t, const char *fname,
                     const char *const *keys);

/* Raise "bad option 'what' to 'fname' (msg)", or "bad argument #n to
 * 'fname' (msg)" when what is "#n": durations and URLs are checked alike
 * whether they come as options or as arguments. */
int dlua_opt_error(lua_State *L, const char *fname, const char *what,
                   const char *msg);

/* Raise "bad argument #arg to 'fname' (msg)". Arguments are numbered as
 * the caller wrote them (self not counted), and fname is the public name,
 * whatever the call site: never luaL_argerror's guess. */
int dlua_arg_error(lua_State *L, int arg, const char *fname, const char *msg);

/* The userdata of metatable mt at idx, or raise "calling 'fname' on bad
 * self (...)". */
void *dlua_self(lua_State *L, int idx, const char *mt, const char *fname);

void dlua_new_class(lua_State *L, const char *name, const luaL_Reg *meta,
                    const luaL_Reg *methods);

/* Raise msg (formatted) at the line of the user's call (dlock.lua's
 * frames skipped). */
int dlua_error(lua_State *L, const char *fmt, ...);

/* dlock.connect(url | opts): a Client, or nil and an error. */
int dlua_connect(lua_State *L);

/* Register the Client and Owner classes; leaves the Client methods table
 * on the stack. */
void dlua_client_open(lua_State *L);

/* client:lock(name [, opts]) with the client at index 1. */
int dlua_lock_new(lua_State *L);
/* client:rwlock(name [, opts]) -> { read = lock, write = lock, name }. */
int dlua_rwlock_new(lua_State *L);
/* client:fair_lock(name [, opts]) -> a lock whose waiters queue (FIFO). */
int dlua_fair_lock_new(lua_State *L);
/* client:_permit(name, id, permits): one permit's lock (dlock.lua). */
int dlua_permit_new(lua_State *L);
/* Register the Lock class; leaves its methods table on the stack. */
void dlua_lock_open(lua_State *L);

/* lua_process.c: pushes dlock.core.process, the `dlock` command's
 * process plumbing (signal handlers: for the command only). */
void dlua_process_open(lua_State *L);

#pragma GCC visibility pop
#endif
