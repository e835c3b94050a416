/* SPDX-License-Identifier: MIT
 * lua_lock.c: the Lock class of the binding.
 *
 * A lock userdata is one block: the struct, then its name and an explicit
 * owner, each NUL-terminated. Its user value pins the client. Each call
 * builds the lock's identity (lockid.h: its keys, the owner and the
 * requester) on its own stack: a lock object costs little more than its
 * name, whatever it holds (100,000 held locks: doc/performance.md). The
 * owner of a call is the explicit owner (new_lock refuses one on a
 * Redlock client), or the running coroutine's
 * (dlua_owner numbers it; lockid.c builds the string).
 */
#include "binding/lua_dlock.h"

#include <math.h>
#include <string.h>

typedef struct lua_lock {
    int64_t wait_us;            /* default wait; <0 forever */
    int64_t lease_ms;           /* default fixed lease; 0 watchdog */
    int64_t renew_ms;           /* default watchdog lease; 0 the client's */
    int64_t permits;            /* a permit's: the semaphore's size */
    uint32_t namelen, ownerlen; /* ownerlen 0: coroutine owners */
    int kind;                   /* DL_KIND_*: a lock, a read-write half,
                                   a semaphore's permit, a fair lock */
} lua_lock;

/* The name and the explicit owner (NULL: none), after the struct. */
static const char *lock_name(const lua_lock *k)
{
    return (const char *)(k + 1);
}

static const char *lock_owner(const lua_lock *k)
{
    return k->ownerlen ? lock_name(k) + k->namelen + 1 : NULL;
}

static lua_lock *check_lock(lua_State *L, int idx, const char *fname)
{
    return dlua_self(L, idx, LOCK_MT, fname);
}

/* Push the lock's client (open, in this process) and return it. Runs
 * pending on_lost callbacks first: "at the next call into the library". */
static lua_client *lock_client(lua_State *L, int li, const char *fname)
{
    lua_getiuservalue(L, li, 1);
    return dlua_client(L, lua_gettop(L), fname);
}

/* The strings of a call's lock identity: on the C stack, or (a long
 * name) in a userdata lockref pushes. */
typedef struct lock_strs {
    char id[384];                       /* the keys, an explicit owner */
    char owner[DL_OWNER_MAX], writer[DL_OWNER_MAX];
} lock_strs;

/* Fill l for the lock k, called by the running owner of the client at
 * ci, with its strings in b (or, if they do not fit, in a userdata pushed
 * onto the stack: the call's until it returns). A read half's l->writer
 * names its write half's owner. */
static void lockref(lua_State *L, lua_lock *k, int ci, dl_lockref *l,
                    lock_strs *b)
{
    lua_client *lc = lua_touserdata(L, ci);
    const char *pfx = lc->c->opts.prefix;
    size_t pl = lc->c->opts.prefixlen;
    size_t n = dl_lockid_size(pl, k->namelen, k->kind, lc->c->id,
                              k->ownerlen);
    char *buf = n <= sizeof b->id ? b->id : lua_newuserdatauv(L, n, 0);
    dl_lockid_build(&l->ident, buf, pfx, pl, lock_name(k), k->namelen,
                    k->kind, lc->c->id, lock_owner(k), k->ownerlen);
    l->kind = k->kind;
    l->permits = k->permits;
    l->writer = NULL;
    l->writerlen = 0;
    if (k->ownerlen) {                  /* explicit: "owner\0r" on a read */
        l->owner_num = 0;
        if (k->kind == DL_KIND_READ) {
            l->writer = l->ident.owner;
            l->writerlen = l->ident.ownerlen - 2;
        }
        return;
    }
    l->owner_num = dlua_owner(L, ci);
    n = dl_lockid_caller(b->owner, lc->c->id, l->owner_num, k->kind,
                         b->writer, &l->writerlen);
    if (k->kind == DL_KIND_READ)
        l->writer = b->writer;
    l->ident.owner = l->ident.req = b->owner;
    l->ident.ownerlen = l->ident.reqlen = n;
}

static const char *const LOCK_KEYS[] = { "wait", "expire", "lease",
                                         "watchdog_lease", "owner", NULL };
static const char *const ACQUIRE_KEYS[] = { "wait", "expire", "lease",
                                            "watchdog_lease", NULL };

