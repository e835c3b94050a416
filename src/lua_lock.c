/* SPDX-License-Identifier: MIT
 * lua_lock.c: the Lock class of the binding.
 *
 * A lock userdata is one block: the struct, then the name, the key
 * "P{name}", the fencing counter of its slot "P{tag}:fence", the channel
 * "P{name}:ch" and an explicit owner, each NUL-terminated. Its user value
 * pins the client. The owner of a call is the explicit owner, or
 * "<client id>:<n>" where n numbers the running coroutine (see
 * dlua_owner); its requester (client.h) is pushed on the stack when it
 * must be built.
 */
#include "lua_dlock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct lua_lock {
    int64_t wait_us;            /* default wait; <0 forever */
    int64_t lease_ms;           /* default lease; 0 watchdog */
    const char *name, *key, *fence, *chan, *owner;
    size_t namelen, keylen, fencelen, chanlen, ownerlen; /* 0: coroutine */
} lua_lock;

#define OWNER_MAX (DL_ID_HEX + 24)

static lua_lock *check_lock(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, LOCK_MT);
}

/* Push the lock's client (open, in this process) and return it. Runs
 * pending on_lost callbacks first: "at the next call into the library". */
static lua_client *lock_client(lua_State *L, int li, const char *fname)
{
    lua_getiuservalue(L, li, 1);
    return dlua_client(L, lua_gettop(L), fname);
}

/* Fill l for the lock at li with the client at ci; buf holds the owner.
 * An explicit owner's requester is pushed (it must stay on the stack
 * while l is used). */
static void lockref(lua_State *L, lua_lock *k, int ci, dl_lockref *l,
                    char *buf)
{
    lua_client *lc = lua_touserdata(L, ci);
    l->key = k->key;     l->keylen = k->keylen;
    l->fence = k->fence; l->fencelen = k->fencelen;
    l->chan = k->chan;   l->chanlen = k->chanlen;
    if (k->ownerlen) {
        l->owner = k->owner;
        l->ownerlen = k->ownerlen;
        l->owner_num = 0;
        lua_pushstring(L, lc->c->id);
        lua_pushliteral(L, "|");
        lua_pushlstring(L, k->owner, k->ownerlen);
        lua_concat(L, 3);
        l->req = lua_tolstring(L, -1, &l->reqlen);
        return;
    }
    l->owner_num = dlua_owner(L, ci);
    int n = snprintf(buf, OWNER_MAX, "%s:%llu", lc->c->id,
                     (unsigned long long)l->owner_num);
    l->owner = l->req = buf;
    l->ownerlen = l->reqlen = (size_t)n;
}

static char *put(char *p, const char *a, size_t alen, const char *b,
                 size_t blen, const char *c, size_t clen)
{
    memcpy(p, a, alen);
    memcpy(p + alen, b, blen);
    memcpy(p + alen + blen, c, clen);
    p[alen + blen + clen] = '\0';
    return p + alen + blen + clen + 1;
}

static const char *const LOCK_KEYS[] = { "wait", "lease", "owner", NULL };
static const char *const ACQUIRE_KEYS[] = { "wait", "lease", NULL };

/* wait and lease from the table at t (if any) over the given defaults. */
static void read_timing(lua_State *L, int t, const char *fname,
                        int64_t *wait_us, int64_t *lease_ms)
{
    if (lua_isnoneornil(L, t))
        return;
    if (!lua_istable(L, t))
        luaL_argerror(L, t, lua_pushfstring(L, "options table expected, "
                      "got %s", luaL_typename(L, t)));
    dlua_check_keys(L, t, fname, fname[0] == 'l' ? LOCK_KEYS : ACQUIRE_KEYS);
    if (lua_getfield(L, t, "wait") != LUA_TNIL)
        *wait_us = dlua_wait_us(L, -1, fname, "wait");
    lua_pop(L, 1);
    if (lua_getfield(L, t, "lease") != LUA_TNIL)
        *lease_ms = dlua_lease_ms(L, -1, fname, "lease");
    lua_pop(L, 1);
}

