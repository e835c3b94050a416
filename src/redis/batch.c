/* SPDX-License-Identifier: MIT
 * batch.c: the executor's pipelined half (exec.h): many operations in
 * one round trip, as the watchdog renews and as close releases.
 *
 * Each operation goes to the node that owns its key (every node on
 * Redlock). The (node, script, slot, index) of each is packed in one sort
 * key, so that a sort brings together what may share a call; the sorted
 * order is cut into calls, every call is queued on its node's pipeline,
 * all pipelines are flushed, and the replies are read back per node in
 * the order sent.
 */
#define _GNU_SOURCE
#include "redis/exec.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* A sort key: node (21 bits), script id (6), slot (14), op index (24). */
#define IDX(o)  ((size_t)((o) & 0xffffff))
#define SLOT(o) ((unsigned)(((o) >> 24) & 0x3fff))
#define ID(o)   ((unsigned)(((o) >> 38) & 0x3f))
#define NODE(o) ((size_t)((o) >> 44))
typedef char dl_ids_fit_the_sort_key[DL_S_COUNT <= 0x3f ? 1 : -1];

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void dl_batch_free(dl_batch *b)
{
    free(b->order);
    free(b->chunks);
    b->order = NULL;
    b->chunks = NULL;
    b->caporder = b->capchunks = 0;
}

/* The sorted sort keys of every (operation, node) pair, with t->mu
 * held (the slot map and node count). */
static int plan(dl_topology *t, dl_batch *b)
{
    size_t fan = t->kind == DL_TOPO_REDLOCK ? t->nnodes : 1;
    b->norder = 0;
    if (b->n > 0xffffff ||
        dl_grow(&b->order, &b->caporder, b->n * fan, sizeof *b->order) != 0)
        return -1;
    for (size_t i = 0; i < b->n; i++) {
        const dl_op *op = &b->ops[i];
        uint64_t slot = 0, node = 0;
        if (t->kind == DL_TOPO_CLUSTER) {
            slot = dl_slot_of(op->key, op->keylen);
            node = t->slots[slot] == DL_NO_NODE ? 0 : t->slots[slot];
        }
        for (size_t k = 0; k < fan; k++)
            b->order[b->norder++] = ((node + k) << 44) |
                                    ((uint64_t)op->id << 38) |
                                    (slot << 24) | i;
    }
    if (b->norder > 1)
        qsort(b->order, b->norder, sizeof *b->order, cmp_u64);
    return 0;
}

/* Cut the sorted order into calls: one node, one script, one slot, at
 * most op->batch operations of a batchable script, else one. */
static int cut(dl_batch *b)
{
    b->nchunks = 0;
    for (size_t i = 0; i < b->norder;) {
        size_t j = i + 1, most = (size_t)b->ops[IDX(b->order[i])].batch;
        while (j < b->norder && j - i < most &&
               NODE(b->order[j]) == NODE(b->order[i]) &&
               ID(b->order[j]) == ID(b->order[i]) &&
               SLOT(b->order[j]) == SLOT(b->order[i]))
            j++;
        if (dl_grow(&b->chunks, &b->capchunks, b->nchunks + 1,
                 sizeof *b->chunks) != 0)
            return -1;
        dl_chunk *k = &b->chunks[b->nchunks++];
        k->node = (uint32_t)NODE(b->order[i]);
        k->first = (uint32_t)i;
        k->m = (uint32_t)(j - i);
        k->redo = k->single = 0;
        i = j;
    }
    return 0;
}

/* The arguments of call k in b->argv: the keys, then each operation's
 * arguments. Returns argc. */
static int call_args(dl_batch *b, const dl_chunk *k)
{
    size_t a = DL_SCRIPT_HEAD;
    for (size_t i = 0; i < k->m; i++) {
        const dl_op *op = &b->ops[IDX(b->order[k->first + i])];
        assert(op->argc - DL_SCRIPT_HEAD <= DL_BATCH_GROUP || k->m == 1);
        for (int j = 0; j < op->nkeys; j++, a++) {
            b->argv[a] = op->argv[DL_SCRIPT_HEAD + j];
            b->lens[a] = op->lens[DL_SCRIPT_HEAD + j];
        }
    }
    for (size_t i = 0; i < k->m; i++) {
        const dl_op *op = &b->ops[IDX(b->order[k->first + i])];
        for (int j = DL_SCRIPT_HEAD + op->nkeys; j < op->argc; j++, a++) {
            b->argv[a] = op->argv[j];
            b->lens[a] = op->lens[j];
        }
    }
    return (int)a;
}

