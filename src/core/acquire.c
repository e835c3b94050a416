/* SPDX-License-Identifier: MIT
 * acquire.c: taking a lock, as resumable steps (client.h), and recording
 * a grant on its hold.
 *
 * A step settles what the last attempt left pending, sends one attempt
 * (a new request id each time), and records a grant; when the lock is
 * busy it subscribes to the lock's channel and returns DL_EWAIT with the
 * fds to watch and the time to come back (waiting.c says when). Release
 * messages are counted per channel (wait.h): a step that finds the count
 * moved since its attempt retries at once, so no release between an
 * attempt and the wait is missed. The blocking acquire is these steps
 * with poll() between them; the scheduler adapters yield to their loop
 * instead.
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "core/lease.h"
#include "core/lost.h"
#include "redis/exec.h"
#include "core/pending.h"
#include "core/waiting.h"
#include "core/watchdog.h"

#include <limits.h>
#include <string.h>

/* A grant Redis confirmed, to record on its hold: the lease (term), the
 * token, the holds the attempt expected (0: a fresh acquire) and those
 * Redis now counts (mine); a fresh hold keeps the caller's lock object
 * reference ref (*ref_kept then set). */
typedef struct dl_grant {
    dl_lease_term term;
    int64_t token, expect, mine;
    int ref;
    int *ref_kept;
} dl_grant;

/* With c->mu held: record grant g on h (l's hold).
 *
 * A reentry whose reply comes after this client gave the hold up as lost
 * (its lease ran out here before a renewal was confirmed) found the
 * tenancy alive in Redis, and joined it: a coroutine owner's holds are
 * this client's alone, so the hold goes on with all its counts (else
 * Redis would count holds nobody releases, and keep the lock for a lease
 * after the last release). An explicit owner's lost holds are DROPped
 * (lost.c): its reentry starts a count of one. */
static void record_grant(dl_client *c, dl_hold *h, const dl_lockref *l,
                         const dl_grant *g)
{
    if (h->lost && h->count > 0 && g->expect > 0 && h->owner_num != 0 &&
        g->token == h->token && g->expect == h->count &&
        g->mine == dl_hold_counted(h) + 1) {
        dl_lost_clear(h);                   /* alive after all */
        if (h->ref != DL_NOREF)
            dl_registry_push_event(&c->reg, h->ref, NULL);
        h->ref = g->ref;
        *g->ref_kept = 1;
    } else if (h->count <= 0 || h->lost) {  /* a fresh hold */
        dl_lost_clear(h);
        h->count = h->local = 0;
        h->watchdog = g->term.watchdog;
        h->acquired_us = g->term.t0;
        h->warned = 0;
        h->owner_num = l->owner_num;
        if (h->ref != DL_NOREF)
            dl_registry_push_event(&c->reg, h->ref, NULL);
        h->ref = g->ref;
        *g->ref_kept = 1;
    }
    h->count++;
    h->token = g->token;
    h->gen++;
    dl_lease_start(c, h, &g->term);
    c->stats.acquired++;
    dl_watchdog_poke(c, dl_lease_wake(c, h));
}

/* One acquire attempt on the node that owns the lock. */

/* After a fresh acquire with sync_replicas: WAIT for the replicas. */
static dl_status sync_replicas(dl_client *c, const dl_lockref *l,
                               char *err, size_t errlen)
{
    dl_op op;
    dl_result res;
    dl_op_sync(&op, l, c->opts.sync_replicas, c->opts.sync_timeout_ms);
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    if (st != DL_OK || res.x >= c->opts.sync_replicas)
        return st;
    return dl_fail(err, errlen, DL_EQUORUM, "quorum: only %lld of %d "
                   "replicas confirmed the lock within %lld ms",
                   (long long)res.x, c->opts.sync_replicas,
                   (long long)c->opts.sync_timeout_ms);
}

/* With c->mu held: what the next attempt on h sends. A reentry keeps its
 * hold's mode and lease; a fresh hold takes the call's. */
