/* SPDX-License-Identifier: MIT
 * lua_connect.c: dlock.connect: its options, checked and turned into a
 * client (client.h), each misuse raised with the option's name.
 */
#define _GNU_SOURCE
#include "binding/lua_connect.h"
#include "binding/lua_client.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- connect -------------------------------------------------------- */

static const char *const CONNECT_KEYS[] = {
    "url", "servers", "sentinels", "master", "cluster", "prefix", "lease",
    "connect_timeout", "command_timeout", "username", "password", "db",
    "on_lost", "max_hold", "warn_hold", "sync_replicas", "sync_timeout", "scheduler",
    "tls", "label", "log", NULL
};

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
    const char *url, *prefix, *username, *password, *master, *label;
    size_t urllen, prefixlen, labellen;
    int64_t lease_ms, max_hold_ms, warn_hold_ms, connect_us, command_us;
    int64_t sync_ms;
    int db;                             /* -1: from the URL */
    int sync_replicas;
    dl_topo_kind topo;
    const char *list;                   /* option naming the URL list */
    size_t nlist;
    int has_tls;                        /* the tls option was given */
    int log;                            /* a log function was given */
    dl_tls_opts tls;
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

/* opts.tls at index t: { ca_file, ca_dir, cert_file, key_file,
 * server_name, verify }. */
static void read_tls(lua_State *L, int t, dl_tls_opts *o)
{
    static const char *const keys[] = { "ca_file", "ca_dir", "cert_file",
                                        "key_file", "server_name", NULL };
    const char **dst[] = { &o->ca_file, &o->ca_dir, &o->cert_file,
                           &o->key_file, &o->server_name };
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = lua_type(L, -1) == LUA_TSTRING &&
                    strcmp(lua_tostring(L, -1), "verify") == 0;
        for (int i = 0; keys[i] && !known; i++)
            known = lua_type(L, -1) == LUA_TSTRING &&
                    strcmp(lua_tostring(L, -1), keys[i]) == 0;
        if (!known)
            dlua_opt_error(L, "dlock.connect", "tls", lua_pushfstring(L,
                           "unknown field '%s'", lua_type(L, -1) ==
                           LUA_TSTRING ? lua_tostring(L, -1) :
                           luaL_typename(L, -1)));
    }
    for (int i = 0; keys[i]; i++) {
        lua_pushstring(L, keys[i]);     /* raw: the table anchors it */
        int ty = lua_rawget(L, t);
        if (ty == LUA_TSTRING && lua_rawlen(L, -1) > 0 &&
            strlen(lua_tostring(L, -1)) == lua_rawlen(L, -1))
            *dst[i] = lua_tostring(L, -1);  /* stays in opts.tls */
        else if (ty != LUA_TNIL)
            dlua_opt_error(L, "dlock.connect", "tls", lua_pushfstring(L,
                           "field '%s': a non-empty string expected",
                           keys[i]));
        lua_pop(L, 1);
    }
    lua_pushliteral(L, "verify");
    int ty = lua_rawget(L, t);
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        dlua_opt_error(L, "dlock.connect", "tls", "field 'verify': a "
                       "boolean expected");
    o->verify = ty == LUA_TNIL || lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (o->key_file && !o->cert_file)
        dlua_opt_error(L, "dlock.connect", "tls", "'key_file' without "
                       "'cert_file'");
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
    a->tls.verify = 1;
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
    a->label = opt_string(L, 1, "label", &a->labellen);
    if (a->label && (a->labellen == 0 || a->labellen > 200 ||
                     strlen(a->label) != a->labellen))
        dlua_opt_error(L, "dlock.connect", "label", "a string of 1 to 200 "
                       "bytes, no NUL, expected");
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
    if (lua_getfield(L, 1, "warn_hold") != LUA_TNIL)
        a->warn_hold_ms = dlua_lease_ms(L, -1, "dlock.connect", "warn_hold");
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
    ty = lua_getfield(L, 1, "log");
    if (ty != LUA_TNIL && ty != LUA_TFUNCTION)
        dlua_opt_error(L, "dlock.connect", "log", "function(level, message) "
                       "expected");
    a->log = ty == LUA_TFUNCTION;
    lua_pop(L, 1);
    lua_pushliteral(L, "tls");          /* raw: opts anchors the table */
    ty = lua_rawget(L, 1);
    if (ty != LUA_TNIL && ty != LUA_TTABLE)
        dlua_opt_error(L, "dlock.connect", "tls", lua_pushfstring(L,
                       "table expected, got %s", luaL_typename(L, -1)));
    if (ty == LUA_TTABLE) {
        a->has_tls = 1;
        read_tls(L, lua_gettop(L), &a->tls);
    }
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
 * -1 with err (a bad URL), or DL_URL_OOM; nothing is allocated then.
 * Does not raise. */