/* Count call k's reply r (NULL: none) for each of its operations. */
static void count(dl_batch *b, const dl_chunk *k, const redisReply *r)
{
    for (size_t i = 0; i < k->m; i++) {
        size_t e = IDX(b->order[k->first + i]);
        const dl_op *op = &b->ops[e];
        dl_vote v = { r ? DL_V_BAD : DL_V_NONE, 0, 0, 0 };
        if (r && op->batch <= 1)
            op->decode(r, &v);
        else if (r && r->type == REDIS_REPLY_ARRAY && r->elements == k->m)
            op->decode(r->element[i], &v);
        dl_exec_tally(&b->tallies[e], &v);
    }
}

/* Queue the calls (every one, or those marked redo) on their nodes'
 * pipelines, and flush them (nodes[0..nnodes), as planned); a node whose
 * link fails gets ok[] = 0. */
static void send_calls(dl_topology *t, const dl_scripts *s, int wd,
                       dl_batch *b, int redo, int *ok, size_t nnodes)
{
    char err[DL_ERRLEN];
    for (size_t i = 0; i < b->nchunks; i++) {
        const dl_chunk *k = &b->chunks[i];
        if (redo && !k->redo)
            continue;
        const dl_op *op = &b->ops[IDX(b->order[k->first])];
        dl_call call = { .id = op->id, .nkeys = op->nkeys * (int)k->m,
                         .argc = call_args(b, k), .argv = b->argv,
                         .lens = b->lens, .wd = wd };
        if (ok[k->node] &&
            dl_script_append(dl_topology_conn(t, k->node, wd), s, &call, err,
                             sizeof err) != DL_OK)
            ok[k->node] = 0;
    }
    for (size_t n = 0; n < nnodes; n++)    /* all nodes work at once */
        if (ok[n] && dl_topology_conn(t, n, wd)->ctx &&
            dl_conn_flush(dl_topology_conn(t, n, wd), err, sizeof err)
                != DL_OK)
            ok[n] = 0;
}

/* What a node's error reply asks of the calls after it. */
enum { FINE = 0, NOSCRIPT = 1, MIGRATING = 2, MOVED = 4, DEMOTED = 8 };

static int classify(const dl_topology *t, const redisReply *r)
{
    if (dl_script_noscript(r))
        return NOSCRIPT;
    if (r->type != REDIS_REPLY_ERROR)
        return FINE;
    if (t->kind != DL_TOPO_CLUSTER && (!strncmp(r->str, "ASK ", 4) ||
                                       !strncmp(r->str, "TRYAGAIN", 8) ||
                                       !strncmp(r->str, "MOVED ", 6)))
        return FINE;                    /* not followed: an error reply */
    if (!strncmp(r->str, "ASK ", 4) || !strncmp(r->str, "TRYAGAIN", 8))
        return MIGRATING;               /* some keys moved already */
    if (!strncmp(r->str, "MOVED ", 6))
        return MOVED;
    if (!strncmp(r->str, "READONLY", 8))
        return DEMOTED;                 /* Sentinel: master demoted */
    return FINE;
}

/* Read the replies of the calls sent by send_calls, each from its node in
 * the order sent, and count them. In the first round a call answered
 * NOSCRIPT is marked redo and not counted; in the second it counts as an
 * error. */
static void read_calls(dl_topology *t, int wd, dl_batch *b, int redo,
                       int *ok, int *what)
{
    char err[DL_ERRLEN];
    for (size_t i = 0; i < b->nchunks; i++) {
        dl_chunk *k = &b->chunks[i];
        if (redo && !k->redo)
            continue;
        k->redo = 0;
        redisReply *r = NULL;
        if (!ok[k->node] ||
            dl_conn_read(dl_topology_conn(t, k->node, wd), &r, err,
                         sizeof err)
                != DL_OK) {
            ok[k->node] = 0;
            count(b, k, NULL);
            continue;
        }
        int c = classify(t, r);
        if (c == NOSCRIPT && !redo)
            k->redo = 1;
        else if (c == MIGRATING)
            k->single = 1;
        what[k->node] |= c;
        if (!k->redo && !k->single)
            count(b, k, r);
        freeReplyObject(r);
    }
}

