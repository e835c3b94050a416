/* SPDX-License-Identifier: MIT
 * wait.h: event-driven waiting for a lock. One subscriber connection per
 * client carries every lock channel it waits on (no connection per
 * waiter); channels stay subscribed in a small LRU cache so a contended
 * lock does not pay SUBSCRIBE on each wait. Lua thread only.
 */
#ifndef DLOCK_WAIT_H
#define DLOCK_WAIT_H

#include "redis/conn.h"

#pragma GCC visibility push(hidden)

#define DL_WAIT_MAX_SUBS 64
#define DL_WAIT_NOTES 4     /* messages kept per channel */
#define DL_WAIT_NOTE_LEN 80 /* and their length at most (a forced
                               release's notice names the lock's key) */

typedef struct dl_sub {
    char *chan;
    size_t len;
    uint64_t count;         /* messages that arrived on it */
    uint64_t used;          /* LRU stamp */
    char notes[DL_WAIT_NOTES][DL_WAIT_NOTE_LEN]; /* the last messages */
    int64_t note_us[DL_WAIT_NOTES];                /* when each was read */
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
 * release published after this returns is counted by dl_waiter_count. */
dl_status dl_waiter_subscribe(dl_waiter *w, const char *chan, size_t len,
                              char *err, size_t errlen);

/* Read, without blocking, whatever the n waiters' sockets hold, and
 * return how many messages have arrived on chan across those subscribed
 * to it (a count that grows while the subscriptions last). An acquire
 * compares the count taken before its attempt with the count after it,
 * so that every waiter of one state sees each release, whoever read it.
 * *live gets how many are subscribed (0: the links broke, and their
 * subscriptions are forgotten). */
uint64_t dl_waiter_count(dl_waiter **ws, size_t n, const char *chan,
                         size_t len, size_t *live);

/* The same count as last read, without reading: what a step read from
 * the sockets is what this grew by meanwhile. */
uint64_t dl_waiter_seen(dl_waiter **ws, size_t n, const char *chan,
                        size_t len);

/* A message that arrived on chan (among the last DL_WAIT_NOTES there,
 * shorter than DL_WAIT_NOTE_LEN) and starts with prefix, as dl_waiter_count
 * last read it; NULL if none. Valid until the next read. */
const char *dl_waiter_note(dl_waiter **ws, size_t n, const char *chan,
                           size_t len, const char *prefix);

/* Whether msg (len mlen) is among the last messages on chan (as
 * dl_waiter_note keeps them: a longer one, or one with a NUL, never is),
 * read at or after since_us. */
int dl_waiter_heard(dl_waiter **ws, size_t n, const char *chan, size_t len,
                    const char *msg, size_t mlen, int64_t since_us);

/* The sockets of the waiters subscribed to chan, into fds (room for n);
 * returns how many. Readable means: call dl_waiter_count again. */
size_t dl_waiter_fds(dl_waiter **ws, size_t n, const char *chan, size_t len,
                     int *fds);

/* The serial (conn.h) of the socket dl_waiter_fds gives first: a new
 * one under a reused fd number has another. 0 when it gives none. */
uint64_t dl_waiter_serial(dl_waiter **ws, size_t n, const char *chan,
                          size_t len);

/* Liveness of an idle subscriber: send PING every interval_us (allowed
 * while subscribed); 0 when the server has answered something within
 * dead_us, -1 (and the connection dropped) when it has not: a server that
 * hangs without closing its socket. */
int dl_waiter_alive(dl_waiter *w, int64_t interval_us, int64_t dead_us,
                    int64_t *next_ping_us);


#pragma GCC visibility pop
#endif
