/* SPDX-License-Identifier: MIT
 * watchdog.h: one OS thread per client that renews watchdog-mode holds in
 * batches over its own connections, ends the requests whose replies were
 * lost, and finds holds lost when Redis says so or when their local
 * deadline passes unconfirmed. It never touches a lua_State.
 */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include "redis/exec.h"
#include "core/registry.h"
#include "core/notice.h"
#include <pthread.h>

#pragma GCC visibility push(hidden)

#define DL_SETTLE_MAX 64        /* pending requests ended per pass */
#define DL_RENEW_MAX (10 * DL_OP_BATCH) /* holds renewed per round
                                   trip: a pass sends its renewals in
                                   chunks this big (whole script calls),
                                   so that their ops (~0.5 KB each) and
                                   buffers stay small however many holds */

struct dl_client;
struct dl_pending;

typedef struct dl_watchdog {
    pthread_t thread;
    int wake[2];                /* a pipe: a byte wakes the sleeping thread
                                   (new work, stop); -1 when not open */
    int running;                /* the thread was started (and not joined) */
    int stopping;               /* close asks the thread to end */
    int sleeping;               /* in poll(), the mutex dropped (which
                                   fields both threads touch: state.h,
                                   THE THREAD RULE) */
    int64_t next_wake_us;       /* when the thread looks next; INT64_MAX
                                   (during a pass: what scan found, lowered
                                   by pokes) */
    int64_t pass_next;          /* when the holds a pass renewed are next
                                   due, or earlier (record) */
    dl_notices ear;             /* its subscriptions to forced releases */
    dl_hold **batch;            /* holds being renewed (inflight) */
    uint64_t *gens;             /* their generations when sent */
    int64_t *ms;                /* the lease each is renewed for */
    int64_t *toks;              /* their tokens when sent */
    unsigned char *checks;      /* 1: only asks whether it is still ours */
    size_t nbatch, capbatch;
    dl_op *ops;                 /* their renewals, then orphans' drops */
    dl_tally *tallies;          /* and how the servers answered */
    size_t capops;
    dl_batch run;               /* the executor's scratch */
    dl_hold **settle;           /* holds whose pending request this pass
                                   ends (inflight), at most DL_SETTLE_MAX */
    struct dl_pending *snap;    /* ... and copies of those requests */
    size_t nsettle;
} dl_watchdog;

/* Start the thread for client c. Returns DL_OK or DL_ECONN with err. */
dl_status dl_watchdog_start(struct dl_client *c, char *err, size_t errlen);

/* Stop and join the thread, free its connection and buffers. Safe to
 * call when it never started. Must not be called with c->mu held. */
void dl_watchdog_stop(struct dl_client *c);

/* With c->mu held: wake the thread if it sleeps past when_us. */
void dl_watchdog_poke(struct dl_client *c, int64_t when_us);

#pragma GCC visibility pop
#endif
