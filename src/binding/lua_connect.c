/* SPDX-License-Identifier: MIT
 * lua_connect.c: dlock.connect: its options, a table of descriptors read
 * by one loop into the core's options (dl_client_opts), each misuse
 * raised with the option's name, and the client they open (client.h).
 */
#define _GNU_SOURCE
#include "binding/lua_connect.h"
#include "binding/lua_client.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN "dlock.connect"
#define OPTS_MT "dlock.ConnectOptions"
#define NONE ((size_t)-1)

/* What connect reads beside the core's options: where the URLs are and
 * the TLS set-up, which become its endpoints. */
typedef struct conn_read {
    dl_client_opts *o;          /* in a userdata on the stack, whose __gc
                                   frees what a raise leaves in it */
    const char *list;           /* the option of the URL list; NULL: one */
    size_t nlist;
    int has_tls;                /* the tls option was given */
    int oom;                    /* a copy failed: connect fails */
    dl_tls_opts tls;            /* borrowed from opts.tls */
} conn_read;

/* How an option's value is read. */
enum { OPT_LEASE, OPT_SECONDS, OPT_COUNT, OPT_STRING, OPT_FUNCTION,
       OPT_BOOLEAN, OPT_URLS, OPT_TLS };

/* One option of connect: its name, how its value is read, what else it
 * must satisfy, and where it goes in the core's options. */
typedef struct conn_opt {
    const char *name;
    int type;                   /* OPT_* */
    /* NULL, or why the value just read (at -1) is refused */
    const char *(*check)(lua_State *L, const conn_read *r);
    size_t field;               /* offsetof in dl_client_opts; NONE */
    size_t aux;                 /* OPT_STRING: its length's offset (or
                                   NONE); OPT_COUNT: the largest value;
                                   OPT_URLS: the topology */
    const char *want;           /* OPT_COUNT, OPT_FUNCTION: what misuse
                                   says is expected */
} conn_opt;

static const char *only_sentinels(lua_State *L, const conn_read *r)
{
    (void)L;
    return r->o->topo == DL_TOPO_SENTINEL ? NULL : "only with 'sentinels'";
}

static const char *has_replicas(lua_State *L, const conn_read *r)
{
    (void)L;
    return r->o->sync_replicas && r->o->topo == DL_TOPO_REDLOCK
               ? "Redlock masters have no replicas to wait for" : NULL;
}

static const char *label_bytes(lua_State *L, const conn_read *r)
{
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    (void)r;
    return n == 0 || n > 200 || strlen(s) != n
               ? "a string of 1 to 200 bytes, no NUL, expected" : NULL;
}

#define AT(f) offsetof(dl_client_opts, f)

/* In the order they are checked: the first misuse raises. */
static const conn_opt OPTS[] = {
    { "servers", OPT_URLS, NULL, NONE, DL_TOPO_REDLOCK, NULL },
    { "sentinels", OPT_URLS, NULL, NONE, DL_TOPO_SENTINEL, NULL },
    { "cluster", OPT_URLS, NULL, NONE, DL_TOPO_CLUSTER, NULL },
    { "master", OPT_STRING, only_sentinels, AT(master), NONE, NULL },
    { "sync_replicas", OPT_COUNT, has_replicas, AT(sync_replicas), 1000,
      "a number of replicas (integer >= 0) expected" },
    { "sync_timeout", OPT_LEASE, NULL, AT(sync_timeout_ms), 0, NULL },
    { "url", OPT_STRING, NULL, NONE, NONE, NULL },  /* parsed last */
    { "prefix", OPT_STRING, NULL, AT(prefix), AT(prefixlen), NULL },
    { "label", OPT_STRING, label_bytes, AT(label), NONE, NULL },
    { "username", OPT_STRING, NULL, AT(tmpl.username), NONE, NULL },
    { "password", OPT_STRING, NULL, AT(tmpl.password), NONE, NULL },
    { "db", OPT_COUNT, NULL, AT(tmpl.db), 1000000,
      "non-negative integer expected" },
    { "lease", OPT_LEASE, NULL, AT(lease_ms), 0, NULL },
    { "max_hold", OPT_LEASE, NULL, AT(max_hold_ms), 0, NULL },
    { "warn_hold", OPT_LEASE, NULL, AT(warn_hold_ms), 0, NULL },
    { "connect_timeout", OPT_SECONDS, NULL, AT(connect_timeout_us), 0, NULL },
    { "command_timeout", OPT_SECONDS, NULL, AT(command_timeout_us), 0, NULL },
    { "on_lost", OPT_FUNCTION, NULL, NONE, 0, "function expected" },
    { "log", OPT_FUNCTION, NULL, AT(log), 0,
      "function(level, message) expected" },
    { "tls", OPT_TLS, NULL, NONE, 0, NULL },
    { "functions", OPT_BOOLEAN, NULL, AT(functions), 0, "boolean expected" },
    /* dlock.lua turns "cqueues", "luv" or a table into its wait function */
    { "scheduler", OPT_FUNCTION, NULL, NONE, 0, "\"cqueues\", \"luv\" or "
      "a table with a wait function expected" },
    { NULL, 0, NULL, 0, 0, NULL }
};

