/* SPDX-License-Identifier: MIT
 * lua_client.c: the Client class of the binding: opening a client for a
 * call, the owners (one per coroutine), the on_lost and log callbacks run
 * on the Lua thread, and the methods that touch no lock (close, ping,
 * call, inspect, poll, stats).
 *
 * A client userdata holds a pointer to its dl_client (NULL once closed)
 * and user values: on_lost, a table of references to lock objects whose
 * holds the registry keeps (so on_lost can be handed the lock), a
 * weak-keyed table coroutine -> owner userdata, whose __gc tells the core
 * that a coroutine was collected, the scheduler and the log function.
 */
#define _GNU_SOURCE
#include "binding/lua_client.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct lua_owner {
    lua_client *lc;             /* pinned by the owner's user value */
    uint64_t num;
} lua_owner;

/* The open client at idx, without running pending callbacks. */
static lua_client *check_open(lua_State *L, int idx, const char *fname)
{
    lua_client *lc = dlua_self(L, idx, CLIENT_MT, fname);
    if (!lc->c)
        dlua_error(L, "calling '%s' on bad self (client is closed)", fname);
    if (!dl_state_same_process(lc->c))
        dlua_error(L, "calling '%s' on bad self (client was opened by "
                   "another process: create a new one after fork)", fname);
    return lc;
}

lua_client *dlua_client(lua_State *L, int idx, const char *fname)
{
    lua_client *lc = check_open(L, idx, fname);
    if (dl_client_has_news(lc->c) && !lc->dispatching) {
        dlua_dispatch(L, idx);
        check_open(L, idx, fname);      /* a callback may have closed it */
    }
    return lc;
}


/* ---- owners ----------------------------------------------------------- */

static int owner__gc(lua_State *L)
{
    lua_owner *o = lua_touserdata(L, 1);
    if (o->lc && o->lc->c && dl_state_same_process(o->lc->c))
        dl_client_owner_gone(o->lc->c, o->num);
    o->lc = NULL;
    return 0;
}

uint64_t dlua_owner(lua_State *L, int ci)
{
    ci = lua_absindex(L, ci);
    lua_client *lc = lua_touserdata(L, ci);
    lua_getiuservalue(L, ci, UV_OWNERS);        /* owners */
    lua_pushthread(L);                          /* owners, co */
    lua_pushvalue(L, -1);                       /* owners, co, co */
    if (lua_rawget(L, -3) == LUA_TUSERDATA) {   /* owners, co, o */
        uint64_t num = ((lua_owner *)lua_touserdata(L, -1))->num;
        lua_pop(L, 3);
        return num;
    }
    lua_pop(L, 1);                              /* owners, co */
    lua_owner *o = lua_newuserdatauv(L, sizeof *o, 1);
    uint64_t num = dl_client_next_owner(lc->c);
    o->lc = lc;
    o->num = num;
    luaL_setmetatable(L, OWNER_MT);
    lua_pushvalue(L, ci);
    lua_setiuservalue(L, -2, 1);                /* o pins the client */
    lua_rawset(L, -3);                          /* owners */
    lua_pop(L, 1);
    return num;
}

void dlua_warn_once(lua_client *lc, unsigned what, const char *msg)
{
    if (lc->warned & what)
        return;
    lc->warned |= what;
    dl_client_warn(lc->c, msg);
}

/* ---- lost-lock notices ---------------------------------------------- */

/* Call on_lost for n notices. The refs table and on_lost are at refs and
 * fn. Every lock object is taken out of refs before the first callback
 * runs, so a callback may close the client (which drops refs) or call
 * into the library without losing the rest of the batch. Returns how many
 * callbacks ran. */
static int deliver(lua_State *L, int refs, int fn, const dl_event *ev,
                   size_t n)
{
    int ran = 0;
    luaL_checkstack(L, (int)n + 4, "dlock: on_lost notices");
    int base = lua_gettop(L);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, refs, ev[i].ref);                /* ..., lock */
        luaL_unref(L, refs, ev[i].ref);
    }
    for (size_t i = 0; i < n; i++) {
        int lock = base + 1 + (int)i;
        if (!ev[i].reason || lua_isnil(L, lock) || !lua_isfunction(L, fn))
            continue;
        lua_pushvalue(L, fn);
        lua_pushvalue(L, lock);
        lua_pushstring(L, ev[i].reason);
        ran++;
        if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
            lua_warning(L, "dlock: on_lost raised: ", 1);
            lua_warning(L, lua_isstring(L, -1) ? lua_tostring(L, -1)
                                               : "(not a string)", 0);
            lua_pop(L, 1);
        }
    }
    lua_settop(L, base);
    return ran;
}

