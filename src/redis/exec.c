/* SPDX-License-Identifier: MIT
 * exec.c: one executor for every operation on every topology.
 *
 * One server (single, Sentinel, Cluster): the operation goes to the node
 * that owns its key (cluster.c follows the redirects); a multi-key script
 * whose slot is mid-migration runs in its one-key form (op.h) if it has
 * one, else again until the command timeout. Its one vote decides.
 *
 * Redlock, as the Redis documentation gives it: the operation goes to
 * all N masters at once (one pipelined write per master, then the
 * replies, the whole bounded by the command timeout) and N/2+1 agreeing
 * votes decide. A grant is valid for lease - elapsed - drift, measured
 * from before it was sent; the caller cancels a grant that falls short
 * (res->maybe), "even on the instances it believed it was not able to
 * lock". Fencing: each master keeps its own counter; the token of a hold
 * is the highest among the quorum that granted it, and when the votes
 * differ that value is written back before the grant counts. Any two
 * quorums share a master, so the next quorum's counter is above every
 * token handed out before, as long as the masters keep their data
 * (doc/scaling-out.md). Explicit owners are refused on Redlock
 * (lua_lock.c): each master would count a shared owner's holds on its
 * own.
 */
#define _GNU_SOURCE
#include "redis/exec.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t dl_exec_drift_us(const dl_topology *t, int64_t ms)
{
    return t->kind == DL_TOPO_REDLOCK ? ms * 10 + 2000 : 0;
}

/* ---- what the topology means to the lock operations ------------------ */

dl_status dl_exec_load_scripts(dl_topology *t, dl_scripts *s, char *err,
                               size_t errlen)
{
    size_t ok = 0, need = dl_exec_quorum(t);
    dl_status st = DL_ECONN;
    for (size_t i = 0; i < t->nnodes; i++) {
        if (t->kind == DL_TOPO_CLUSTER &&
            (st = dl_cluster_refresh(t, i, 0, err, errlen)) != DL_OK)
            continue;
        st = dl_script_load(&t->nodes[i]->cmd, s, err, errlen);
        if (st == DL_OK)
            ok++;
        if (st == DL_OK && !dl_exec_fans_out(t))
            break;
    }
    if (ok >= need)
        return DL_OK;
    if (dl_exec_fans_out(t))
        return dl_fail(err, errlen, DL_EQUORUM, "quorum: only %zu of %zu "
                       "servers reachable", ok, t->nnodes);
    return st;
}

size_t dl_exec_quorum(const dl_topology *t)
{
    return t->kind == DL_TOPO_REDLOCK ? (size_t)t->quorum : 1;
}

int dl_exec_fans_out(const dl_topology *t)
{
    return t->kind == DL_TOPO_REDLOCK;
}

size_t dl_exec_waiters(dl_topology *t, const char *key, size_t len,
                       dl_waiter **ws)
{
    size_t lo = 0, hi = t->nnodes, n = 0;
    if (!dl_exec_fans_out(t)) {
        lo = dl_topology_route(t, key, len);
        hi = lo + 1;
    }
    for (size_t i = lo; i < hi; i++)
        ws[n++] = &t->nodes[i]->sub;
    return n;
}

int dl_exec_by_slot(const dl_topology *t)
{
    return t->kind == DL_TOPO_CLUSTER;
}

int dl_exec_same_node(const dl_topology *t, const char *a, size_t alen,
                      const char *b, size_t blen)
{
    return t->kind != DL_TOPO_CLUSTER ||
           dl_slot_of(a, alen) == dl_slot_of(b, blen);
}

const char *dl_exec_publish_verb(const dl_topology *t)
{
    return t->kind == DL_TOPO_CLUSTER ? "spublish" : "publish";
}

const char *dl_exec_numsub_verb(const dl_topology *t)
{
    return t->kind == DL_TOPO_CLUSTER ? "shardnumsub" : "numsub";
}

