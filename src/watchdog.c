/* SPDX-License-Identifier: MIT
 * watchdog.c: the renewal thread.
 *
 * DESIGN. One thread per client, its own hiredis connection to each node,
 * one mutex (the client's) and one condition variable on CLOCK_MONOTONIC,
 * in the shape of Redis's bio.c: the loop starts with the mutex held,
 * scans the registry, drops the mutex for the network, and retakes it to
 * record what Redis said. Each pass:
 *   1. marks lost every hold whose local deadline has passed (the lease
 *      may have run out without a confirmed renewal);
 *   2. takes every watchdog hold due for renewal, renewing up to lease/6
 *      early so that holds drift into the same pass, and notes the node
 *      (and Cluster slot) each goes to - every node on Redlock;
 *   3. renews them with one script call per DL_RENEW_BATCH keys of one
 *      node (and one slot, which Cluster scripts need), every call of the
 *      pass pipelined and written to all nodes before any reply is read:
 *      one round trip per pass, however many holds;
 *   4. releases orphans (holds of collected coroutines) and frees them;
 *   5. counts the answers per hold against the quorum (1, or N/2+1 on
 *      Redlock): renewed, lost, or retried soon;
 *   6. sleeps until the earliest renewal or deadline, or a poke.
 * The thread runs no Lua, blocks every signal, and is joined by close.
 */
#define _GNU_SOURCE
#include "watchdog.h"
#include "pending.h"
#include "redlock.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOST_TAKEN "lost: another owner holds the lock"
#define LOST_UNCONFIRMED "lost: the lease ran out before a renewal was confirmed"
#define LOST_EXPIRED "lost: the lease expired"
#define LOST_MAXHOLD "lost: max_hold"

