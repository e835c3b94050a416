/* SPDX-License-Identifier: MIT
 * lua_dlock.c: the module table and the Client class of the binding.
 * Converts between Lua values and core calls; owns no I/O of its own.
 *
 * A client userdata holds a pointer to its dl_client (NULL once closed)
 * and three user values: on_lost, a table of references to lock objects
 * whose holds the registry keeps (so on_lost can be handed the lock), and
 * a weak-keyed table coroutine -> owner userdata, whose __gc tells the
 * core that a coroutine was collected.
 */
#define _GNU_SOURCE
#include "lua_dlock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DLOCK_VERSION "dlock 1.0.0"

typedef struct lua_owner {
    lua_client *lc;             /* pinned by the owner's user value */
    uint64_t num;
} lua_owner;

int dlua_fail(lua_State *L, dl_status st, const char *detail)
{
    const char *code = dl_strerror(st);
    size_t n = strlen(code);
    luaL_pushfail(L);
    if (!detail || !*detail)
        lua_pushstring(L, code);
    else if (strncmp(detail, code, n) == 0)
        lua_pushstring(L, detail);
    else
        lua_pushfstring(L, "%s: %s", code, detail);
    return 2;
}

/* Raise msg (formatted) with the position of the user's call: frames of
 * the module's Lua half (dlock.lua) are skipped, so the error points at
 * the line that called the public function, as luaL_error would had the
 * user called the C function directly. */
static int throw_error(lua_State *L, const char *fmt, ...)
{
    lua_Debug ar;
    int level = 1;
    for (; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "S", &ar);
        size_t n = strlen(ar.source);
        if (!(n >= 10 && strcmp(ar.source + n - 10, "/dlock.lua") == 0) &&
            strcmp(ar.source, "@dlock.lua") != 0)
            break;
    }
    luaL_where(L, level);
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

int dlua_opt_error(lua_State *L, const char *fname, const char *what,
                   const char *msg)
{
    if (what[0] == '#')
        return throw_error(L, "bad argument %s to '%s' (%s)", what, fname,
                          msg);
    return throw_error(L, "bad option '%s' to '%s' (%s)", what, fname, msg);
}

int dlua_arg_error(lua_State *L, int arg, const char *fname, const char *msg)
{
    return throw_error(L, "bad argument #%d to '%s' (%s)", arg, fname, msg);
}

void *dlua_self(lua_State *L, int idx, const char *mt, const char *fname)
{
    void *p = luaL_testudata(L, idx, mt);
    if (!p)
        throw_error(L, "calling '%s' on bad self (%s expected, got %s)",
                   fname, mt, luaL_typename(L, idx));
    return p;
}

void dlua_new_class(lua_State *L, const char *name, const luaL_Reg *meta,
                    const luaL_Reg *methods)
{
    luaL_newmetatable(L, name);         /* mt */
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);                    /* mt, methods */
    if (methods)
        luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "methods");     /* mt */
    lua_pop(L, 1);
}

/* The open client at idx, without running pending callbacks. */
static lua_client *check_open(lua_State *L, int idx, const char *fname)
{
    lua_client *lc = dlua_self(L, idx, CLIENT_MT, fname);
    if (!lc->c)
        throw_error(L, "calling '%s' on bad self (client is closed)", fname);
    if (!dl_client_same_process(lc->c))
        throw_error(L, "calling '%s' on bad self (client was opened by "
                   "another process: create a new one after fork)", fname);
    return lc;
}

lua_client *dlua_client(lua_State *L, int idx, const char *fname)
{
    lua_client *lc = check_open(L, idx, fname);
    if (__atomic_load_n(&lc->c->pending, __ATOMIC_ACQUIRE) &&
        !lc->dispatching) {
        dlua_dispatch(L, idx);
        check_open(L, idx, fname);      /* a callback may have closed it */
    }
    return lc;
}

/* ---- durations ------------------------------------------------------ */

