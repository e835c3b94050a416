/* SPDX-License-Identifier: MIT
 * release.c: a holder gives back one count of its hold: lock:release.
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "core/lost.h"
#include "redis/exec.h"
#include "core/pending.h"
#include "core/watchdog.h"

#include <stdio.h>
#include <string.h>

/* Append more to the error message in err. */
static void err_more(char *err, size_t errlen, const char *more)
{
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, "%s", more);
}

/* With c->mu held, before a release is sent for l's hold h (NULL: none),
 * st the status of ending its last request: whether the release ends
 * here, with *st. A last request that could not be ended (no server in
 * reach) leaves this release unsendable after it; it is counted out all
 * the same, as a release whose reply is lost is (a count kept here would
 * be renewed for as long as its owner lives), and the watchdog goes on
 * ending the last request: at 0, Redis frees the lock at its TTL. A lost
 * hold counts one out and reports it, at each release. */
static int ends_here(dl_client *c, const dl_lockref *l, dl_hold *h,
                     dl_status *st, int *unref, char *err, size_t errlen)
{
    if (h && h->count > 0 && *st != DL_OK) {
        dl_state_count_out(h, 0);
        h->gen++;
        dl_pending_hand_over(h);
        dl_watchdog_poke(c, 0);
        if (h->count <= 0)
            err_more(err, errlen, "; the hold is given up here, and the "
                     "lock is freed when its lease runs out");
    }
    if (!h || h->count <= 0 || *st != DL_OK) {
        if (h)
            dl_state_tidy(c, h, unref);
        if (*st == DL_OK)
            *st = dl_state_not_held(c, l, err, errlen);
        return 1;
    }
    if (!h->lost)
        return 0;
    const char *why = h->lost;
    dl_state_count_out(h, 0);
    dl_state_tidy(c, h, unref);
    *st = dl_fail(err, errlen, DL_ELOST, "%s", why);
    return 1;
}

/* With c->mu held: what came of the release p of h (st, and the count
 * Redis has left, left). Unanswered, it goes on in the background. */
static dl_status record_release(dl_client *c, dl_hold *h, const dl_pending *p,
                                int64_t left, int64_t *remaining,
                                dl_status st, char *err, size_t errlen)
{
    dl_pending_back(h);
    if (!p->done) {
        dl_pending_hand_over(h);
        dl_watchdog_poke(c, 0);
        err_more(err, errlen, "; the release is being completed in the "
                 "background");
        return st;
    }
    dl_pending_done(c, h, p->seq, p->code);
    h->finished = 0;
    if (p->code != 1)
        return dl_fail(err, errlen, DL_ELOST, "%s", h->lost ? h->lost
                                                           : LOST_GONE);
    *remaining = dl_exec_fans_out(&c->topo) ? h->count : left;
    return st;
}

dl_status dl_release(dl_client *c, const dl_lockref *l, int64_t *remaining,
                     int *unref, char *err, size_t errlen)
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
        dl_state_count_out(h, 1);       /* a count Redis never had */
        c->stats.released++;
        *remaining = h->count;
        pthread_mutex_unlock(&c->mu);
        return DL_OK;
    }
    if (h && h->pend != DL_PEND_NONE) {     /* end the last request first */
        dl_pending_settle_begin(h, &p);
        pthread_mutex_unlock(&c->mu);
        st = dl_pending_io(c, 0, &p, &p.done, &p.code, &left, err, errlen);
        pthread_mutex_lock(&c->mu);
        st = dl_pending_settle_end(c, h, &p, st);
    }
    if (ends_here(c, l, h, &st, unref, err, errlen)) {
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    /* From here the hold is one fewer, whatever Redis answers: a hold
     * whose count reaches 0 is never renewed again. */
    dl_pending_begin(c, h, DL_PEND_RELEASE, h->lease_ms, h->deadline_us, 0);
    dl_state_count_out(h, 0);
    h->gen++;
    dl_pending_copy(h, &p);
    pthread_mutex_unlock(&c->mu);

    st = dl_pending_io(c, 0, &p, &p.done, &p.code, &left, err, errlen);

    pthread_mutex_lock(&c->mu);
    st = record_release(c, h, &p, left, remaining, st, err, errlen);
    dl_state_tidy(c, h, unref);
    pthread_mutex_unlock(&c->mu);
    return st;
}
