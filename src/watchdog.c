/* SPDX-License-Identifier: MIT
 * watchdog.c: the renewal thread.
 *
 * DESIGN. One thread per client, its own hiredis connection, one mutex
 * (the client's) and one condition variable on CLOCK_MONOTONIC, in the
 * shape of Redis's bio.c: the loop starts with the mutex held, scans the
 * registry, drops the mutex for the network, and retakes it to record
 * what Redis said. Each pass:
 *   1. marks lost every hold whose local deadline has passed (the lease
 *      may have run out without a confirmed renewal);
 *   2. takes every watchdog hold due for renewal, renewing up to lease/6
 *      early so that holds drift into the same pass;
 *   3. renews them with one script call per DL_RENEW_BATCH keys, all
 *      calls pipelined: one round trip per pass, however many holds;
 *   4. releases orphans (holds of collected coroutines) in the same
 *      pipeline and frees them;
 *   5. sleeps until the earliest renewal or deadline, or a poke.
 * The thread runs no Lua, blocks every signal, and is joined by close.
 */
#define _GNU_SOURCE
#include "watchdog.h"
#include "client.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RES_ERROR 2
#define RES_NOSCRIPT 3
#define LOST_GONE "lost: the lock expired or was deleted"
#define LOST_TAKEN "lost: another owner holds the lock"
#define LOST_UNCONFIRMED "lost: the lease ran out before a renewal was confirmed"
#define LOST_EXPIRED "lost: the lease expired"
#define LOST_MAXHOLD "lost: max_hold reached"

static int reserve_batch(dl_watchdog *w, size_t n)
{
    if (n <= w->capbatch)
        return 0;
    size_t cap = w->capbatch ? w->capbatch * 2 : 64;
    while (cap < n)
        cap *= 2;
    dl_hold **b = realloc(w->batch, cap * sizeof *b);
    if (b)
        w->batch = b;
    uint64_t *g = realloc(w->gens, cap * sizeof *g);
    if (g)
        w->gens = g;
    int *r = realloc(w->res, cap * sizeof *r);
    if (r)
        w->res = r;
    if (!b || !g || !r)
        return -1;
    w->capbatch = cap;
    return 0;
}

static int reserve_argv(dl_watchdog *w, size_t n)
{
    if (n <= w->capargv)
        return 0;
    const char **a = realloc(w->argv, n * sizeof *a);
    if (a)
        w->argv = a;
    size_t *l = realloc(w->lens, n * sizeof *l);
    if (l)
        w->lens = l;
    if (!a || !l)
        return -1;
    w->capargv = n;
    return 0;
}

static int capped(const dl_client *c, const dl_hold *h, int64_t now)
{
    int64_t cap = c->opts.max_hold_ms * 1000;
    return cap > 0 && now + c->opts.lease_ms * 1000 - h->acquired_us > cap;
}

/* Steps 1 and 2, with c->mu held. Returns when to look next. */
static int64_t scan(dl_client *c, int64_t now)
{
    dl_watchdog *w = &c->wd;
    int64_t lease = c->opts.lease_ms * 1000, next = INT64_MAX;
    w->nbatch = 0;
    for (dl_hold *h = c->reg.head; h; h = h->next) {
        if (h->lost || h->count <= 0)
            continue;
        if (now >= h->deadline_us) {
            dl_client_lose(c, h, !h->watchdog ? LOST_EXPIRED
                                 : capped(c, h, now) ? LOST_MAXHOLD
                                 : LOST_UNCONFIRMED);
            continue;
        }
        if (h->deadline_us < next)
            next = h->deadline_us;
        if (!h->watchdog || h->releasing || h->inflight || capped(c, h, now))
            continue;
        if (h->renew_at_us > now + lease / 6) {
            if (h->renew_at_us < next)
                next = h->renew_at_us;
            continue;
        }
        if (reserve_batch(w, w->nbatch + 1) != 0) {
            next = now + 10000;             /* out of memory: later */
            break;
        }
        h->inflight = 1;
        w->gens[w->nbatch] = h->gen;
        w->batch[w->nbatch++] = h;
    }
    return next;
}