static void plan_attempt(dl_client *c, dl_hold *h, const dl_acquire *op,
                         int64_t now, dl_attempt *at)
{
    const dl_acquire_args *a = &op->args;
    int64_t left_us = c->opts.max_hold_ms * 1000;   /* 0: no cap */
    at->expect = at->token = 0;
    if (h->lost && h->count > 0)        /* dropped (lost.c): a fair lock */
        at->token = h->token;           /* must not adopt it back */
    if (!h->lost && h->count > 0) {
        at->expect = h->count;
        at->token = h->token;
        at->watchdog = h->watchdog;
        at->ms = at->watchdog || !a->lease_ms ? h->lease_ms : a->lease_ms;
        if (left_us > 0) {
            left_us += h->acquired_us - now;
            if (left_us < 1000)
                left_us = 1000;
        }
    } else {
        at->watchdog = a->lease_ms == 0;
        at->ms = !at->watchdog ? a->lease_ms : a->renew_ms ? a->renew_ms
                                                           : c->opts.lease_ms;
    }
    if (left_us > 0 && at->ms * 1000 > left_us)
        at->ms = left_us / 1000;        /* never past max_hold */
}

/* With c->mu held: a reentry that needs no round trip. The client holds
 * the tenancy, and its confirmed deadline is ahead (the test held()
 * makes), so the reentry takes one more count here only, and its release
 * sends nothing either (release.c): Redis counts one hold per client and
 * requester however deep the reentry goes. Not where Redis would do more
 * than count: a fixed lease that the reentry's own would raise (the TTL
 * would outlast the deadline), a read hold or a permit (a lease of its
 * own each). */
static int reenter_here(dl_client *c, dl_hold *h, const dl_lockref *l,
                        const dl_acquire *op, int64_t now)
{
    const dl_acquire_args *a = &op->args;
    if (h->lost || h->count <= 0 || now >= h->deadline_us ||
        (l->kind != DL_KIND_LOCK && l->kind != DL_KIND_FAIR &&
         l->kind != DL_KIND_WRITE))
        return 0;
    if (!h->watchdog) {
        int64_t ms = a->lease_ms ? a->lease_ms : h->lease_ms;
        if (now + ms * 1000 > h->deadline_us)
            return 0;
    }
    h->count++;
    h->local++;
    c->stats.acquired++;
    return 1;
}

/* A random secret for a fair lock's queued attempt (src/redis/scripts/README.md,
 * THE SECRET): from the kernel, never the host's random(). */
static uint64_t fair_secret(void)
{
    return (uint64_t)dl_random_u32() << 32 | dl_random_u32();
}

/* With c->mu held: take the grant (token tok) heard by op's waiter as a
 * hold, if a grant's message may be one: its lease runs from the grant
 * (after the queued attempt was sent) for at most DL_FAIR_GRANT_MS until
 * the watchdog renews it, and a third of that must be left. Not over
 * Redlock, where one master's grant is no majority, nor when replicas
 * must confirm, nor for a fixed lease longer than the grant's, nor for a
 * grant heard late, nor after a cancel of a fair attempt by this client
 * since the waiter queued: one of the same owner (another acquire of it
 * shares the requester, and its hold may be a new one by now) may have
 * taken the grant back. The waiter then claims it with an attempt (which
 * finds it, or finds it gone). */
static int take_grant(dl_client *c, dl_hold *h, const dl_lockref *l,
                      dl_acquire *op, int64_t tok)
{
    int64_t valid = op->reg_ms < DL_FAIR_GRANT_MS ? op->reg_ms
                                                  : DL_FAIR_GRANT_MS;
    if (dl_exec_fans_out(&c->topo) || c->opts.sync_replicas > 0 ||
        c->fair_voids != op->reg_voids ||   /* a cancel since: it may */
        (!op->reg_watchdog && op->reg_ms > valid) ||
        (h->count > 0 && !h->lost) ||
        dl_now_us() > op->reg_t0 + valid * 1000 * 2 / 3)
        return 0;
    dl_grant g = { { op->reg_t0, op->reg_ms, valid, 0, op->reg_watchdog },
                   tok, 0, 1, op->args.ref, &op->args.ref_kept };
    h->hashed = 1;                      /* (a queue: the lock is a hash) */
    record_grant(c, h, l, &g);
    return 1;
}

/* ---- the step: passes of plan, send, judge --------------------------
 * Each pass plans under c->mu what to send, sends it without the mutex
 * (the one I/O of the pass), and judges what came back under the mutex
 * again: either the step is over (its status in s->st), or the next pass
 * goes on from where this one left the hold. */

enum { SETTLE, ATTEMPT, SUBSCRIBE };