int dlua_lock_new(lua_State *L)
{
    lua_client *lc = dlua_client(L, 1, "lock");
    size_t namelen, ownerlen = 0;
    if (lua_type(L, 2) != LUA_TSTRING)      /* no number coercion */
        luaL_typeerror(L, 2, "string");
    const char *name = lua_tolstring(L, 2, &namelen);
    const char *owner = NULL;
    luaL_argcheck(L, namelen > 0, 2, "lock name must not be empty");
    int64_t wait_us = -1, lease_ms = 0;
    read_timing(L, 3, "lock", &wait_us, &lease_ms);
    if (lua_istable(L, 3)) {
        int ty = lua_getfield(L, 3, "owner");
        if (ty == LUA_TSTRING)
            owner = lua_tolstring(L, -1, &ownerlen);
        else if (ty != LUA_TNIL)
            dlua_opt_error(L, "lock", "owner", "string expected");
        if (owner && ownerlen == 0)
            dlua_opt_error(L, "lock", "owner", "must not be empty");
        lua_pop(L, 1);                  /* the string stays in opts */
    }
    const char *pfx = lc->c->opts.prefix;
    size_t pl = lc->c->opts.prefixlen;
    size_t keylen = pl + namelen + 2;
    char stag[24];                      /* {tag}:fence */
    stag[0] = '{';
    size_t size = sizeof(lua_lock) + namelen + 1 + keylen + 1 +
                  pl + sizeof stag + 1 + keylen + 3 + 1 + ownerlen + 1;
    lua_lock *k = lua_newuserdatauv(L, size, 1);
    char *p = (char *)(k + 1), tag[2] = { '{', '}' };
    k->wait_us = wait_us;
    k->lease_ms = lease_ms;
    k->name = p;
    p = put(p, name, namelen, "", 0, "", 0);
    k->key = p;                         /* P{name} */
    p = put(p, pfx, pl, tag, 1, name, namelen);
    p[-1] = '}';
    *p++ = '\0';
    /* The counter on the lock's slot: P{tag}:fence. */
    size_t taglen = 1 + (size_t)dl_slot_tag(dl_key_slot(k->key, keylen),
                                            stag + 1, sizeof stag - 8);
    memcpy(stag + taglen, "}:fence", 7);
    taglen += 7;
    k->fence = p;
    p = put(p, pfx, pl, stag, taglen, "", 0);
    k->fencelen = pl + taglen;
    k->chan = p;
    p = put(p, k->key, keylen, ":ch", 3, "", 0);
    k->owner = p;
    put(p, owner ? owner : "", ownerlen, "", 0, "", 0);
    k->namelen = namelen;
    k->keylen = keylen;
    k->chanlen = keylen + 3;
    k->ownerlen = ownerlen;
    luaL_setmetatable(L, LOCK_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* What a Lock method works on: its client and the lock as the running
 * owner sees it. Lives on the method's C stack (l.owner points into it). */
typedef struct lock_call {
    lua_client *lc;
    int ci;                     /* stack index of the client */
    dl_lockref l;
    char owner[OWNER_MAX];
} lock_call;

/* Every method starts here, once its own arguments are read: check the
 * lock at 1, drop what follows, push its client (which runs pending
 * on_lost callbacks) and fill in the lock's identity. */
static void begin(lua_State *L, const char *fname, lock_call *k)
{
    lua_lock *lk = check_lock(L, 1);
    lua_settop(L, 1);
    k->lc = lock_client(L, 1, fname);
    k->ci = lua_gettop(L);
    lockref(L, lk, k->ci, &k->l, k->owner);
}

static int acquire(lua_State *L, const char *fname, int64_t wait_us,
                   int64_t lease_ms)
{
    lock_call k;
    char err[DL_ERRLEN];
    begin(L, fname, &k);
    lua_getiuservalue(L, k.ci, UV_REFS);        /* client, refs */
    lua_pushvalue(L, 1);
    int ref = luaL_ref(L, -2), kept = 0;
    dl_status st = dl_client_acquire(k.lc->c, &k.l, wait_us, lease_ms, ref,
                                     &kept, err, sizeof err);
    if (!kept)
        luaL_unref(L, -1, ref);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushvalue(L, 1);
    return 1;
}

static int lock_acquire(lua_State *L)
{
    lua_lock *k = check_lock(L, 1);
    int64_t wait_us = k->wait_us, lease_ms = k->lease_ms;
    read_timing(L, 2, "acquire", &wait_us, &lease_ms);
    return acquire(L, "acquire", wait_us, lease_ms);
}

static int lock_try_acquire(lua_State *L)
{
    lua_lock *k = check_lock(L, 1);
    int64_t wait_us = 0, lease_ms = k->lease_ms;
    read_timing(L, 2, "try_acquire", &wait_us, &lease_ms);
    if (wait_us != 0)
        dlua_opt_error(L, "try_acquire", "wait", "try_acquire does not "
                       "wait: use acquire");
    return acquire(L, "try_acquire", 0, lease_ms);
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
    check_lock(L, 1);
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
    check_lock(L, 1);
    if (lua_isnoneornil(L, 2))
        luaL_argerror(L, 2, "number of seconds expected");
    int64_t ms = dlua_lease_ms(L, 2, "extend", "seconds");
    begin(L, "extend", &k);
    dl_status st = dl_client_extend(k.lc->c, &k.l, ms, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, 1);
    return 1;
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
    lua_lock *k = check_lock(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2),
                                                "name") == 0)
        lua_pushlstring(L, k->name, k->namelen);
    return 1;
}

static int lock__tostring(lua_State *L)
{
    lua_lock *k = check_lock(L, 1);
    lua_getiuservalue(L, 1, 1);
    lua_client *lc = lua_touserdata(L, -1);
    dl_holdinfo hi;
    memset(&hi, 0, sizeof hi);
    if (lc && lc->c && dl_client_same_process(lc->c)) {
        char ownbuf[OWNER_MAX];
        dl_lockref l;
        lockref(L, k, lua_gettop(L), &l, ownbuf);
        dl_client_hold_info(lc->c, &l, &hi);
    }
    if (hi.held)
        lua_pushfstring(L, "dlock.Lock: \"%s\" (held x%d)", k->name,
                        (int)hi.count);
    else
        lua_pushfstring(L, "dlock.Lock: \"%s\" (%s)", k->name,
                        hi.lost ? "lost" : "not held");
    return 1;
}

void dlua_lock_open(lua_State *L)
{
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
        { "force_release", lock_force_release },
        { NULL, NULL }
    };
    dlua_new_class(L, LOCK_MT, meta, methods);
    luaL_getmetatable(L, LOCK_MT);              /* mt */
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_pushcclosure(L, lock__index, 1);        /* mt, index */
    lua_setfield(L, -2, "__index");
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_remove(L, -2);                          /* methods */
}