#define FIELD(o, off, type) ((type *)(void *)((char *)(o) + (off)))

/* opts[name] is a non-empty array of URL strings (at -1); returns its
 * length. */
static size_t url_list(lua_State *L, const char *name)
{
    if (!lua_istable(L, -1))
        dlua_opt_error(L, FN, name, "array of URL strings expected");
    size_t n = (size_t)lua_rawlen(L, -1);
    if (n == 0 || n > DL_MAX_NODES)
        dlua_opt_error(L, FN, name, lua_pushfstring(L, "between 1 and %d "
                       "URLs expected", DL_MAX_NODES));
    for (size_t i = 1; i <= n; i++) {
        if (lua_rawgeti(L, -1, (lua_Integer)i) != LUA_TSTRING)
            dlua_opt_error(L, FN, name, "array of URL strings expected");
        lua_pop(L, 1);
    }
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
            dlua_opt_error(L, FN, "tls", lua_pushfstring(L, "unknown field "
                           "'%s'", lua_type(L, -1) == LUA_TSTRING ?
                           lua_tostring(L, -1) : luaL_typename(L, -1)));
    }
    for (int i = 0; keys[i]; i++) {
        lua_pushstring(L, keys[i]);     /* raw: the table anchors it */
        int ty = lua_rawget(L, t);
        if (ty == LUA_TSTRING && lua_rawlen(L, -1) > 0 &&
            strlen(lua_tostring(L, -1)) == lua_rawlen(L, -1))
            *dst[i] = lua_tostring(L, -1);  /* stays in opts.tls */
        else if (ty != LUA_TNIL)
            dlua_opt_error(L, FN, "tls", lua_pushfstring(L, "field '%s': a "
                           "non-empty string expected", keys[i]));
        lua_pop(L, 1);
    }
    lua_pushliteral(L, "verify");
    int ty = lua_rawget(L, t);
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        dlua_opt_error(L, FN, "tls", "field 'verify': a boolean expected");
    o->verify = ty == LUA_TNIL || lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (o->key_file && !o->cert_file)
        dlua_opt_error(L, FN, "tls", "'key_file' without 'cert_file'");
}

/* A copy of the string at -1 into the owned char * at field (and its
 * length at lenfield, unless NONE). */
static void set_string(lua_State *L, conn_read *r, size_t field,
                       size_t lenfield)
{
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    char *copy = malloc(n + 1);
    if (!copy) {
        r->oom = 1;
        return;
    }
    memcpy(copy, s, n + 1);
    char **dst = FIELD(r->o, field, char *);
    free(*dst);
    *dst = copy;
    if (lenfield != NONE)
        *FIELD(r->o, lenfield, size_t) = n;
}

/* Read the value (at -1, not nil) of option p into r, or raise. */
static void read_opt(lua_State *L, const conn_opt *p, conn_read *r)
{
    int ty = lua_type(L, -1);
    lua_Integer i;
    switch (p->type) {
    case OPT_LEASE:
        *FIELD(r->o, p->field, int64_t) = dlua_lease_ms(L, -1, FN, p->name);
        break;
    case OPT_SECONDS:
        *FIELD(r->o, p->field, int64_t) = dlua_seconds_us(L, -1, FN,
                                                          p->name);
        break;
    case OPT_COUNT:
        i = lua_tointeger(L, -1);
        if (!lua_isinteger(L, -1) || i < 0 || (size_t)i > p->aux)
            dlua_opt_error(L, FN, p->name, p->want);
        *FIELD(r->o, p->field, int) = (int)i;
        break;
    case OPT_STRING:
        if (ty != LUA_TSTRING)
            dlua_opt_error(L, FN, p->name, lua_pushfstring(L, "string "
                           "expected, got %s", luaL_typename(L, -1)));
        if (p->field != NONE)
            set_string(L, r, p->field, p->aux);
        break;
    case OPT_BOOLEAN:
        if (ty != LUA_TBOOLEAN)
            dlua_opt_error(L, FN, p->name, p->want);
        *FIELD(r->o, p->field, int) = lua_toboolean(L, -1);
        break;
    case OPT_FUNCTION:
        if (ty != LUA_TFUNCTION)
            dlua_opt_error(L, FN, p->name, p->want);
        if (p->field != NONE)
            *FIELD(r->o, p->field, int) = 1;
        break;
    case OPT_URLS:
        r->o->topo = (dl_topo_kind)p->aux;
        r->list = p->name;
        r->nlist = url_list(L, p->name);
        break;
    default:                            /* OPT_TLS */
        if (ty != LUA_TTABLE)
            dlua_opt_error(L, FN, "tls", lua_pushfstring(L, "table "
                           "expected, got %s", luaL_typename(L, -1)));
        r->has_tls = 1;
        read_tls(L, lua_gettop(L), &r->tls);
    }
}

