/* SPDX-License-Identifier: MIT
 * lost.h: how a hold is lost: the reasons a lost hold reports, and the
 * one place it is marked lost and its on_lost notice queued (lost.c).
 */
#ifndef DLOCK_LOST_H
#define DLOCK_LOST_H

#include "core/state.h"

#pragma GCC visibility push(hidden)

/* The reasons (h->lost; on_lost's second argument). */
#define LOST_GONE "lost: the lock expired or was deleted"
#define LOST_MAXHOLD "lost: max_hold"
#define LOST_TAKEN "lost: another owner holds the lock"
#define LOST_UNCONFIRMED "lost: the lease ran out before a renewal was confirmed"
#define LOST_EXPIRED "lost: the lease expired"
#define LOST_FORCED "lost: forced release"

/* With c->mu held (either thread): mark h lost for reason, once: count
 * it, log it, queue its on_lost notice (the notice takes h->ref) and flag
 * the news for the Lua thread. An explicit owner's holds (h->count, in
 * tenancy h->token) are queued for the watchdog's DROP. */
void dl_lost_mark(dl_client *c, dl_hold *h, const char *reason);

/* With c->mu held: h is not lost (a fresh hold, or a reentry that found
 * its tenancy alive in Redis). */
void dl_lost_clear(dl_hold *h);

#pragma GCC visibility pop
#endif
