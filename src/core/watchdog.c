/* SPDX-License-Identifier: MIT
 * watchdog.c: the renewal thread.
 *
 * DESIGN. One thread per client, its own hiredis connection to each node,
 * one mutex (the client's) and a pipe that wakes it from poll(), in the
 * shape of Redis's bio.c: the loop starts with the mutex held,
 * scans the registry, drops the mutex for the network, and retakes it to
 * record what Redis said. Each pass:
 *   1. marks lost every hold whose local deadline has passed (the lease
 *      may have run out without a confirmed renewal), and takes the
 *      pending requests due to be ended (pending.c);
 *   2. takes every watchdog hold due for renewal, renewing up to lease/6
 *      early so that holds drift into the same pass, and notes the node
 *      (and Cluster slot) each goes to - every node on Redlock;
 *   3. renews them with one script call per DL_OP_BATCH keys of one
 *      node (and one slot, which Cluster scripts need), every call of the
 *      pass pipelined and written to all nodes before any reply is read:
 *      one round trip per pass, however many holds;
 *   4. releases orphans (holds of collected coroutines) and frees them,
 *      and ends the pending requests step 1 took (a release resent, an
 *      acquire cancelled), one at a time;
 *   5. counts the answers per hold against the quorum (1, or N/2+1 on
 *      Redlock): renewed, lost, or retried soon. On Sentinel a sentinel is
 *      asked, beside the renewals, which server is the master: a renewal
 *      counts only if it is the one renewed on. An old master keeps taking
 *      writes for a while after a failover (until Sentinel demotes it,
 *      some 10 s later); renewals confirmed there would keep a hold whose
 *      copy on the new master runs out. On another answer the connection
 *      moves to the master named and the holds are renewed there at once
 *      (or found lost), whether or not the Lua thread heard of it;
 *   6. sleeps until the earliest renewal or deadline, a poke (a byte on
 *      its pipe), or a message on the client's notice channel: a forced
 *      release somewhere (force.lua; notice.c). It listens wherever one
 *      can be announced (every Redlock master, every Cluster node with slots,
 *      the Sentinel master) and wakes to subscribe again where that
 *      failed. After a notice (or a subscription made again: one may
 *      have been missed) every watchdog-mode hold is renewed at once, and
 *      every other one asked whether it is still its own, so a hold that was
 *      forced is found lost within a round trip, not at its next renewal
 *      or the end of its fixed lease; at most one such pass per 50 ms.
 * The thread runs no Lua, blocks every signal, and is joined by close.
 */
