/* SPDX-License-Identifier: MIT
 * lua_acquire.c: the Lock's methods that take and give back a hold: the
 * blocking acquire, try_acquire, the steps of an acquire that a
 * scheduler drives (dlock.lua), release and <close>; and what is told
 * once before a wait.
 */
#include "binding/lua_acquire.h"
#include "binding/lua_lockobj.h"
#include "core/waiting.h"

#include <stdio.h>
#include <string.h>

#define STEP_MT "dlock.AcquireStep"

/* The state of an acquire between its steps, and the public function
 * (static text) that began it. */
typedef struct lua_step {
    dl_acquire op;
    const char *fname;
} lua_step;

/* Before an acquire of the lock at 1 that may wait (wait_us != 0) and
 * would block the Lua state (blocking: no scheduler, or not yieldable):
 * whether an event loop is loaded that the wait would stall. And the old
 * name 'lease', if the options said it. Each is told once per client. */
static void warn_acquire(lua_State *L, const char *fname, int old_lease,
                         int64_t wait_us, int blocking)
{
    lua_client *lc = dlua_lock_client(L, 1, fname);
    int ci = lua_gettop(L);
    if (old_lease)
        dlua_warn_lease(lc);
    if (blocking && wait_us != 0 && !(lc->warned & DLUA_WARN_LOOP)) {
        lua_getiuservalue(L, ci, UV_SCHED);
        int sched = !lua_isnil(L, -1);
        int cq = 0, uv = 0;
        if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE) {
            cq = lua_getfield(L, -1, "cqueues") != LUA_TNIL;
            uv = lua_getfield(L, -2, "luv") != LUA_TNIL;
            lua_pop(L, 2);
        }
        lua_pop(L, 2);
        if (!sched && (cq || uv))
            dlua_warn_once(lc, DLUA_WARN_LOOP, cq
                ? "a blocking wait with cqueues loaded: without a scheduler "
                  "a wait blocks the whole Lua state, every cqueues "
                  "coroutine with it (connect{ scheduler = \"cqueues\" }: "
                  "see doc/event-loops.md)"
                : "a blocking wait with luv loaded: without a scheduler a "
                  "wait blocks the whole Lua state, the luv loop with it "
                  "(connect{ scheduler = \"luv\" }: see doc/event-loops.md)");
    }
    lua_pop(L, 1);
}

/* The options of an acquire of the lock at 1 by fname (opts at 2), over
 * the lock's defaults; once: a single attempt (try_acquire), which a
 * wait other than 0 contradicts. */
static dl_acquire_args acquire_args(lua_State *L, const char *fname,
                                    int once, int blocking)
{
    lua_lock *k = dlua_check_lock(L, 1, fname);
    dl_acquire_args a = { .wait_us = once ? 0 : k->wait_us,
                          .lease_ms = k->lease_ms, .renew_ms = k->renew_ms };
    int old = dlua_lock_timing(L, 2, fname, 0, &a);
    if (once && a.wait_us != 0)
        dlua_opt_error(L, fname, "wait", "try_acquire does not wait: use "
                       "acquire");
    warn_acquire(L, fname, old, a.wait_us, blocking);
    return a;
}

/* Push what acquire returns for st: the lock (at 1), or nil, err and,
 * after a timeout, the holder's TTL. Returns how many. */
static int acquired(lua_State *L, dl_status st, const dl_acquire_args *a,
                    const char *err)
{
    if (st == DL_ETIMEOUT && a->busy_ms >= 0) { /* when to come back */
        dlua_fail(L, st, err);
        lua_pushnumber(L, (lua_Number)a->busy_ms / 1000);
        return 3;
    }
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushvalue(L, 1);
    return 1;
}

/* A write half whose owner holds the read half would wait for itself:
 * raise instead. */