/* Grow *p (of *cap elements of size sz) to hold n. */
static int grow(void *p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(*(void **)p, c * sz);
    if (!q)
        return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

static int reserve_batch(dl_watchdog *w, size_t n)
{
    size_t cap = w->capbatch, c2 = cap, c3 = cap, c4 = cap, c5 = cap;
    size_t c6 = cap;
    if (grow(&w->batch, &cap, n, sizeof *w->batch) ||
        grow(&w->gens, &c2, n, sizeof *w->gens) ||
        grow(&w->votes, &c3, n, sizeof *w->votes) ||
        grow(&w->ms, &c4, n, sizeof *w->ms) ||
        grow(&w->ms_s, &c5, n, sizeof *w->ms_s) ||
        grow(&w->tok_s, &c6, n, sizeof *w->tok_s))
        return -1;
    w->capbatch = cap;
    return 0;
}

/* With c->mu held: h has nothing left; the Lua thread frees it. */
static void finish(dl_client *c, dl_hold *h)
{
    if (h->count > 0 || h->pend != DL_PEND_NONE)
        return;
    h->finished = 1;
    c->sweep = 1;
    __atomic_store_n(&c->pending, 1, __ATOMIC_RELEASE);
}

/* When h's max_hold runs out (INT64_MAX: never). */
static int64_t cap_end(const dl_client *c, const dl_hold *h)
{
    int64_t cap = c->opts.max_hold_ms * 1000;
    return cap > 0 ? h->acquired_us + cap : INT64_MAX;
}

/* Steps 1 and 2, with c->mu held. Returns when to look next. */
static int64_t scan(dl_client *c, int64_t now)
{
    dl_watchdog *w = c->wd;
    dl_topology *t = &c->topo;
    int64_t lease = c->opts.lease_ms * 1000, next = INT64_MAX;
    int64_t retry = lease / 10 < 1000000 ? lease / 10 : 1000000;
    w->nbatch = w->norder = w->nsettle = 0;
    for (dl_hold *h = c->reg.head; h; h = h->next) {
        if (h->pend != DL_PEND_NONE && !h->pend_lua && !h->inflight) {
            if (now > h->pend_until_us) {   /* its lease has run out */
                if (h->pend == DL_PEND_RELEASE)
                    c->stats.unconfirmed++;
                h->pend = DL_PEND_NONE;
                finish(c, h);
            } else if (h->pend_retry_us > now) {
                if (h->pend_retry_us < next)
                    next = h->pend_retry_us;
            } else if (w->nsettle < DL_SETTLE_MAX) {
                h->inflight = 1;
                h->pend_retry_us = now + retry;
                dl_client_pending_copy(h, &w->snap[w->nsettle]);
                w->settle[w->nsettle++] = h;
            } else {
                next = now;                 /* the rest in the next pass */
            }
        }
        if (h->lost || h->count <= 0)
            continue;
        if (now >= h->deadline_us) {
            dl_client_lose(c, h, !h->watchdog ? LOST_EXPIRED
                                 : h->final ? LOST_MAXHOLD
                                 : LOST_UNCONFIRMED);
            continue;
        }
        if (h->deadline_us < next)
            next = h->deadline_us;
        if (!h->watchdog || h->inflight || h->final)
            continue;
        if (h->retry_at_us > now) {         /* back off after a failure */
            if (h->retry_at_us < next)
                next = h->retry_at_us;
            continue;
        }
        int64_t hl = h->lease_ms * 1000;   /* this hold's watchdog lease */
        if (h->renew_at_us > now + hl / 6) {
            if (h->renew_at_us < next)
                next = h->renew_at_us;
            continue;
        }
        size_t fan = t->kind == DL_TOPO_REDLOCK ? t->nnodes : 1;
        if (reserve_batch(w, w->nbatch + 1) != 0 ||
            grow(&w->order, &w->caporder, w->norder + fan,
                 sizeof *w->order) != 0) {
            next = now + 10000;             /* out of memory: later */
            break;
        }
        size_t e = w->nbatch++;
        h->inflight = 1;
        /* The renewal that would outlive max_hold sets exactly the time
         * left, and is the last. */
        int64_t end = cap_end(c, h);
        w->ms[e] = now + hl < end ? h->lease_ms : (end - now + 999) / 1000;
        if (w->ms[e] < 1)
            w->ms[e] = 1;
        snprintf(w->ms_s[e], sizeof w->ms_s[e], "%lld", (long long)w->ms[e]);
        snprintf(w->tok_s[e], sizeof w->tok_s[e], "%lld", (long long)h->token);
        w->gens[e] = h->gen;
        w->batch[e] = h;
        memset(&w->votes[e], 0, sizeof w->votes[e]);
        uint64_t slot = 0, node = 0;
        if (t->kind == DL_TOPO_CLUSTER) {
            slot = dl_key_slot(h->key, h->keylen);
            node = t->slots[slot] == DL_NO_NODE ? 0 : t->slots[slot];
        }
        for (size_t k = 0; k < fan; k++)
            w->order[w->norder++] = ((node + k) << 40) | (slot << 24) | e;
    }
    return next;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define ENTRY(o) ((size_t)((o) & 0xffffff))
#define SLOT(o)  ((unsigned)(((o) >> 24) & 0xffff))
#define NODE(o)  ((size_t)((o) >> 40))

/* Cut the sorted order into script calls: one node, one slot, at most
 * DL_RENEW_BATCH keys each. */
static int make_chunks(dl_watchdog *w)
{
    w->nchunks = 0;
    for (size_t i = 0; i < w->norder;) {
        size_t j = i + 1;
        while (j < w->norder && j - i < DL_RENEW_BATCH &&
               NODE(w->order[j]) == NODE(w->order[i]) &&
               SLOT(w->order[j]) == SLOT(w->order[i]))
            j++;
        if (grow(&w->chunks, &w->capchunks, w->nchunks + 1,
                 sizeof *w->chunks) != 0)
            return -1;
        dl_chunk *k = &w->chunks[w->nchunks++];
        k->node = (uint32_t)NODE(w->order[i]);
        k->first = (uint32_t)i;
        k->m = (uint32_t)(j - i);
        k->redo = 0;
        k->single = 0;
        i = j;
    }
    return 0;
}

/* The arguments of chunk k in w->argv/w->lens: the keys, then owner,
 * lease and token per key. Returns argc. */
static int chunk_args(dl_client *c, const dl_chunk *k)
{
    dl_watchdog *w = c->wd;
    size_t a = DL_SCRIPT_HEAD;
    for (size_t i = 0; i < k->m; i++, a++) {
        const dl_hold *h = w->batch[ENTRY(w->order[k->first + i])];
        w->argv[a] = h->key;
        w->lens[a] = h->keylen;
    }
    for (size_t i = 0; i < k->m; i++, a += 3) {
        size_t e = ENTRY(w->order[k->first + i]);
        const dl_hold *h = w->batch[e];
        w->argv[a] = h->owner;
        w->lens[a] = h->ownerlen;
        w->argv[a + 1] = w->ms_s[e];
        w->lens[a + 1] = strlen(w->ms_s[e]);
        w->argv[a + 2] = w->tok_s[e];
        w->lens[a + 2] = strlen(w->tok_s[e]);
    }
    return (int)a;
}

/* Count chunk k's answers: per key 1 renewed, 0 gone, -1 taken. */
static void tally(dl_watchdog *w, const dl_chunk *k, const redisReply *r)
{
    for (size_t i = 0; i < k->m; i++) {
        dl_votes *v = &w->votes[ENTRY(w->order[k->first + i])];
        long long x = 2;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == k->m &&
            r->element[i]->type == REDIS_REPLY_INTEGER)
            x = r->element[i]->integer;
        if (x == 1)
            v->ok++;
        else if (x == 0)
            v->gone++;
        else if (x == -1)
            v->taken++;
        else
            v->err++;
    }
}

/* DROP every orphan on its node(s), queued on the pipelines. */
static void queue_orphans(dl_client *c, dl_hold *orphans, size_t nnodes,
                          size_t *ndrop)
{
    dl_topology *t = &c->topo;
    char err[DL_ERRLEN];
    char bufs[3][24];
    for (dl_hold *h = orphans; h; h = h->onext) {
        const char *argv[DL_SCRIPT_HEAD + 7];
        size_t lens[DL_SCRIPT_HEAD + 7];
        if (!dl_client_drop_args(c, h, argv, lens, bufs))
            continue;
        size_t lo = 0, hi = nnodes;
        if (t->kind != DL_TOPO_REDLOCK) {
            lo = dl_topology_route(t, h->key, h->keylen);
            hi = lo + 1;
        }
        for (size_t k = lo; k < hi; k++)
            if (dl_script_append(&t->nodes[k]->wd, &c->scripts, DL_S_DROP,
                                 1, 10, argv, lens, err, sizeof err) == DL_OK)
                ndrop[k]++;
    }
}

/* Queue the renewal chunks (every one, or those marked redo) on their
 * nodes' pipelines; a node whose connection fails gets sent[] = 0. */
static void queue_chunks(dl_client *c, int redo, int *sent)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    for (size_t i = 0; i < w->nchunks; i++) {
        const dl_chunk *k = &w->chunks[i];
        if (redo && !k->redo)
            continue;
        int argc = chunk_args(c, k);
        if (sent[k->node] &&
            dl_script_append(&c->topo.nodes[k->node]->wd, &c->scripts,
                             DL_S_RENEW, (int)k->m, argc, w->argv, w->lens,
                             err, sizeof err) != DL_OK)
            sent[k->node] = 0;
    }
}

