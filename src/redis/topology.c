/* SPDX-License-Identifier: MIT
 * topology.c: nodes, routing and fan-out.
 *
 * DESIGN. Every topology is a list of nodes; what differs is which nodes
 * an operation goes to. One server and Sentinel use node 0 (Sentinel
 * re-resolves node 0's address through a resolver hook on each of its
 * connections, so the Lua thread and the watchdog follow a failover on
 * their own). Redlock sends every operation to all nodes at once and
 * counts answers against a quorum. Cluster routes each lock by the CRC16
 * slot of its hash tag through a slot map learnt from CLUSTER SLOTS and
 * corrected by MOVED; ASK is followed for one command without touching
 * the map. Nodes are only ever added (under the client's mutex, by
 * either thread, without I/O) and freed at close, so a node pointer read
 * under the mutex stays valid.
 */
#define _GNU_SOURCE
#include "redis/topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nodes ------------------------------------------------------------ */

static void free_node(dl_node *n)
{
    if (!n)
        return;
    dl_conn_free(&n->cmd);
    dl_waiter_free(&n->sub);
    dl_conn_free(&n->wd);
    dl_endpoint_free(&n->ep);
    free(n);
}

/* Where n's connections tell their ups and downs, and as what. */
static void name_conns(dl_topology *t, dl_node *n)
{
    dl_conn_tell(&n->cmd, t->log, "command");
    dl_conn_tell(&n->sub.conn, t->log, "subscriber");
    dl_conn_tell(&n->wd, t->log, "watchdog");
}

/* A Cluster node's resolver: the address its entry has now. */
static int node_resolve(void *ud, dl_endpoint *out, char *err, size_t errlen)
{
    dl_node *n = ud;
    pthread_mutex_lock(n->topo->mu);
    int bad = dl_endpoint_copy(out, &n->ep);
    pthread_mutex_unlock(n->topo->mu);
    if (bad)
        dl_oom(err, errlen);
    return bad ? -1 : 0;
}

/* A node for ep (copied), its connections not yet open. */
static dl_node *new_node(dl_topology *t, const dl_endpoint *ep)
{
    dl_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    int bad = dl_endpoint_copy(&n->ep, ep);
    bad |= dl_conn_init(&n->cmd, ep, t->connect_timeout_us,
                        t->command_timeout_us);
    bad |= dl_waiter_init(&n->sub, ep, t->connect_timeout_us,
                          t->kind == DL_TOPO_CLUSTER);
    bad |= dl_conn_init(&n->wd, ep, t->wd_timeout_us < t->connect_timeout_us
                                        ? t->wd_timeout_us
                                        : t->connect_timeout_us,
                        t->wd_timeout_us);
    if (bad) {
        free_node(n);
        return NULL;
    }
    name_conns(t, n);
    dl_conn *cs[3] = { &n->cmd, &n->sub.conn, &n->wd };
    if (t->kind == DL_TOPO_SENTINEL)
        for (int i = 0; i < 3; i++)
            dl_conn_follow(cs[i], &t->resolver, NULL, 1);
    if (t->kind == DL_TOPO_CLUSTER) {
        n->topo = t;
        n->resolver.resolve = node_resolve;
        n->resolver.ud = n;
        n->named = 1;
        for (int i = 0; i < 3; i++)
            dl_conn_follow(cs[i], &n->resolver, &n->moved, 0);
    }
    return n;
}

/* The index of the node at host:port, or DL_NO_NODE. Expects t->mu. */
static size_t find_node(const dl_topology *t, const char *host, int port)
{
    for (size_t i = 0; i < t->nnodes; i++) {
        const dl_endpoint *ep = &t->nodes[i]->ep;
        if (ep->port == port && ep->host && strcmp(ep->host, host) == 0)
            return i;
    }
    return DL_NO_NODE;
}

size_t dl_topology_node_at(dl_topology *t, const char *host, int port)
{
    size_t found = find_node(t, host, port);
    if (found != DL_NO_NODE)
        return found;
    size_t reuse = DL_NO_NODE;
    for (size_t i = t->nseeds; t->nnodes == DL_MAX_NODES &&
                               reuse == DL_NO_NODE && i < t->nnodes; i++)
        if (!t->nodes[i]->named)
            reuse = i;
    if (t->nnodes == DL_MAX_NODES && reuse == DL_NO_NODE)
        return DL_NO_NODE;
    dl_endpoint ep;
    if (dl_endpoint_copy(&ep, &t->tmpl) != 0)
        return DL_NO_NODE;
    free(ep.host);
    free(ep.path);
    ep.path = NULL;
    ep.host = strdup(host);
    ep.port = port;
    if (reuse != DL_NO_NODE && ep.host) {
        /* The entry of a node the cluster no longer names: each of its
         * connections, on its own thread, is dropped and reconnects here
         * the next time it is used (when nothing is queued on it). No
         * slot maps to it: the map that stopped naming it took its slots
         * away before any entry was given anew. */
        dl_node *n = t->nodes[reuse];
        dl_endpoint_free(&n->ep);       /* host may have pointed into it */
        n->ep = ep;
        n->named = 1;
        __atomic_add_fetch(&n->moved, 1, __ATOMIC_RELEASE);
        dl_log_say(t->log, DL_LOG_INFO, "cluster: node entry %zu now "
                   "%s:%d", reuse, n->ep.host, n->ep.port);
        return reuse;
    }
    dl_node *n = ep.host ? new_node(t, &ep) : NULL;
    dl_endpoint_free(&ep);
    if (!n)
        return DL_NO_NODE;
    t->nodes[t->nnodes] = n;
    return t->nnodes++;
}