/* Call the log function at fn with every message queued on *pc. A
 * function that raises is reported (lua_warning), not propagated; one
 * that closes the client (*pc becomes NULL) ends the telling. */
static void tell(lua_State *L, dl_client *const *pc, int fn)
{
    dl_log_msg m[8];
    size_t n;
    while (*pc && (n = dl_client_take_log(*pc, m, 8)) > 0)
        for (size_t i = 0; i < n && lua_isfunction(L, fn); i++) {
            lua_pushvalue(L, fn);
            lua_pushstring(L, dl_log_level(m[i].level));
            if (m[i].repeats)
                lua_pushfstring(L, "%s (%d times)", m[i].text,
                                (int)m[i].repeats + 1);
            else
                lua_pushstring(L, m[i].text);
            if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
                lua_warning(L, "dlock: log raised: ", 1);
                lua_warning(L, lua_isstring(L, -1) ? lua_tostring(L, -1)
                                                   : "(not a string)", 0);
                lua_pop(L, 1);
            }
        }
}

/* Deliver every queued notice of the client at ci; the client may be
 * closed by a callback meanwhile (close then delivers what is left). */
static int drain(lua_State *L, int ci)
{
    lua_client *lc = lua_touserdata(L, ci);
    dl_event ev[16];
    size_t n;
    int ran = 0;
    lua_getiuservalue(L, ci, UV_REFS);
    lua_getiuservalue(L, ci, UV_ONLOST);
    int refs = lua_gettop(L) - 1;
    lua_getiuservalue(L, ci, UV_LOG);
    tell(L, &lc->c, refs + 2);  /* first what happened, then who lost */
    while (lc->c && (n = dl_client_take_events(lc->c, ev, 16)) > 0)
        ran += deliver(L, refs, refs + 1, ev, n);
    tell(L, &lc->c, refs + 2);
    lua_pop(L, 3);
    return ran;
}

int dlua_dispatch(lua_State *L, int ci)
{
    ci = lua_absindex(L, ci);
    lua_client *lc = lua_touserdata(L, ci);
    if (!lc->c || lc->dispatching)
        return 0;
    lc->dispatching = 1;
    int ran = drain(L, ci);
    lc->dispatching = 0;
    return ran;
}

/* ---- Client methods ----------------------------------------------- */

/* Close: the notices still queued are delivered first (a callback that
 * closes the client, or a close at exit, loses none of them). */
static int client_close(lua_State *L)
{
    lua_client *lc = dlua_self(L, 1, CLIENT_MT, "close");
    dl_client *c = lc->c;
    if (!c)
        return 0;
    lua_settop(L, 1);                   /* __close passes an error value */
    int same = dl_state_same_process(c);
    lc->c = NULL;                       /* every call from here on raises */
    lua_getiuservalue(L, 1, UV_REFS);
    lua_getiuservalue(L, 1, UV_ONLOST);
    lua_getiuservalue(L, 1, UV_LOG);
    dl_event ev[16];
    size_t n;
    dl_client *const *pc = same ? &c : &lc->c;   /* lc->c: NULL, none */
    tell(L, pc, 4);
    while (same && (n = dl_client_take_events(c, ev, 16)) > 0)
        deliver(L, 2, 3, ev, n);
    tell(L, pc, 4);
    lua_settop(L, 1);
    dl_client_close(c);
    lua_pushnil(L);
    lua_setiuservalue(L, 1, UV_REFS);
    return 0;
}