static void flush_nodes(dl_topology *t, int *sent, size_t nnodes)
{
    char err[DL_ERRLEN];
    for (size_t k = 0; k < nnodes; k++)     /* all nodes work at once */
        if (sent[k] && t->nodes[k]->wd.ctx &&
            dl_conn_flush(&t->nodes[k]->wd, err, sizeof err) != DL_OK)
            sent[k] = 0;
}

/* Read the replies of the chunks queued by queue_chunks, each from its
 * node in the order sent, and count them. In the first round (!redo) a
 * chunk answered NOSCRIPT is marked redo and not counted, and its node in
 * noscript[]; in the second it counts as an error. */
static void read_chunks(dl_client *c, int redo, int *sent, int *noscript,
                        int *moved, int *retarget)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    for (size_t i = 0; i < w->nchunks; i++) {
        dl_chunk *k = &w->chunks[i];
        if (redo && !k->redo)
            continue;
        k->redo = 0;
        dl_conn *conn = &c->topo.nodes[k->node]->wd;
        redisReply *r = NULL;
        if (!sent[k->node] ||
            dl_conn_read(conn, &r, err, sizeof err) != DL_OK) {
            sent[k->node] = 0;
            tally(w, k, NULL);
            continue;
        }
        if (!redo && dl_script_noscript(r)) {
            k->redo = 1;
            noscript[k->node] = 1;
        } else if (r->type == REDIS_REPLY_ERROR &&
                   (strncmp(r->str, "ASK ", 4) == 0 ||
                    strncmp(r->str, "TRYAGAIN", 8) == 0)) {
            k->single = 1;                  /* some keys moved already */
        } else if (r->type == REDIS_REPLY_ERROR &&
                   strncmp(r->str, "MOVED ", 6) == 0) {
            moved[k->node] = 1;
        } else if (r->type == REDIS_REPLY_ERROR &&
                   strncmp(r->str, "READONLY", 8) == 0) {
            retarget[k->node] = 1;          /* Sentinel: master demoted */
        }
        if (!k->redo && !k->single)
            tally(w, k, r);
        freeReplyObject(r);
    }
}