/* ---- Sentinel ----------------------------------------------------------- */

/* The resolver of node 0's connections: ask each sentinel in turn. */
static int sentinel_resolve(void *ud, dl_endpoint *out, char *err,
                            size_t errlen)
{
    dl_topology *t = ud;
    char last[DL_ERRLEN] = "no sentinel answered";
    memset(out, 0, sizeof *out);
    /* From the one that answered last: a hung one costs a timeout once. */
    size_t first = __atomic_load_n(&t->sentinel_ok, __ATOMIC_RELAXED);
    for (size_t k = 0; k < t->nsentinels; k++) {
        size_t i = (first + k) % t->nsentinels;
        dl_conn sc;
        redisReply *r = NULL;
        if (dl_conn_init(&sc, &t->sentinels[i], t->connect_timeout_us,
                         t->command_timeout_us) != 0)
            break;
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                                t->master };
        int ok = 0;
        if (dl_conn_call(&sc, 3, argv, NULL, &r, last, sizeof last) ==
            DL_OK) {
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[0]->type == REDIS_REPLY_STRING &&
                r->element[1]->type == REDIS_REPLY_STRING &&
                dl_endpoint_copy(out, &t->tmpl) == 0) {
                free(out->host);
                free(out->path);
                out->path = NULL;
                out->host = strdup(r->element[0]->str);
                out->port = atoi(r->element[1]->str);
                ok = out->host != NULL && out->port > 0;
                if (ok)
                    dl_log_say(t->log, DL_LOG_INFO, "sentinel %s:%d: master "
                               "'%s' is at %s:%d", t->sentinels[i].host ?
                               t->sentinels[i].host : "?",
                               t->sentinels[i].port, t->master, out->host,
                               out->port);
                if (!ok)
                    dl_endpoint_free(out);
            } else {
                snprintf(last, sizeof last, "sentinel %s:%d does not know "
                         "master '%s'", t->sentinels[i].host ?
                         t->sentinels[i].host : "?", t->sentinels[i].port,
                         t->master);
            }
            freeReplyObject(r);
        }
        dl_conn_free(&sc);
        if (ok) {
            __atomic_store_n(&t->sentinel_ok, i, __ATOMIC_RELAXED);
            return 0;
        }
    }
    dl_fail(err, errlen, DL_ECONN, "%s", last);
    return -1;
}

#define SWITCH_MASTER "+switch-master"

/* The host (copied) and port of a GET-MASTER-ADDR-BY-NAME reply: 0, or
 * -1 when it names none (an unknown master) or out of memory. */
static int master_addr(const redisReply *r, char **host, int *port)
{
    *host = NULL;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    *port = atoi(r->element[1]->str);
    *host = *port > 0 ? strdup(r->element[0]->str) : NULL;
    return *host ? 0 : -1;
}

/* Whether c is set to host:port (a resolved address). */
static int conn_at(const dl_conn *c, const char *host, int port)
{
    return c->ep.host && !c->ep.path && c->ep.port == port &&
           strcmp(c->ep.host, host) == 0;
}

/* Lua thread: node 0's command and subscriber connections ask the
 * sentinels again before their next use. */
static void lua_retarget(dl_topology *t)
{
    dl_node *n = t->nodes[0];
    dl_conn_retarget(&n->cmd);
    dl_waiter_free(&n->sub);            /* its subscriptions go with it */
    if (dl_waiter_init(&n->sub, &t->tmpl, t->connect_timeout_us, 0) == 0) {
        dl_conn_follow(&n->sub.conn, &t->resolver, NULL, 1);
        dl_conn_tell(&n->sub.conn, t->log, "subscriber");
    }
}

static void announce(dl_topology *t)
{
    dl_log_say(t->log, DL_LOG_INFO, "failover: the sentinels announced a "
               "new master for '%s'; reconnecting", t->master);
}

/* Lua thread, on a new subscription: a failover announced while there was
 * none was not heard. Ask the sentinel now listened to where the master
 * is; if the command connection is elsewhere, send every connection to
 * the sentinels again. */