static int client_ping(lua_State *L)
{
    lua_client *lc = dlua_client(L, 1, "ping");
    char err[DL_ERRLEN];
    dl_status st = dl_client_ping(lc->c, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- the user's commands (client:call, lock:guard) -------------------- */

void dlua_command_args(lua_State *L, int first, int n, const char *fname,
                       dlua_command *cmd)
{
    if (n < 1)
        dlua_arg_error(L, 1, fname, "a command name expected");
    if (n > 1000000)
        dlua_arg_error(L, 1, fname, "too many arguments");
    cmd->argc = n;
    cmd->argv = lua_newuserdatauv(L, sizeof *cmd->argv * (size_t)n, 0);
    cmd->lens = lua_newuserdatauv(L, sizeof *cmd->lens * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        int t = lua_type(L, first + i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            dlua_arg_error(L, i + 1, fname, lua_pushfstring(L, "string or "
                           "number expected, got %s", luaL_typename(L,
                                                                first + i)));
        /* a number becomes its text in place (the slot keeps it alive) */
        cmd->argv[i] = lua_tolstring(L, first + i, &cmd->lens[i]);
    }
}

/* Push r as Lua values: an integer, a string (a status too), nil for a
 * null (false inside an array, as Redis's own scripts have it), a table
 * for an array. */
static void push_reply(lua_State *L, const redisReply *r, int top)
{
    luaL_checkstack(L, 3, "reply nested too deep");
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        lua_pushinteger(L, (lua_Integer)r->integer);
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        lua_pushlstring(L, r->str, r->len);
        break;
    case REDIS_REPLY_ARRAY:
        lua_createtable(L, r->elements > INT_MAX ? 0 : (int)r->elements, 0);
        for (size_t i = 0; i < r->elements; i++) {
            push_reply(L, r->element[i], 0);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    default:                            /* NIL */
        if (top)
            lua_pushnil(L);
        else
            lua_pushboolean(L, 0);
    }
}

int dlua_push_reply(lua_State *L, dl_status st, redisReply *r,
                    const char *err)
{
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    push_reply(L, r, 1);                /* (raises on no memory alone) */
    freeReplyObject(r);
    return 1;
}

/* client:call(cmd, ...) -> the reply | nil, err */
static int client_call(lua_State *L)
{
    lua_client *lc = dlua_client(L, 1, "call");
    if (dl_client_fans_out(lc->c))
        dlua_error(L, "calling 'call' on a Redlock client (servers = ...): "
                   "there is no one server to send a command to; use a "
                   "client of one server, Sentinel or Cluster");
    dlua_command cmd;
    dlua_command_args(L, 2, lua_gettop(L) - 1, "call", &cmd);
    char err[DL_ERRLEN];
    redisReply *r;
    dl_status st = dl_command_call(lc->c, cmd.argc, cmd.argv, cmd.lens, &r,
                                   err, sizeof err);
    return dlua_push_reply(L, st, r, err);
}

/* Push the table of client:inspect for the dl_inspect at 1. */
static int push_inspect(lua_State *L)
{
    const dl_inspect *in = lua_touserdata(L, 1);
    lua_createtable(L, 0, 4);
    lua_createtable(L, (int)in->nowners, 0);
    for (size_t i = 0; i < in->nowners; i++) {
        const dl_inspect_owner *o = &in->owners[i];
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, (lua_Integer)o->count);
        lua_setfield(L, -2, "count");
        if (o->label) {
            lua_pushstring(L, o->label);
            lua_setfield(L, -2, "label");
        }
        if (o->client[0]) {
            lua_pushstring(L, o->client);
            lua_setfield(L, -2, "client");
        }
        if (!o->coroutine) {
            lua_pushlstring(L, o->owner, o->ownerlen);
            lua_setfield(L, -2, "owner");
        }
        if (o->mode) {
            lua_pushstring(L, o->mode == 'r' ? "read" : "write");
            lua_setfield(L, -2, "mode");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "owners");
    if (in->ttl_ms >= 0) {
        lua_pushnumber(L, (lua_Number)in->ttl_ms / 1000);
        lua_setfield(L, -2, "ttl");
    }
    lua_pushinteger(L, (lua_Integer)in->token);
    lua_setfield(L, -2, "token");
    lua_pushinteger(L, (lua_Integer)in->waiters);
    lua_setfield(L, -2, "waiters");
    return 1;
}

/* client:inspect(name) -> nil (free) | { owners = { { label, count,
 * client, owner, mode }... }, ttl, token, waiters } | nil, err */
static int client_inspect(lua_State *L)
{
    lua_client *lc = dlua_client(L, 1, "inspect");
    size_t len;
    if (lua_type(L, 2) != LUA_TSTRING)
        dlua_arg_error(L, 1, "inspect", lua_pushfstring(L, "lock name (a "
                       "string) expected, got %s", luaL_typename(L, 2)));
    const char *name = lua_tolstring(L, 2, &len);
    if (len == 0)
        dlua_arg_error(L, 1, "inspect", "lock name must not be empty");
    char err[DL_ERRLEN];
    dl_inspect in;
    int held;
    dl_status st = dl_inspect_lock(lc->c, name, len, &held, &in, err,
                                   sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    if (!held) {
        lua_pushnil(L);
        return 1;
    }
    /* The table is built under a pcall: in is freed however it ends. */
    lua_pushcfunction(L, push_inspect);
    lua_pushlightuserdata(L, &in);
    int rc = lua_pcall(L, 1, 1, 0);
    dl_inspect_free(&in);
    if (rc != LUA_OK)
        return lua_error(L);            /* out of memory */
    return 1;
}

static int client_poll(lua_State *L)
{
    check_open(L, 1, "poll");
    lua_pushinteger(L, dlua_dispatch(L, 1));
    return 1;
}

static void set_count(lua_State *L, const char *k, uint64_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static int client_stats(lua_State *L)
{
    lua_client *lc = dlua_client(L, 1, "stats");
    dl_stats s;
    size_t held;
    dl_client_stats(lc->c, &s, &held);
    lua_createtable(L, 0, 12);
    set_count(L, "acquired", s.acquired);
    set_count(L, "released", s.released);
    set_count(L, "renewed", s.renewed);
    set_count(L, "lost", s.lost);
    set_count(L, "waits", s.waits);
    set_count(L, "timeouts", s.timeouts);
    set_count(L, "held", held);
    set_count(L, "renew_batches", s.renew_batches);
    set_count(L, "renew_errors", s.renew_errors);
    set_count(L, "wakeups", s.wakeups);
    set_count(L, "unconfirmed", s.unconfirmed);
    lua_pushboolean(L, dl_client_evictable(lc->c));
    lua_setfield(L, -2, "evictable");
    size_t n;
    char **names = dl_client_held_long(lc->c, &n);
    lua_createtable(L, (int)n, 0);      /* held past warn_hold */
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    free(names);
    lua_setfield(L, -2, "held_long");
    return 1;
}

static int client__index(lua_State *L)
{
    lua_client *lc = luaL_checkudata(L, 1, CLIENT_MT);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return 1;
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "id") == 0
        && lc->c) {
        lua_pushstring(L, dl_client_id(lc->c));
        return 1;
    }
    return 1;
}

static int client__tostring(lua_State *L)
{
    lua_client *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (lc->c)
        lua_pushfstring(L, "dlock.Client: %s", dl_client_id(lc->c));
    else
        lua_pushliteral(L, "dlock.Client: closed");
    return 1;
}

void dlua_client_open(lua_State *L)
{
    static const luaL_Reg client_meta[] = {
        { "__gc", client_close },
        { "__close", client_close },
        { "__tostring", client__tostring },
        { NULL, NULL }
    };
    static const luaL_Reg client_methods[] = {
        { "ping", client_ping },
        { "call", client_call },
        { "inspect", client_inspect },
        { "poll", client_poll },
        { "stats", client_stats },
        { "close", client_close },
        { NULL, NULL }
    };
    static const luaL_Reg owner_meta[] = {
        { "__gc", owner__gc },
        { NULL, NULL }
    };
    dlua_new_class(L, OWNER_MT, owner_meta, NULL);
    dlua_new_class(L, CLIENT_MT, client_meta, client_methods);
    luaL_getmetatable(L, CLIENT_MT);            /* cmt */
    lua_getfield(L, -1, "methods");             /* cmt, methods */
    lua_pushcclosure(L, client__index, 1);      /* cmt, index */
    lua_setfield(L, -2, "__index");
    lua_getfield(L, -1, "methods");             /* cmt, methods */
    lua_remove(L, -2);                          /* methods */
}
