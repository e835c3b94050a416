/* SPDX-License-Identifier: MIT
 * lease.h: a hold's lease timing, and its only writer: the length of its
 * lease (lease_ms), until when it is believed held (deadline_us), when
 * the watchdog renews it (renew_at_us) or may retry a failed renewal
 * (retry_at_us), and whether its lease is the last before max_hold
 * (final). Every function here but dl_lease_retry_gap_us and
 * dl_lease_left_ms (which read only options and the clock) expects c->mu
 * held.
 */
#ifndef DLOCK_LEASE_H
#define DLOCK_LEASE_H

#include "core/state.h"

#pragma GCC visibility push(hidden)

/* A lease Redis granted: sent at t0 for ms, of which valid_ms (<= ms)
 * count here, less drift_us; renewed by the watchdog or not. */
typedef struct dl_lease_term {
    int64_t t0, ms, valid_ms, drift_us;
    int watchdog;
} dl_lease_term;

/* An acquire of h was confirmed for term t: its lease starts again (the
 * hold's acquired_us and watchdog are set). */
void dl_lease_start(const dl_client *c, dl_hold *h, const dl_lease_term *t);

/* A renewal of h for ms, sent at sent, was confirmed: its deadline moves
 * on (never back), the next renewal is a third of its lease later, and a
 * renewal shorter than its lease (at max_hold) is its last. */
void dl_lease_renewed(const dl_client *c, dl_hold *h, int64_t sent,
                      int64_t ms);

/* An extend of h to ms, from t0, was confirmed: believed held until
 * until. lowers: Redis set the TTL (else it only raised it, and a longer
 * lease h had stays); capped: ms was cut to max_hold (its last lease). */
void dl_lease_extended(dl_hold *h, int64_t t0, int64_t ms, int64_t until,
                       int lowers, int capped);

/* An extend that may have lowered h's TTL got no answer: h is believed
 * held no longer than until. */
void dl_lease_lowered(dl_hold *h, int64_t until);

/* A renewal of h failed: not again for delay_us. */
void dl_lease_back_off(dl_hold *h, int64_t delay_us);

/* h is renewed at t, with no back-off. */
void dl_lease_renew_now(dl_hold *h, int64_t t);

/* h is renewed at t, or earlier if it was due earlier (a back-off
 * stays). */
void dl_lease_renew_by(dl_hold *h, int64_t t);

/* How long a failed renewal of a lease of lease_ms waits: a tenth of it,
 * at most 1 s. */
int64_t dl_lease_retry_gap_us(int64_t lease_ms);

/* What is left of max_hold for a hold acquired at acquired_us: at least
 * 1 ms, INT64_MAX with no cap, 0 when it is over. */
int64_t dl_lease_left_ms(const dl_client *c, int64_t acquired_us);

/* When h's max_hold runs out (INT64_MAX: never). */
int64_t dl_lease_cap_end(const dl_client *c, const dl_hold *h);

/* When the watchdog must look at h next: its renewal (or the end of a
 * lease nothing renews), or its warn_hold if sooner. */
int64_t dl_lease_wake(const dl_client *c, const dl_hold *h);

#pragma GCC visibility pop
#endif