static void news_missed(dl_topology *t)
{
    char err[DL_ERRLEN];
    dl_conn *cmd = &t->nodes[0]->cmd, sc;
    if (cmd->resolve_next || !cmd->ep.host)
        return;                         /* it asks before connecting */
    if (dl_conn_init(&sc, &t->sentinels[t->news_from], t->connect_timeout_us,
                     t->command_timeout_us) != 0)
        return;
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            t->master };
    redisReply *r;
    char *host = NULL;
    int port = 0;
    if (dl_conn_call(&sc, 3, argv, NULL, &r, err, sizeof err) == DL_OK) {
        (void)master_addr(r, &host, &port);
        freeReplyObject(r);
    }
    dl_conn_free(&sc);
    if (host && !conn_at(cmd, host, port)) {
        lua_retarget(t);
        announce(t);
        __atomic_store_n(&t->wd_retarget, 1, __ATOMIC_RELEASE);
    }
    free(host);
}

void dl_topology_sentinel_news(dl_topology *t)
{
    char err[DL_ERRLEN];
    size_t len = sizeof SWITCH_MASTER - 1;
    dl_waiter *w = &t->news;
    if (t->kind != DL_TOPO_SENTINEL || t->nsentinels == 0)
        return;
    if (__atomic_exchange_n(&t->lua_retarget, 0, __ATOMIC_ACQ_REL))
        lua_retarget(t);                /* the watchdog found a new master */
    if (!t->news_init || t->news_dead ||
        (!w->conn.ctx && !w->conn.retry_at_us)) {
        /* (Re)start on the next sentinel; the first time on the first. */
        if (t->news_init) {
            dl_waiter_free(w);
            t->news_from = (t->news_from + 1) % t->nsentinels;
        }
        t->news_dead = 0;
        t->news_init = dl_waiter_init(w, &t->sentinels[t->news_from],
                                      t->connect_timeout_us, 0) == 0;
        if (!t->news_init)
            return;
    }
    if (!dl_waiter_subscribed(w, SWITCH_MASTER, len)) {
        if (dl_waiter_subscribe(w, SWITCH_MASTER, len, err, sizeof err)
            != DL_OK)
            return;
        t->news_seen = 0;               /* a new subscription counts anew */
        news_missed(t);
    }
    /* What the socket holds is read first: a notice (and the answer to
     * the last PING) that came while the client was idle is there. */
    size_t live;
    uint64_t seen = dl_waiter_count(&w, 1, SWITCH_MASTER, len, &live);
    if (!live)
        return;                         /* broken: the next sentinel next */
    if (seen != t->news_seen) {
        t->news_seen = seen;
        lua_retarget(t);
        announce(t);
        __atomic_store_n(&t->wd_retarget, 1, __ATOMIC_RELEASE);
    }
    /* A sentinel that hangs (rather than closing) would keep us deaf to
     * failovers: one that answers no PING within 2 s is left for the next. */
    if (dl_waiter_alive(w, 500000, 2000000 + t->connect_timeout_us,
                        &t->news_ping_us) != 0)
        t->news_dead = 1;
}

/* ---- the watchdog's sentinel probe --------------------------------------- */

static void probe_next(dl_topology *t)
{
    if (t->probe_init)
        dl_conn_free(&t->probe);
    t->probe_init = 0;
    t->probe_from = (t->probe_from + 1) % t->nsentinels;
}

static int probe_open(dl_topology *t)
{
    if (t->probe_init)
        return 0;
    int64_t ct = t->wd_timeout_us < t->connect_timeout_us ? t->wd_timeout_us
                                                          : t->connect_timeout_us;
    if (dl_conn_init(&t->probe, &t->sentinels[t->probe_from], ct,
                     t->wd_timeout_us) != 0)
        return -1;
    t->probe_init = 1;
    return 0;
}

size_t dl_topology_wd_listen_at(dl_topology *t, dl_endpoint *eps,
                                size_t max)
{
    size_t n = 0;
    if (t->kind == DL_TOPO_SENTINEL)    /* the master it renews on */
        return dl_endpoint_copy(&eps[0], &t->nodes[0]->wd.ep) == 0;
    if (t->kind != DL_TOPO_CLUSTER) {   /* the server, or every master */
        for (size_t i = 0; i < t->nnodes && n < max; i++)
            if (dl_endpoint_copy(&eps[n], &t->nodes[i]->ep) == 0)
                n++;
        return n;
    }
    /* Cluster: every node that owns a slot (a PUBLISH reaches the whole
     * cluster, so each one hears every force while any of them lives);
     * before a map is learnt, the first seed. */
    unsigned char seen[DL_MAX_NODES] = { 0 };
    for (size_t sl = 0; sl < DL_SLOTS; sl++)
        if (t->slots[sl] != DL_NO_NODE && t->slots[sl] < DL_MAX_NODES)
            seen[t->slots[sl]] = 1;
    for (size_t i = 0; i < t->nnodes && n < max; i++)
        if (seen[i] && dl_endpoint_copy(&eps[n], &t->nodes[i]->ep) == 0)
            n++;
    if (n == 0 && dl_endpoint_copy(&eps[0], &t->nodes[0]->ep) == 0)
        n = 1;
    return n;
}