static int parse_urls(lua_State *L, const conn_args *a, dl_endpoint **eps,
                      size_t *neps, char *err, size_t errlen)
{
    size_t n = a->list ? a->nlist : 1;
    dl_endpoint *v = calloc(n, sizeof *v);
    if (!v)
        return DL_URL_OOM;
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
        int bad = dl_endpoint_parse(&v[i], url, len, err, errlen);
        if (!bad && a->topo != DL_TOPO_SENTINEL && apply_auth(&v[i], a) != 0)
            bad = DL_URL_OOM;
        if (bad) {
            for (size_t k = 0; k <= i; k++)
                dl_endpoint_free(&v[k]);
            free(v);
            if (a->list)
                lua_pop(L, 1);
            return bad;
        }
    }
    if (a->list)
        lua_pop(L, 1);
    *eps = v;
    *neps = n;
    return 0;
}

/* Give every rediss:// endpoint (and the template of discovered nodes)
 * one TLS set-up. Returns 0, 1 when TLS is not built in (err says so:
 * a connection failure), or -1 with err (raise it: a bad option). */
static int set_up_tls(const conn_args *a, dl_client_opts *o, char *err,
                      size_t errlen)
{
    size_t ntls = 0;
    for (size_t i = 0; i < o->neps; i++)
        ntls += o->eps[i].tls != 0;
    if (ntls == 0 && !a->has_tls)
        return 0;
    if (ntls == 0) {
        snprintf(err, errlen, "given, but no URL is rediss:// (TLS)");
        return -1;
    }
    if (ntls != o->neps && a->topo != DL_TOPO_REDLOCK) {
        snprintf(err, errlen, "every URL in '%s' must be rediss:// or none",
                 a->list);
        return -1;
    }
    dl_tls_config *cfg = dl_tls_config_new(&a->tls, err, errlen);
    if (!cfg)
        return dl_tls_built() ? -1 : 1;
    for (size_t i = 0; i < o->neps; i++)
        if (o->eps[i].tls)
            o->eps[i].tlscfg = dl_tls_config_ref(cfg);
    o->tmpl.tls = o->eps[0].tls;            /* discovered nodes: like it */
    dl_tls_config_unref(o->tmpl.tlscfg);
    o->tmpl.tlscfg = o->tmpl.tls ? dl_tls_config_ref(cfg) : NULL;
    dl_tls_config_unref(cfg);
    return 0;
}

int dlua_connect(lua_State *L)
{
    conn_args a;
    char err[DL_ERRLEN];
    read_args(L, &a);
    dl_client_opts o;
    memset(&o, 0, sizeof o);
    int bad = parse_urls(L, &a, &o.eps, &o.neps, err, sizeof err);
    if (bad == DL_URL_OOM)
        return dlua_fail(L, DL_ECONN, "out of memory");
    if (bad)
        return dlua_opt_error(L, "dlock.connect", a.list ? a.list :
                              lua_istable(L, 1) ? "url" : "#1",
                              lua_pushfstring(L, "bad URL%s: %s",
                                              a.list ? " in the list" : "",
                                              err));

    /* From here on nothing raises until the client is anchored (but a bad
     * tls option, once what it made is freed: lc->c is NULL then). */
    lua_client *lc = lua_newuserdatauv(L, sizeof *lc, UV_COUNT);
    lc->c = NULL;
    lc->dispatching = 0;
    lc->warned = 0;
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
    o.warn_hold_ms = a.warn_hold_ms;
    o.connect_timeout_us = a.connect_us;
    o.command_timeout_us = a.command_us;
    o.sync_replicas = a.sync_replicas;
    o.sync_timeout_ms = a.sync_ms;
    if (a.label && !(o.label = dup_str(a.label)))
        oom = 1;
    o.log = a.log;
    if (oom || !o.prefix) {
        dl_client_opts_free(&o);
        return dlua_fail(L, DL_ECONN, "out of memory");
    }
    int tls = set_up_tls(&a, &o, err, sizeof err);
    if (tls != 0) {
        dl_client_opts_free(&o);
        if (tls > 0)
            return dlua_fail(L, DL_ECONN, err);
        return dlua_opt_error(L, "dlock.connect", "tls",
                              lua_pushfstring(L, "%s", err));
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
        lua_getfield(L, 1, "log");
        lua_setiuservalue(L, -2, UV_LOG);
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

