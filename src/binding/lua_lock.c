/* SPDX-License-Identifier: MIT
 * lua_lock.c: the Lock class of the binding: what a lock object answers
 * without taking a hold (held, count, token, ttl), what a holder does
 * with its hold besides giving it back (extend, guard), force_release,
 * and the class itself, whose other methods lua_acquire.c registers and
 * whose objects lua_lockobj.c makes.
 */
#include "binding/lua_lock.h"
#include "binding/lua_acquire.h"
#include "binding/lua_lockobj.h"

#include <math.h>
#include <string.h>

/* permit:_available() -> how many of its semaphore's permits are free. */
static int lock_available(lua_State *L)
{
    dlua_lock_call k;
    char err[DL_ERRLEN];
    int64_t n;
    dlua_lock_begin(L, "available", &k, 1);
    dl_status st = dl_client_available(k.lc->c, &k.l, &n, err, DL_ERRLEN);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

static void hold_info(lua_State *L, const char *fname, dl_holdinfo *hi)
{
    dlua_lock_call k;
    dlua_lock_begin(L, fname, &k, 1);
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
    dlua_lock_call k;
    char err[DL_ERRLEN];
    int64_t ms;
    dlua_lock_begin(L, "ttl", &k, 1);
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
    dlua_lock_call k;
    char err[DL_ERRLEN];
    dlua_check_lock(L, 1, "extend");
    if (lua_isnoneornil(L, 2))
        dlua_arg_error(L, 1, "extend", "number of seconds expected");
    int64_t ms = dlua_lease_ms(L, 2, "extend", "#1");
    dlua_lock_begin(L, "extend", &k, 1);
    dl_status st = dl_extend(k.lc->c, &k.l, ms, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* Raise: the key of a guarded command is in another Cluster slot than
 * the lock l, whose hash tag it should take. */
static int other_slot(lua_State *L, const dlua_lock_call *k, const char *key)
{
    size_t pl, taglen;                  /* the name, or "\1" + name */
    dl_client_prefix(k->lc->c, &pl);
    const char *tag = dl_lockid_tag(&k->l.ident, pl, &taglen);
    lua_pushfstring(L, "key '%s' is in another Cluster slot than the "
                    "lock: give it the lock's hash tag, as in '%s{", key,
                    key);
    lua_pushlstring(L, tag, taglen);
    lua_pushliteral(L, "}'");
    lua_concat(L, 3);
    return dlua_arg_error(L, 2, "guard", lua_tostring(L, -1));
}

/* lock:guard(cmd, ...) -> the reply | nil, err: client:call, run only
 * while this owner's hold is still the lock's current tenancy. */
static int lock_guard(lua_State *L)
{
    lua_lock *lk = dlua_check_lock(L, 1, "guard");
    if (lk->kind == DL_KIND_READ || lk->kind == DL_KIND_SEM)
        dlua_error(L, "calling 'guard' on a %s: a guard needs an exclusive "
                   "hold (a lock, a fair lock or a write lock)",
                   lk->kind == DL_KIND_READ ? "read lock" : "semaphore");
    int n = lua_gettop(L) - 1;
    dlua_command cmd;
    dlua_command_args(L, 2, n, "guard", &cmd);
    dlua_lock_call k;
    k.lc = dlua_lock_client(L, 1, "guard");
    if (dl_client_fans_out(k.lc->c))
        dlua_error(L, "calling 'guard' on a Redlock client (servers = ...): "
                   "there is no one server to write to; use a client of "
                   "one server, Sentinel or Cluster");
    k.ci = lua_gettop(L);
    dlua_lockref(L, lk, k.ci, &k.l, &k.strs);
    if (cmd.argc > 1 && !dl_command_same_slot(k.lc->c, &k.l, cmd.argv[1],
                                              cmd.lens[1]))
        other_slot(L, &k, cmd.argv[1]);
    char err[DL_ERRLEN];
    redisReply *r;
    dl_status st = dl_command_guard(k.lc->c, &k.l, cmd.argc, cmd.argv,
                                    cmd.lens, &r, err, sizeof err);
    return dlua_push_reply(L, st, r, err);
}

static int lock_force_release(lua_State *L)
{
    dlua_lock_call k;
    char err[DL_ERRLEN];
    int existed;
    dlua_lock_begin(L, "force_release", &k, 1);
    dl_status st = dl_client_force_release(k.lc->c, &k.l, &existed, err,
                                           sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, existed);
    return 1;
}

/* lock.name, and the methods (the upvalue). */
static int lock__index(lua_State *L)
{
    lua_lock *k = dlua_check_lock(L, 1, "__index");
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2),
                                                "name") == 0)
        lua_pushlstring(L, dlua_lock_name(k), k->namelen);
    return 1;
}

/* 'dlock.Lock: "name" read (held x2)', with no I/O and no callbacks. */
static int lock__tostring(lua_State *L)
{
    lua_lock *k = dlua_check_lock(L, 1, "__tostring");
    lua_getiuservalue(L, 1, 1);
    lua_client *lc = lua_touserdata(L, -1);
    dl_holdinfo hi;
    memset(&hi, 0, sizeof hi);
    if (lc && lc->c && dl_state_same_process(lc->c)) {
        dlua_lock_strs b;
        dl_lockref l;
        dlua_lockref(L, k, lua_gettop(L), &l, &b);
        dl_client_hold_info(lc->c, &l, &hi);
    }
    const char *half = k->kind == DL_KIND_READ ? " read"
                       : k->kind == DL_KIND_WRITE ? " write" : "";
    lua_pushliteral(L, "dlock.Lock: \"");  /* the name whole, NULs too */
    lua_pushlstring(L, dlua_lock_name(k), k->namelen);
    if (hi.held)
        lua_pushfstring(L, "\"%s (held x%d)", half, (int)hi.count);
    else
        lua_pushfstring(L, "\"%s (%s)", half, hi.lost ? "lost" : "not held");
    lua_concat(L, 3);
    return 1;
}

void dlua_lock_open(lua_State *L, int client_methods)
{
    static const luaL_Reg meta[] = {
        { "__tostring", lock__tostring },
        { NULL, NULL }
    };
    static const luaL_Reg methods[] = {
        { "held", lock_held },
        { "count", lock_count },
        { "token", lock_token },
        { "ttl", lock_ttl },
        { "extend", lock_extend },
        { "guard", lock_guard },
        { "force_release", lock_force_release },
        { "_available", lock_available },
        { NULL, NULL }
    };
    dlua_lock_constructors(L, lua_absindex(L, client_methods));
    dlua_new_class(L, LOCK_MT, meta, methods);
    luaL_getmetatable(L, LOCK_MT);              /* mt */
    dlua_acquire_open(L, -1);
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_pushcclosure(L, lock__index, 1);        /* mt, index */
    lua_setfield(L, -2, "__index");
    lua_getfield(L, -1, "methods");             /* mt, methods */
    lua_remove(L, -2);                          /* methods */
}
