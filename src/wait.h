/* SPDX-License-Identifier: MIT
 * wait.h: event-driven waiting for a lock. One subscriber connection per
 * client carries every lock channel it waits on (no connection per
 * waiter); channels stay subscribed in a small LRU cache so a contended
 * lock does not pay SUBSCRIBE on each wait. Lua thread only.
 */
#ifndef DLOCK_WAIT_H
#define DLOCK_WAIT_H

#include "conn.h"

#define DL_WAIT_MAX_SUBS 64

typedef struct dl_sub {
    char *chan;
    size_t len;
    int pending;            /* a message arrived since the last wait */
    uint64_t used;          /* LRU stamp */
} dl_sub;

typedef struct dl_waiter {
    dl_conn conn;
    int sharded;            /* SSUBSCRIBE (Cluster shard channels) */
    dl_sub subs[DL_WAIT_MAX_SUBS];
    int nsubs;
    uint64_t tick;
    int64_t rx_us;          /* when the server last sent anything */
} dl_waiter;

/* Returns 0, or -1 when out of memory. */
int dl_waiter_init(dl_waiter *w, const dl_endpoint *ep,
                   int64_t connect_timeout_us, int sharded);
void dl_waiter_free(dl_waiter *w);

/* Whether chan is subscribed (confirmed by the server). */
int dl_waiter_subscribed(dl_waiter *w, const char *chan, size_t len);

/* Subscribe to chan and wait for the server's confirmation, so that a
 * release published after this returns is seen by dl_waiter_wait. */
dl_status dl_waiter_subscribe(dl_waiter *w, const char *chan, size_t len,
                              char *err, size_t errlen);

/* Block until a message on chan arrives on any of the n waiters (1),
 * timeout_us passes (0), or none of them is subscribed any more (-1: the
 * links broke; their subscriptions are forgotten). A message that arrived
 * since the previous wait on chan counts. */
int dl_waiter_wait_any(dl_waiter **ws, size_t n, const char *chan,
                       size_t len, int64_t timeout_us);

static inline int dl_waiter_wait(dl_waiter *w, const char *chan, size_t len,
                                 int64_t timeout_us)
{
    return dl_waiter_wait_any(&w, 1, chan, len, timeout_us);
}

/* Liveness of an idle subscriber: send PING every interval_us (allowed
 * while subscribed); 0 when the server has answered something within
 * dead_us, -1 (and the connection dropped) when it has not: a server that
 * hangs without closing its socket. */
int dl_waiter_alive(dl_waiter *w, int64_t interval_us, int64_t dead_us,
                    int64_t *next_ping_us);

/* A poll() timeout for us microseconds: rounded up, never negative,
 * at most an hour (callers loop until their deadline). */
int dl_poll_ms(int64_t us);

#endif
