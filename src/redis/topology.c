/* SPDX-License-Identifier: MIT
 * topology.c: the nodes (topology.h), and what every topology does with
 * them: run a call on one, or on every Redlock master at once.
 *
 * DESIGN. Every topology is a list of nodes; what differs is which nodes
 * an operation goes to. One server and Sentinel use node 0 (sentinel.c
 * gives node 0's connections a resolver, so that the Lua thread and the
 * watchdog follow a failover on their own). Redlock sends every operation
 * to all nodes at once and the executor counts answers against a quorum.
 * Cluster routes each lock by the CRC16 slot of its hash tag through the
 * slot map cluster.c learns and corrects. Nodes are only ever added
 * (under the client's mutex, by either thread, without I/O) and freed at
 * close, so a node pointer read under the mutex stays valid.
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
    dl_conn_tell(&n->cmd, t->log, "command");
    dl_conn_tell(&n->sub.conn, t->log, "subscriber");
    dl_conn_tell(&n->wd, t->log, "watchdog");
    if (t->kind == DL_TOPO_CLUSTER) {   /* its entry may change address */
        n->topo = t;
        n->resolver.resolve = node_resolve;
        n->resolver.ud = n;
        n->named = 1;
        dl_conn_follow(&n->cmd, &n->resolver, &n->moved, 0);
        dl_conn_follow(&n->sub.conn, &n->resolver, &n->moved, 0);
        dl_conn_follow(&n->wd, &n->resolver, &n->moved, 0);
    }
    return n;
}

size_t dl_topology_add_node(dl_topology *t, const dl_endpoint *ep)
{
    dl_node *n = t->nnodes < DL_MAX_NODES ? new_node(t, ep) : NULL;
    if (!n)
        return DL_NO_NODE;
    t->nodes[t->nnodes] = n;
    return t->nnodes++;
}

size_t dl_topology_find(const dl_topology *t, const char *host, int port)
{
    for (size_t i = 0; i < t->nnodes; i++) {
        const dl_endpoint *ep = &t->nodes[i]->ep;
        if (ep->port == port && ep->host && strcmp(ep->host, host) == 0)
            return i;
    }
    return DL_NO_NODE;
}

dl_conn *dl_topology_conn(dl_topology *t, size_t idx, int wd)
{
    return wd ? &t->nodes[idx]->wd : &t->nodes[idx]->cmd;
}

/* ---- set-up ------------------------------------------------------------ */

/* Sentinel: node 0, from the template, wherever the sentinels say. */
static dl_status add_master(dl_topology *t, const dl_topology_opts *o,
                            char *err, size_t errlen)
{
    size_t i = dl_topology_add_node(t, &t->tmpl);
    dl_node *n = i == DL_NO_NODE ? NULL : t->nodes[i];
    dl_sentinel_opts so = {
        .at = o->eps, .n = o->neps, .master = o->master, .tmpl = &t->tmpl,
        .connect_timeout_us = o->connect_timeout_us,
        .command_timeout_us = o->command_timeout_us,
        .wd_timeout_us = o->wd_timeout_us, .log = o->log,
        .cmd = n ? &n->cmd : NULL, .sub = n ? &n->sub : NULL,
        .wd = n ? &n->wd : NULL
    };
    dl_sentinel_init(&t->sentinel, &so);
    return n ? DL_OK : dl_oom(err, errlen);
}

dl_status dl_topology_init(dl_topology *t, const dl_topology_opts *o,
                           char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->log = o->log;
    t->kind = o->kind;
    t->mu = o->mu;
    t->tmpl = *o->tmpl;
    memset(o->tmpl, 0, sizeof *o->tmpl);
    t->connect_timeout_us = o->connect_timeout_us;
    t->command_timeout_us = o->command_timeout_us;
    t->wd_timeout_us = o->wd_timeout_us;
    t->quorum = o->kind == DL_TOPO_REDLOCK ? (int)(o->neps / 2 + 1) : 1;
    dl_status st = DL_OK;
    if (o->neps == 0 || o->neps > DL_MAX_NODES)
        st = dl_fail(err, errlen, DL_ECONN, "between 1 and %d servers",
                     DL_MAX_NODES);
    int own = st != DL_OK || o->kind != DL_TOPO_SENTINEL;
    if (!own)                           /* eps and master: the sentinel's */
        st = add_master(t, o, err, errlen);
    if (st == DL_OK && o->kind == DL_TOPO_CLUSTER) {
        t->nseeds = o->neps;
        t->slots = malloc(DL_SLOTS * sizeof *t->slots);
        if (!t->slots)
            st = dl_oom(err, errlen);
        else
            for (size_t i = 0; i < DL_SLOTS; i++)
                t->slots[i] = DL_NO_NODE;
    }
    for (size_t i = 0; own && st == DL_OK && i < o->neps; i++)
        if (dl_topology_add_node(t, &o->eps[i]) == DL_NO_NODE)
            st = dl_oom(err, errlen);
    for (size_t i = 0; own && i < o->neps; i++)
        dl_endpoint_free(&o->eps[i]);
    if (own) {
        free(o->eps);
        free(o->master);
    }
    return st;
}

