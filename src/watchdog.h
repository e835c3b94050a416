/* SPDX-License-Identifier: MIT
 * watchdog.h: one OS thread per client that renews watchdog-mode holds in
 * batches over its own connection, and marks holds lost when Redis says
 * so or when their local deadline passes unconfirmed. It never touches a
 * lua_State.
 */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include "conn.h"
#include "registry.h"
#include "topology.h"
#include <pthread.h>

#pragma GCC visibility push(hidden)

#define DL_RENEW_BATCH 100      /* keys per renewal script call */
#define DL_SETTLE_MAX 64        /* pending requests ended per pass */

struct dl_client;
struct dl_pending;

/* Per hold of a pass: how the servers answered its renewal. */
typedef struct dl_votes {
    uint16_t ok, gone, taken, err;
} dl_votes;

/* One renewal script call: node, and entries order[first..first+m). */
typedef struct dl_chunk {
    uint32_t node, first, m;
    int redo;                   /* answered NOSCRIPT: send again */
    int single;                 /* answered ASK/TRYAGAIN (its slot is
                                   migrating): renew key by key */
} dl_chunk;

typedef struct dl_watchdog {
    pthread_t thread;
    pthread_cond_t cv;          /* signalled on new work and on stop */
    int running;                /* the thread was started (and not joined) */
    int cv_ready;               /* cv was initialised */
    int stopping;
    int64_t next_wake_us;       /* when the thread looks next; INT64_MAX */
    dl_hold **batch;            /* holds being renewed (inflight) */
    uint64_t *gens;             /* their generations when sent */
    dl_votes *votes;            /* their answers */
    int64_t *ms;                /* the lease each is renewed for */
    char (*ms_s)[24];           /* ... as text */
    char (*tok_s)[24];          /* their tokens as text */
    dl_hold **settle;           /* holds whose pending request this pass
                                   ends (inflight), at most DL_SETTLE_MAX */
    struct dl_pending *snap;           /* ... and copies of those requests */
    size_t nsettle;
    uint64_t *order;            /* (node, slot, entry) sort keys */
    size_t nbatch, capbatch;
    size_t norder, caporder;
    dl_chunk *chunks;
    size_t nchunks, capchunks;
    const char **argv;          /* reused argument vector */
    size_t *lens;
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