void dl_exec_tally(dl_tally *tl, const dl_vote *v)
{
    tl->form |= v->form;
    switch (v->kind) {
    case DL_V_YES:
        if (!tl->yes || v->y < tl->ymin)
            tl->ymin = v->y;
        if (!tl->yes || v->y > tl->ymax)
            tl->ymax = v->y;
        tl->yes++;
        break;
    case DL_V_BUSY:
        if (!tl->busy || v->x < tl->busy_min)
            tl->busy_min = v->x;
        tl->busy++;
        break;
    case DL_V_NO:    tl->no++;    break;
    case DL_V_TAKEN: tl->taken++; break;
    case DL_V_NONE:  tl->none++;  break;
    default:         tl->bad++;   break;
    }
}

dl_status dl_exec_verdict(const dl_topology *t, const dl_op *op,
                          const dl_tally *tl, int valid, const char *rerr,
                          dl_result *res, char *err, size_t errlen)
{
    const char *name = op->name;
    size_t n = t->kind == DL_TOPO_REDLOCK ? t->nnodes : 1;
    size_t q = (size_t)t->quorum, replied = n - tl->none;
    res->yes = tl->yes;
    res->form = tl->form;
    res->maybe = n > 1 && (tl->yes > 0 || tl->none > 0);
    if (tl->yes >= q && valid) {
        res->kind = DL_V_YES;
        res->y = tl->ymax;
        return DL_OK;
    }
    if (replied < q) {
        dl_fail(err, errlen, DL_EQUORUM, "quorum: %s: only %zu of %zu "
                "servers answered", name, replied, n);
        if (t->kind == DL_TOPO_REDLOCK)
            dl_log_say(t->log, DL_LOG_WARN, "%s", err);
        return DL_EQUORUM;
    }
    if (tl->no + tl->taken > n - q) {   /* a quorum does not have it */
        res->kind = tl->taken ? DL_V_TAKEN : DL_V_NO;
        return DL_OK;
    }
    if (tl->yes + tl->busy + tl->no + tl->taken == 0)
        return dl_fail(err, errlen, DL_EREDIS, "%s", rerr && *rerr ? rerr
                       : "unexpected reply");
    if (op->rule == DL_RULE_READ) {         /* not by a quorum: absent */
        res->kind = DL_V_NO;
        return DL_OK;
    }
    if (op->rule == DL_RULE_CONTEND || tl->busy) {
        res->kind = DL_V_BUSY;
        res->busy_ms = tl->busy ? tl->busy_min : 0;
        res->split = tl->busy < q;      /* nobody holds a quorum */
        return DL_OK;
    }
    dl_fail(err, errlen, DL_EQUORUM, "quorum: %s: %u of %zu servers "
            "confirmed", name, tl->yes, n);
    if (t->kind == DL_TOPO_REDLOCK)
        dl_log_say(t->log, DL_LOG_WARN, "%s", err);
    return DL_EQUORUM;
}

void dl_exec_call_of(dl_op *op, dl_call *call)
{
    call->id = op->id;
    call->nkeys = op->nkeys;
    call->argc = op->argc;
    call->argv = DL_OP_ARGV(op);
    call->lens = DL_OP_LENS(op);
    call->lead = op->lead;
    call->key = op->key;
    call->keylen = op->keylen;
    call->wd = op->wd;
}

/* ---- one server ----------------------------------------------------- */

static dl_status run_routed(dl_topology *t, const dl_scripts *s, dl_op *op,
                            redisReply **r, char *err, size_t errlen)
{
    dl_call call;
    dl_conn *conn = NULL;
    dl_exec_call_of(op, &call);
    if (op->block_us) {                 /* the reply may take that long */
        conn = dl_topology_conn(t, dl_topology_route(t, op->key, op->keylen),
                                op->wd);
        dl_conn_read_timeout(conn, op->block_us + (op->wd ? t->wd_timeout_us
                                                  : t->command_timeout_us));
    }
    dl_status st = dl_exec_by_slot(t)
                       ? dl_cluster_run(t, s, &call, r, err, errlen)
                       : dl_topology_run(t, s, &call, r, err, errlen);
    if (conn)
        dl_conn_read_timeout(conn, 0);
    return st;
}