static double check_seconds(lua_State *L, int idx, const char *fname,
                            const char *what)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        dlua_opt_error(L, fname, what, lua_pushfstring(L,
                       "number of seconds expected, got %s",
                       luaL_typename(L, idx)));
    double s = lua_tonumber(L, idx);
    if (s != s)
        dlua_opt_error(L, fname, what, "NaN is not a duration");
    if (s < 0)
        dlua_opt_error(L, fname, what, "negative duration");
    return s;
}

int64_t dlua_wait_us(lua_State *L, int idx, const char *fname,
                     const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s * 1e6 >= 9e15)                /* math.huge, or ~285 years */
        return -1;
    return (int64_t)ceil(s * 1e6);
}

int64_t dlua_lease_ms(lua_State *L, int idx, const char *fname,
                      const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s == 0)
        dlua_opt_error(L, fname, what, "a lease must be positive");
    if (!(s * 1e3 <= (double)DL_MAX_LEASE_MS))
        dlua_opt_error(L, fname, what, "lease too large");
    return (int64_t)ceil(s * 1e3);
}

int64_t dlua_seconds_us(lua_State *L, int idx, const char *fname,
                        const char *what)
{
    double s = check_seconds(L, idx, fname, what);
    if (s == 0)
        dlua_opt_error(L, fname, what, "must be positive");
    if (!(s <= 86400.0 * 365))
        dlua_opt_error(L, fname, what, "too large");
    return (int64_t)ceil(s * 1e6);
}

/* ---- owners ----------------------------------------------------------- */

static int owner__gc(lua_State *L)
{
    lua_owner *o = lua_touserdata(L, 1);
    if (o->lc && o->lc->c && dl_client_same_process(o->lc->c))
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
    o->lc = lc;
    o->num = ++lc->c->next_owner;               /* never reused */
    luaL_setmetatable(L, OWNER_MT);
    lua_pushvalue(L, ci);
    lua_setiuservalue(L, -2, 1);                /* o pins the client */
    lua_rawset(L, -3);                          /* owners */
    lua_pop(L, 1);
    return lc->c->next_owner;
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
    while (lc->c && (n = dl_client_take_events(lc->c, ev, 16)) > 0)
        ran += deliver(L, refs, refs + 1, ev, n);
    lua_pop(L, 2);
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

/* ---- connect -------------------------------------------------------- */

static const char *const CONNECT_KEYS[] = {
    "url", "servers", "sentinels", "master", "cluster", "prefix", "lease",
    "connect_timeout", "command_timeout", "username", "password", "db",
    "on_lost", "max_hold", "sync_replicas", "sync_timeout", "scheduler",
    NULL
};

void dlua_check_keys(lua_State *L, int t, const char *fname,
                     const char *const *keys)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (int i = 0; keys[i] && !known; i++)
                known = strcmp(lua_tostring(L, -1), keys[i]) == 0;
        if (!known) {
            const char *k = lua_type(L, -1) == LUA_TSTRING
                                ? lua_tostring(L, -1)
                                : luaL_typename(L, -1);
            dlua_opt_error(L, fname, k, "unknown option");
        }
    }
}

/* opts[name] as a string, or NULL when absent; raises on another type. */
static const char *opt_string(lua_State *L, int t, const char *name,
                              size_t *len)
{
    int ty = lua_getfield(L, t, name);
    const char *s = NULL;
    if (ty == LUA_TSTRING)
        s = lua_tolstring(L, -1, len);
    else if (ty != LUA_TNIL)
        dlua_opt_error(L, "dlock.connect", name, lua_pushfstring(L,
                       "string expected, got %s", luaL_typename(L, -1)));
    lua_pop(L, 1);                      /* the string stays in opts */
    return s;
}

static int opt_present(lua_State *L, int t, const char *name)
{
    int present = lua_getfield(L, t, name) != LUA_TNIL;
    lua_pop(L, 1);
    return present;
}

