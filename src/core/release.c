/* SPDX-License-Identifier: MIT
 * release.c: what a holder does to its hold: release one count of it, or
 * extend its lease.
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "redis/exec.h"
#include "core/pending.h"
#include "core/watchdog.h"

#include <stdio.h>
#include <string.h>

/* With c->mu held: one count of h is over; the counts kept here alone
 * (h->local) never outnumber those left. */
static void count_out(dl_hold *h)
{
    h->count--;
    if (h->local > h->count)
        h->local = h->count;
}

dl_status dl_client_release(dl_client *c, const dl_lockref *l,
                            int64_t *remaining, int *unref,
                            char *err, size_t errlen)
{
    dl_client_enter(c);
    dl_status st = DL_OK;
    dl_pending p;
    int64_t left;
    *unref = DL_NOREF;
    *remaining = 0;
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    if (h && h->local > 0 && h->count > h->local && !h->lost) {
        h->local--;                     /* a count Redis never had */
        h->count--;
        c->stats.released++;
        *remaining = h->count;
        pthread_mutex_unlock(&c->mu);
        return DL_OK;
    }
    if (h && h->pend != DL_PEND_NONE) {     /* end the last request first */
        dl_client_settle_begin(h, &p);
        pthread_mutex_unlock(&c->mu);
        st = dl_client_pending_io(c, 0, &p, &p.done, &p.code, &left, err,
                                  errlen);
        pthread_mutex_lock(&c->mu);
        st = dl_client_settle_end(c, h, &p, st);
    }
    if (h && h->count > 0 && st != DL_OK) {
        /* The last request could not be ended (no server in reach): this
         * release cannot be sent after it. It is counted out all the same,
         * as a release whose reply is lost is: a count kept here would be
         * renewed for as long as its owner lives. The watchdog goes on
         * ending the last request; at 0, Redis frees the lock at its TTL. */
        count_out(h);
        h->gen++;
        dl_client_hand_over(h);
        dl_watchdog_poke(c, 0);
        if (h->count <= 0) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, "; the hold is given up here, and "
                     "the lock is freed when its lease runs out");
        }
    }
    if (!h || h->count <= 0 || st != DL_OK) {
        if (h)
            dl_client_tidy(c, h, unref);
        if (st == DL_OK)
            st = dl_client_not_held(c, l, err, errlen);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (h->lost) {                          /* each release reports it */
        const char *why = h->lost;
        count_out(h);
        dl_client_tidy(c, h, unref);
        pthread_mutex_unlock(&c->mu);
        return dl_fail(err, errlen, DL_ELOST, "%s", why);
    }
    /* From here the hold is one fewer, whatever Redis answers: a hold
     * whose count reaches 0 is never renewed again. */
    dl_client_begin_request(c, h, DL_PEND_RELEASE, h->lease_ms,
                            h->deadline_us, 0);
    h->count--;
    h->gen++;
    dl_client_pending_copy(h, &p);
    pthread_mutex_unlock(&c->mu);

    st = dl_client_pending_io(c, 0, &p, &p.done, &p.code, &left, err,
                              errlen);

    pthread_mutex_lock(&c->mu);
    dl_client_request_back(h);
    if (p.done) {
        dl_client_pending_done(c, h, p.seq, p.code);
        h->finished = 0;
        if (p.code == 1)
            *remaining = dl_exec_fans_out(&c->topo) ? h->count : left;
        else
            st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost ? h->lost
                                                              : LOST_GONE);
    } else {
        dl_client_hand_over(h);
        dl_watchdog_poke(c, 0);
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, "; the release is being completed "
                 "in the background");
    }
    dl_client_tidy(c, h, unref);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* The lock's token as this owner holds it (0 when not held), and the
 * most an extend may ask for: what is left of max_hold, at least 1 ms
 * (INT64_MAX: no cap; 0: max_hold is over). */
static int64_t held_token(dl_client *c, const dl_lockref *l,
                          const char **lost, int64_t *cap_ms)
{
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    int64_t tok = h && h->count > 0 ? h->token : 0;
    *lost = h && h->count > 0 ? h->lost : NULL;
    *cap_ms = INT64_MAX;
    if (tok && c->opts.max_hold_ms > 0) {
        int64_t left = h->acquired_us + c->opts.max_hold_ms * 1000 -
                       dl_now_us();
        *cap_ms = left <= 0 ? 0 : left < 1000 ? 1 : left / 1000;
    }
    pthread_mutex_unlock(&c->mu);
    return tok;
}

dl_status dl_client_extend(dl_client *c, const dl_lockref *l,
                           int64_t lease_ms, char *err, size_t errlen)
{
    dl_client_enter(c);
    const char *lost;
    int64_t cap_ms;
    int64_t tok = held_token(c, l, &lost, &cap_ms);
    if (!tok) {
        pthread_mutex_lock(&c->mu);
        dl_status st = dl_client_not_held(c, l, err, errlen);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (lost)
        return dl_fail(err, errlen, DL_ELOST, "%s", lost);
    if (cap_ms == 0)                        /* (the watchdog says so next) */
        return dl_fail(err, errlen, DL_ELOST, "%s", LOST_MAXHOLD);
    int capped = lease_ms > cap_ms;         /* max_hold: a ceiling here too */
    if (capped)
        lease_ms = cap_ms;

    /* A coroutine owner's extend may set a TTL below the one the last
     * renewal left (dl_op_extend_lowers), and may run even when its reply
     * is lost: from its send, the hold is believed no longer than it asks
     * for. A renewal in flight meanwhile (sent before, perhaps run before
     * the extend) is not recorded: its deadline could outlast the TTL this
     * extend set (h->gen). Any other extend only raises the TTL (and
     * the client keeps the longer lease too). */
    dl_op op;
    dl_result res;
    dl_op_extend(&op, l, lease_ms, tok, c->pubverb);
    int64_t sent = dl_now_us();
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    int ok = st == DL_OK && res.kind == DL_V_YES;
    int64_t t0 = st == DL_OK ? res.t0 : sent;
    int64_t until = t0 + lease_ms * 1000 -
                    dl_exec_drift_us(&c->topo, lease_ms);

    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    if (!h || h->count <= 0) {
        if (st == DL_OK)
            st = dl_client_not_held(c, l, err, errlen);
    } else if (st != DL_OK) {
        if (dl_op_extend_lowers(l)) {
            h->gen++;
            if (until < h->deadline_us)
                h->deadline_us = until;
            if (h->watchdog && !h->final) { /* renew now: a lease again */
                h->renew_at_us = dl_now_us();
                h->retry_at_us = 0;
                dl_watchdog_poke(c, h->renew_at_us);
            }
        }
    } else if (ok) {
        /* Where the server only raises (an explicit owner's extend, a
         * read-write hold's: op.c), a longer lease it had stays: the
         * hold is believed as long, and a fixed lease keeps its length
         * (found in review: the client took the shorter one as its end,
         * while Redis kept the lock to the longer one). */
        int lowers = dl_op_extend_lowers(l);
        h->gen++;
        if (lowers || until > h->deadline_us)
            h->deadline_us = until;
        if (!h->watchdog && (lowers || lease_ms > h->lease_ms))
            h->lease_ms = lease_ms;
        h->renew_at_us = t0 + lease_ms * 1000 / 3;
        if (capped && h->watchdog)          /* its last lease: no renewal */
            h->final = 1;
        dl_watchdog_poke(c, h->watchdog && !h->final ? h->renew_at_us
                                                      : h->deadline_us);
    } else {
        dl_client_lose(c, h, LOST_GONE);
        st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}
