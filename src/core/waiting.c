/* SPDX-License-Identifier: MIT
 * waiting.c: an acquire that waits for a busy lock (waiting.h).
 */
#define _GNU_SOURCE
#include "core/waiting.h"
#include "core/pending.h"
#include "core/watchdog.h"
#include "redis/exec.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

size_t dl_waiting_subscribe(dl_client *c, const dl_lockref *l,
                            dl_waiter **ws, size_t *nws)
{
    char err[DL_ERRLEN];
    size_t fresh = 0;
    *nws = dl_exec_waiters(&c->topo, l->ident.key, l->ident.keylen, ws);
    for (size_t i = 0; i < *nws; i++)
        if (!dl_waiter_subscribed(ws[i], l->ident.chan, l->ident.chanlen) &&
            dl_waiter_subscribe(ws[i], l->ident.chan, l->ident.chanlen, err,
                                sizeof err)
                == DL_OK)
            fresh++;
    return fresh;
}

/* The token in a grant message's tail m (after "seq:secret:"): digits
 * only, and nothing after them; else -1. */
static long long grant_token(const char *m)
{
    long long tok = 0;
    if (*m == '\0')
        return -1;
    for (; *m; m++) {
        int d = *m - '0';
        if (d < 0 || d > 9 || tok > (LLONG_MAX - d) / 10)
            return -1;
        tok = tok * 10 + d;
    }
    return tok;
}

int64_t dl_waiting_heard_grant(const dl_client *c, dl_waiter **ws,
                               size_t nws, const dl_lockref *l,
                               const dl_acquire *op)
{
    char prefix[64];
    long long tok = -1, t;
    size_t heard = 0, need = dl_exec_quorum(&c->topo);
    if (l->kind != DL_KIND_FAIR || !op->reg_seq)
        return -1;
    snprintf(prefix, sizeof prefix, "%llu:" DL_FAIR_SECRET_FMT ":",
             (unsigned long long)op->reg_seq,
             (unsigned long long)op->reg_secret);
    for (size_t i = 0; i < nws; i++) {
        const char *m = dl_waiter_note(&ws[i], 1, l->ident.chan,
                                       l->ident.chanlen, prefix);
        if (m && (t = grant_token(m + strlen(prefix))) >= 0) {
            heard++;
            tok = t > tok ? t : tok;
        }
    }
    return heard >= need ? tok : -1;
}

int64_t dl_waiting_busy_bound_us(int64_t busy_ms)
{
    if (busy_ms <= 0)
        return 100000;
    return busy_ms < 59000 ? busy_ms * 1000 + 1000 : 60000000;
}

int64_t dl_waiting_nap_us(dl_acquire *op, dl_status st)
{
    if (st == DL_EAGAIN || st == DL_EBOUNCE)
        return DL_MIGRATION_NAP_US;
    if (st != DL_EDOWN || op->until_us == INT64_MAX)
        return 0;               /* (a wait forever fails: a dead server
                                   must not look like a busy lock) */
    op->nap_us = op->nap_us ? op->nap_us * 2 : DL_BACKOFF_MIN_US;
    if (op->nap_us > DL_BACKOFF_MAX_US)
        op->nap_us = DL_BACKOFF_MAX_US;
    return op->nap_us;
}

dl_status dl_waiting_until(dl_acquire *op, const int *fds, size_t nfds,
                           int64_t until_us)
{
    op->nfds = nfds;
    op->serial = 0;                     /* (the caller's to set) */
    if (nfds)
        memcpy(op->fds, fds, nfds * sizeof *fds);
    op->wake_us = until_us < op->until_us ? until_us : op->until_us;
    return DL_EWAIT;
}

void dl_waiting_give_up(dl_client *c, const dl_lockref *l, dl_acquire *op)
{
    dl_status st;
    char err[DL_ERRLEN];
    int64_t ms = op->claim_ms;
    if (!ms)
        return;
    op->claim_ms = 0;
    dl_hold *h = dl_state_hold(c, l, 0, &st, err, sizeof err);
    if (h && (h->count > 0 || h->pend != DL_PEND_NONE || h->pend_lua))
        return;
    if (!h && !(h = dl_state_hold(c, l, 1, &st, err, sizeof err)))
        return;                         /* out of memory: as if it died */
    dl_pending_begin(c, h, DL_PEND_VOID, ms, dl_now_us() + ms * 1000 +
                     c->topo.command_timeout_us, 1);
    if (l->kind == DL_KIND_FAIR)        /* a grant heard may be taken back */
        c->fair_voids++;
    dl_pending_hand_over(h);
    dl_watchdog_poke(c, 0);
}

void dl_waiting_abandon(dl_client *c, const dl_lockref *l, dl_acquire *op)
{
    if (!op->waiting)
        return;
    op->waiting = 0;
    pthread_mutex_lock(&c->mu);
    dl_waiting_give_up(c, l, op);
    pthread_mutex_unlock(&c->mu);
}
