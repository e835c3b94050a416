/* SPDX-License-Identifier: MIT
 * cluster.c: Redis Cluster (cluster.h): the slot map, learnt from CLUSTER
 * SLOTS, and the way of a call to the node that owns its key.
 *
 * DESIGN. Each lock goes by the CRC16 slot of its hash tag (slot.c)
 * through the slot map, corrected by MOVED (and then learnt whole again);
 * ASK is followed for one command without touching the map, and
 * remembered for a while (dl_cluster_migrating). A node is added for an
 * address only if the cluster names it; the map that stops naming a node
 * takes its slots away, and only then may its entry be given to another
 * address (topology.h: entries are never removed before close).
 */
#define _GNU_SOURCE
#include "redis/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the slot map ------------------------------------------------------ */

/* With t->mu held: the node index for host:port, created (no I/O) if
 * new: in a free entry, else in that of a node the last map learnt did
 * not name (its connections move to host:port the next time each is
 * used). DL_NO_NODE when full or out of memory. */
static size_t node_at(dl_topology *t, const char *host, int port)
{
    size_t found = dl_topology_find(t, host, port);
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
    size_t idx = ep.host ? dl_topology_add_node(t, &ep) : DL_NO_NODE;
    dl_endpoint_free(&ep);
    return idx;
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

dl_status dl_cluster_refresh(dl_topology *t, size_t via, int wd, char *err,
                             size_t errlen)
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
            size_t idx = dl_topology_find(t, host, port);
            if (pass == 0) {
                if (idx != DL_NO_NODE)
                    t->nodes[idx]->named = 1;
                valid++;
                continue;
            }
            if (idx == DL_NO_NODE)
                idx = node_at(t, host, port);
            for (long long sl = lo; idx != DL_NO_NODE && sl <= hi; sl++)
                t->slots[sl] = (uint16_t)idx;
        }
    }
    pthread_mutex_unlock(t->mu);
    freeReplyObject(r);
    return DL_OK;
}

int dl_cluster_remap(dl_topology *t, size_t failed, int wd)
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
        if (dl_cluster_refresh(t, i, wd, err, sizeof err) == DL_OK) {
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
        named = node_at(t, host, port) != DL_NO_NODE;
        pthread_mutex_unlock(t->mu);
    }
    return named;
}

/* ---- a call's way to its node ----------------------------------------- */

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

int dl_cluster_migrating(const dl_topology *t, const char *key,
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

/* With t->mu taken: dl_topology_find. */
static size_t find_locked(dl_topology *t, const char *host, int port)
{
    pthread_mutex_lock(t->mu);
    size_t to = dl_topology_find(t, host, port);
    pthread_mutex_unlock(t->mu);
    return to;
}

/* Follow the redirect err tells (MOVED or ASK) from node *idx: *idx gets
 * the node it names, *asking whether it is an ASK. A MOVED corrects the
 * map and learns all of it again. DL_OK, or an error (in err) when it is
 * not followed. */
static dl_status follow(dl_topology *t, int wd, size_t *idx, int *asking,
                        char *err, size_t errlen)
{
    unsigned slot;
    int port;
    char host[256], msg[DL_ERRLEN];
    snprintf(msg, sizeof msg, "%s", err);
    if (parse_redirect(msg, asking, &slot, host, sizeof host, &port))
        return dl_fail(err, errlen, DL_EREDIS, "%s", msg);
    size_t to = find_locked(t, host, port);
    if (to == DL_NO_NODE) {
        /* An address we were not told of: credentials go there only
         * if the cluster's own topology names it. */
        (void)dl_cluster_refresh(t, *idx, wd, err, errlen);
        to = find_locked(t, host, port);
        if (to == DL_NO_NODE && named_member(t, *idx, wd, host, port))
            to = find_locked(t, host, port);
        if (to == DL_NO_NODE)
            return dl_fail(err, errlen, DL_EREDIS, "%s: not followed, the "
                           "cluster does not name %s:%d among its nodes",
                           msg, host, port);
    }
    if (*asking)
        note_asked(t, slot);
    if (!*asking) {
        pthread_mutex_lock(t->mu);
        t->nodes[to]->named = 1;        /* it has a slot: not to be reused */
        t->slots[slot] = (uint16_t)to;
        pthread_mutex_unlock(t->mu);
        dl_log_say(t->log, DL_LOG_INFO, "cluster: slot %u moved to %s:%d "
                   "(MOVED)", slot, host, port);
        /* the map moved: learn all of it */
        (void)dl_cluster_refresh(t, to, wd, msg, sizeof msg);
    }
    *idx = to;
    return DL_OK;
}

/* After a connection failure to node *idx: the node is gone; if the map,
 * learnt again, now gives the slot to another (its replica, promoted),
 * the call goes there: a lock script only, whose request records make a
 * resend exact (it may have run on the dead node, and replicated). A
 * plain command (client:call, WAIT) or a guarded one (a script with a
 * data key) fails here; the next call goes to the new node. Returns 1
 * when *idx is that node. */
static int failed_over(dl_topology *t, const dl_call *call, size_t *idx)
{
    if (!dl_cluster_remap(t, *idx, call->wd) || call->id < 0 ||
        dl_script_layout_of((dl_script_id)call->id)->key[DL_KEY_DATA])
        return 0;
    size_t to = dl_topology_route(t, call->key, call->keylen);
    if (to == *idx)
        return 0;
    *idx = to;
    return 1;
}

dl_status dl_cluster_run(dl_topology *t, const dl_scripts *s,
                         const dl_call *call, redisReply **out, char *err,
                         size_t errlen)
{
    if (t->kind != DL_TOPO_CLUSTER)
        return dl_topology_run(t, s, call, out, err, errlen);
    size_t idx = dl_topology_route(t, call->key, call->keylen);
    int asking = 0;
    for (int hop = 0; hop < 5; hop++) {
        dl_status st = dl_topology_run_at(t, s, call, idx, asking, out, err,
                                          errlen);
        if ((st == DL_ECONN || st == DL_EDOWN) && !asking &&
            failed_over(t, call, &idx))
            continue;
        if (st == DL_EREDIS && strncmp(err, "TRYAGAIN", 8) == 0)
            /* A multi-key script while its slot migrates: the keys are
             * split between two nodes for now. It did not run. */
            return dl_fail(err, errlen, DL_EAGAIN, "slot %u is being "
                           "migrated (TRYAGAIN)",
                           dl_slot_of(call->key, call->keylen));
        if (st != DL_EMOVED)
            return st;
        if ((st = follow(t, call->wd, &idx, &asking, err, errlen)) != DL_OK)
            return st;
    }
    return dl_fail(err, errlen, DL_EBOUNCE, "too many cluster redirects");
}
