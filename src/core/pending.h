/* SPDX-License-Identifier: MIT
 * pending.h: the requests of a hold: begun, ended, and those whose reply
 * was lost, and how they end (see pending.c). Used by the lock operations
 * and the watchdog.
 */
#ifndef DLOCK_PENDING_H
#define DLOCK_PENDING_H

#include "core/state.h"

#pragma GCC visibility push(hidden)

/* A request of a hold whose outcome is not known yet, as copied under
 * c->mu: what it takes to settle it without the mutex. */
typedef struct dl_pending {
    int kind;                   /* DL_PEND_VOID or DL_PEND_RELEASE */
    uint64_t seq;
    int64_t token, ms;
    int64_t count;              /* a release's: hold.pend_count */
    int fresh;                  /* a VOID's: hold.pend_fresh */
    dl_lockref l;               /* strings of the hold, which outlives the
                                   call (holds are freed on the Lua thread,
                                   or by the watchdog once not in flight) */
    int done;                   /* the watchdog's result of it */
    int64_t code;
} dl_pending;

/* With c->mu held: copy h's pending request. */
void dl_pending_copy(const dl_hold *h, dl_pending *p);

/* Without the mutex: resend p's release, or cancel its acquire (VOID),
 * on the watchdog's connections if wd. *done when the outcome is known:
 * *code 1 (released, or cancelled), -1 (a release found the hold gone);
 * *left gets a release's remaining count. */
dl_status dl_pending_io(dl_client *c, int wd, const dl_pending *p,
                        int *done, int64_t *code, int64_t *left,
                        char *err, size_t errlen);

/* With c->mu held: the outcome of h's request seq is known. Reports a
 * lost release (on_lost), counts a confirmed one, and marks h finished
 * when nothing is left of it. */
void dl_pending_done(dl_client *c, dl_hold *h, uint64_t seq,
                     int64_t code);

/* Best effort, for a hold about to be dropped (at close, or a collected
 * coroutine's): end its pending request once, whatever the answer. The
 * caller owns h (no other thread may touch it). */
void dl_pending_end(dl_client *c, int wd, const dl_hold *h);

/* The Lua thread's side. */

/* The Lua thread ends h's pending request (h->pend) before it sends a new
 * one for h, in two halves around the I/O, as the watchdog does, so that
 * no call releases a mutex its caller holds:
 *   dl_pending_settle_begin, with c->mu: copy it into p (on the wire from
 *     this thread now: the watchdog leaves it alone);
 *   dl_pending_io(c, 0, p, &p->done, &p->code, ...), without;
 *   dl_pending_settle_end, with c->mu: record what came of it. Returns
 *     DL_OK once it ended, else st (the I/O's status). */
void dl_pending_settle_begin(dl_hold *h, dl_pending *p);
dl_status dl_pending_settle_end(dl_client *c, dl_hold *h, const dl_pending *p,
                                dl_status st);

/* The transitions of h's pending request (its fields pend* are written
 * by pending.c alone), with c->mu held. */

/* h's request kind (DL_PEND_*) goes on the wire from this thread, with a
 * new request id; Redis keeps its record ms; it is moot after until_us;
 * fresh: an acquire that expected no hold (a cancel may take back a fair
 * grant its client never saw). */
void dl_pending_begin(dl_client *c, dl_hold *h, int kind, int64_t ms,
                      int64_t until_us, int fresh);

/* Its outcome is known, or it never ran: nothing is pending. */
void dl_pending_clear(dl_hold *h);

/* Its reply is back on this thread, which leaves it pending: the next
 * request of the hold, or the watchdog, ends it. */
void dl_pending_back(dl_hold *h);

/* Its reply did not come: the watchdog ends it (the caller pokes it). */
void dl_pending_hand_over(dl_hold *h);

/* A fair waiter that gives up owes a cancel (it leaves the queue, and a
 * grant to it passes on), unless a request is pending already. */
void dl_pending_owe_cancel(dl_hold *h);

/* The watchdog's: the hold's lease has run out, so no answer matters any
 * more (a release never confirmed is counted); and when to try again. */
void dl_pending_lapse(dl_client *c, dl_hold *h);
void dl_pending_retry_at(dl_hold *h, int64_t t);

#pragma GCC visibility pop
#endif