/* Results of one renewal call for holds first..first+m. */
static void fill(dl_watchdog *w, size_t first, size_t m, const redisReply *r)
{
    int noscript = dl_script_noscript(r);
    for (size_t i = 0; i < m; i++) {
        w->res[first + i] = noscript ? RES_NOSCRIPT : RES_ERROR;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == m &&
            r->element[i]->type == REDIS_REPLY_INTEGER)
            w->res[first + i] = (int)r->element[i]->integer;
    }
}

/* Steps 3 and 4, without the mutex. Fills w->res. Returns the number
 * of script calls made. */
static size_t renew(dl_client *c, dl_hold *orphans)
{
    dl_watchdog *w = &c->wd;
    char err[DL_ERRLEN], lease_s[24];
    size_t n = w->nbatch, nchunks = (n + DL_RENEW_BATCH - 1) / DL_RENEW_BATCH;
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)c->opts.lease_ms);
    for (size_t i = 0; i < n; i++)
        w->res[i] = RES_ERROR;
    if (reserve_argv(w, 2 * n + (DL_SCRIPT_HEAD + 1) * nchunks) != 0)
        return 0;

    int ok = 1;
    for (size_t k = 0, off = 0; k < nchunks && ok; k++) {
        size_t first = k * DL_RENEW_BATCH;
        size_t m = n - first < DL_RENEW_BATCH ? n - first : DL_RENEW_BATCH;
        const char **argv = w->argv + off;
        size_t *lens = w->lens + off;
        size_t a = DL_SCRIPT_HEAD;
        for (size_t i = 0; i < m; i++, a++) {
            argv[a] = w->batch[first + i]->key;
            lens[a] = w->batch[first + i]->keylen;
        }
        argv[a] = lease_s;
        lens[a++] = strlen(lease_s);
        for (size_t i = 0; i < m; i++, a++) {
            argv[a] = w->batch[first + i]->owner;
            lens[a] = w->batch[first + i]->ownerlen;
        }
        ok = dl_script_append(&w->conn, &c->scripts, DL_S_RENEW, (int)m,
                              (int)a, argv, lens, err, sizeof err) == DL_OK;
        off += a;
    }
    size_t ndrop = 0;
    for (dl_hold *h = orphans; h && ok; h = h->onext, ndrop++) {
        const char *argv[DL_SCRIPT_HEAD + 4];
        size_t lens[DL_SCRIPT_HEAD + 4];
        argv[3] = h->key;   lens[3] = h->keylen;
        argv[4] = h->owner; lens[4] = h->ownerlen;
        argv[5] = h->chan;  lens[5] = h->chanlen;
        argv[6] = "publish"; lens[6] = 7;
        ok = dl_script_append(&w->conn, &c->scripts, DL_S_DROP, 1, 7, argv,
                              lens, err, sizeof err) == DL_OK;
    }

    /* Read every reply in order, then resend chunks whose script the
     * server had lost (SCRIPT FLUSH, restart) with EVAL. */
    for (size_t k = 0; k < nchunks && ok; k++) {
        size_t first = k * DL_RENEW_BATCH;
        size_t m = n - first < DL_RENEW_BATCH ? n - first : DL_RENEW_BATCH;
        redisReply *r;
        if (dl_conn_read(&w->conn, &r, err, sizeof err) != DL_OK)
            return nchunks;
        fill(w, first, m, r);
        freeReplyObject(r);
    }
    for (size_t i = 0; i < ndrop && ok; i++) {
        redisReply *r;
        if (dl_conn_read(&w->conn, &r, err, sizeof err) != DL_OK)
            return nchunks;
        freeReplyObject(r);
    }
    for (size_t k = 0, off = 0; k < nchunks && ok; k++) {
        size_t first = k * DL_RENEW_BATCH;
        size_t m = n - first < DL_RENEW_BATCH ? n - first : DL_RENEW_BATCH;
        size_t argc = DL_SCRIPT_HEAD + 2 * m + 1;
        redisReply *r;
        if (w->res[first] == RES_NOSCRIPT) {
            if (dl_script_eval(&w->conn, &c->scripts, DL_S_RENEW, (int)m,
                               (int)argc, w->argv + off, w->lens + off, &r,
                               err, sizeof err) != DL_OK)
                break;
            fill(w, first, m, r);
            freeReplyObject(r);
        }
        off += argc;
    }
    return nchunks;
}