/* Renew one by one the holds of chunks whose slot is migrating: each
 * call follows its own key's ASK redirect (with ASKING). */
static void renew_singly(dl_client *c)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    for (size_t i = 0; i < w->nchunks; i++) {
        dl_chunk *k = &w->chunks[i];
        if (!k->single)
            continue;
        k->single = 0;
        for (size_t j = 0; j < k->m; j++) {
            dl_chunk one = { k->node, k->first + (uint32_t)j, 1, 0, 0 };
            int argc = chunk_args(c, &one);
            const dl_hold *h = w->batch[ENTRY(w->order[one.first])];
            redisReply *r = NULL;
            if (dl_topology_eval(&c->topo, &c->scripts, 1, h->key, h->keylen,
                                 DL_S_RENEW, 1, argc, w->argv, w->lens, &r,
                                 err, sizeof err) != DL_OK)
                r = NULL;
            tally(w, &one, r);
            if (r)
                freeReplyObject(r);
        }
    }
}

/* Steps 3 and 4, without the mutex. Fills w->votes. Returns the number
 * of script calls made.
 *
 * Every reply is read from the connection its request went to, in the
 * order sent, so each hold is counted on its own answer. A server that
 * lost the scripts (SCRIPT FLUSH; a restart or a new Cluster node is met
 * by loading them on every new connection) answers NOSCRIPT: once all of
 * that node's replies are in, the scripts are loaded again and those
 * chunks sent in a second round. */