typedef struct step {
    int next;                   /* what the next pass sends */
    dl_status st;               /* when the step is over */
    dl_hold *h;                 /* l's hold, once found */
    dl_waiter *ws[DL_MAX_NODES];    /* the waiters of l's channel */
    size_t nws;
    int64_t grant;              /* a fair grant heard, its token; else -1 */
    dl_pending pend;            /* SETTLE, or an undo: the request ended */
    int undo;                   /* ... as an ATTEMPT's undo */
    /* ATTEMPT: what was sent, and what came of it */
    dl_op try;
    dl_attempt at;
    dl_result a;
    int granted;
    int64_t now;                /* when it was judged */
    /* SUBSCRIBE: new subscriptions, and release messages counted */
    size_t fresh;
    uint64_t seen;
} step;

/* With c->mu held: plan the next pass, or end the step (returns 0). */
static int plan_pass(dl_client *c, const dl_lockref *l, dl_acquire *op,
                     step *s, char *err, size_t errlen)
{
    dl_acquire_args *args = &op->args;
    if (s->next == SUBSCRIBE)
        return 1;
    s->h = dl_state_hold(c, l, 1, &s->st, err, errlen);
    if (!s->h)
        return 0;
    if (s->h->pend != DL_PEND_NONE) {   /* the last try's: end it first */
        s->grant = -1;                  /* (a cancel may take it back) */
        s->next = SETTLE;
        dl_pending_settle_begin(s->h, &s->pend);
        return 1;
    }
    if (reenter_here(c, s->h, l, op, dl_now_us())) {
        s->st = DL_OK;                  /* nothing to send */
        return 0;
    }
    if (s->grant >= 0 && take_grant(c, s->h, l, op, s->grant)) {
        s->st = DL_OK;                  /* the message is the hold */
        return 0;
    }
    s->grant = -1;                      /* else claim it: an attempt */
    s->next = ATTEMPT;
    s->undo = 0;
    plan_attempt(c, s->h, op, dl_now_us(), &s->at);
    dl_pending_begin(c, s->h, DL_PEND_VOID, s->at.ms, dl_now_us() +
                     s->at.ms * 1000 + c->topo.command_timeout_us,
                     s->at.expect == 0);
    dl_pending_copy(s->h, &s->pend); /* its cancel, if need be */
    /* A fair lock's waiter queues on every attempt of a wait, the last
     * one too: a cancel then takes back a grant to it. */
    int fair = l->kind == DL_KIND_FAIR;
    s->at.seq = s->h->pend_seq;
    s->at.waits = args->wait_us != 0 && (fair || dl_now_us() < op->until_us);
    s->at.secret = fair && s->at.waits ? fair_secret() : 0;
    s->at.pub = c->pubverb;
    s->at.hashed = s->at.expect ? s->h->hashed : *dl_state_form_hint(c, l);
    s->at.waited_ms = (dl_now_us() - op->since_us) / 1000;
    dl_op_acquire(&s->try, l, &s->at);
    return 1;
}

/* Without the mutex: the pass's one I/O. */
static void send_pass(dl_client *c, const dl_lockref *l, dl_acquire *op,
                      step *s, char *err, size_t errlen)
{
    size_t nlive;
    int64_t left;
    char e2[DL_ERRLEN];
    switch (s->next) {
    case SETTLE:
        s->st = dl_pending_io(c, 0, &s->pend, &s->pend.done,
                              &s->pend.code, &left, err, errlen);
        return;
    case ATTEMPT:
        /* Releases counted from here on wake this acquire. */
        op->seen = dl_waiter_count(s->ws, s->nws, l->ident.chan,
                                   l->ident.chanlen, &nlive);
        s->st = dl_exec(&c->topo, &c->scripts, &s->try, &s->a, err, errlen);
        s->granted = s->st == DL_OK && s->a.kind == DL_V_YES;
        if (!s->granted || c->opts.sync_replicas == 0 || s->at.expect != 0)
            return;
        s->st = sync_replicas(c, l, err, errlen);
        s->undo = s->st != DL_OK;       /* shortfall: take it back now */
        if (s->undo)
            (void)dl_pending_io(c, 0, &s->pend, &s->pend.done,
                                &s->pend.code, &left, e2, sizeof e2);
        return;
    case SUBSCRIBE:
        s->fresh = dl_waiting_subscribe(c, l, s->ws, &s->nws);
        s->seen = dl_waiter_count(s->ws, s->nws, l->ident.chan,
                                  l->ident.chanlen, &nlive);
        return;
    }
}