/* A lease from opts[name] at t, or 0 when absent. */
static int64_t opt_lease(lua_State *L, int t, const char *fname,
                         const char *name)
{
    int64_t ms = 0;
    if (lua_getfield(L, t, name) != LUA_TNIL)
        ms = dlua_lease_ms(L, -1, fname, name);
    lua_pop(L, 1);
    return ms;
}

/* wait, expire (or its old name lease) and watchdog_lease from the table
 * at t (if any) over the defaults in a. Either kind of lease given here
 * replaces a default of the other kind. Returns whether it said 'lease'. */
static int read_timing(lua_State *L, int t, const char *fname,
                       dl_acquire_args *a)
{
    if (lua_isnoneornil(L, t))
        return 0;
    if (!lua_istable(L, t))
        dlua_arg_error(L, t - 1, fname, lua_pushfstring(L, "options table "
                       "expected, got %s", luaL_typename(L, t)));
    dlua_check_keys(L, t, fname, fname[0] == 'l' ? LOCK_KEYS : ACQUIRE_KEYS);
    if (lua_getfield(L, t, "wait") != LUA_TNIL)
        a->wait_us = dlua_wait_us(L, -1, fname, "wait");
    lua_pop(L, 1);
    int64_t expire = opt_lease(L, t, fname, "expire");
    int64_t lease = opt_lease(L, t, fname, "lease");
    int64_t renew = opt_lease(L, t, fname, "watchdog_lease");
    if (expire && lease)
        dlua_opt_error(L, fname, "lease", "'lease' is the old name of "
                       "'expire': give one of them");
    if ((expire || lease) && renew)
        dlua_opt_error(L, fname, "watchdog_lease", "a lock either expires "
                       "('expire') or is renewed ('watchdog_lease'), not "
                       "both");
    if (expire || lease) {
        a->lease_ms = expire ? expire : lease;
        a->renew_ms = 0;
    } else if (renew) {
        a->renew_ms = renew;
        a->lease_ms = 0;
    }
    return lease != 0;
}

/* Log msg once per client (the flag what), through its log function. */
static void warn_once(lua_client *lc, unsigned what, const char *msg)
{
    if (lc->warned & what)
        return;
    lc->warned |= what;
    dl_client_warn(lc->c, msg);
}

static const char OLD_LEASE[] = "'lease' on a lock or an acquire is the "
    "old name of 'expire', a fixed lease the watchdog does not renew "
    "(connect's 'lease' is the watchdog's): say 'expire', or "
    "'watchdog_lease' for the lock's own watchdog lease";

/* Before an acquire of the lock at 1 that may wait (a.wait_us != 0) and
 * would block the Lua state (no scheduler, or not yieldable): whether
 * an event loop is loaded that the wait would stall. */
