/* SPDX-License-Identifier: MIT
 * log.h: what a client tells connect{ log = fn }: reconnects, failovers,
 * slot moves, quorum losses. Any thread queues a message here; the Lua
 * thread takes them and calls fn, at the same points as on_lost. A client
 * without a log function queues nothing (dl_log_say returns at once).
 */
#ifndef DLOCK_LOG_H
#define DLOCK_LOG_H

#include "base/dlock.h"

#include <pthread.h>

#pragma GCC visibility push(hidden)

enum { DL_LOG_INFO, DL_LOG_WARN };

#define DL_LOG_MAX 32           /* queued messages; more are counted */
#define DL_LOG_LEN 240

typedef struct dl_log_msg {
    int level;
    unsigned repeats;           /* the same message again, coalesced */
    char text[DL_LOG_LEN];
} dl_log_msg;

typedef struct dl_log {
    int on;                     /* set once, before any thread starts */
    int pending;                /* atomic: messages are queued */
    pthread_mutex_t mu;         /* a leaf: guards what follows */
    dl_log_msg q[DL_LOG_MAX];
    size_t n;
    uint64_t dropped;
} dl_log;

void dl_log_init(dl_log *lg, int on);
void dl_log_free(dl_log *lg);

/* Queue a message (any thread; lg may be NULL). */
void dl_log_say(dl_log *lg, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Take up to max messages (the Lua thread). A "dropped" note comes last
 * when some could not be queued. */
size_t dl_log_take(dl_log *lg, dl_log_msg *out, size_t max);

/* "info" or "warn". */
const char *dl_log_level(int level);

#pragma GCC visibility pop
#endif