static int judge_attempt(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         step *s, char *err, size_t errlen);
static int judge_subscribe(dl_client *c, const dl_lockref *l,
                           dl_acquire *op, step *s);
static int judge_refusal(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         step *s, char *err, size_t errlen);

/* With c->mu held: what the pass came to. Returns 1 for another pass, 0
 * when the step is over. */
static int judge_pass(dl_client *c, const dl_lockref *l, dl_acquire *op,
                      step *s, char *err, size_t errlen)
{
    if (s->next == ATTEMPT)
        return judge_attempt(c, l, op, s, err, errlen);
    if (s->next == SUBSCRIBE)
        return judge_subscribe(c, l, op, s);
    /* SETTLE: the last try ended, or a wait goes on (its cancel met a
     * slot migration, or a server out of reach: it stays pending, and the
     * watchdog ends it too). */
    s->st = dl_pending_settle_end(c, s->h, &s->pend, s->st);
    if (s->st == DL_OK)
        return 1;
    int64_t now = dl_now_us(), nap;
    if (op->args.wait_us != 0 && now < op->until_us &&
        (nap = dl_waiting_nap_us(op, s->st)) > 0)
        s->st = dl_waiting_until(op, NULL, 0, now + nap);
    return 0;
}

/* An attempt's outcome (op.h, dl_result). */
static int judge_attempt(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         step *s, char *err, size_t errlen)
{
    dl_acquire_args *args = &op->args;
    dl_hold *h = s->h;
    const dl_result *a = &s->a;
    int fair = l->kind == DL_KIND_FAIR;
    int64_t now = s->now = dl_now_us(), t0 = a->t0;
    int waiting = args->wait_us != 0 && now < op->until_us;
    if (a->form)                        /* the form it found (op.h) */
        *dl_state_form_hint(c, l) = (a->form & DL_FORM_HASH) != 0;
    if (s->st == DL_EAGAIN && !s->granted) {    /* TRYAGAIN: not run */
        if (waiting || !(fair && op->reg_seq)) {
            dl_pending_clear(h); /* nothing to cancel */
            if (waiting)                /* try again */
                s->st = dl_waiting_until(op, NULL, 0,
                                         now + DL_MIGRATION_NAP_US);
            else                        /* an earlier attempt's claim */
                dl_waiting_give_up(c, l, op);
            return 0;
        }
        /* A fair wait that ends here: an earlier attempt of it queued the
         * waiter, and the cancel (VOID) takes it out of the queue (and
         * passes on a grant to it). */
        c->fair_voids++;
        dl_pending_hand_over(h);
        dl_watchdog_poke(c, 0);
        return 0;
    }
    if (s->st != DL_OK) {               /* it may have run: cancel it */
        /* The cancel leaves the queue, and takes back a grant made to
         * this requester that its client never claimed (lib/cancel.lua):
         * a grant's message heard from now on may be one taken back, by
         * this acquire or by another of the same owner (take_grant). */
        if (fair) {
            op->reg_seq = 0;
            c->fair_voids++;
        }
        if (s->undo)                    /* taken back at once? */
            (void)dl_pending_settle_end(c, h, &s->pend, DL_OK);
        if (h->pend != DL_PEND_NONE) {
            dl_pending_hand_over(h);
            dl_watchdog_poke(c, 0);
        }
        /* Mid-migration, or out of reach: a wait goes on, its next try
         * cancelling this one first. */
        int64_t nap;
        if (waiting && (nap = dl_waiting_nap_us(op, s->st)) > 0)
            s->st = dl_waiting_until(op, NULL, 0, now + nap);
        return 0;
    }
    if (s->granted) {
        dl_pending_clear(h);
        int64_t drift = dl_exec_drift_us(&c->topo, s->at.ms);
        dl_grant g = { { t0, s->at.ms, s->at.ms, drift, s->at.watchdog },
                       a->y, s->at.expect, a->x, args->ref, &args->ref_kept };
        if (a->form)                    /* (a reentry's does not say) */
            h->hashed = (a->form & DL_FORM_HASH) != 0;
        record_grant(c, h, l, &g);
        return 0;
    }
    return judge_refusal(c, l, op, s, err, errlen);
}

/* An attempt that was not granted: the lock is busy (wait, or time out),
 * or a reentry found its hold gone. */