static char *dup_str(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Everything that can raise, before anything is allocated: fills o with
 * borrowed strings and numbers. */
typedef struct conn_args {
    const char *url, *prefix, *username, *password, *master;
    size_t urllen, prefixlen;
    int64_t lease_ms, max_hold_ms, connect_us, command_us, sync_ms;
    int db;                             /* -1: from the URL */
    int sync_replicas;
    dl_topo_kind topo;
    const char *list;                   /* option naming the URL list */
    size_t nlist;
} conn_args;

/* opts[name] is a non-empty array of URL strings; returns its length. */
static size_t url_list(lua_State *L, const char *name)
{
    lua_getfield(L, 1, name);
    if (!lua_istable(L, -1))
        dlua_opt_error(L, "dlock.connect", name, "array of URL strings expected");
    size_t n = (size_t)lua_rawlen(L, -1);
    if (n == 0 || n > DL_MAX_NODES)
        dlua_opt_error(L, "dlock.connect", name, lua_pushfstring(L,
                       "between 1 and %d URLs expected", DL_MAX_NODES));
    for (size_t i = 1; i <= n; i++) {
        if (lua_rawgeti(L, -1, (lua_Integer)i) != LUA_TSTRING)
            dlua_opt_error(L, "dlock.connect", name, "array of URL strings "
                           "expected");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

static void read_args(lua_State *L, conn_args *a)
{
    memset(a, 0, sizeof *a);
    a->url = "redis://127.0.0.1:6379/0";
    a->urllen = strlen(a->url);
    a->prefix = "dlock:";
    a->prefixlen = 6;
    a->lease_ms = 30000;
    a->connect_us = a->command_us = 1000000;
    a->db = -1;
    a->topo = DL_TOPO_SINGLE;
    a->sync_ms = 1000;
    if (lua_type(L, 1) == LUA_TSTRING) {
        a->url = lua_tolstring(L, 1, &a->urllen);
        return;
    }
    if (lua_isnoneornil(L, 1))          /* every default */
        return;
    if (!lua_istable(L, 1))
        dlua_arg_error(L, 1, "dlock.connect", lua_pushfstring(L, "URL string "
                       "or options table expected, got %s",
                       luaL_typename(L, 1)));
    dlua_check_keys(L, 1, "dlock.connect", CONNECT_KEYS);
    static const char *const topo[] = { "url", "servers", "sentinels",
                                        "cluster", NULL };
    int ntopo = 0;
    for (int i = 0; topo[i]; i++)
        ntopo += opt_present(L, 1, topo[i]);
    if (ntopo > 1)
        dlua_arg_error(L, 1, "dlock.connect", "give only one of 'url', "
                       "'servers', 'sentinels' and 'cluster'");
    static const dl_topo_kind kinds[] = { DL_TOPO_SINGLE, DL_TOPO_REDLOCK,
                                          DL_TOPO_SENTINEL, DL_TOPO_CLUSTER };
    for (int i = 1; topo[i]; i++)
        if (opt_present(L, 1, topo[i])) {
            a->topo = kinds[i];
            a->list = topo[i];
            a->nlist = url_list(L, topo[i]);
        }
    size_t n0;
    a->master = opt_string(L, 1, "master", &n0);
    if (a->master && a->topo != DL_TOPO_SENTINEL)
        dlua_opt_error(L, "dlock.connect", "master", "only with 'sentinels'");
    if (!a->master && a->topo == DL_TOPO_SENTINEL)
        dlua_opt_error(L, "dlock.connect", "master", "the master's name is "
                       "needed with 'sentinels'");
    if (lua_getfield(L, 1, "sync_replicas") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 ||
            lua_tointeger(L, -1) > 1000)
            dlua_opt_error(L, "dlock.connect", "sync_replicas", "a number of "
                           "replicas (integer >= 0) expected");
        a->sync_replicas = (int)lua_tointeger(L, -1);
        if (a->sync_replicas && a->topo == DL_TOPO_REDLOCK)
            dlua_opt_error(L, "dlock.connect", "sync_replicas", "Redlock masters "
                           "have no replicas to wait for");
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "sync_timeout") != LUA_TNIL)
        a->sync_ms = dlua_lease_ms(L, -1, "dlock.connect", "sync_timeout");
    lua_pop(L, 1);
    const char *s;
    size_t n;
    if ((s = opt_string(L, 1, "url", &n))) {
        a->url = s;
        a->urllen = n;
    }
    if ((s = opt_string(L, 1, "prefix", &n))) {
        a->prefix = s;
        a->prefixlen = n;
    }
    a->username = opt_string(L, 1, "username", &n);
    a->password = opt_string(L, 1, "password", &n);
    if (lua_getfield(L, 1, "db") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0 ||
            lua_tointeger(L, -1) > 1000000)
            dlua_opt_error(L, "dlock.connect", "db", "non-negative integer "
                           "expected");
        a->db = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "lease") != LUA_TNIL)
        a->lease_ms = dlua_lease_ms(L, -1, "dlock.connect", "lease");
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "max_hold") != LUA_TNIL)
        a->max_hold_ms = dlua_lease_ms(L, -1, "dlock.connect", "max_hold");
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "connect_timeout") != LUA_TNIL)
        a->connect_us = dlua_seconds_us(L, -1, "dlock.connect", "connect_timeout");
    lua_pop(L, 1);
    if (lua_getfield(L, 1, "command_timeout") != LUA_TNIL)
        a->command_us = dlua_seconds_us(L, -1, "dlock.connect", "command_timeout");
    lua_pop(L, 1);
    int ty = lua_getfield(L, 1, "on_lost");
    if (ty != LUA_TNIL && ty != LUA_TFUNCTION)
        dlua_opt_error(L, "dlock.connect", "on_lost", "function expected");
    lua_pop(L, 1);
    /* dlock.lua turns "cqueues", "luv" or a table into its wait function */
    ty = lua_getfield(L, 1, "scheduler");
    if (ty != LUA_TNIL && ty != LUA_TFUNCTION)
        dlua_opt_error(L, "dlock.connect", "scheduler", "\"cqueues\", "
                       "\"luv\" or a table with a wait function expected");
    lua_pop(L, 1);
}