void dl_topology_free(dl_topology *t)
{
    for (size_t i = 0; i < t->nnodes; i++)
        free_node(t->nodes[i]);
    dl_sentinel_free(&t->sentinel);
    free(t->slots);
    dl_endpoint_free(&t->tmpl);
    memset(t, 0, sizeof *t);
}

/* ---- routing and running ------------------------------------------------ */

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

dl_status dl_topology_run_at(dl_topology *t, const dl_scripts *s,
                             const dl_call *call, size_t idx, int asking,
                             redisReply **out, char *err, size_t errlen)
{
    dl_conn *c = dl_topology_conn(t, idx, call->wd);
    if (call->id >= 0)
        return dl_script_eval(c, s, call, asking, out, err, errlen);
    dl_status st;
    if (asking) {
        const char *a[1] = { "ASKING" };
        redisReply *r;
        if ((st = dl_conn_call(c, 1, a, NULL, &r, err, errlen)) != DL_OK)
            return st;
        freeReplyObject(r);
    }
    st = dl_conn_call(c, call->argc, call->argv, call->lens, out, err,
                      errlen);
    if (st == DL_OK && (*out)->type == REDIS_REPLY_ERROR) {
        st = dl_reply_error(*out, err, errlen);
        freeReplyObject(*out);
        *out = NULL;
    }
    return st;
}

dl_status dl_topology_run(dl_topology *t, const dl_scripts *s,
                          const dl_call *call, redisReply **out, char *err,
                          size_t errlen)
{
    dl_status st = dl_topology_run_at(t, s, call, 0, 0, out, err, errlen);
    if (st != DL_EMOVED)
        return st;
    char msg[DL_ERRLEN];
    snprintf(msg, sizeof msg, "%s", err);
    return dl_fail(err, errlen, DL_EREDIS, "%s (the server is a Redis "
                   "Cluster node: connect with connect{ cluster = { url, "
                   "... } })", msg);
}

/* ---- Redlock fan-out ----------------------------------------------------- */

size_t dl_topology_fan(dl_topology *t, const dl_scripts *s,
                       const dl_call *call, redisReply **out)
{
    char err[DL_ERRLEN];
    int sent[DL_MAX_NODES], reused[DL_MAX_NODES], script = call->id >= 0;
    size_t n = t->nnodes, replied = 0;
    for (size_t i = 0; i < n; i++) {
        dl_conn *c = dl_topology_conn(t, i, call->wd);
        out[i] = NULL;
        reused[i] = c->ctx != NULL;
        sent[i] = (script ? dl_script_append(c, s, call, err, sizeof err)
                          : dl_conn_append(c, call->argc, call->argv,
                                           call->lens, err, sizeof err))
                      == DL_OK &&
                  dl_conn_flush(c, err, sizeof err) == DL_OK;
    }
    int64_t deadline = dl_now_us() + (call->wd ? t->wd_timeout_us
                                               : t->command_timeout_us);
    for (size_t i = 0; i < n; i++) {
        dl_conn *c = dl_topology_conn(t, i, call->wd);
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
            st = script ? dl_script_eval(c, s, call, 0, &r, err, sizeof err)
                        : dl_conn_call(c, call->argc, call->argv, call->lens,
                                       &r, err, sizeof err);
        }
        dl_conn_read_timeout(c, 0);
        if (st != DL_OK)
            continue;
        if (script && dl_script_noscript(r)) {  /* nothing else queued */
            freeReplyObject(r);
            dl_conn_read_timeout(c, deadline - dl_now_us());
            st = dl_script_eval(c, s, call, 0, &r, err, sizeof err);
            dl_conn_read_timeout(c, 0);
            if (st != DL_OK)
                continue;
        }
        out[i] = r;
        replied++;
    }
    return replied;
}

/* ---- the watchdog's listening ------------------------------------------- */

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