static int judge_refusal(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         step *s, char *err, size_t errlen)
{
    dl_acquire_args *args = &op->args;
    dl_hold *h = s->h;
    const dl_result *a = &s->a;
    int fair = l->kind == DL_KIND_FAIR;
    int64_t now = s->now, t0 = a->t0;
    /* Not granted. A Redlock attempt that some master may have run stays
     * pending: the next try or the watchdog undoes it. A fair waiter's
     * silent master at most queued it, or granted it: the next try adopts
     * that. (Grants from a minority are given back: split holds would
     * wait for each other.) */
    if (!a->maybe ||
        (fair && s->at.waits && a->kind == DL_V_BUSY && a->yes == 0))
        dl_pending_clear(h);
    else
        dl_pending_back(h);
    if (a->kind != DL_V_BUSY) {         /* a reentry found it gone */
        dl_lost_mark(c, h, LOST_GONE);
        s->st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost);
        return 0;
    }
    /* Busy: a->busy_ms is the holder's remaining TTL (a queued fair
     * waiter's: when to come back). */
    if (fair && s->at.waits) {
        op->reg_seq = s->at.seq;
        op->reg_voids = c->fair_voids;
        op->reg_secret = s->at.secret;
        op->reg_t0 = t0;
        op->reg_ms = s->at.ms;
        op->reg_watchdog = s->at.watchdog;
    }
    /* A wait that blocks the owners' thread, for a lock another owner of
     * this client holds past the wait's end, would wait for its own
     * thread: it ends now. */
    char whose[128];
    int here = op->blocks && !op->waited && args->wait_us != 0 &&
               dl_state_held_here(c, l, op->until_us, whose, sizeof whose);
    if (args->wait_us == 0 || now >= op->until_us || here) {
        c->stats.timeouts++;
        if (fair && s->at.waits) {        /* leave the queue; a grant */
            c->fair_voids++;            /* to it passes on */
            dl_pending_owe_cancel(h);
        }
        if (a->busy_ms >= 0 && !here) { /* as of this last attempt (no
                                           use to come back: ours) */
            args->busy_ms = a->busy_ms - (now - t0) / 1000;
            if (args->busy_ms < 0)
                args->busy_ms = 0;
        }
        args->held_here = here;
        if (here)
            s->st = dl_fail(err, errlen, DL_ETIMEOUT, "timeout: %s", whose);
        else
            s->st = dl_fail(err, errlen, DL_ETIMEOUT, "timeout");
        if (h->pend != DL_PEND_NONE) {
            dl_pending_hand_over(h);
            dl_watchdog_poke(c, 0);
        }
        return 0;
    }
    if (!op->waited) {
        op->waited = 1;
        c->stats.waits++;
    }
    if (s->at.waits && (l->kind == DL_KIND_LOCK || fair ||
                      l->kind == DL_KIND_SEM))
        op->claim_ms = s->at.ms;        /* a waiter now, until it gives up */
    if (a->split) {                     /* Redlock split vote */
        s->st = dl_waiting_until(op, NULL, 0, now + 1000 +
                         (int64_t)(dl_random_u32() % 10000));
        return 0;
    }
    s->next = SUBSCRIBE;                /* then wait for a release */
    return 1;
}

/* Subscribed to l's channel: retry at once when a subscription is new
 * or a release came meanwhile; else wait for one. */
static int judge_subscribe(dl_client *c, const dl_lockref *l,
                           dl_acquire *op, step *s)
{
    int fair = l->kind == DL_KIND_FAIR;
    s->next = ATTEMPT;
    if (s->fresh > 0)
        return 1;                       /* retry before waiting */
    if (s->seen != op->seen) {          /* released meanwhile */
        s->grant = dl_waiting_heard_grant(c, s->ws, s->nws, l, op);
        if (!fair || s->grant >= 0) {
            c->stats.wakeups++;
            return 1;
        }
        op->seen = s->seen;             /* another waiter's grant */
    }
    int fds[DL_MAX_NODES];
    size_t nfds = dl_waiter_fds(s->ws, s->nws, l->ident.chan,
                                l->ident.chanlen, fds);
    int64_t bound = dl_waiting_busy_bound_us(s->a.busy_ms);
    /* No subscriber, or a slot mid-migration (the release may run on the
     * other node, ASK, and announce itself there, unheard): nap, and look
     * again. */
    if (bound > 100000 && (nfds == 0 ||
                           dl_cluster_migrating(&c->topo, l->ident.key,
                                                l->ident.keylen, s->now)))
        bound = 100000;
    s->st = dl_waiting_until(op, fds, nfds, s->now + bound);
    op->serial = dl_waiter_serial(s->ws, s->nws, l->ident.chan,
                                  l->ident.chanlen);
    return 0;
}

