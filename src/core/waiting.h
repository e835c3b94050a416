/* SPDX-License-Identifier: MIT
 * waiting.h: an acquire that waits for a busy lock: subscribing to the
 * lock's channel, the grants a fair waiter hears there, how long to wait
 * or nap, and giving up a waiter's claim (waiting.c).
 */
#ifndef DLOCK_WAITING_H
#define DLOCK_WAITING_H

#include "core/client.h"

#pragma GCC visibility push(hidden)

/* Subscribe the waiters ws (*nws of them, dl_exec_waiters) to l's
 * channel, where the release will be announced. Returns how many
 * subscriptions are new: the caller retries before it waits. */
size_t dl_waiting_subscribe(dl_client *c, const dl_lockref *l,
                            dl_waiter **ws, size_t *nws);

/* A fair lock's waiter: the token of the grant to its queued attempt,
 * if its client heard it from as many servers as make a quorum (over
 * Redlock, claiming it sooner would find the masters that have not
 * granted yet busy, and give the others back); else -1. A grant names
 * the attempt's seq and secret, "seq:secret:token": the channel is no
 * proof (anyone allowed to PUBLISH may send there), the secret is, and a
 * message without it is only a wake-up. */
int64_t dl_waiting_heard_grant(const dl_client *c, dl_waiter **ws,
                               size_t nws, const dl_lockref *l,
                               const dl_acquire *op);

/* How long to wait for a release message before trying again: until a
 * second after the holder's TTL runs out (busy_ms, from the server), but
 * at most a minute, so that any TTL a client of the server may set (one
 * near INT64_MAX too) gives a positive, bounded wait; 0.1 s when the TTL
 * is unknown. */
int64_t dl_waiting_busy_bound_us(int64_t busy_ms);

/* A Cluster slot mid-migration: the nap before the next try. */
#define DL_MIGRATION_NAP_US 50000

/* How long a waiting acquire naps after st before it tries again; 0
 * when st does not pass with time. A Cluster slot mid-migration (TRYAGAIN,
 * DL_EAGAIN: the script did not run; or MOVED/ASK back and forth past the
 * redirect limit, DL_EBOUNCE) is over with the migration: 50 ms. A server
 * out of reach (DL_EDOWN: refused, reset, timed out, loading, not the
 * master) is back after its restart or failover: from 25 ms, doubling up
 * to 1 s, as a connection backs off, within a finite wait. A server that
 * refuses us (AUTH, TLS) or an error reply does not pass. */
int64_t dl_waiting_nap_us(dl_acquire *op, dl_status st);

/* Come back at until_us, or earlier when one of fds is readable. */
dl_status dl_waiting_until(dl_acquire *op, const int *fds, size_t nfds,
                           int64_t until_us);

/* With c->mu held: op's wait ends, and gives up the claim an attempt of
 * it made as a waiter (op->claim_ms): a cancel (VOID) with a request id
 * of its own, which the watchdog sends. It withdraws a lock's longest
 * waiter and a reservation for it (void.lua), leaves a fair lock's queue
 * and passes on a grant to it that its client never took (fair_void.lua),
 * and leaves a semaphore's queue (sem_void.lua), as a timed-out wait's
 * last try does. Not while another request of l's hold is under way, or
 * l is held (the claim was met): that settles it. */
void dl_waiting_give_up(dl_client *c, const dl_lockref *l, dl_acquire *op);

/* op's wait ends between its steps, without another (its scheduler's wait
 * raised, its coroutine was closed): the claim an attempt of it made as a
 * waiter is given up as a timed-out wait's is, by a cancel the watchdog
 * sends; nothing when op is not waiting, or another request of l's hold
 * is under way (that one's end, or a hold, settles it). */
void dl_waiting_abandon(dl_client *c, const dl_lockref *l, dl_acquire *op);

#pragma GCC visibility pop
#endif