void dl_topology_wd_resolve(dl_topology *t)
{
    char err[DL_ERRLEN];
    if (t->kind == DL_TOPO_SENTINEL && !t->nodes[0]->wd.ep.host &&
        !t->nodes[0]->wd.ep.path)
        (void)dl_conn_ensure(&t->nodes[0]->wd, err, sizeof err);
}

void dl_topology_wd_follow(dl_topology *t)
{
    if (__atomic_exchange_n(&t->wd_retarget, 0, __ATOMIC_ACQ_REL))
        dl_conn_retarget(&t->nodes[0]->wd);
}

int dl_topology_probe_send(dl_topology *t)
{
    char err[DL_ERRLEN];
    if (t->kind != DL_TOPO_SENTINEL || t->nsentinels == 0)
        return 0;
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            t->master };
    int64_t until = dl_now_us() + t->wd_timeout_us;
    /* Each sentinel once at most, within the watchdog's timeout; a link
     * found dead on writing is replaced once on the same sentinel. */
    for (size_t k = 0; k < t->nsentinels; k++) {
        for (int again = 0; again < 2; again++) {
            if (probe_open(t) != 0)
                return 0;
            int reused = t->probe.ctx != NULL;
            if (dl_conn_append(&t->probe, 3, argv, NULL, err, sizeof err)
                    == DL_OK &&
                dl_conn_flush(&t->probe, err, sizeof err) == DL_OK)
                return 1;
            if (!reused)
                break;
        }
        probe_next(t);
        if (dl_now_us() >= until)
            break;
    }
    return 0;
}

int dl_topology_probe_check(dl_topology *t, int sent, int64_t until_us)
{
    char err[DL_ERRLEN];
    if (t->kind != DL_TOPO_SENTINEL)
        return DL_PROBE_SAME;
    if (!sent)
        return DL_PROBE_UNKNOWN;
    dl_conn *pc = &t->probe;
    redisReply *r = NULL;
    int64_t left = until_us - dl_now_us();
    /* The answer came beside the renewals: it is there by now, unless
     * the sentinel is slow. */
    dl_conn_read_timeout(pc, left > 1000 ? left : 1000);
    dl_status st = dl_conn_read(pc, &r, err, sizeof err);
    dl_conn_read_timeout(pc, 0);
    if (st != DL_OK && pc->stale) {     /* closed while idle: once more */
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                                t->master };
        st = dl_conn_call(pc, 3, argv, NULL, &r, err, sizeof err);
    }
    char *host = NULL;
    int port = 0;
    if (st == DL_OK) {
        (void)master_addr(r, &host, &port);
        freeReplyObject(r);
    }
    if (!host) {                        /* no answer, or none usable */
        probe_next(t);
        return DL_PROBE_UNKNOWN;
    }
    dl_conn *wc = &t->nodes[0]->wd;
    if (conn_at(wc, host, port)) {
        free(host);
        return DL_PROBE_SAME;
    }
    /* The sentinel names another master: the watchdog's connection goes
     * there (to the address this sentinel gave, checked with ROLE on
     * connecting), and the Lua thread's asks again before its next use. */
    const dl_endpoint *at = &t->sentinels[t->probe_from];
    dl_log_say(t->log, DL_LOG_INFO, "sentinel %s:%d: master '%s' is at "
               "%s:%d", at->host ? at->host : "?", at->port, t->master, host,
               port);
    dl_conn_move_to(wc, host, port);
    free(host);
    __atomic_store_n(&t->lua_retarget, 1, __ATOMIC_RELEASE);
    return DL_PROBE_MOVED;
}

/* ---- set-up ------------------------------------------------------------ */