/* Apply the top-level username/password/db over ep. Returns -1 when out
 * of memory. */
static int apply_auth(dl_endpoint *ep, const conn_args *a)
{
    if (a->username) {
        free(ep->username);
        if (!(ep->username = dup_str(a->username)))
            return -1;
    }
    if (a->password) {
        free(ep->password);
        if (!(ep->password = dup_str(a->password)))
            return -1;
    }
    if (a->db >= 0)
        ep->db = a->db;
    return 0;
}

/* Parse the URLs of the connection into *eps (neps of them). Returns 0,
 * or -1 with err and nothing allocated. Does not raise. */
static int parse_urls(lua_State *L, const conn_args *a, dl_endpoint **eps,
                      size_t *neps, char *err, size_t errlen)
{
    size_t n = a->list ? a->nlist : 1;
    dl_endpoint *v = calloc(n, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (a->list)
        lua_getfield(L, 1, a->list);            /* list */
    for (size_t i = 0; i < n; i++) {
        size_t len = a->urllen;
        const char *url = a->url;
        if (a->list) {
            lua_rawgeti(L, -1, (lua_Integer)i + 1);
            url = lua_tolstring(L, -1, &len);
            lua_pop(L, 1);                      /* still in the list */
        }
        char e[DL_ERRLEN];
        int bad = dl_endpoint_parse(&v[i], url, len, e, sizeof e) != 0;
        if (bad)
            snprintf(err, errlen, "%s", e);
        else if (a->topo != DL_TOPO_SENTINEL && apply_auth(&v[i], a) != 0) {
            snprintf(err, errlen, "out of memory");
            bad = 1;
        }
        if (bad) {
            for (size_t k = 0; k <= i; k++)
                dl_endpoint_free(&v[k]);
            free(v);
            if (a->list)
                lua_pop(L, 1);
            return -1;
        }
    }
    if (a->list)
        lua_pop(L, 1);
    *eps = v;
    *neps = n;
    return 0;
}

static int module_connect(lua_State *L)
{
    conn_args a;
    char err[DL_ERRLEN];
    read_args(L, &a);
    dl_client_opts o;
    memset(&o, 0, sizeof o);
    if (parse_urls(L, &a, &o.eps, &o.neps, err, sizeof err) != 0)
        return dlua_opt_error(L, "dlock.connect", a.list ? a.list :
                              lua_istable(L, 1) ? "url" : "#1",
                              lua_pushfstring(L, "bad URL%s: %s",
                                              a.list ? " in the list" : "",
                                              err));

    /* From here on nothing raises until the client is anchored. */
    lua_client *lc = lua_newuserdatauv(L, sizeof *lc, UV_COUNT);
    lc->c = NULL;
    lc->dispatching = 0;
    luaL_setmetatable(L, CLIENT_MT);
    o.topo = a.topo;
    int oom = 0;
    if (a.topo == DL_TOPO_SENTINEL) {           /* the master's auth */
        o.tmpl.port = 6379;
        oom = apply_auth(&o.tmpl, &a) != 0 || !(o.master = dup_str(a.master));
    } else {
        oom = dl_endpoint_copy(&o.tmpl, &o.eps[0]) != 0;
    }
    o.prefix = malloc(a.prefixlen + 1);
    if (o.prefix) {
        memcpy(o.prefix, a.prefix, a.prefixlen);
        o.prefix[a.prefixlen] = '\0';
    }
    o.prefixlen = a.prefixlen;
    o.lease_ms = a.lease_ms;
    o.max_hold_ms = a.max_hold_ms;
    o.connect_timeout_us = a.connect_us;
    o.command_timeout_us = a.command_us;
    o.sync_replicas = a.sync_replicas;
    o.sync_timeout_ms = a.sync_ms;
    if (oom || !o.prefix) {
        dl_client_opts_free(&o);
        return dlua_fail(L, DL_ECONN, "out of memory");
    }
    dl_client *c;
    dl_status st = dl_client_open(&c, &o, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lc->c = c;
    if (lua_istable(L, 1)) {
        lua_getfield(L, 1, "on_lost");
        lua_setiuservalue(L, -2, UV_ONLOST);
        lua_getfield(L, 1, "scheduler");
        lua_setiuservalue(L, -2, UV_SCHED);
    }
    lua_newtable(L);
    lua_setiuservalue(L, -2, UV_REFS);
    lua_newtable(L);                    /* owners, weak keys */
    lua_newtable(L);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setiuservalue(L, -2, UV_OWNERS);
    return 1;
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
    int same = dl_client_same_process(c);
    lc->c = NULL;                       /* every call from here on raises */
    lua_getiuservalue(L, 1, UV_REFS);
    lua_getiuservalue(L, 1, UV_ONLOST);
    dl_event ev[16];
    size_t n;
    while (same && (n = dl_client_take_events(c, ev, 16)) > 0)
        deliver(L, 2, 3, ev, n);
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
        lua_pushstring(L, lc->c->id);
        return 1;
    }
    return 1;
}

static int client__tostring(lua_State *L)
{
    lua_client *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (lc->c)
        lua_pushfstring(L, "dlock.Client: %s", lc->c->id);
    else
        lua_pushliteral(L, "dlock.Client: closed");
    return 1;
}

/* ---- module helpers for tests, examples and benchmarks ------------- */

/* dlock.core.parse_url(url) -> { host, port, path, db, username,
 * password } or nil, err. No I/O: lets tests probe the parser. */
static int module_parse_url(lua_State *L)
{
    size_t len;
    const char *url = luaL_checklstring(L, 1, &len);
    char err[DL_ERRLEN];
    dl_endpoint ep;
    if (dl_endpoint_parse(&ep, url, len, err, sizeof err) != 0) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_createtable(L, 0, 6);
    const char *names[4] = { "host", "path", "username", "password" };
    const char *vals[4] = { ep.host, ep.path, ep.username, ep.password };
    for (int i = 0; i < 4; i++)
        if (vals[i]) {
            lua_pushstring(L, vals[i]);
            lua_setfield(L, -2, names[i]);
        }
    if (ep.host) {
        lua_pushinteger(L, ep.port);
        lua_setfield(L, -2, "port");
    }
    lua_pushinteger(L, ep.db);
    lua_setfield(L, -2, "db");
    dl_endpoint_free(&ep);
    return 1;
}

/* dlock.core.scripts() -> { acquire = source, release = ..., ... }: the
 * Redis-side scripts, so tests can drive them step by step. */
static int module_scripts(lua_State *L)
{
    lua_createtable(L, 0, DL_S_COUNT);
    for (int i = 0; i < DL_S_COUNT; i++) {
        const char *name;
        lua_pushstring(L, dl_script_source((dl_script_id)i, &name));
        lua_setfield(L, -2, name);
    }
    return 1;
}

/* dlock.core.key_slot(key) -> the Cluster hash slot of key (tests). */
static int module_key_slot(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    lua_pushinteger(L, (lua_Integer)dl_key_slot(key, len));
    return 1;
}

/* dlock.core.slot_tag(slot) -> the hash tag dlock uses for slot's
 * fencing counter (tests). */
static int module_slot_tag(lua_State *L)
{
    char buf[16];
    lua_Integer slot = luaL_checkinteger(L, 1);
    luaL_argcheck(L, slot >= 0 && slot < DL_SLOTS, 1, "slot in [0, 16383]");
    dl_slot_tag((unsigned)slot, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

/* dlock.core.jitter() -> a Redlock retry nap in microseconds (tests). */
static int module_jitter(lua_State *L)
{
    lua_pushinteger(L, 1000 + (lua_Integer)(dl_random_u32() % 10000));
    return 1;
}

static int module_now(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)dl_now_us() / 1e6);
    return 1;
}

static int module_sleep(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TNUMBER)
        dlua_arg_error(L, 1, "dlock.sleep", lua_pushfstring(L, "number of "
                       "seconds expected, got %s", luaL_typename(L, 1)));
    double s = lua_tonumber(L, 1);
    if (!(s >= 0 && s <= 86400))
        dlua_arg_error(L, 1, "dlock.sleep", "seconds from 0 to 86400 "
                       "expected");
    dl_wait_fds(NULL, 0, dl_now_us() + (int64_t)(s * 1e6));
    return 0;
}