static void check_upgrade(lua_State *L, dlua_lock_call *k, const char *fname)
{
    dl_holdinfo w, r;
    dl_lockref rl = k->l;
    if (k->l.kind != DL_KIND_WRITE)
        return;
    lua_pushlstring(L, k->l.ident.owner, k->l.ident.ownerlen);
    lua_pushlstring(L, "\0r", 2);
    lua_concat(L, 2);
    size_t rn;
    rl.ident.owner = lua_tolstring(L, -1, &rn);
    rl.ident.ownerlen = (uint32_t)rn;
    dl_client_hold_info(k->lc->c, &rl, &r);
    dl_client_hold_info(k->lc->c, &k->l, &w);
    lua_pop(L, 1);
    if (r.count > 0 && w.count == 0)
        dlua_error(L, "calling '%s' on a write lock whose owner holds its "
                   "read lock: it would wait for itself (release the read "
                   "lock first; a writer may take the read lock, not the "
                   "other way round)", fname);
}

/* Run a blocking acquire (op NULL) or one step of op. The lock object is
 * referenced for the registry, and kept if a fresh hold took it. */
static dl_status run(lua_State *L, dlua_lock_call *k, dl_acquire_args *a,
                     dl_acquire *op, char *err)
{
    lua_getiuservalue(L, k->ci, UV_REFS);       /* client, refs */
    lua_pushvalue(L, 1);
    a->ref = luaL_ref(L, -2);
    a->ref_kept = 0;
    dl_status st = op ? dl_acquire_step(k->lc->c, &k->l, op, err, DL_ERRLEN)
                      : dl_acquire_blocking(k->lc->c, &k->l, a, err,
                                            DL_ERRLEN);
    if (!a->ref_kept)
        luaL_unref(L, -1, a->ref);
    lua_pop(L, 1);
    return st;
}

/* The blocking acquire of the lock at 1 by fname, with a. */
static int acquire(lua_State *L, const char *fname, dl_acquire_args *a)
{
    dlua_lock_call k;
    char err[DL_ERRLEN];
    dlua_lock_begin(L, fname, &k, 1);
    check_upgrade(L, &k, fname);
    dl_status st = run(L, &k, a, NULL, err);
    if (st == DL_ETIMEOUT && a->held_here) {
        lua_getiuservalue(L, k.ci, UV_SCHED);
        size_t n = strlen(err);
        snprintf(err + n, sizeof err - n, lua_isnil(L, -1)
                 ? "; without a scheduler a wait blocks the Lua state, "
                   "that coroutine with it (connect{ scheduler = ... })"
                 : "; this wait cannot yield to the scheduler (it is not "
                   "in a coroutine the scheduler runs): it would block the "
                   "Lua state, that coroutine with it");
        lua_pop(L, 1);
    }
    return acquired(L, st, a, err);
}

/* lock:acquire([opts]): the blocking acquire (dlock.lua's acquire calls
 * lock:_acquire_step instead where a wait can yield to a scheduler). */
static int lock_acquire(lua_State *L)
{
    dl_acquire_args a = acquire_args(L, "acquire", 0, 1);
    return acquire(L, "acquire", &a);
}

/* lock:_acquire(opts, fname): the blocking acquire, for the Lua half's
 * public function fname. */
static int lock_acquire_as(lua_State *L)
{
    const char *fname = dlua_caller(L, 3);
    dl_acquire_args a = acquire_args(L, fname, 0, 1);
    return acquire(L, fname, &a);
}

static int lock_try_acquire(lua_State *L)
{
    dl_acquire_args a = acquire_args(L, "try_acquire", 1, 1);
    return acquire(L, "try_acquire", &a);
}

/* lock:_acquire_step(opts [, fname]) -> a new step state for
 * acquire(opts), by the public function fname ("acquire" if none). */
static int lock_step_new(lua_State *L)
{
    const char *fname = lua_isnoneornil(L, 3) ? "acquire"
                                              : dlua_caller(L, 3);
    dl_acquire_args a = acquire_args(L, fname, 0, 0);
    lua_step *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->op.args = a;
    s->op.drained = -1;
    s->fname = fname;
    luaL_setmetatable(L, STEP_MT);
    return 1;
}

/* lock:_step(step) -> true, acquire's results | false, fd or nil,
 * seconds, serial: wait until fd is readable or the time has passed,
 * then step again. serial names the socket: another under the same fd
 * number (the old one broke and was replaced) has another serial. */
