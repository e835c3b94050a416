/* SPDX-License-Identifier: MIT
 * notice.h: the watchdog's ear for forced releases: its subscriptions to
 * the client's notice channel (P"forced") wherever one can be announced,
 * and the early pass a notice asks for (notice.c). Watchdog thread only.
 */
#ifndef DLOCK_NOTICE_H
#define DLOCK_NOTICE_H

#include "core/state.h"
#include "redis/wait.h"

#pragma GCC visibility push(hidden)

/* One subscription to the notice channel (watchdog thread only). */
typedef struct dl_listener {
    dl_waiter sub;
    int init;                   /* sub was initialised */
    int was_up;                 /* it was subscribed once already */
    int missed;                 /* it could not subscribe since (a notice
                                   may have come meanwhile) */
    uint64_t count;             /* messages counted there so far */
    int64_t retry_us;           /* no new subscription before this */
    int64_t backoff_us;         /* and the wait after the last failure */
} dl_listener;

#define DL_FORCED_GAP_US 50000  /* early passes for notices: one per */

/* Where the watchdog listens for notices, and the early passes they ask
 * for (watchdog thread only). */
typedef struct dl_notices {
    dl_listener *listen[DL_MAX_NODES]; /* subscribed to the client's
                                   notice channel (forced releases,
                                   client.c) at each place one can be
                                   announced; made when first needed */
    dl_endpoint places[DL_MAX_NODES]; /* those places, as the topology
                                   last gave them (kept here, not on the
                                   thread's stack: a fork's child frees
                                   them at close) */
    size_t nplaces;
    int64_t forced_us;          /* the last early pass notices asked for */
    int forced_wanted;          /* a notice came since: a pass is due at
                                   forced_us + DL_FORCED_GAP_US */
} dl_notices;

/* Whether a forced release of h's lock was among the last notices a
 * listener read since h was acquired (this thread reads them). What came
 * since wait_until's last read is read first, without waiting: a pass
 * under way when the force ran finds the lock gone before wait_until has
 * read the force's notice. */
int dl_notice_heard_forced(dl_client *c, dl_notices *ear, const dl_hold *h);

/* Free l (NULL: nothing). */
void dl_notice_free(dl_listener *l);

/* Whether some place has no subscription and may be tried now. */
int dl_notice_due(const dl_notices *ear, int64_t now);

/* When the next failed subscription may be tried again (INT64_MAX:
 * none is waiting). */
int64_t dl_notice_retry_at(const dl_notices *ear);

/* Without the mutex: the notice subscription at place i, (re)made if it
 * is not there (or the place moved: a new master). After a failure it
 * is not tried again for a while (1 s, doubling to a minute; a place
 * with no address yet, a Sentinel master not found, every second): a
 * server that does not answer must not hold up the renewals of the
 * others, and *tried is set after one attempt failed, so that a wake
 * tries no more (they come at their own retry times: dl_notice_retry_at).
 * Returns its socket, or -1; *fresh = 1 when it subscribed after its
 * subscription there broke or could not be made (a notice may have been
 * missed meanwhile: the holds are checked as after one). The first
 * subscription at a place, made at once, asks nothing: it is made as soon
 * as the client holds anything, and a check then would be one more round
 * trip per client. */
int dl_notice_fd(dl_client *c, dl_notices *ear, size_t i, int *fresh,
                 int *tried);

/* With c->mu held: the places to listen at, asked of the topology again
 * (on Sentinel, once the master is found). The mutex is dropped while
 * the sentinels may be asked. */
void dl_notice_find_places(dl_client *c, dl_notices *ear);

/* With c->mu held: a notice came (or one came within the last
 * DL_FORCED_GAP_US, and that gap is over): every watchdog-mode hold is due
 * at once, and every other one is asked whether it is still its own.
 * At most one such pass per gap: a flood of messages, which anyone
 * allowed to PUBLISH can send, costs no more renewals (each message still
 * wakes the thread for a look at the registry). */
void dl_notice_forced_pass(dl_client *c, dl_notices *ear);

#pragma GCC visibility pop
#endif
