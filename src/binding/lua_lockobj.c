/* SPDX-License-Identifier: MIT
 * lua_lockobj.c: a lock object of the binding: its userdata, the
 * constructors that make one (client:lock, :rwlock, :fair_lock, and the
 * Lua half's :_lock and :_permit), its options, and the identity each
 * call builds from it.
 *
 * Each call builds the lock's identity (lockid.h: its keys, the owner and
 * the requester) on its own stack: a lock object costs little more than
 * its name, whatever it holds (100,000 held locks: doc/performance.md).
 * The owner of a call is the explicit owner (a Redlock client refuses
 * one), or the running coroutine's (dlua_owner numbers it; lockid.c
 * builds the string).
 */
#include "binding/lua_lockobj.h"

#include <string.h>

/* The explicit owner (NULL: none), after the name. */
static const char *lock_owner(const lua_lock *k)
{
    return k->ownerlen ? dlua_lock_name(k) + k->namelen + 1 : NULL;
}

lua_lock *dlua_check_lock(lua_State *L, int idx, const char *fname)
{
    return dlua_self(L, idx, LOCK_MT, fname);
}

lua_client *dlua_lock_client(lua_State *L, int li, const char *fname)
{
    lua_getiuservalue(L, li, 1);
    return dlua_client(L, lua_gettop(L), fname);
}

void dlua_lockref(lua_State *L, const lua_lock *k, int ci, dl_lockref *l,
                  dlua_lock_strs *b)
{
    lua_client *lc = lua_touserdata(L, ci);
    const char *id = dl_client_id(lc->c);
    size_t pl;
    const char *pfx = dl_client_prefix(lc->c, &pl);
    size_t n = dl_lockid_size(pl, k->namelen, k->kind, id, k->ownerlen);
    char *buf = n <= sizeof b->id ? b->id : lua_newuserdatauv(L, n, 0);
    dl_lockid_spec spec = { pfx, pl, dlua_lock_name(k), k->namelen, k->kind,
                            id, lock_owner(k), k->ownerlen };
    dl_lockid_build(&l->ident, buf, &spec);
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
    n = dl_lockid_caller(b->owner, id, l->owner_num, k->kind, b->writer,
                         &l->writerlen);
    if (k->kind == DL_KIND_READ)
        l->writer = b->writer;
    l->ident.owner = l->ident.req = b->owner;
    l->ident.ownerlen = l->ident.reqlen = n;
}

void dlua_lock_begin(lua_State *L, const char *fname, dlua_lock_call *k,
                     int keep)
{
    lua_lock *lk = dlua_check_lock(L, 1, fname);
    lua_settop(L, keep);
    k->lc = dlua_lock_client(L, 1, fname);
    k->ci = lua_gettop(L);
    dlua_lockref(L, lk, k->ci, &k->l, &k->strs);
}

/* ---- options ---------------------------------------------------------- */

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