static int lock_step(lua_State *L)
{
    dlua_lock_call k;
    char err[DL_ERRLEN];
    lua_step *s = luaL_checkudata(L, 2, STEP_MT);
    dl_acquire *op = &s->op;
    dlua_lock_begin(L, s->fname, &k, 2);    /* (on_lost may run a GC) */
    check_upgrade(L, &k, s->fname);
    dl_status st = run(L, &k, &op->args, op, err);
    if (st == DL_EWAIT) {
        lua_pushboolean(L, 0);
        if (op->nfds)
            lua_pushinteger(L, op->fds[0]);
        else
            lua_pushnil(L);
        int64_t left = op->wake_us - dl_now_us();
        lua_pushnumber(L, left > 0 ? (lua_Number)left / 1e6 : 0);
        lua_pushinteger(L, (lua_Integer)op->serial);
        return 4;
    }
    lua_pushboolean(L, 1);
    return 1 + acquired(L, st, &op->args, err);
}

/* lock:_drained(step) -> the socket step's last step read messages from,
 * that other coroutines may be waiting on (their scheduler wakes them),
 * or nil. */
static int lock_drained(lua_State *L)
{
    dlua_check_lock(L, 1, "acquire");
    lua_step *s = luaL_checkudata(L, 2, STEP_MT);
    if (s->op.drained >= 0)
        lua_pushinteger(L, s->op.drained);
    else
        lua_pushnil(L);
    return 1;
}

/* lock:_abandon(step): step's wait ended between its steps (its
 * scheduler's wait raised, its coroutine was closed): its claim as a
 * waiter goes. */
static int lock_abandon(lua_State *L)
{
    dlua_lock_call k;
    lua_step *s = luaL_checkudata(L, 2, STEP_MT);
    dlua_lock_begin(L, s->fname, &k, 2);
    dl_waiting_abandon(k.lc->c, &k.l, &s->op);
    return 0;
}

/* lock:_scheduler() -> the client's scheduler wait function, or nil. */
static int lock_scheduler(lua_State *L)
{
    dlua_check_lock(L, 1, "acquire");
    lua_getiuservalue(L, 1, 1);
    if (!luaL_testudata(L, -1, CLIENT_MT))
        return 0;
    lua_getiuservalue(L, -1, UV_SCHED);
    return 1;
}

/* Release one hold of the lock at 1. Returns the number of Lua results. */
static int release(lua_State *L, const char *fname)
{
    dlua_lock_call k;
    char err[DL_ERRLEN];
    int64_t left;
    int unref;
    dlua_lock_begin(L, fname, &k, 1);
    dl_status st = dl_release(k.lc->c, &k.l, &left, &unref, err,
                              sizeof err);
    if (unref != DL_NOREF) {
        lua_getiuservalue(L, k.ci, UV_REFS);
        luaL_unref(L, -1, unref);
        lua_pop(L, 1);
    }
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, 1);
    lua_pushinteger(L, (lua_Integer)left);
    return 2;
}

static int lock_release(lua_State *L)
{
    return release(L, "release");
}

/* <close>: release one hold; a lost or missing hold is not raised here
 * (on_lost reports the loss), a closed client is ignored. */
static int lock__close(lua_State *L)
{
    dlua_check_lock(L, 1, "__close");
    lua_getiuservalue(L, 1, 1);
    lua_client *lc = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!lc || !lc->c || !dl_state_same_process(lc->c))
        return 0;
    release(L, "__close");
    return 0;
}

void dlua_acquire_open(lua_State *L, int mt)
{
    static const luaL_Reg methods[] = {
        { "acquire", lock_acquire },
        { "try_acquire", lock_try_acquire },
        { "release", lock_release },
        { "_acquire", lock_acquire_as },
        { "_acquire_step", lock_step_new },
        { "_step", lock_step },
        { "_drained", lock_drained },
        { "_abandon", lock_abandon },
        { "_scheduler", lock_scheduler },
        { NULL, NULL }
    };
    static const luaL_Reg none[] = { { NULL, NULL } };
    mt = lua_absindex(L, mt);
    dlua_new_class(L, STEP_MT, none, NULL);
    lua_pushcfunction(L, lock__close);
    lua_setfield(L, mt, "__close");
    lua_getfield(L, mt, "methods");
    luaL_setfuncs(L, methods, 0);
    lua_pop(L, 1);
}