static void warn_acquire(lua_State *L, const char *fname, int old_lease,
                         int64_t wait_us, int blocking)
{
    lua_client *lc = lock_client(L, 1, fname);
    int ci = lua_gettop(L);
    if (old_lease)
        warn_once(lc, DLUA_WARN_LEASE, OLD_LEASE);
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
            warn_once(lc, DLUA_WARN_LOOP, cq
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

/* Push a new lock of kind for client:fname(name [, opts]) (client at 1,
 * name at 2, opts at 3). */
static void new_lock(lua_State *L, const char *fname, int kind)
{
    lua_client *lc = dlua_client(L, 1, fname);
    size_t namelen, ownerlen = 0;
    if (lua_type(L, 2) != LUA_TSTRING)      /* no number coercion */
        dlua_arg_error(L, 1, fname, lua_pushfstring(L, "lock name (a "
                       "string) expected, got %s", luaL_typename(L, 2)));
    const char *name = lua_tolstring(L, 2, &namelen);
    const char *owner = NULL;
    if (namelen == 0)
        dlua_arg_error(L, 1, fname, "lock name must not be empty");
    dl_acquire_args a = { .wait_us = -1 };
    if (read_timing(L, 3, "lock", &a))
        warn_once(lc, DLUA_WARN_LEASE, OLD_LEASE);
    if (lua_istable(L, 3)) {
        int ty = lua_getfield(L, 3, "owner");
        if (ty == LUA_TSTRING)
            owner = lua_tolstring(L, -1, &ownerlen);
        else if (ty != LUA_TNIL)
            dlua_opt_error(L, fname, "owner", "string expected");
        if (owner && ownerlen == 0)
            dlua_opt_error(L, fname, "owner", "must not be empty");
        if (owner && memchr(owner, '\0', ownerlen))  /* "\0r": a read half */
            dlua_opt_error(L, fname, "owner", "must not contain a NUL byte");
        if (owner && dl_lockid_is_caller(owner, ownerlen))
            dlua_opt_error(L, fname, "owner", "must not have the form of a "
                           "coroutine's owner (<client id>:<n>)");
        lua_pop(L, 1);                  /* (opts keeps it: copied below) */
    }
    /* A semaphore's permits name their own owners (and semaphores are
     * refused on Redlock before this). */
    if (owner && kind != DL_KIND_SEM && dl_client_fans_out(lc->c))
        dlua_error(L, "calling '%s' with an explicit owner on a Redlock "
                   "client (servers = ...): each master counts a shared "
                   "owner's holds on its own, and a lost message can give "
                   "two holders or a repeated token; use coroutine owners, "
                   "or one server, Sentinel or Cluster", fname);
    if (namelen >= UINT32_MAX || ownerlen >= UINT32_MAX)
        dlua_arg_error(L, 1, fname, "lock name or owner too long");
    lua_lock *k = lua_newuserdatauv(L, sizeof(lua_lock) + namelen + 1 +
                                    (owner ? ownerlen + 1 : 0), 1);
    char *p = (char *)(k + 1);
    k->wait_us = a.wait_us;
    k->lease_ms = a.lease_ms;
    k->renew_ms = a.renew_ms;
    memcpy(p, name, namelen);
    p[namelen] = '\0';
    k->namelen = (uint32_t)namelen;
    k->ownerlen = owner ? (uint32_t)ownerlen : 0;
    if (owner) {
        memcpy(p + namelen + 1, owner, ownerlen);
        p[namelen + 1 + ownerlen] = '\0';
    }
    k->kind = kind;
    k->permits = 0;
    luaL_setmetatable(L, LOCK_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
}

static int client_lock_new(lua_State *L)
{
    new_lock(L, "lock", DL_KIND_LOCK);
    return 1;
}

/* client:_permit(name, id, permits): the lock of one permit of the
 * semaphore name (owner id), for dlock.lua's Semaphore. */
static int client_permit_new(lua_State *L)
{
    lua_settop(L, 4);
    lua_client *lc = dlua_client(L, 1, "semaphore");
    if (dl_client_fans_out(lc->c))
        dlua_error(L, "calling 'semaphore' on a Redlock client (servers = "
                   "...): each master would count permits on its own, and "
                   "quorums that overlap could let more holders in than "
                   "permits; use one server, Sentinel or Cluster");
    lua_Integer permits = luaL_checkinteger(L, 4);
    luaL_checkstring(L, 3);
    lua_createtable(L, 0, 1);           /* { owner = id } as opts */
    lua_pushvalue(L, 3);
    lua_setfield(L, -2, "owner");
    lua_replace(L, 3);
    lua_settop(L, 3);
    new_lock(L, "semaphore", DL_KIND_SEM);
    ((lua_lock *)lua_touserdata(L, -1))->permits = permits;
    return 1;
}

/* client:fair_lock(name [, opts]): a lock whose waiters queue. */
static int client_fair_lock_new(lua_State *L)
{
    new_lock(L, "fair_lock", DL_KIND_FAIR);
    return 1;
}

static int client_rwlock_new(lua_State *L)
{
    lua_settop(L, 3);                   /* client, name, opts or nil */
    new_lock(L, "rwlock", DL_KIND_READ);
    new_lock(L, "rwlock", DL_KIND_WRITE);
    lua_createtable(L, 0, 3);
    lua_insert(L, -3);                  /* t, read, write */
    lua_setfield(L, -3, "write");
    lua_setfield(L, -2, "read");
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "name");
    return 1;
}

/* What a Lock method works on: its client and the lock as the running
 * owner sees it. Lives on the method's C stack (l.owner points into it). */
typedef struct lock_call {
    lua_client *lc;
    int ci;                     /* stack index of the client */
    dl_lockref l;
    lock_strs strs;
} lock_call;

/* Every method starts here, once its own arguments are read: check the
 * lock at 1, drop what follows, push its client (which runs pending
 * on_lost callbacks) and fill in the lock's identity. */
/* The lock at 1 and its client, with the first keep arguments kept on
 * the stack (anchored while the call runs) and the rest dropped. */
static void begin_keeping(lua_State *L, const char *fname, lock_call *k,
                          int keep)
{
    lua_lock *lk = check_lock(L, 1, fname);
    lua_settop(L, keep);
    k->lc = lock_client(L, 1, fname);
    k->ci = lua_gettop(L);
    lockref(L, lk, k->ci, &k->l, &k->strs);
}

static void begin(lua_State *L, const char *fname, lock_call *k)
{
    begin_keeping(L, fname, k, 1);
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

/* Run a blocking acquire (op NULL) or one step of op. The lock object is
 * referenced for the registry, and kept if a fresh hold took it. */
/* A write half whose owner holds the read half would wait for itself:
 * raise instead. */
static void check_upgrade(lua_State *L, lock_call *k)
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
        dlua_error(L, "calling 'acquire' on a write lock whose owner holds "
                   "its read lock: it would wait for itself (release the "
                   "read lock first; a writer may take the read lock, not "
                   "the other way round)");
}

static dl_status run(lua_State *L, lock_call *k, dl_acquire_args *a,
                     dl_acquire *op, char *err)
{
    check_upgrade(L, k);
    lua_getiuservalue(L, k->ci, UV_REFS);       /* client, refs */
    lua_pushvalue(L, 1);
    a->ref = luaL_ref(L, -2);
    a->ref_kept = 0;
    dl_status st = op ? dl_client_acquire_step(k->lc->c, &k->l, op, err,
                                               DL_ERRLEN)
                      : dl_client_acquire(k->lc->c, &k->l, a, err,
                                          DL_ERRLEN);
    if (!a->ref_kept)
        luaL_unref(L, -1, a->ref);
    lua_pop(L, 1);
    return st;
}

/* lock:_drained(op) -> the socket op's last step read messages from, that
 * other coroutines may be waiting on (their scheduler wakes them), or nil. */
static int lock_drained(lua_State *L)
{
    check_lock(L, 1, "acquire");
    dl_acquire *op = luaL_checkudata(L, 2, STEP_MT);
    if (op->drained >= 0)
        lua_pushinteger(L, op->drained);
    else
        lua_pushnil(L);
    return 1;
}

static int acquire(lua_State *L, const char *fname, dl_acquire_args *a)
{
    lock_call k;
    char err[DL_ERRLEN];
    begin(L, fname, &k);
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

/* The blocking acquire (dlock.lua calls lock:_step instead where a wait
 * can yield to a scheduler). */
static int lock_acquire(lua_State *L)
{
    lua_lock *k = check_lock(L, 1, "acquire");
    dl_acquire_args a = { .wait_us = k->wait_us, .lease_ms = k->lease_ms,
                          .renew_ms = k->renew_ms };
    int old = read_timing(L, 2, "acquire", &a);
    warn_acquire(L, "acquire", old, a.wait_us, 1);
    return acquire(L, "acquire", &a);
}

/* permit:_available() -> how many of its semaphore's permits are free. */
static int lock_available(lua_State *L)
{
    lock_call k;
    char err[DL_ERRLEN];
    int64_t n;
    begin(L, "available", &k);
    dl_status st = dl_client_available(k.lc->c, &k.l, &n, err, DL_ERRLEN);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

/* lock:_scheduler() -> the client's scheduler wait function, or nil. */
static int lock_scheduler(lua_State *L)
{
    check_lock(L, 1, "acquire");
    lua_getiuservalue(L, 1, 1);
    if (!luaL_testudata(L, -1, CLIENT_MT))
        return 0;
    lua_getiuservalue(L, -1, UV_SCHED);
    return 1;
}

/* lock:_acquire_step([opts]) -> a new step state for acquire(opts). */
static int lock_step_new(lua_State *L)
{
    lua_lock *k = check_lock(L, 1, "acquire");
    dl_acquire_args a = { .wait_us = k->wait_us, .lease_ms = k->lease_ms,
                          .renew_ms = k->renew_ms };
    int old = read_timing(L, 2, "acquire", &a);
    warn_acquire(L, "acquire", old, a.wait_us, 0);
    dl_acquire *op = lua_newuserdatauv(L, sizeof *op, 0);
    memset(op, 0, sizeof *op);
    op->args = a;
    op->drained = -1;
    luaL_setmetatable(L, STEP_MT);
    return 1;
}

/* lock:_step(op) -> true, acquire's results | false, fd or nil, seconds,
 * serial: wait until fd is readable or the time has passed, then step
 * again. serial names the socket: another under the same fd number (the
 * old one broke and was replaced) has another serial. */
static int lock_step(lua_State *L)
{
    lock_call k;
    char err[DL_ERRLEN];
    dl_acquire *op = luaL_checkudata(L, 2, STEP_MT);
    begin_keeping(L, "acquire", &k, 2);     /* (on_lost may run a GC) */
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

/* lock:_abandon(op): op's wait ended between its steps (its scheduler's
 * wait raised, its coroutine was closed): its claim as a waiter goes. */
static int lock_abandon(lua_State *L)
{
    lock_call k;
    dl_acquire *op = luaL_checkudata(L, 2, STEP_MT);
    begin_keeping(L, "acquire", &k, 2);
    dl_client_acquire_abandon(k.lc->c, &k.l, op);
    return 0;
}

static int lock_try_acquire(lua_State *L)
{
    lua_lock *k = check_lock(L, 1, "try_acquire");
    dl_acquire_args a = { .wait_us = 0, .lease_ms = k->lease_ms,
                          .renew_ms = k->renew_ms };
    int old = read_timing(L, 2, "try_acquire", &a);
    if (a.wait_us != 0)
        dlua_opt_error(L, "try_acquire", "wait", "try_acquire does not "
                       "wait: use acquire");
    warn_acquire(L, "try_acquire", old, 0, 1);
    return acquire(L, "try_acquire", &a);
}

/* Release one hold. Returns the number of Lua results. */
static int release(lua_State *L, const char *fname)
{
    lock_call k;
    char err[DL_ERRLEN];
    int64_t left;
    int unref;
    begin(L, fname, &k);
    dl_status st = dl_client_release(k.lc->c, &k.l, &left, &unref, err,
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
    check_lock(L, 1, "__close");
    lua_getiuservalue(L, 1, 1);
    lua_client *lc = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!lc || !lc->c || !dl_client_same_process(lc->c))
        return 0;
    release(L, "__close");
    return 0;
}

static void hold_info(lua_State *L, const char *fname, dl_holdinfo *hi)
{
    lock_call k;
    begin(L, fname, &k);
    dl_client_hold_info(k.lc->c, &k.l, hi);
}

static int lock_held(lua_State *L)
{
    dl_holdinfo hi;
    hold_info(L, "held", &hi);
    lua_pushboolean(L, hi.held);
    return 1;
}

static int lock_count(lua_State *L)
{
    dl_holdinfo hi;
    hold_info(L, "count", &hi);
    lua_pushinteger(L, (lua_Integer)hi.count);
    return 1;
}

static int lock_token(lua_State *L)
{
    dl_holdinfo hi;
    hold_info(L, "token", &hi);
    if (!hi.held)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)hi.token);
    return 1;
}

static int lock_ttl(lua_State *L)
{
    lock_call k;
    char err[DL_ERRLEN];
    int64_t ms;
    begin(L, "ttl", &k);
    dl_status st = dl_client_ttl(k.lc->c, &k.l, &ms, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    if (ms == -2)
        lua_pushnil(L);
    else if (ms < 0)
        lua_pushnumber(L, HUGE_VAL);
    else
        lua_pushnumber(L, (lua_Number)ms / 1000);
    return 1;
}

static int lock_extend(lua_State *L)
{
    lock_call k;
    char err[DL_ERRLEN];
    check_lock(L, 1, "extend");
    if (lua_isnoneornil(L, 2))
        dlua_arg_error(L, 1, "extend", "number of seconds expected");
    int64_t ms = dlua_lease_ms(L, 2, "extend", "#1");
    begin(L, "extend", &k);
    dl_status st = dl_client_extend(k.lc->c, &k.l, ms, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* lock:guard(cmd, ...) -> the reply | nil, err: client:call, run only
 * while this owner's hold is still the lock's current tenancy. */
static int lock_guard(lua_State *L)
{
    lua_lock *lk = check_lock(L, 1, "guard");
    if (lk->kind == DL_KIND_READ || lk->kind == DL_KIND_SEM)
        dlua_error(L, "calling 'guard' on a %s: a guard needs an exclusive "
                   "hold (a lock, a fair lock or a write lock)",
                   lk->kind == DL_KIND_READ ? "read lock" : "semaphore");
    int n = lua_gettop(L) - 1;
    dlua_command cmd;
    dlua_command_args(L, 2, n, "guard", &cmd);
    lock_call k;
    k.lc = lock_client(L, 1, "guard");
    if (dl_client_fans_out(k.lc->c))
        dlua_error(L, "calling 'guard' on a Redlock client (servers = ...): "
                   "there is no one server to write to; use a client of "
                   "one server, Sentinel or Cluster");
    k.ci = lua_gettop(L);
    lockref(L, lk, k.ci, &k.l, &k.strs);
    if (cmd.argc > 1 && !dl_client_same_slot(k.lc->c, &k.l, cmd.argv[1],
                                              cmd.lens[1])) {
        size_t taglen;                  /* the name, or "\1" + name */
        const char *tag = dl_lockid_tag(&k.l.ident, k.lc->c->opts.prefixlen,
                                        &taglen);
        lua_pushfstring(L, "key '%s' is in another Cluster slot than the "
                        "lock: give it the lock's hash tag, as in '%s{",
                        cmd.argv[1], cmd.argv[1]);
        lua_pushlstring(L, tag, taglen);
        lua_pushliteral(L, "}'");
        lua_concat(L, 3);
        dlua_arg_error(L, 2, "guard", lua_tostring(L, -1));
    }
    char err[DL_ERRLEN];
    redisReply *r;
    dl_status st = dl_client_guard(k.lc->c, &k.l, cmd.argc, cmd.argv,
                                   cmd.lens, &r, err, sizeof err);
    return dlua_push_reply(L, st, r, err);
}

static int lock_force_release(lua_State *L)
{
    lock_call k;
    char err[DL_ERRLEN];
    int existed;
    begin(L, "force_release", &k);
    dl_status st = dl_client_force_release(k.lc->c, &k.l, &existed, err,
                                           sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, existed);
    return 1;
}

static int lock__index(lua_State *L)
{
    lua_lock *k = check_lock(L, 1, "__index");
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2),
                                                "name") == 0)
        lua_pushlstring(L, lock_name(k), k->namelen);
    return 1;
}

static int lock__tostring(lua_State *L)
{
    lua_lock *k = check_lock(L, 1, "__tostring");
    lua_getiuservalue(L, 1, 1);
    lua_client *lc = lua_touserdata(L, -1);
    dl_holdinfo hi;
    memset(&hi, 0, sizeof hi);
    if (lc && lc->c && dl_client_same_process(lc->c)) {
        lock_strs b;
        dl_lockref l;
        lockref(L, k, lua_gettop(L), &l, &b);
        dl_client_hold_info(lc->c, &l, &hi);
    }
    const char *half = k->kind == DL_KIND_READ ? " read"
                       : k->kind == DL_KIND_WRITE ? " write" : "";
    lua_pushliteral(L, "dlock.Lock: \"");  /* the name whole, NULs too */
    lua_pushlstring(L, lock_name(k), k->namelen);
    if (hi.held)
        lua_pushfstring(L, "\"%s (held x%d)", half, (int)hi.count);
    else
        lua_pushfstring(L, "\"%s (%s)", half, hi.lost ? "lost" : "not held");
    lua_concat(L, 3);
    return 1;
}

void dlua_lock_open(lua_State *L, int client_methods)
{
    static const luaL_Reg constructors[] = {
        { "lock", client_lock_new },
        { "rwlock", client_rwlock_new },
        { "fair_lock", client_fair_lock_new },
        { "_permit", client_permit_new },
        { NULL, NULL }
    };
    static const luaL_Reg meta[] = {
        { "__close", lock__close },
        { "__tostring", lock__tostring },
        { NULL, NULL }
    };
    static const luaL_Reg methods[] = {
        { "acquire", lock_acquire },
        { "try_acquire", lock_try_acquire },
        { "release", lock_release },
        { "held", lock_held },
        { "count", lock_count },
        { "token", lock_token },
        { "ttl", lock_ttl },
        { "extend", lock_extend },
        { "guard", lock_guard },
        { "force_release", lock_force_release },
        { "_scheduler", lock_scheduler },
        { "_available", lock_available },
        { "_acquire_step", lock_step_new },
        { "_step", lock_step },
        { "_drained", lock_drained },
        { "_abandon", lock_abandon },
        { NULL, NULL }
    };
    static const luaL_Reg none[] = { { NULL, NULL } };
    client_methods = lua_absindex(L, client_methods);
    lua_pushvalue(L, client_methods);
    luaL_setfuncs(L, constructors, 0);
    lua_pop(L, 1);
    dlua_new_class(L, STEP_MT, none, NULL);
    dlua_new_class(L, LOCK_MT, meta, methods);
    luaL_getmetatable(L, LOCK_MT);              /* mt */
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_pushcclosure(L, lock__index, 1);        /* mt, index */
    lua_setfield(L, -2, "__index");
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_remove(L, -2);                          /* methods */
}
