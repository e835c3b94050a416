/* SPDX-License-Identifier: MIT
 * lua_lockobj.h: a lock object (lua_lockobj.c), as the files of the Lock
 * class share it: its userdata, the identity each call builds from it,
 * the timing options of its acquires, and the public name a call of the
 * Lua half raises under.
 */
#ifndef DLOCK_LUA_LOCKOBJ_H
#define DLOCK_LUA_LOCKOBJ_H

#include "binding/lua_client.h"

#pragma GCC visibility push(hidden)

#define LOCK_MT "dlock.Lock"

/* A lock userdata is one block: this struct, then its name and an
 * explicit owner, each NUL-terminated. Its user value 1 pins the client. */
typedef struct lua_lock {
    int64_t wait_us;            /* default wait; <0 forever */
    int64_t lease_ms;           /* default fixed lease; 0 watchdog */
    int64_t renew_ms;           /* default watchdog lease; 0 the client's */
    int64_t permits;            /* a permit's: the semaphore's size */
    uint32_t namelen, ownerlen; /* ownerlen 0: coroutine owners */
    int kind;                   /* DL_KIND_*: a lock, a read-write half,
                                   a semaphore's permit, a fair lock */
} lua_lock;

/* The lock's name (namelen bytes, NUL-terminated). */
static inline const char *dlua_lock_name(const lua_lock *k)
{
    return (const char *)(k + 1);
}

/* The lock at idx, or raise "calling 'fname' on bad self (...)". */
lua_lock *dlua_check_lock(lua_State *L, int idx, const char *fname);

/* The strings of a call's lock identity: on the C stack, or (a long
 * name) in a userdata dlua_lockref pushes. */
typedef struct dlua_lock_strs {
    char id[384];                       /* the keys, an explicit owner */
    char owner[DL_OWNER_MAX], writer[DL_OWNER_MAX];
} dlua_lock_strs;

/* Fill l for the lock k, called by the running owner of the open client
 * at ci, with its strings in b (or, if they do not fit, in a userdata
 * pushed onto the stack: the call's until it returns). A read half's
 * l->writer names its write half's owner. */
void dlua_lockref(lua_State *L, const lua_lock *k, int ci, dl_lockref *l,
                  dlua_lock_strs *b);

/* What a Lock method works on: its client and the lock as the running
 * owner sees it. Lives on the method's C stack (l points into strs). */
typedef struct dlua_lock_call {
    lua_client *lc;
    int ci;                     /* stack index of the client */
    dl_lockref l;
    dlua_lock_strs strs;
} dlua_lock_call;

/* Push the client of the lock at li (open, in this process; its queued
 * callbacks run first) and return it; raises as dlua_client. */
lua_client *dlua_lock_client(lua_State *L, int li, const char *fname);

/* Every method starts here once its own arguments are read: the lock at
 * 1 is checked, the first keep values stay on the stack (anchored while
 * the call runs) and the rest are dropped, its client is pushed, and k
 * is filled. */
void dlua_lock_begin(lua_State *L, const char *fname, dlua_lock_call *k,
                     int keep);

/* wait, expire (or its old name lease) and watchdog_lease from the
 * options table at t (none or nil: nothing), over the defaults in a; an
 * object's defaults (with_owner: owner is known too) or one acquire's.
 * Either kind of lease given replaces a default of the other kind.
 * Raises on misuse, naming fname and the argument t - 1. Returns whether
 * the options said 'lease', for the caller to tell dlua_warn_lease. */
int dlua_lock_timing(lua_State *L, int t, const char *fname, int with_owner,
                     dl_acquire_args *a);

/* Tell lc's log, once, that 'lease' on a lock is the old name of
 * 'expire'. */
void dlua_warn_lease(lua_client *lc);

/* The public function, named by the string at idx, that a call of the
 * Lua half runs for ("with", "multi_lock", ...): misuse is raised under
 * its name. */
const char *dlua_caller(lua_State *L, int idx);

/* Put the constructors of locks (client:lock, :rwlock, :fair_lock, and
 * the Lua half's :_lock and :_permit) in the table at methods. */
void dlua_lock_constructors(lua_State *L, int methods);

#pragma GCC visibility pop
#endif
