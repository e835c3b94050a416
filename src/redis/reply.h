/* SPDX-License-Identifier: MIT
 * reply.h: what a Redis reply means to dlock: an error reply's kind (a
 * Cluster redirect, a server that cannot serve yet, anything else), and
 * the integers of an array reply.
 */
#ifndef DLOCK_REPLY_H
#define DLOCK_REPLY_H

#include "base/dlock.h"
#include <hiredis/hiredis.h>

#pragma GCC visibility push(hidden)

/* Internal: a Cluster redirect (MOVED, ASK), its text in err. */
#define DL_EMOVED DL_INTERNAL(1, DL_EREDIS)

/* Internal: the server is out of reach for now, which a restart or a
 * failover ends: the connection was refused, reset, closed or timed out,
 * the server cannot serve yet (LOADING, BUSY, MASTERDOWN), or it is not
 * the master. A waiting acquire tries again. A server that refuses us
 * (AUTH, TLS, a bad address) is DL_ECONN. Users see "connection". */
#define DL_EDOWN DL_INTERNAL(5, DL_ECONN)

/* Classify an error reply: a Cluster redirect (MOVED, ASK) is DL_EMOVED,
 * the transient states of a server that cannot serve yet (LOADING, BUSY,
 * MASTERDOWN) are DL_EDOWN, anything else is DL_EREDIS. Writes the text
 * to err. */
dl_status dl_reply_error(const redisReply *r, char *err, size_t errlen);

/* Integer element i of an array reply: 0, or -1 if there is none. */
int dl_reply_int(const redisReply *r, size_t i, int64_t *v);

#pragma GCC visibility pop
#endif