/* Run one by one the operations of calls whose slot is migrating: each
 * follows its own key's ASK redirect (with ASKING); one whose keys are
 * not all on one node (TRYAGAIN) runs in its one-key form, if it has one
 * (op.h), as run_one does (exec.c). */
static void run_singly(dl_topology *t, const dl_scripts *s, int wd,
                       dl_batch *b)
{
    char err[DL_ERRLEN];
    for (size_t i = 0; i < b->nchunks; i++) {
        dl_chunk *k = &b->chunks[i];
        if (!k->single)
            continue;
        k->single = 0;
        for (uint32_t j = 0; j < k->m; j++) {
            dl_chunk one = { k->node, k->first + j, 1, 0, 0 };
            dl_op *op = &b->ops[IDX(b->order[one.first])];
            redisReply *r = NULL;
            dl_op alt;
            dl_call call;
            dl_exec_call_of(op, &call);
            call.argc = call_args(b, &one);
            call.argv = b->argv;
            call.lens = b->lens;
            call.wd = wd;
            dl_status st = dl_cluster_run(t, s, &call, &r, err, sizeof err);
            if (st == DL_EAGAIN && dl_op_one_key(op, &alt)) {
                dl_exec_call_of(&alt, &call);
                call.wd = wd;
                st = dl_cluster_run(t, s, &call, &r, err, sizeof err);
            }
            if (st != DL_OK)
                r = NULL;
            count(b, &one, r);
            if (r)
                freeReplyObject(r);
        }
    }
}

dl_status dl_batch_verdict(const dl_topology *t, const dl_batch *b,
                           size_t i, dl_result *res, char *err,
                           size_t errlen)
{
    return dl_exec_verdict(t, &b->ops[i], &b->tallies[i], 1, NULL, res, err,
                           errlen);
}

size_t dl_batch_run(dl_topology *t, const dl_scripts *s, int wd,
                    dl_batch *b)
{
    char err[DL_ERRLEN];
    int ok[DL_MAX_NODES], what[DL_MAX_NODES] = { 0 };
    if (b->n == 0)
        return 0;
    memset(b->tallies, 0, b->n * sizeof *b->tallies);
    pthread_mutex_lock(t->mu);
    size_t nnodes = t->nnodes;
    int planned = plan(t, b);
    pthread_mutex_unlock(t->mu);
    if (planned != 0 || cut(b) != 0) {
        b->nchunks = 0;
        for (size_t i = 0; i < b->n; i++)
            b->tallies[i].bad++;        /* out of memory: failed */
        return 0;
    }
    for (size_t n = 0; n < nnodes; n++)
        ok[n] = 1;
    send_calls(t, s, wd, b, 0, ok, nnodes);
    read_calls(t, wd, b, 0, ok, what);
    int again = 0;
    for (size_t n = 0; n < nnodes; n++) {
        if (!(what[n] & NOSCRIPT))
            continue;                   /* else nothing is pending on it */
        ok[n] = ok[n] && dl_script_ready(dl_topology_conn(t, n, wd), s, 1,
                                         err, sizeof err) == DL_OK;
        again = 1;
    }
    if (again) {
        send_calls(t, s, wd, b, 1, ok, nnodes);
        read_calls(t, wd, b, 1, ok, what);
    }
    run_singly(t, s, wd, b);
    for (size_t n = 0; n < nnodes; n++) {
        if (what[n] & MOVED)            /* Cluster: the map moved */
            (void)dl_cluster_refresh(t, n, wd, err, sizeof err);
        else if (!ok[n])                /* Cluster: a node gone? */
            (void)dl_cluster_remap(t, n, wd);
        if (what[n] & DEMOTED)          /* ask the sentinels again */
            dl_conn_retarget(dl_topology_conn(t, n, wd));
    }
    return b->nchunks;
}