dl_status dl_topology_init(dl_topology *t, dl_topo_kind kind,
                           pthread_mutex_t *mu, dl_endpoint *eps,
                           size_t neps, char *master, dl_endpoint *tmpl,
                           int64_t connect_timeout_us,
                           int64_t command_timeout_us,
                           int64_t wd_timeout_us, dl_log *log, char *err,
                           size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->log = log;
    t->kind = kind;
    t->mu = mu;
    t->tmpl = *tmpl;
    memset(tmpl, 0, sizeof *tmpl);
    t->master = master;
    t->connect_timeout_us = connect_timeout_us;
    t->command_timeout_us = command_timeout_us;
    t->wd_timeout_us = wd_timeout_us;
    t->quorum = kind == DL_TOPO_REDLOCK ? (int)(neps / 2 + 1) : 1;
    t->resolver.resolve = sentinel_resolve;
    t->resolver.ud = t;
    t->resolver.master_only = 1;
    dl_status st = DL_OK;
    if (neps == 0 || neps > DL_MAX_NODES)
        st = dl_fail(err, errlen, DL_ECONN, "between 1 and %d servers",
                     DL_MAX_NODES);
    if (st == DL_OK && kind == DL_TOPO_SENTINEL) {
        t->sentinels = eps;
        t->nsentinels = neps;
        eps = NULL;
        dl_node *n = new_node(t, &t->tmpl);
        if (!n)
            st = dl_oom(err, errlen);
        else
            t->nodes[t->nnodes++] = n;
    }
    if (st == DL_OK && kind == DL_TOPO_CLUSTER) {
        t->nseeds = neps;
        t->slots = malloc(DL_SLOTS * sizeof *t->slots);
        if (!t->slots)
            st = dl_oom(err, errlen);
        else
            for (size_t i = 0; i < DL_SLOTS; i++)
                t->slots[i] = DL_NO_NODE;
    }
    for (size_t i = 0; eps && st == DL_OK && i < neps; i++) {
        dl_node *n = new_node(t, &eps[i]);
        if (!n)
            st = dl_oom(err, errlen);
        else
            t->nodes[t->nnodes++] = n;
    }
    for (size_t i = 0; eps && i < neps; i++)
        dl_endpoint_free(&eps[i]);
    free(eps);
    return st;
}

void dl_topology_free(dl_topology *t)
{
    for (size_t i = 0; i < t->nnodes; i++)
        free_node(t->nodes[i]);
    if (t->news_init)
        dl_waiter_free(&t->news);
    if (t->probe_init)
        dl_conn_free(&t->probe);
    for (size_t i = 0; i < t->nsentinels; i++)
        dl_endpoint_free(&t->sentinels[i]);
    free(t->sentinels);
    free(t->slots);
    free(t->master);
    dl_endpoint_free(&t->tmpl);
    memset(t, 0, sizeof *t);
}

/* ---- routing ------------------------------------------------------------ */

size_t dl_topology_route(dl_topology *t, const char *key, size_t len)
{
    if (t->kind != DL_TOPO_CLUSTER)
        return 0;
    unsigned slot = dl_slot_of(key, len);
    pthread_mutex_lock(t->mu);
    size_t idx = t->slots[slot];
    pthread_mutex_unlock(t->mu);
    return idx == DL_NO_NODE ? 0 : idx;
}

/* Between the passes of a refresh, with t->mu: nodes this map does not
 * name are dropped from it: no slot goes to them any more, and only then
 * may their entries be given to new nodes. A reply with nothing usable in
 * it (valid == 0) changes nothing. */
static void unname_slots(dl_topology *t, size_t valid)
{
    for (size_t i = t->nseeds; !valid && i < t->nnodes; i++)
        t->nodes[i]->named = t->nodes[i]->was_named;
    for (size_t sl = 0; valid && sl < DL_SLOTS; sl++)
        if (t->slots[sl] != DL_NO_NODE && !t->nodes[t->slots[sl]]->named)
            t->slots[sl] = DL_NO_NODE;
}

/* One entry of a CLUSTER SLOTS reply: {lo, hi, {host, port, ...}, ...}.
 * An empty or "?" host is the node asked (n, under mu). 0, or -1 when
 * malformed or out of range. */
static int slots_entry(const redisReply *e, const dl_node *n,
                       const char **host, int *port, long long *lo,
                       long long *hi)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    *lo = e->element[0]->integer;
    *hi = e->element[1]->integer;
    long long p = e->element[2]->element[1]->integer;
    if (*lo < 0 || *hi >= DL_SLOTS || *lo > *hi || p <= 0 || p > 65535)
        return -1;
    *port = (int)p;
    *host = e->element[2]->element[0]->str;
    if (!**host || strcmp(*host, "?") == 0)
        *host = n->ep.host ? n->ep.host : "127.0.0.1";
    return 0;
}