static int opts__gc(lua_State *L)
{
    dl_state_opts_free(lua_touserdata(L, 1));
    return 0;
}

/* Push the options' userdata (freed by its __gc) at their defaults. */
static void new_opts(lua_State *L, conn_read *r)
{
    memset(r, 0, sizeof *r);
    r->o = lua_newuserdatauv(L, sizeof *r->o, 0);
    memset(r->o, 0, sizeof *r->o);
    if (luaL_newmetatable(L, OPTS_MT)) {
        lua_pushcfunction(L, opts__gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    dl_client_opts *o = r->o;
    o->topo = DL_TOPO_SINGLE;
    o->prefix = strdup("dlock:");
    o->prefixlen = 6;
    r->oom = !o->prefix;
    o->lease_ms = 30000;
    o->connect_timeout_us = o->command_timeout_us = 1000000;
    o->sync_timeout_ms = 1000;
    o->tmpl.db = -1;                    /* none given: the URLs' own */
    o->functions = 1;
    r->tls.verify = 1;
}

/* Check the options at 1 (a URL string, a table, or none) and read them
 * into r, pushing the options' userdata. Everything that can raise on a
 * bad option but a bad URL and the TLS files. */
static void read_args(lua_State *L, conn_read *r)
{
    static const char *const topo[] = { "url", "servers", "sentinels",
                                        "cluster", NULL };
    int t = lua_type(L, 1);
    if (t != LUA_TSTRING && t != LUA_TNIL && t != LUA_TTABLE)
        dlua_arg_error(L, 1, FN, lua_pushfstring(L, "URL string or options "
                       "table expected, got %s", luaL_typename(L, 1)));
    if (t == LUA_TTABLE) {
        dlua_check_keys(L, 1, FN, &OPTS[0].name, sizeof OPTS[0]);
        int ntopo = 0;
        for (int i = 0; topo[i]; i++) {
            ntopo += lua_getfield(L, 1, topo[i]) != LUA_TNIL;
            lua_pop(L, 1);
        }
        if (ntopo > 1)
            dlua_arg_error(L, 1, FN, "give only one of 'url', 'servers', "
                           "'sentinels' and 'cluster'");
    }
    new_opts(L, r);
    for (const conn_opt *p = OPTS; t == LUA_TTABLE && p->name; p++) {
        if (lua_getfield(L, 1, p->name) != LUA_TNIL) {
            read_opt(L, p, r);
            const char *why = p->check ? p->check(L, r) : NULL;
            if (why)
                dlua_opt_error(L, FN, p->name, why);
        }
        lua_pop(L, 1);
    }
    if (r->o->topo == DL_TOPO_SENTINEL && !r->o->master)
        dlua_opt_error(L, FN, "master", "the master's name is needed with "
                       "'sentinels'");
}

/* Copy the top-level username/password/db (in o->tmpl) over ep. Returns
 * -1 when out of memory. */
static int apply_auth(dl_endpoint *ep, const dl_endpoint *auth)
{
    char **dst[] = { &ep->username, &ep->password };
    char *const src[] = { auth->username, auth->password };
    for (int i = 0; i < 2; i++)
        if (src[i]) {
            free(*dst[i]);
            if (!(*dst[i] = strdup(src[i])))
                return -1;
        }
    if (auth->db >= 0)
        ep->db = auth->db;
    return 0;
}

/* The URL of the i-th endpoint: of the list, of opts.url, the argument,
 * or the default. */
static const char *url_of(lua_State *L, const conn_read *r, size_t i,
                          size_t *len)
{
    const char *url = NULL;
    if (r->list) {
        lua_getfield(L, 1, r->list);
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        url = lua_tolstring(L, -1, len);
        lua_pop(L, 2);                  /* still in the list */
    } else if (lua_type(L, 1) == LUA_TSTRING) {
        url = lua_tolstring(L, 1, len);
    } else if (lua_istable(L, 1)) {
        lua_getfield(L, 1, "url");
        url = lua_tolstring(L, -1, len);
        lua_pop(L, 1);                  /* still in opts */
    }
    if (url)
        return url;
    *len = strlen("redis://127.0.0.1:6379/0");
    return "redis://127.0.0.1:6379/0";
}

/* Parse the URLs into the endpoints, give each the top-level auth and
 * make the template of discovered nodes. Returns 0, -1 with err (a bad
 * URL), or DL_URL_OOM. Does not raise. */
static int endpoints(lua_State *L, conn_read *r, char *err, size_t errlen)
{
    dl_client_opts *o = r->o;
    size_t n = r->list ? r->nlist : 1;
    if (!(o->eps = calloc(n, sizeof *o->eps)))
        return DL_URL_OOM;
    for (; o->neps < n; o->neps++) {
        size_t len;
        const char *url = url_of(L, r, o->neps, &len);
        int bad = dl_endpoint_parse(&o->eps[o->neps], url, len, err, errlen);
        if (bad)
            return bad;
        if (o->topo != DL_TOPO_SENTINEL &&
            apply_auth(&o->eps[o->neps], &o->tmpl) != 0) {
            o->neps++;
            return DL_URL_OOM;
        }
    }
    if (o->topo == DL_TOPO_SENTINEL) {          /* the master's auth */
        o->tmpl.port = 6379;
        if (o->tmpl.db < 0)
            o->tmpl.db = 0;
        return 0;
    }
    dl_endpoint_free(&o->tmpl);                 /* now in every endpoint */
    return dl_endpoint_copy(&o->tmpl, &o->eps[0]) != 0 ? DL_URL_OOM : 0;
}

/* Give every rediss:// endpoint (and the template of discovered nodes)
 * one TLS set-up. Returns 0, 1 when TLS is not built in (err says so:
 * a connection failure), or -1 with err (raise it: a bad option). */
static int set_up_tls(const conn_read *r, char *err, size_t errlen)
{
    dl_client_opts *o = r->o;
    size_t ntls = 0;
    for (size_t i = 0; i < o->neps; i++)
        ntls += o->eps[i].tls != 0;
    if (ntls == 0 && !r->has_tls)
        return 0;
    if (ntls == 0) {
        snprintf(err, errlen, "given, but no URL is rediss:// (TLS)");
        return -1;
    }
    if (ntls != o->neps && o->topo != DL_TOPO_REDLOCK) {
        snprintf(err, errlen, "every URL in '%s' must be rediss:// or none",
                 r->list);
        return -1;
    }
    dl_tls_config *cfg = dl_tls_config_new(&r->tls, err, errlen);
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

/* Push a client userdata, not open yet, with its user values. */
static lua_client *new_client(lua_State *L)
{
    lua_client *lc = lua_newuserdatauv(L, sizeof *lc, UV_COUNT);
    lc->c = NULL;
    lc->dispatching = 0;
    lc->warned = 0;
    luaL_setmetatable(L, CLIENT_MT);
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
    return lc;
}

int dlua_connect(lua_State *L)
{
    conn_read r;
    char err[DL_ERRLEN];
    lua_settop(L, 1);
    read_args(L, &r);                   /* the options' userdata at 2 */
    int bad = r.oom ? DL_URL_OOM : endpoints(L, &r, err, sizeof err);
    if (bad == DL_URL_OOM)
        return dlua_fail(L, DL_ECONN, "out of memory");
    if (bad)
        return dlua_opt_error(L, FN, r.list ? r.list : lua_istable(L, 1)
                              ? "url" : "#1", lua_pushfstring(L, "bad URL%s: "
                              "%s", r.list ? " in the list" : "", err));
    int tls = set_up_tls(&r, err, sizeof err);
    if (tls > 0)
        return dlua_fail(L, DL_ECONN, err);
    if (tls < 0)
        return dlua_opt_error(L, FN, "tls", lua_pushfstring(L, "%s", err));
    lua_client *lc = new_client(L);
    dl_client *c;
    dl_status st = dl_client_open(&c, r.o, err, sizeof err);
    if (st != DL_OK)
        return dlua_fail(L, st, err);
    lc->c = c;
    return 1;
}
