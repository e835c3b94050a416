/* SPDX-License-Identifier: MIT
 * pending.c: requests whose outcome is not known, and how they end.
 *
 * DESIGN. Every acquire and release attempt carries a request id; Redis
 * records, per requester (client + owner), the last one that took effect
 * (src/redis/scripts/README.md, RESENDS). When a reply is lost (a timeout, a
 * dropped connection), the client cannot know whether the request ran,
 * or whether it will still run (a paused server runs it later). It keeps
 * the request on the hold as "pending" and ends it by sending, with the
 * same id:
 *   - a release again: it runs at most once, and answers whether it ran
 *     on a hold still there (released) or found it gone (lost);
 *   - for an acquire, VOID: it undoes the acquire if it ran, else records
 *     the id as cancelled so that a late arrival is refused.
 * Either is safe to send any number of times, from either thread. The
 * Lua thread ends a hold's pending request before it sends a new one for
 * that hold, so a requester has one unsettled request at most and one
 * record per requester suffices; the watchdog ends the others in the
 * background (every lease/10, at most 1 s) until the hold's lease would
 * have run out. The states a lost reply can leave, and what ends them:
 *   acquire ran / not yet / never  -> VOID undoes / refuses / records
 *   release ran / not yet / never  -> resend answers / runs it / runs it
 *   the hold expired meanwhile     -> the resend answers lost
 */
#define _GNU_SOURCE
#include "core/pending.h"
#include "core/lost.h"
#include "redis/exec.h"

#include <stdio.h>
#include <string.h>


void dl_pending_copy(const dl_hold *h, dl_pending *p)
{
    memset(p, 0, sizeof *p);
    p->kind = h->pend;
    p->seq = h->pend_seq;
    p->token = h->pend_token;
    p->count = h->pend_count;
    p->ms = h->pend_ms;
    p->fresh = h->pend_fresh;
    dl_state_lockref(h, &p->l);
}

dl_status dl_pending_io(dl_client *c, int wd, const dl_pending *p,
                        int *done, int64_t *code, int64_t *left,
                        char *err, size_t errlen)
{
    dl_op op;
    dl_result res;
    if (p->kind == DL_PEND_RELEASE)
        dl_op_release(&op, &p->l, p->seq, p->token, p->count, p->ms,
                      c->pubverb);
    else
        dl_op_void(&op, &p->l, p->seq, p->ms, c->pubverb, p->fresh);
    op.wd = wd;
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    *done = st == DL_OK;
    *code = st != DL_OK ? 0 : res.kind == DL_V_YES ? 1 : -1;
    *left = res.kind == DL_V_YES ? res.x : 0;
    return st;
}

void dl_pending_done(dl_client *c, dl_hold *h, uint64_t seq,
                     int64_t code)
{
    if (h->pend == DL_PEND_NONE || h->pend_seq != seq)
        return;                 /* the other thread recorded it first */
    int kind = h->pend;
    h->pend = DL_PEND_NONE;
    if (kind == DL_PEND_RELEASE && code == 1)
        c->stats.released++;
    else if (kind == DL_PEND_RELEASE)
        dl_lost_mark(c, h, LOST_GONE);
    h->finished = h->count <= 0;
}

void dl_pending_end(dl_client *c, int wd, const dl_hold *h)
{
    char err[DL_ERRLEN];
    dl_pending p;
    int done;
    int64_t code, left;
    if (h->pend == DL_PEND_NONE)
        return;
    dl_pending_copy(h, &p);
    (void)dl_pending_io(c, wd, &p, &done, &code, &left, err,
                        sizeof err);
}

/* ---- the Lua thread's side ------------------------------------------ */

void dl_pending_settle_begin(dl_hold *h, dl_pending *p)
{
    dl_pending_copy(h, p);
    h->pend_lua = 1;                    /* on the wire from this thread */
}

dl_status dl_pending_settle_end(dl_client *c, dl_hold *h, const dl_pending *p,
                                dl_status st)
{
    h->pend_lua = 0;
    if (p->done)
        dl_pending_done(c, h, p->seq, p->code);
    h->finished = 0;            /* this thread decides what becomes of h */
    return p->done ? DL_OK : st;
}

/* ---- the transitions of a hold's pending request ----------------------
 * The fields pend* of a hold are written here and nowhere else. */

void dl_pending_begin(dl_client *c, dl_hold *h, int kind, int64_t ms,
                      int64_t until_us, int fresh)
{
    h->pend = kind;
    h->pend_lua = 1;
    /* (read by the watchdog too, in dl_lost_mark) */
    h->pend_seq = __atomic_add_fetch(&c->next_seq, 1, __ATOMIC_RELAXED);
    h->pend_token = h->token;
    h->pend_count = h->hashed ? 0 : dl_hold_counted(h);
    h->pend_ms = ms;
    h->pend_until_us = until_us;
    h->pend_fresh = fresh;
}

void dl_pending_clear(dl_hold *h)
{
    h->pend = DL_PEND_NONE;
    h->pend_lua = 0;
}

void dl_pending_back(dl_hold *h)
{
    h->pend_lua = 0;
}

void dl_pending_hand_over(dl_hold *h)
{
    h->pend_lua = 0;
    h->pend_retry_us = dl_now_us();
}

void dl_pending_owe_cancel(dl_hold *h)
{
    if (h->pend == DL_PEND_NONE)
        h->pend = DL_PEND_VOID;
}

void dl_pending_lapse(dl_client *c, dl_hold *h)
{
    if (h->pend == DL_PEND_RELEASE)
        c->stats.unconfirmed++;
    h->pend = DL_PEND_NONE;
}

void dl_pending_retry_at(dl_hold *h, int64_t t)
{
    h->pend_retry_us = t;
}