dl_status dl_topology_refresh(dl_topology *t, size_t via, int wd,
                              char *err, size_t errlen)
{
    if (t->kind != DL_TOPO_CLUSTER)     /* no slot map to learn */
        return dl_fail(err, errlen, DL_EREDIS, "not a Cluster client");
    pthread_mutex_lock(t->mu);
    dl_node *n = via < t->nnodes ? t->nodes[via] : NULL;
    pthread_mutex_unlock(t->mu);
    if (!n)
        return dl_fail(err, errlen, DL_ECONN, "no such node");
    dl_conn *c = wd ? &n->wd : &n->cmd;
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    redisReply *r;
    dl_status st = dl_conn_call(c, 2, argv, NULL, &r, err, errlen);
    if (st != DL_OK)
        return st;
    if (r->type != REDIS_REPLY_ARRAY) {
        st = r->type == REDIS_REPLY_ERROR ? dl_reply_error(r, err, errlen)
             : dl_fail(err, errlen, DL_EREDIS, "bad CLUSTER SLOTS reply");
        freeReplyObject(r);
        return st;
    }
    /* Two passes: first the nodes we know are named again, so that a
     * new node is never given the entry of one named further on. */
    pthread_mutex_lock(t->mu);
    size_t valid = 0;
    for (size_t i = t->nseeds; i < t->nnodes; i++)
        t->nodes[i]->was_named = t->nodes[i]->named, t->nodes[i]->named = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)                  /* (whatever the entries are) */
            unname_slots(t, valid);
        for (size_t i = 0; i < r->elements; i++) {
            const char *host;
            int port;
            long long lo, hi;
            if (slots_entry(r->element[i], n, &host, &port, &lo, &hi) != 0)
                continue;
            size_t idx = find_node(t, host, port);
            if (pass == 0) {
                if (idx != DL_NO_NODE)
                    t->nodes[idx]->named = 1;
                valid++;
                continue;
            }
            if (idx == DL_NO_NODE)
                idx = dl_topology_node_at(t, host, port);
            for (long long sl = lo; idx != DL_NO_NODE && sl <= hi; sl++)
                t->slots[sl] = (uint16_t)idx;
        }
    }
    pthread_mutex_unlock(t->mu);
    freeReplyObject(r);
    return DL_OK;
}

int dl_topology_remap(dl_topology *t, size_t failed, int wd)
{
    char err[DL_ERRLEN];
    int64_t now = dl_now_us();
    if (t->kind != DL_TOPO_CLUSTER || now - t->remap_us[!!wd] <
                                          DL_REMAP_GAP_US)
        return 0;
    t->remap_us[!!wd] = now;
    pthread_mutex_lock(t->mu);
    size_t n = t->nnodes;
    pthread_mutex_unlock(t->mu);
    /* From the node after the failed one, so that a dead first seed is
     * not where every remap starts; bounded by the command timeout. */
    for (size_t k = 1; k <= n; k++) {
        size_t i = (failed + k) % n;
        if (i == failed && n > 1)
            continue;
        if (dl_topology_refresh(t, i, wd, err, sizeof err) == DL_OK) {
            dl_log_say(t->log, DL_LOG_INFO, "cluster: slot map learnt "
                       "again after a node failed");
            return 1;
        }
        if (t->command_timeout_us > 0 &&
            dl_now_us() - now > t->command_timeout_us)
            break;
    }
    return 0;
}

/* Cluster: whether the cluster, asked through node `via`, names
 * host:port among its members (CLUSTER NODES: "<id> <ip:port@cport[,
 * hostname]> <flags> ..."); if so, the node is added. A slot being
 * imported by a node that owns no slot yet is found only this way. */
static int named_member(dl_topology *t, size_t via, int wd, const char *host,
                        int port)
{
    char err[DL_ERRLEN];
    pthread_mutex_lock(t->mu);
    dl_node *n = t->nodes[via];
    pthread_mutex_unlock(t->mu);
    const char *argv[2] = { "CLUSTER", "NODES" };
    redisReply *r;
    if (dl_conn_call(wd ? &n->wd : &n->cmd, 2, argv, NULL, &r, err,
                     sizeof err) != DL_OK)
        return 0;
    int named = 0;
    size_t hlen = strlen(host);
    for (const char *line = r->type == REDIS_REPLY_STRING ? r->str : NULL;
         line && *line && !named; line = strchr(line, '\n'),
                                  line = line ? line + 1 : NULL) {
        const char *addr = strchr(line, ' '), *eol = strchr(line, '\n');
        if (!addr || (eol && addr > eol))
            continue;
        addr++;
        const char *at = strchr(addr, '@'), *sp = strchr(addr, ' ');
        if (!at || (sp && at > sp) || (eol && at > eol))
            continue;
        const char *colon = at;
        while (colon > addr && colon[-1] != ':')
            colon--;
        if (colon == addr || (size_t)(colon - 1 - addr) != hlen ||
            memcmp(addr, host, hlen) != 0 || atoi(colon) != port)
            continue;
        const char *flags = sp ? sp + 1 : "";
        named = strncmp(flags, "noaddr", 6) != 0 &&
                strncmp(flags, "handshake", 9) != 0;
    }
    freeReplyObject(r);
    if (named) {
        pthread_mutex_lock(t->mu);
        named = dl_topology_node_at(t, host, port) != DL_NO_NODE;
        pthread_mutex_unlock(t->mu);
    }
    return named;
}