/* Record the results of a pass sent at `sent`, with c->mu held. */
static void record(dl_client *c, int64_t sent, size_t calls)
{
    dl_watchdog *w = &c->wd;
    int64_t lease = c->opts.lease_ms * 1000;
    int64_t retry = lease / 10 < 1000000 ? lease / 10 : 1000000;
    int failed = 0;
    for (size_t i = 0; i < w->nbatch; i++) {
        dl_hold *h = w->batch[i];
        h->inflight = 0;
        if (h->dead) {
            free(h);
            continue;
        }
        if (h->lost || h->releasing || h->gen != w->gens[i])
            continue;
        switch (w->res[i]) {
        case 1:
            if (sent + lease > h->deadline_us)
                h->deadline_us = sent + lease;
            h->renew_at_us = sent + lease / 3;
            c->stats.renewed++;
            break;
        case 0:
            dl_client_lose(c, h, LOST_GONE);
            break;
        case -1:
            dl_client_lose(c, h, LOST_TAKEN);
            break;
        default:
            failed = 1;
            h->renew_at_us = dl_now_us() + retry;
        }
    }
    c->stats.renew_batches += calls;
    if (failed)
        c->stats.renew_errors++;
    w->nbatch = 0;
}

static void wait_until(dl_client *c, int64_t when_us)
{
    c->wd.next_wake_us = when_us;
    if (when_us == INT64_MAX) {
        pthread_cond_wait(&c->wd.cv, &c->mu);
        return;
    }
    struct timespec ts;
    ts.tv_sec = (time_t)(when_us / 1000000);
    ts.tv_nsec = (long)(when_us % 1000000) * 1000;
    pthread_cond_timedwait(&c->wd.cv, &c->mu, &ts);
}

static void *run(void *arg)
{
    dl_client *c = arg;
    dl_watchdog *w = &c->wd;
    pthread_setname_np(pthread_self(), "dlock-watchdog");
    pthread_mutex_lock(&c->mu);
    while (!w->stopping) {                  /* invariant: c->mu held */
        int64_t next = scan(c, dl_now_us());
        dl_hold *orphans = c->reg.orphans;
        c->reg.orphans = NULL;
        if (w->nbatch == 0 && !orphans) {
            wait_until(c, next);
            continue;
        }
        w->next_wake_us = 0;                /* busy: no pokes needed */
        pthread_mutex_unlock(&c->mu);
        int64_t sent = dl_now_us();
        size_t calls = renew(c, orphans);
        while (orphans) {
            dl_hold *next_o = orphans->onext;
            free(orphans);
            orphans = next_o;
        }
        pthread_mutex_lock(&c->mu);
        record(c, sent, calls);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

dl_status dl_watchdog_start(dl_client *c, char *err, size_t errlen)
{
    dl_watchdog *w = &c->wd;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return dl_fail(err, errlen, DL_ECONN, "cannot create a condition");
    w->cv_ready = 1;
    /* A renewal must come back well within the lease it protects. */
    int64_t third = c->opts.lease_ms * 1000 / 3;
    int64_t cmd = c->opts.command_timeout_us;
    int64_t con = c->opts.connect_timeout_us;
    dl_conn_init(&w->conn, &c->opts.ep, con < third ? con : third,
                 cmd > 0 && cmd < third ? cmd : third);
    w->next_wake_us = INT64_MAX;

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dl_fail(err, errlen, DL_ECONN, "cannot start the watchdog");
    w->running = 1;
    return DL_OK;
}

void dl_watchdog_stop(dl_client *c)
{
    dl_watchdog *w = &c->wd;
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
    dl_conn_drop(&w->conn);
    free(w->batch);
    free(w->gens);
    free(w->res);
    free(w->argv);
    free(w->lens);
    w->batch = NULL;
    w->gens = NULL;
    w->res = NULL;
    w->argv = NULL;
    w->lens = NULL;
    w->capbatch = w->capargv = w->nbatch = 0;
}

void dl_watchdog_poke(dl_client *c, int64_t when_us)
{
    if (c->wd.running && when_us < c->wd.next_wake_us) {
        c->wd.next_wake_us = when_us;
        pthread_cond_signal(&c->wd.cv);
    }
}