static dl_status step_on(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         char *err, size_t errlen);

/* A step, and whether it read messages off a socket that other waiters
 * of this Lua state may be waiting on: read here, the socket no longer
 * wakes them, so their scheduler nudges them (dlock/sched.lua). */
dl_status dl_acquire_step(dl_client *c, const dl_lockref *l,
                          dl_acquire *op, char *err, size_t errlen)
{
    dl_client_enter(c);
    dl_waiter *ws[DL_MAX_NODES];
    const char *ch = l->ident.chan;
    size_t len = l->ident.chanlen, n;
    n = dl_exec_waiters(&c->topo, l->ident.key, l->ident.keylen, ws);
    uint64_t before = dl_waiter_seen(ws, n, ch, len);
    dl_status st = step_on(c, l, op, err, errlen);
    op->waiting = st == DL_EWAIT;
    int fds[DL_MAX_NODES];              /* (ws: the nodes' own subscribers) */
    op->drained = dl_waiter_seen(ws, n, ch, len) != before &&
                  dl_waiter_fds(ws, n, ch, len, fds) > 0 ? fds[0] : -1;
    return st;
}

static dl_status step_on(dl_client *c, const dl_lockref *l, dl_acquire *op,
                         char *err, size_t errlen)
{
    dl_acquire_args *args = &op->args;
    step s;
    size_t nlive;
    int woke = 0, fair = l->kind == DL_KIND_FAIR;
    memset(&s, 0, sizeof s);
    s.nws = dl_exec_waiters(&c->topo, l->ident.key, l->ident.keylen, s.ws);
    s.grant = -1;
    if (!op->started) {
        int64_t now = dl_now_us();
        op->started = 1;
        op->since_us = now;
        op->until_us = args->wait_us < 0 ? INT64_MAX : now + args->wait_us;
        args->ref_kept = 0;
        args->busy_ms = -1;
        args->held_here = 0;
    } else if (op->nfds || op->wake_us) {   /* back from a wait: why? */
        uint64_t seen = dl_waiter_count(s.ws, s.nws, l->ident.chan,
                                        l->ident.chanlen, &nlive);
        int64_t now = dl_now_us();
        /* (on the same sockets: one made again meanwhile, by another
         * waiter's step, may have missed the release: look) */
        int same = nlive == op->nfds &&
                   dl_waiter_serial(s.ws, s.nws, l->ident.chan,
                                    l->ident.chanlen) == op->serial;
        if (seen == op->seen && now < op->wake_us && same)
            return DL_EWAIT;                /* early: wait on */
        woke = seen != op->seen;
        s.grant = dl_waiting_heard_grant(c, s.ws, s.nws, l, op);
        if (fair && s.grant < 0 && now < op->wake_us && same) {
            op->seen = seen;                /* another waiter's grant */
            return DL_EWAIT;
        }
    }
    op->nfds = 0;
    op->wake_us = 0;

    pthread_mutex_lock(&c->mu);
    if (woke)
        c->stats.wakeups++;
    while (plan_pass(c, l, op, &s, err, errlen)) {
        pthread_mutex_unlock(&c->mu);
        send_pass(c, l, op, &s, err, errlen);
        pthread_mutex_lock(&c->mu);
        if (!judge_pass(c, l, op, &s, err, errlen))
            break;
    }
    if (s.h) {
        int unref = DL_NOREF;
        dl_state_tidy(c, s.h, &unref);
        if (unref != DL_NOREF)
            dl_registry_push_event(&c->reg, unref, NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return s.st;
}

dl_status dl_acquire_blocking(dl_client *c, const dl_lockref *l,
                              dl_acquire_args *args, char *err, size_t errlen)
{
    dl_acquire op;
    memset(&op, 0, sizeof op);
    op.args = *args;
    op.blocks = 1;
    dl_status st;
    while ((st = dl_acquire_step(c, l, &op, err, errlen)) == DL_EWAIT)
        dl_wait_fds(op.fds, op.nfds, op.wake_us);
    *args = op.args;
    return st;
}