static dl_status run_one(dl_topology *t, const dl_scripts *s, dl_op *op,
                         dl_result *res, char *err, size_t errlen)
{
    redisReply *r;
    dl_op alt;
    int64_t until = res->t0 + (op->wd ? t->wd_timeout_us
                                      : t->command_timeout_us);
    dl_status st;
    for (;;) {
        st = run_routed(t, s, op, &r, err, errlen);
        if (st != DL_EAGAIN)
            break;
        /* A multi-key script whose slot is mid-migration did not run:
         * its one-key form at once, if it has one, else again soon. */
        if (dl_op_one_key(op, &alt)) {
            st = run_routed(t, s, &alt, &r, err, errlen);
            break;
        }
        if (dl_now_us() + 10000 >= until)
            break;
        poll(NULL, 0, 10);
    }
    if (st != DL_OK)
        return st;
    dl_vote v = { DL_V_BAD, 0, 0, 0 };
    dl_tally tl;
    memset(&tl, 0, sizeof tl);
    op->decode(r, &v);
    if (op->keep)
        op->keep[0] = r;
    else
        freeReplyObject(r);
    dl_exec_tally(&tl, &v);
    res->x = v.x;
    char what[64];
    snprintf(what, sizeof what, "unexpected %s reply", op->name);
    return dl_exec_verdict(t, op, &tl, 1, what, res, err, errlen);
}

/* ---- every Redlock master ------------------------------------------- */

static void free_all(redisReply **rs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rs[i])
            freeReplyObject(rs[i]);
}

static int desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Send op to every master; count the votes into tl; xs (if not NULL)
 * gets the x of each yes vote. */
static void fan(dl_topology *t, const dl_scripts *s, dl_op *op,
                dl_tally *tl, int64_t *xs, char *rerr, size_t rerrlen)
{
    redisReply *rs[DL_MAX_NODES];
    dl_call call;
    memset(tl, 0, sizeof *tl);
    dl_exec_call_of(op, &call);
    dl_topology_fan(t, s, &call, rs);
    for (size_t i = 0; i < t->nnodes; i++) {
        dl_vote v = { DL_V_NONE, 0, 0, 0 };
        if (rs[i] && rs[i]->type == REDIS_REPLY_ERROR) {
            dl_reply_error(rs[i], rerr, rerrlen);
            v.kind = DL_V_BAD;
        } else if (rs[i]) {
            op->decode(rs[i], &v);
        }
        if (v.kind == DL_V_YES && xs)
            xs[tl->yes] = v.x;
        dl_exec_tally(tl, &v);
        if (op->keep) {                 /* the caller's now */
            op->keep[i] = rs[i];
            rs[i] = NULL;
        }
    }
    free_all(rs, t->nnodes);
}

/* Whether a grant sent at t0 for op->lease_ms is still valid. */
static int valid(const dl_topology *t, const dl_op *op, int64_t t0)
{
    return !op->lease_ms ||
           op->lease_ms * 1000 - (dl_now_us() - t0) -
           dl_exec_drift_us(t, op->lease_ms) > 0;
}

static dl_status run_all(dl_topology *t, const dl_scripts *s, dl_op *op,
                         dl_result *res, char *err, size_t errlen)
{
    size_t q = (size_t)t->quorum;
    int64_t xs[DL_MAX_NODES];
    char rerr[DL_ERRLEN] = "";
    dl_tally tl;
    dl_op fence;
    fan(t, s, op, &tl, xs, rerr, sizeof rerr);
    int ok = valid(t, op, res->t0);
    if (tl.yes >= q && ok && tl.ymin != tl.ymax &&
        dl_op_unify(op, tl.ymax, &fence)) {
        dl_tally ft;
        fan(t, s, &fence, &ft, NULL, rerr, sizeof rerr);
        ok = ft.yes >= q && valid(t, op, res->t0); /* cannot vouch for it */
    }
    if (tl.yes >= q) {
        qsort(xs, tl.yes, sizeof *xs, desc);
        res->x = xs[q - 1];
    }
    return dl_exec_verdict(t, op, &tl, ok, rerr, res, err, errlen);
}

dl_status dl_exec(dl_topology *t, const dl_scripts *s, dl_op *op,
                  dl_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->t0 = dl_now_us();
    return t->kind == DL_TOPO_REDLOCK ? run_all(t, s, op, res, err, errlen)
                                      : run_one(t, s, op, res, err, errlen);
}