int dlua_lock_timing(lua_State *L, int t, const char *fname, int with_owner,
                     dl_acquire_args *a)
{
    if (lua_isnoneornil(L, t))
        return 0;
    if (!lua_istable(L, t))
        dlua_arg_error(L, t - 1, fname, lua_pushfstring(L, "options table "
                       "expected, got %s", luaL_typename(L, t)));
    dlua_check_keys(L, t, fname, with_owner ? LOCK_KEYS : ACQUIRE_KEYS,
                    sizeof(char *));
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

void dlua_warn_lease(lua_client *lc)
{
    dlua_warn_once(lc, DLUA_WARN_LEASE, "'lease' on a lock or an acquire "
                   "(a semaphore's too) is the old name of 'expire', a "
                   "fixed lease the watchdog does not renew (connect's "
                   "'lease' is the watchdog's): say 'expire', or "
                   "'watchdog_lease' for the lock's own watchdog lease");
}

const char *dlua_caller(lua_State *L, int idx)
{
    static const char *const names[] = { "lock", "acquire", "try_acquire",
                                         "with", "multi_lock", "semaphore",
                                         NULL };
    return names[luaL_checkoption(L, idx, NULL, names)];
}

/* ---- constructors ----------------------------------------------------- */

/* opts.owner of the options at 3 (NULL: none), checked. */
static const char *opt_owner(lua_State *L, const char *fname, size_t *len)
{
    const char *owner = NULL;
    *len = 0;
    if (!lua_istable(L, 3))
        return NULL;
    int ty = lua_getfield(L, 3, "owner");
    if (ty == LUA_TSTRING)
        owner = lua_tolstring(L, -1, len);
    else if (ty != LUA_TNIL)
        dlua_opt_error(L, fname, "owner", "string expected");
    if (owner && *len == 0)
        dlua_opt_error(L, fname, "owner", "must not be empty");
    if (owner && memchr(owner, '\0', *len))    /* "\0r": a read half */
        dlua_opt_error(L, fname, "owner", "must not contain a NUL byte");
    if (owner && dl_lockid_is_caller(owner, *len))
        dlua_opt_error(L, fname, "owner", "must not have the form of a "
                       "coroutine's owner (<client id>:<n>)");
    lua_pop(L, 1);                      /* (opts keeps it: it is copied) */
    return owner;
}

/* Push a new lock of kind for client:fname(name [, opts]) (client at 1,
 * name at 2, opts at 3). */
static void new_lock(lua_State *L, const char *fname, int kind)
{
    lua_client *lc = dlua_client(L, 1, fname);
    size_t namelen, ownerlen;
    if (lua_type(L, 2) != LUA_TSTRING)      /* no number coercion */
        dlua_arg_error(L, 1, fname, lua_pushfstring(L, "lock name (a "
                       "string) expected, got %s", luaL_typename(L, 2)));
    const char *name = lua_tolstring(L, 2, &namelen);
    if (namelen == 0)
        dlua_arg_error(L, 1, fname, "lock name must not be empty");
    dl_acquire_args a = { .wait_us = -1 };
    if (dlua_lock_timing(L, 3, fname, 1, &a))
        dlua_warn_lease(lc);
    const char *owner = opt_owner(L, fname, &ownerlen);
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
    k->ownerlen = (uint32_t)ownerlen;
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

/* client:_lock(name, opts, fname): client:lock, for the Lua half's
 * public function fname (client:with, client:multi_lock). */
static int client_lock_as(lua_State *L)
{
    const char *fname = dlua_caller(L, 4);
    lua_settop(L, 3);
    new_lock(L, fname, DL_KIND_LOCK);
    return 1;
}

/* client:_permit(name, id, permits, fname): the lock of one permit of
 * the semaphore name (owner id), for the Lua half's Semaphore and its
 * public function fname. */
static int client_permit_new(lua_State *L)
{
    const char *fname = dlua_caller(L, 5);
    lua_settop(L, 4);
    lua_client *lc = dlua_client(L, 1, fname);
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
    new_lock(L, fname, DL_KIND_SEM);
    ((lua_lock *)lua_touserdata(L, -1))->permits = permits;
    return 1;
}

/* client:fair_lock(name [, opts]): a lock whose waiters queue. */
static int client_fair_lock_new(lua_State *L)
{
    new_lock(L, "fair_lock", DL_KIND_FAIR);
    return 1;
}

/* client:rwlock(name [, opts]): { read = lock, write = lock, name }. */
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

void dlua_lock_constructors(lua_State *L, int methods)
{
    static const luaL_Reg constructors[] = {
        { "lock", client_lock_new },
        { "rwlock", client_rwlock_new },
        { "fair_lock", client_fair_lock_new },
        { "_lock", client_lock_as },
        { "_permit", client_permit_new },
        { NULL, NULL }
    };
    lua_pushvalue(L, methods);
    luaL_setfuncs(L, constructors, 0);
    lua_pop(L, 1);
}