#define _GNU_SOURCE
#include "core/watchdog.h"
#include "core/lease.h"
#include "core/lost.h"
#include "core/pending.h"
#include "redis/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static int reserve_batch(dl_watchdog *w, size_t n)
{
    size_t cap = w->capbatch, c2 = cap, c3 = cap, c4 = cap, c5 = cap;
    if (dl_grow(&w->batch, &cap, n, sizeof *w->batch) ||
        dl_grow(&w->gens, &c2, n, sizeof *w->gens) ||
        dl_grow(&w->ms, &c3, n, sizeof *w->ms) ||
        dl_grow(&w->toks, &c4, n, sizeof *w->toks) ||
        dl_grow(&w->checks, &c5, n, sizeof *w->checks))
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

/* The scan walks every hold, each somewhere else in memory: it asks for
 * the lines it reads (from count to the flags) DL_AHEAD holds early, so
 * that their cache misses overlap (100,000 holds: doc/performance.md). */
#define DL_AHEAD 8
#if defined(__GNUC__)
#define dl_prefetch(p) __builtin_prefetch(p)
#else
#define dl_prefetch(p) ((void)(p))
#endif
static void ahead(const dl_hold *h)
{
    dl_prefetch(&h->count);
    dl_prefetch(&h->retry_at_us);
    dl_prefetch(&h->lost);
    dl_prefetch(&h->dead);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* When scan has something to do for h, or earlier, never later: its
 * renewal (or the retry of a failed one) or the end of its lease. */
static int64_t due(const dl_hold *h)
{
    int64_t r = h->retry_at_us > h->renew_at_us ? h->retry_at_us
                                                 : h->renew_at_us;
    return min64(r, h->deadline_us);
}

/* With c->mu held: say once that h has been held past warn_hold. */
static void warn_long(dl_client *c, dl_hold *h, int64_t now)
{
    size_t len;
    const char *name = dl_lockid_name(&h->ident, c->opts.prefixlen, &len);
    h->warned = 1;
    dl_log_say(&c->log, DL_LOG_WARN, "lock '%.*s' has been held for %.1f s, "
               "past warn_hold: a release forgotten? The watchdog renews a "
               "hold for as long as its owner lives", (int)len, name,
               (double)(now - h->acquired_us) / 1e6);
}

/* With c->mu held: h's pending request, taken into this pass (to be
 * ended: w->settle) when due. Returns when to look at it next (INT64_MAX:
 * nothing to look at). */
static int64_t scan_pending(dl_client *c, dl_hold *h, int64_t now,
                            int64_t retry)
{
    dl_watchdog *w = c->wd;
    if (h->pend == DL_PEND_NONE || h->pend_lua || h->inflight)
        return INT64_MAX;
    if (now > h->pend_until_us) {       /* its lease has run out */
        dl_pending_lapse(c, h);
        finish(c, h);
        return INT64_MAX;
    }
    if (h->pend_retry_us > now)
        return h->pend_retry_us;
    if (w->nsettle >= DL_SETTLE_MAX)
        return now;                     /* the rest in the next pass */
    h->inflight = 1;
    dl_pending_retry_at(h, now + retry);
    dl_pending_copy(h, &w->snap[w->nsettle]);
    w->settle[w->nsettle++] = h;
    return INT64_MAX;
}

/* With c->mu held: h's renewal goes into this pass's batch (check: only
 * asks whether h is still the lock's). Returns -1 out of memory. */
static int take(dl_client *c, dl_hold *h, int check, int64_t now)
{
    dl_watchdog *w = c->wd;
    if (reserve_batch(w, w->nbatch + 1) != 0)
        return -1;
    size_t e = w->nbatch++;
    h->inflight = 1;
    h->check = 0;
    w->checks[e] = (unsigned char)check;
    /* The renewal that would outlive max_hold asks for exactly the time
     * left, and is the last (a renewal never lowers a TTL, renew.lua: the
     * key may outlive max_hold by the lease the last one left). A check
     * is a renewal of 1 ms: it changes no TTL, and answers whether the
     * hold is still the lock's. */
    int64_t end = dl_lease_cap_end(c, h), hl = h->lease_ms * 1000;
    w->ms[e] = check ? 1 : now + hl < end ? h->lease_ms
                                          : (end - now + 999) / 1000;
    if (w->ms[e] < 1)
        w->ms[e] = 1;
    w->toks[e] = h->token;
    w->gens[e] = h->gen;
    w->batch[e] = h;
    return 0;
}

/* Steps 1 and 2, with c->mu held. Returns when to look next. */
static int64_t scan(dl_client *c, int64_t now)
{
    dl_watchdog *w = c->wd;
    int64_t next = INT64_MAX, retry = dl_lease_retry_gap_us(c->opts.lease_ms);
    int64_t warn_us = c->opts.warn_hold_ms * 1000;
    w->nbatch = w->nsettle = 0;
    dl_hold *h;
    for (DL_REGISTRY_EACH(&c->reg, i, h)) {
        if (i >= DL_AHEAD)
            ahead(c->reg.all[i - DL_AHEAD]);
        next = min64(next, scan_pending(c, h, now, retry));
        if (h->lost || h->count <= 0)
            continue;
        if (warn_us > 0 && !h->warned) {    /* connect{ warn_hold } */
            if (now - h->acquired_us >= warn_us)
                warn_long(c, h, now);
            else
                next = min64(next, h->acquired_us + warn_us);
        }
        if (now >= h->deadline_us) {
            dl_lost_mark(c, h, !h->watchdog ? LOST_EXPIRED
                               : h->final ? LOST_MAXHOLD
                               : LOST_UNCONFIRMED);
            continue;
        }
        next = min64(next, h->deadline_us);
        /* A hold nothing renews is only asked after a forced release. */
        int check = h->check && (!h->watchdog || h->final);
        if (h->inflight || (!check && (!h->watchdog || h->final)))
            continue;
        int64_t hl = h->lease_ms * 1000;   /* this hold's watchdog lease */
        if (!check && h->retry_at_us > now) {   /* back off after a failure */
            next = min64(next, h->retry_at_us);
            continue;
        }
        if (!check && h->renew_at_us > now + hl / 6) {
            next = min64(next, h->renew_at_us);
            continue;
        }
        if (take(c, h, check, now) != 0) {
            next = now + 10000;             /* out of memory: later */
            break;
        }
    }
    return next;
}

/* With c->mu held: the operations of one chunk of the pass, in w->run:
 * the renewal of each hold scan took in w->batch[off, off + cnt), then
 * the DROP of each orphan. On running out of memory, nothing: the holds
 * are retried and the orphans kept. */
static int build_ops(dl_client *c, dl_hold *orphans, size_t off, size_t cnt)
{
    dl_watchdog *w = c->wd;
    size_t n = 0, k = cnt, c1 = w->capops, c2 = w->capops;
    for (dl_hold *h = orphans; h; h = h->onext)
        n++;
    n += cnt;
    w->run.n = 0;
    if (dl_grow(&w->ops, &c1, n, sizeof *w->ops) ||
        dl_grow(&w->tallies, &c2, n, sizeof *w->tallies))
        return -1;
    w->capops = c1;
    for (size_t e = 0; e < cnt; e++) {
        dl_lockref l;
        dl_state_lockref(w->batch[off + e], &l);
        dl_op_renew(&w->ops[e], &l, w->ms[off + e], w->toks[off + e],
                    c->pubverb);
        w->ops[e].wd = 1;
    }
    for (dl_hold *h = orphans; h; h = h->onext) {
        dl_lockref l;
        if (dl_state_drop_op(c, h, &l, &w->ops[k]))
            w->ops[k++].wd = 1;
    }
    w->run.ops = w->ops;
    w->run.tallies = w->tallies;
    w->run.n = k;
    return 0;
}

/* Steps 3 and 4, without the mutex: the pass's operations, pipelined on
 * every node at once (exec.h). Returns the number of script calls. */
static size_t renew(dl_client *c, dl_hold *orphans)
{
    /* An orphan's pending request is ended before its holds are dropped
     * (rare: one call each, before anything is queued). */
    for (dl_hold *h = orphans; h; h = h->onext)
        dl_pending_end(c, 1, h);
    return dl_batch_run(&c->topo, &c->scripts, 1, &c->wd->run);
}

/* One hold's renewal result (w->batch[i], of the chunk from off, sent at
 * `sent`), with c->mu held: its deadline and next renewal, or lost.
 * Returns 1 if the renewal failed (not sent, no answer, unconfirmed). */
static int settle(dl_client *c, dl_hold *h, int64_t sent, int probe,
                  size_t off, size_t i)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    dl_result res;
    dl_status st = i - off < w->run.n
        ? dl_batch_verdict(&c->topo, &w->run, i - off, &res, err,
                           sizeof err)
        : DL_ECONN;                         /* not sent */
    int64_t retry = dl_lease_retry_gap_us(h->lease_ms);
    if (st == DL_OK && res.kind == DL_V_YES && probe != DL_PROBE_SAME) {
        /* Renewed on a server the sentinels no longer name (an old
         * master that still takes writes), or not known to be the
         * master: not confirmed. After a failover, again at once on
         * the new master: there it is renewed, or found lost. */
        dl_lease_back_off(h, probe == DL_PROBE_MOVED ? 10000 : retry);
        return 1;
    }
    if (st == DL_OK && res.kind == DL_V_YES && w->checks[i])
        return 0;                           /* still ours: as it was */
    if (st == DL_OK && res.kind == DL_V_YES) {
        dl_lease_renewed(c, h, sent, w->ms[i]);
        c->stats.renewed++;
        return 0;
    }
    if (st == DL_OK) {                      /* a quorum has it not */
        dl_lost_mark(c, h, res.kind == DL_V_TAKEN ? LOST_TAKEN
                           : dl_notice_heard_forced(c, &w->ear, h)
                           ? LOST_FORCED : LOST_GONE);
        return 0;
    }
    dl_lease_back_off(h, retry);
    return 1;
}

/* Step 5: record the results of a chunk of a pass (w->batch[off, off +
 * cnt)) sent at `sent`, with c->mu held. probe: what the sentinels said
 * of the server renewed on (sentinel.h); a renewal counts as confirmed
 * only where they name it the master. */
static void record(dl_client *c, int64_t sent, size_t calls, int probe,
                   size_t off, size_t cnt)
{
    dl_watchdog *w = c->wd;
    int failed = 0;
    for (size_t i = off; i < off + cnt; i++) {
        dl_hold *h = w->batch[i];
        h->inflight = 0;
        if (h->dead) {
            free(h);
            continue;
        }
        if (h->lost)
            continue;
        if (h->gen == w->gens[i])       /* else changed meanwhile: not renewed */
            failed |= settle(c, h, sent, probe, off, i);
        if (!h->lost)
            w->pass_next = min64(w->pass_next, due(h));
    }
    dl_hold *h;
    if (probe == DL_PROBE_MOVED) {      /* every hold, to the new master */
        for (DL_REGISTRY_EACH(&c->reg, i, h))
            if (h->watchdog && !h->lost && !h->final)
                dl_lease_renew_by(h, sent);
        w->pass_next = sent;
    }
    c->stats.renew_batches += calls;
    if (failed)
        c->stats.renew_errors++;
}

/* Step 4's pending requests, without the mutex: end those scan took
 * (resend a release, cancel an acquire), one at a time: they are rare. */
static void settle_io(dl_client *c)
{
    dl_watchdog *w = c->wd;
    char err[DL_ERRLEN];
    for (size_t i = 0; i < w->nsettle; i++) {
        int64_t left;
        dl_pending_io(c, 1, &w->snap[i], &w->snap[i].done,
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
            dl_pending_done(c, h, w->snap[i].seq, w->snap[i].code);
            finish(c, h);
        }
    }
    w->nsettle = 0;
}

/* With c->mu held: wake the thread if it sleeps (a full pipe is awake
 * already). */
static void wake(dl_watchdog *w)
{
    if (w->sleeping || w->stopping) {
        char b = 1;
        ssize_t r = write(w->wake[1], &b, 1);
        (void)r;
    }
}

/* With c->mu held: sleep until when_us, a poke, or a forced release
 * heard on the notice channel (while the client holds anything). The
 * mutex is dropped while it sleeps. */
static void wait_until(dl_client *c, int64_t when_us)
{
    dl_watchdog *w = c->wd;
    int listen = c->reg.count > 0;
    w->next_wake_us = when_us;
    w->sleeping = 1;
    if (listen && dl_notice_due(&w->ear, dl_now_us()))
        dl_notice_find_places(c, &w->ear);
    size_t np = listen ? w->ear.nplaces : 0;
    pthread_mutex_unlock(&c->mu);

    struct pollfd p[1 + DL_MAX_NODES];
    p[0] = (struct pollfd){ w->wake[0], POLLIN, 0 };
    int heard = 0, tried = 0;
    for (size_t i = 0; i < np; i++)
        p[1 + i] = (struct pollfd){
            dl_notice_fd(c, &w->ear, i, &heard, &tried), POLLIN, 0 };
    if (np > 0 && dl_notice_retry_at(&w->ear) < when_us)
        when_us = dl_notice_retry_at(&w->ear);  /* a subscription to retry */
    if (heard)
        when_us = 0;                        /* subscribed again: check now */
    if (w->ear.forced_wanted && w->ear.forced_us + DL_FORCED_GAP_US < when_us)
        when_us = w->ear.forced_us + DL_FORCED_GAP_US;
    int64_t now = dl_now_us();
    int timeout = when_us <= now ? 0 : dl_poll_ms(when_us - now);
                                            /* (idle: an hour at most) */
    (void)poll(p, 1 + np, timeout);
    char buf[64];
    while (read(w->wake[0], buf, sizeof buf) > 0)
        ;                                   /* pokes: all seen */
    for (size_t i = 0; i < np; i++) {
        dl_listener *l = w->ear.listen[i];
        if (p[1 + i].fd < 0 || !p[1 + i].revents || !l)
            continue;
        dl_waiter *wp = &l->sub;
        size_t live;
        uint64_t n = dl_waiter_count(&wp, 1, c->notice, c->noticelen, &live);
        heard |= n != l->count;
        l->count = n;
    }

    pthread_mutex_lock(&c->mu);
    w->sleeping = 0;
    if (heard)                              /* a forced release somewhere */
        w->ear.forced_wanted = 1;           /* (or subscribed again) */
    dl_notice_forced_pass(c, &w->ear);
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
        /* A pass ends with a sleep until the first of: what scan found
         * due next, what the Lua thread poked for meanwhile, and what the
         * pass's holds are due for next (record). Not with a scan: on
         * 100,000 holds, a walk over all of them is most of this thread's
         * time (doc/performance.md). A pass that settled requests or
         * dropped orphans looks again at once. */
        w->next_wake_us = next;
        w->pass_next = INT64_MAX;
        int again = orphans != NULL || w->nsettle > 0;
        /* In chunks of DL_RENEW_MAX holds, one round trip each; the
         * orphans and the pending requests with the first. */
        for (size_t off = 0; off == 0 || off < w->nbatch;
             off += DL_RENEW_MAX) {
            size_t cnt = w->nbatch - off < DL_RENEW_MAX ? w->nbatch - off
                                                        : DL_RENEW_MAX;
            if (build_ops(c, orphans, off, cnt) != 0) { /* no memory */
                if (orphans)
                    c->reg.orphans = orphans;   /* (first chunk only) */
                orphans = NULL;
            }
            pthread_mutex_unlock(&c->mu);
            dl_sentinel_wd_follow(&c->topo.sentinel);
            int64_t sent = dl_now_us();
            /* Sentinel: which server is the master, asked beside the
             * renewals (w->batch is this thread's own). */
            int asked = cnt > 0 && dl_sentinel_probe_send(&c->topo.sentinel);
            size_t calls = renew(c, orphans);
            int probe = cnt > 0
                ? dl_sentinel_probe_check(&c->topo.sentinel, asked,
                                          sent + c->topo.wd_timeout_us)
                : DL_PROBE_SAME;
            while (orphans) {
                dl_hold *next_o = orphans->onext;
                free(orphans);
                orphans = next_o;
            }
            if (off == 0)
                settle_io(c);
            pthread_mutex_lock(&c->mu);
            record(c, sent, calls, probe, off, cnt);
        }
        w->nbatch = 0;
        settle_record(c);
        int64_t when = min64(w->next_wake_us, w->pass_next);
        if (!again && !w->stopping && when > dl_now_us())
            wait_until(c, when);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

dl_status dl_watchdog_start(dl_client *c, char *err, size_t errlen)
{
    dl_watchdog *w = c->wd = calloc(1, sizeof *c->wd);
    if (!w)
        return dl_oom(err, errlen);
    w->wake[0] = w->wake[1] = -1;
    w->settle = malloc(DL_SETTLE_MAX * sizeof *w->settle);
    w->snap = malloc(DL_SETTLE_MAX * sizeof *w->snap);
    if (!w->settle || !w->snap)
        return dl_oom(err, errlen);
    if (pipe2(w->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        w->wake[0] = w->wake[1] = -1;
        return dl_fail(err, errlen, DL_ECONN, "cannot create a pipe: %s",
                       strerror(errno));
    }
    w->next_wake_us = INT64_MAX;
    int rc;

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, run, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dl_fail(err, errlen, DL_ECONN, "cannot start the watchdog thread: %s%s",
                       strerror(rc), rc == EAGAIN ? " (the process may not create threads:"
                       " see RLIMIT_NPROC; HAProxy needs insecure-fork-wanted)" : "");
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
        wake(w);
        pthread_mutex_unlock(&c->mu);
        pthread_join(w->thread, NULL);
        w->running = 0;
    }
    for (int i = 0; i < 2; i++)
        if (w->wake[i] >= 0)
            close(w->wake[i]);
    for (size_t i = 0; i < DL_MAX_NODES; i++) {
        dl_notice_free(w->ear.listen[i]);
        if (i < w->ear.nplaces)
            dl_endpoint_free(&w->ear.places[i]);
    }
    free(w->batch);
    free(w->gens);
    free(w->ms);
    free(w->toks);
    free(w->checks);
    free(w->ops);
    free(w->tallies);
    dl_batch_free(&w->run);
    free(w->settle);
    free(w->snap);
    free(w);
    c->wd = NULL;
}

void dl_watchdog_poke(dl_client *c, int64_t when_us)
{
    if (c->wd && c->wd->running && when_us < c->wd->next_wake_us) {
        c->wd->next_wake_us = when_us;
        wake(c->wd);
    }
}