static size_t renew(dl_client *c, dl_hold *orphans, size_t nnodes)
{
    dl_watchdog *w = c->wd;
    dl_topology *t = &c->topo;
    char err[DL_ERRLEN];
    size_t ndrop[DL_MAX_NODES] = { 0 };
    int sent[DL_MAX_NODES], moved[DL_MAX_NODES] = { 0 };
    int retarget[DL_MAX_NODES] = { 0 }, noscript[DL_MAX_NODES] = { 0 };
    /* An orphan's pending request is ended before its holds are dropped
     * (rare: one call each, before anything is queued). */
    for (dl_hold *h = orphans; h; h = h->onext)
        dl_client_pending_end(c, 1, h);
    if (w->norder > 1)                      /* none: order may be NULL */
        qsort(w->order, w->norder, sizeof *w->order, cmp_u64);
    if (make_chunks(w) != 0) {
        w->nchunks = 0;
        for (size_t i = 0; i < w->nbatch; i++)
            w->votes[i].err++;
        return 0;
    }
    for (size_t k = 0; k < nnodes; k++)
        sent[k] = 1;
    queue_chunks(c, 0, sent);
    queue_orphans(c, orphans, nnodes, ndrop);
    flush_nodes(t, sent, nnodes);
    read_chunks(c, 0, sent, noscript, moved, retarget);
    int again = 0;
    for (size_t k = 0; k < nnodes; k++) {
        for (size_t i = 0; sent[k] && i < ndrop[k]; i++) {
            redisReply *r;
            if (dl_conn_read(&t->nodes[k]->wd, &r, err, sizeof err) != DL_OK)
                break;
            freeReplyObject(r);
        }
        if (noscript[k]) {                  /* nothing pending on it now */
            sent[k] = sent[k] && dl_scripts_ready(&t->nodes[k]->wd,
                                                  &c->scripts, 1, err,
                                                  sizeof err) == DL_OK;
            again = 1;
        }
    }
    if (again) {
        queue_chunks(c, 1, sent);
        flush_nodes(t, sent, nnodes);
        read_chunks(c, 1, sent, noscript, moved, retarget);
    }
    renew_singly(c);
    for (size_t k = 0; k < nnodes; k++) {
        if (moved[k])                       /* Cluster: the map moved */
            (void)dl_topology_refresh(t, k, 1, err, sizeof err);
        if (retarget[k])                    /* ask the sentinels again */
            dl_conn_retarget(&t->nodes[k]->wd);
    }
    return w->nchunks;
}

/* Steps 5: record the results of a pass sent at `sent`, with c->mu held. */
static void record(dl_client *c, int64_t sent, size_t calls)
{
    dl_watchdog *w = c->wd;
    dl_topology *t = &c->topo;
    size_t q = (size_t)t->quorum;
    size_t n = t->kind == DL_TOPO_REDLOCK ? t->nnodes : 1;
    int failed = 0;
    for (size_t i = 0; i < w->nbatch; i++) {
        dl_hold *h = w->batch[i];
        const dl_votes *v = &w->votes[i];
        h->inflight = 0;
        if (h->dead) {
            free(h);
            continue;
        }
        if (h->lost || h->gen != w->gens[i])
            continue;
        int64_t lease = h->lease_ms * 1000;
        int64_t retry = lease / 10 < 1000000 ? lease / 10 : 1000000;
        if (v->ok >= q) {
            int64_t drift = dl_redlock_drift_us(c, w->ms[i]);
            int64_t end = cap_end(c, h);
            int64_t until = sent + w->ms[i] * 1000 - drift;
            if (w->ms[i] < h->lease_ms) {       /* the last, at max_hold */
                h->final = 1;
                until = end - drift;
            }
            if (until > h->deadline_us)
                h->deadline_us = until;
            h->renew_at_us = sent + lease / 3;
            h->retry_at_us = 0;
            c->stats.renewed++;
        } else if ((size_t)(v->gone + v->taken) > n - q) {
            dl_client_lose(c, h, v->taken ? LOST_TAKEN : LOST_GONE);
        } else {
            failed = 1;
            h->retry_at_us = dl_now_us() + retry;
        }
    }
    c->stats.renew_batches += calls;
    if (failed)
        c->stats.renew_errors++;
    w->nbatch = 0;
}

/* Step 4b, without the mutex: end the pending requests taken by scan
 * (resend a release, cancel an acquire), one at a time: they are rare. */
static void settle_io(dl_client *c)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    for (size_t i = 0; i < w->nsettle; i++) {
        int64_t left;
        dl_client_pending_io(c, 1, &w->snap[i], &w->snap[i].done,
                             &w->snap[i].code, &left, err, sizeof err);
    }
}

/* With c->mu held: record what settle_io learnt. */
static void settle_record(dl_client *c)
{
    dl_watchdog *w = c->wd;
    for (size_t i = 0; i < w->nsettle; i++) {
        dl_hold *h = w->settle[i];
        h->inflight = 0;
        if (h->dead) {
            free(h);
            continue;
        }
        if (w->snap[i].done) {
            dl_client_pending_done(c, h, w->snap[i].seq, w->snap[i].code);
            finish(c, h);
        }
    }
    w->nsettle = 0;
}