/* Parse "MOVED 3999 127.0.0.1:6381" / "ASK ..." in msg. */
static int parse_redirect(const char *msg, int *ask, unsigned *slot,
                          char *host, size_t hostsz, int *port)
{
    *ask = strncmp(msg, "ASK ", 4) == 0;
    if (!*ask && strncmp(msg, "MOVED ", 6) != 0)
        return -1;
    const char *p = msg + (*ask ? 4 : 6);
    char *end;
    unsigned long s = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || s >= DL_SLOTS)
        return -1;
    p = end + 1;
    const char *colon = strrchr(p, ':');
    if (!colon || (size_t)(colon - p) >= hostsz)
        return -1;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    *port = atoi(colon + 1);
    *slot = (unsigned)s;
    return *port > 0 ? 0 : -1;
}

/* Run a script (id >= 0) or a plain command on node idx. */
static dl_status run_once(dl_topology *t, const dl_scripts *s, int wd,
                          size_t idx, int asking, int id, int nkeys,
                          int argc, const char **argv, size_t *lens,
                          redisReply **out, char *err, size_t errlen)
{
    dl_node *n = t->nodes[idx];         /* idx came from under t->mu */
    dl_conn *c = wd ? &n->wd : &n->cmd;
    if (id >= 0)
        return dl_script_eval(c, s, asking, (dl_script_id)id, nkeys, argc,
                              argv, lens, out, err, errlen);
    dl_status st;
    if (asking) {
        const char *a[1] = { "ASKING" };
        redisReply *r;
        if ((st = dl_conn_call(c, 1, a, NULL, &r, err, errlen)) != DL_OK)
            return st;
        freeReplyObject(r);
    }
    st = dl_conn_call(c, argc, argv, lens, out, err, errlen);
    if (st == DL_OK && (*out)->type == REDIS_REPLY_ERROR) {
        st = dl_reply_error(*out, err, errlen);
        freeReplyObject(*out);
        *out = NULL;
    }
    return st;
}

/* An ASK was followed for slot: remember it (over the oldest). */
static void note_asked(dl_topology *t, unsigned slot)
{
    int64_t now = dl_now_us();
    size_t n = sizeof t->asked / sizeof t->asked[0], at = 0;
    pthread_mutex_lock(t->mu);
    for (size_t i = 0; i < n; i++) {
        if (t->asked[i].at_us && t->asked[i].slot == slot) {
            at = i;
            break;
        }
        if (t->asked[i].at_us < t->asked[at].at_us)
            at = i;
    }
    t->asked[at].slot = slot;
    t->asked[at].at_us = now;
    pthread_mutex_unlock(t->mu);
}

int dl_topology_migrating(const dl_topology *t, const char *key,
                          size_t keylen, int64_t now_us)
{
    if (t->kind != DL_TOPO_CLUSTER)
        return 0;
    unsigned slot = dl_slot_of(key, keylen);
    for (size_t i = 0; i < sizeof t->asked / sizeof t->asked[0]; i++)
        if (t->asked[i].at_us && t->asked[i].slot == slot &&
            now_us - t->asked[i].at_us < DL_ASKED_US)
            return 1;
    return 0;
}