int luaopen_dlock_core(lua_State *L);

__attribute__((visibility("default")))
int luaopen_dlock_core(lua_State *L)
{
    static const luaL_Reg client_meta[] = {
        { "__gc", client_close },
        { "__close", client_close },
        { "__tostring", client__tostring },
        { NULL, NULL }
    };
    static const luaL_Reg client_methods[] = {
        { "lock", dlua_lock_new },
        { "ping", client_ping },
        { "poll", client_poll },
        { "stats", client_stats },
        { "close", client_close },
        { NULL, NULL }
    };
    static const luaL_Reg owner_meta[] = {
        { "__gc", owner__gc },
        { NULL, NULL }
    };
    static const luaL_Reg funcs[] = {
        { "connect", module_connect },
        { "now", module_now },
        { "jitter", module_jitter },
        { "key_slot", module_key_slot },
        { "parse_url", module_parse_url },
        { "scripts", module_scripts },
        { "slot_tag", module_slot_tag },
        { "sleep", module_sleep },
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

    luaL_newlib(L, funcs);                      /* methods, M */
    lua_insert(L, -2);                          /* M, methods */
    lua_setfield(L, -2, "Client");              /* M */
    dlua_lock_open(L);                          /* M, lock methods */
    lua_setfield(L, -2, "Lock");
    lua_pushliteral(L, DLOCK_VERSION);
    lua_setfield(L, -2, "_VERSION");
    return 1;
}