static void wait_until(dl_client *c, int64_t when_us)
{
    c->wd->next_wake_us = when_us;
    if (when_us == INT64_MAX) {
        pthread_cond_wait(&c->wd->cv, &c->mu);
        return;
    }
    struct timespec ts;
    ts.tv_sec = (time_t)(when_us / 1000000);
    ts.tv_nsec = (long)(when_us % 1000000) * 1000;
    pthread_cond_timedwait(&c->wd->cv, &c->mu, &ts);
}

static void *run(void *arg)
{
    dl_client *c = arg;
    dl_watchdog *w = c->wd;
    pthread_mutex_lock(&c->mu);
    while (!w->stopping) {                  /* invariant: c->mu held */
        int64_t next = scan(c, dl_now_us());
        dl_hold *orphans = c->reg.orphans;
        c->reg.orphans = NULL;
        if (w->nbatch == 0 && !orphans && w->nsettle == 0) {
            wait_until(c, next);
            continue;
        }
        size_t nnodes = c->topo.nnodes;
        w->next_wake_us = 0;                /* busy: no pokes needed */
        pthread_mutex_unlock(&c->mu);
        if (__atomic_exchange_n(&c->topo.wd_retarget, 0, __ATOMIC_ACQ_REL))
            dl_conn_retarget(&c->topo.nodes[0]->wd);   /* Sentinel news */
        int64_t sent = dl_now_us();
        size_t calls = renew(c, orphans, nnodes);
        while (orphans) {
            dl_hold *next_o = orphans->onext;
            free(orphans);
            orphans = next_o;
        }
        settle_io(c);
        pthread_mutex_lock(&c->mu);
        record(c, sent, calls);
        settle_record(c);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

dl_status dl_watchdog_start(dl_client *c, char *err, size_t errlen)
{
    dl_watchdog *w = c->wd = calloc(1, sizeof *c->wd);
    if (!w)
        return dl_fail(err, errlen, DL_ECONN, "out of memory");
    size_t n = DL_SCRIPT_HEAD + 4 * DL_RENEW_BATCH;
    w->argv = malloc(n * sizeof *w->argv);
    w->lens = malloc(n * sizeof *w->lens);
    w->settle = malloc(DL_SETTLE_MAX * sizeof *w->settle);
    w->snap = malloc(DL_SETTLE_MAX * sizeof *w->snap);
    if (!w->argv || !w->lens || !w->settle || !w->snap)
        return dl_fail(err, errlen, DL_ECONN, "out of memory");
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return dl_fail(err, errlen, DL_ECONN, "cannot create a condition");
    w->cv_ready = 1;
    w->next_wake_us = INT64_MAX;

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dl_fail(err, errlen, DL_ECONN, "cannot start the watchdog");
    /* Named here, not by the thread: visible as soon as connect returns. */
    pthread_setname_np(w->thread, "dlock-watchdog");
    w->running = 1;
    return DL_OK;
}

void dl_watchdog_stop(dl_client *c)
{
    dl_watchdog *w = c->wd;
    if (!w)
        return;
    if (w->running) {
        pthread_mutex_lock(&c->mu);
        w->stopping = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(w->thread, NULL);
        w->running = 0;
    }
    /* In a forked child the parent's thread may have been waiting on cv:
     * destroying it there could block, so it is left alone. */
    if (w->cv_ready && dl_client_same_process(c))
        pthread_cond_destroy(&w->cv);
    w->cv_ready = 0;
    free(w->batch);
    free(w->gens);
    free(w->votes);
    free(w->ms);
    free(w->ms_s);
    free(w->tok_s);
    free(w->settle);
    free(w->snap);
    free(w->order);
    free(w->chunks);
    free(w->argv);
    free(w->lens);
    free(w);
    c->wd = NULL;
}

void dl_watchdog_poke(dl_client *c, int64_t when_us)
{
    if (c->wd && c->wd->running && when_us < c->wd->next_wake_us) {
        c->wd->next_wake_us = when_us;
        pthread_cond_signal(&c->wd->cv);
    }
}