dl_status dl_topology_run(dl_topology *t, const dl_scripts *s, int wd,
                          const char *key, size_t keylen, int id, int nkeys,
                          int argc, const char **argv, size_t *lens,
                          redisReply **out, char *err, size_t errlen)
{
    size_t idx = dl_topology_route(t, key, keylen);
    int asking = 0;
    for (int hop = 0; hop < 5; hop++) {
        dl_status st = run_once(t, s, wd, idx, asking, id, nkeys, argc,
                                argv, lens, out, err, errlen);
        if ((st == DL_ECONN || st == DL_EDOWN) && !asking &&
            dl_topology_remap(t, idx, wd) && id >= 0 &&
            !dl_script_layout_of((dl_script_id)id)->key[DL_KEY_DATA]) {
            /* The node is gone; if the map now gives the slot to
             * another (its replica, promoted), go there: a lock script
             * only, whose request records make a resend exact (it may
             * have run on the dead node, and replicated). A plain
             * command (client:call, WAIT) or a guarded one (a script
             * with a data key) fails here; the next call goes to the
             * new node. */
            size_t to = dl_topology_route(t, key, keylen);
            if (to != idx) {
                idx = to;
                continue;
            }
        }
        if (st == DL_EREDIS && t->kind == DL_TOPO_CLUSTER &&
            strncmp(err, "TRYAGAIN", 8) == 0)
            /* A multi-key script while its slot migrates: the keys are
             * split between two nodes for now. It did not run. */
            return dl_fail(err, errlen, DL_EAGAIN, "slot %u is being "
                           "migrated (TRYAGAIN)", dl_slot_of(key, keylen));
        if (st != DL_EMOVED)
            return st;
        unsigned slot;
        int port;
        char host[256], msg[DL_ERRLEN];
        snprintf(msg, sizeof msg, "%s", err);
        if (t->kind != DL_TOPO_CLUSTER)     /* nothing goes elsewhere */
            return dl_fail(err, errlen, DL_EREDIS, "%s (the server is a "
                           "Redis Cluster node: connect with connect{ "
                           "cluster = { url, ... } })", msg);
        if (parse_redirect(msg, &asking, &slot, host, sizeof host, &port))
            return dl_fail(err, errlen, DL_EREDIS, "%s", msg);
        pthread_mutex_lock(t->mu);
        size_t to = find_node(t, host, port);
        pthread_mutex_unlock(t->mu);
        if (to == DL_NO_NODE) {
            /* An address we were not told of: credentials go there only
             * if the cluster's own topology names it. */
            (void)dl_topology_refresh(t, idx, wd, err, errlen);
            pthread_mutex_lock(t->mu);
            to = find_node(t, host, port);
            pthread_mutex_unlock(t->mu);
            if (to == DL_NO_NODE && named_member(t, idx, wd, host, port)) {
                pthread_mutex_lock(t->mu);
                to = find_node(t, host, port);
                pthread_mutex_unlock(t->mu);
            }
            if (to == DL_NO_NODE)
                return dl_fail(err, errlen, DL_EREDIS, "%s: not followed, "
                               "the cluster does not name %s:%d among its "
                               "nodes", msg, host, port);
        }
        if (asking)
            note_asked(t, slot);
        if (!asking) {
            pthread_mutex_lock(t->mu);
            t->nodes[to]->named = 1;    /* it has a slot: not to be reused */
            t->slots[slot] = (uint16_t)to;
            pthread_mutex_unlock(t->mu);
            dl_log_say(t->log, DL_LOG_INFO, "cluster: slot %u moved to "
                       "%s:%d (MOVED)", slot, host, port);
            /* the map moved: learn all of it */
            (void)dl_topology_refresh(t, to, wd, msg, sizeof msg);
        }
        idx = to;
    }
    return dl_fail(err, errlen, DL_EBOUNCE, "too many cluster redirects");
}

/* ---- Redlock fan-out ----------------------------------------------------- */

size_t dl_topology_fan(dl_topology *t, const dl_scripts *s, int wd, int id,
                       int nkeys, int argc, const char **argv, size_t *lens,
                       redisReply **out)
{
    char err[DL_ERRLEN];
    int sent[DL_MAX_NODES], reused[DL_MAX_NODES];
    size_t n = t->nnodes, replied = 0;
    for (size_t i = 0; i < n; i++) {
        dl_conn *c = wd ? &t->nodes[i]->wd : &t->nodes[i]->cmd;
        out[i] = NULL;
        reused[i] = c->ctx != NULL;
        sent[i] = (id >= 0 ? dl_script_append(c, s, (dl_script_id)id, nkeys,
                                              argc, argv, lens, err,
                                              sizeof err)
                           : dl_conn_append(c, argc, argv, lens, err,
                                            sizeof err)) == DL_OK &&
                  dl_conn_flush(c, err, sizeof err) == DL_OK;
    }
    int64_t deadline = dl_now_us() + (wd ? t->wd_timeout_us
                                         : t->command_timeout_us);
    for (size_t i = 0; i < n; i++) {
        dl_conn *c = wd ? &t->nodes[i]->wd : &t->nodes[i]->cmd;
        int64_t left = deadline - dl_now_us();
        if (!sent[i] && !(reused[i] && c->stale && left > 0))
            continue;
        if (left <= 0) {
            dl_conn_drop(c);            /* its reply must not be read later */
            continue;
        }
        dl_conn_read_timeout(c, left);
        redisReply *r = NULL;
        dl_status st = sent[i] ? dl_conn_read(c, &r, err, sizeof err) : DL_EDOWN;
        if (st != DL_OK && reused[i] && c->stale) {
            /* A link that died while idle (a restarted server): once more
             * on a new one, as dl_conn_call does; a resend is exact. */
            st = id >= 0 ? dl_script_eval(c, s, 0, (dl_script_id)id, nkeys,
                                          argc, argv, lens, &r, err,
                                          sizeof err)
                         : dl_conn_call(c, argc, argv, lens, &r, err,
                                        sizeof err);
        }
        dl_conn_read_timeout(c, 0);
        if (st != DL_OK)
            continue;
        if (id >= 0 && dl_script_noscript(r)) {  /* nothing else queued */
            freeReplyObject(r);
            dl_conn_read_timeout(c, deadline - dl_now_us());
            st = dl_script_eval(c, s, 0, (dl_script_id)id, nkeys, argc,
                                argv, lens, &r, err, sizeof err);
            dl_conn_read_timeout(c, 0);
            if (st != DL_OK)
                continue;
        }
        out[i] = r;
        replied++;
    }
    return replied;
}
