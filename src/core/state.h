/* SPDX-License-Identifier: MIT
 * state.h: what one client is, as the parts below the public API share
 * it: the lock operations (client.c, acquire.c, release.c), the renewal
 * thread (watchdog.c) and the ending of unsettled requests (pending.c).
 * It names the watchdog only by pointer, so that none of them needs the
 * others' headers: client.h sits on top of all of them.
 */
#ifndef DLOCK_STATE_H
#define DLOCK_STATE_H

#include "redis/conn.h"
#include "core/registry.h"
#include "redis/op.h"
#include "redis/topology.h"

#include <pthread.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden)

struct dl_watchdog;

/* Why a hold is lost when Redis no longer has it (both threads say it). */
#define LOST_GONE "lost: the lock expired or was deleted"
#define LOST_MAXHOLD "lost: max_hold"

typedef struct dl_client_opts {
    dl_topo_kind topo;
    dl_endpoint *eps;           /* owned: url | servers | sentinels | seeds */
    size_t neps;
    char *master;               /* owned: Sentinel master name */
    dl_endpoint tmpl;           /* owned: credentials/db of data nodes */
    char *prefix;               /* owned */
    size_t prefixlen;
    int64_t lease_ms;           /* watchdog lease */
    int64_t max_hold_ms;        /* 0: no cap */
    int64_t warn_hold_ms;       /* log holds older than this; 0: never */
    int64_t connect_timeout_us;
    int64_t command_timeout_us;
    int sync_replicas;          /* WAIT for this many replicas; 0: no */
    int64_t sync_timeout_ms;
    char *label;                /* owned: diagnostics name; NULL: host
                                   name and pid */
    int log;                    /* queue log messages (log.h) */
} dl_client_opts;

/* Free what opts owns. */
void dl_client_opts_free(dl_client_opts *opts);

typedef struct dl_stats {
    uint64_t acquired, released, renewed, lost, waits, timeouts;
    uint64_t renew_batches, renew_errors, wakeups;
    uint64_t unconfirmed;       /* releases never confirmed before their
                                   lease ran out */
} dl_stats;

typedef struct dl_client {
    pthread_mutex_t mu;         /* guards reg, stats, wd->next_wake_us and
                                   topo's node list and slot map */
    dl_registry reg;
    dl_stats stats;
    int pending;                /* notices queued; read unlocked as a hint */
    int sweep;                  /* finished holds wait to be freed */
    dl_client_opts opts;
    dl_topology topo;
    struct dl_watchdog *wd;     /* its renewal thread (watchdog.h) */
    dl_scripts scripts;         /* read-only once open */
    const char *pubverb;        /* "publish", or "spublish" on Cluster */
    char *notice;               /* P"forced": where a forced release is
                                   told to every client of prefix P */
    size_t noticelen;
    char id[DL_ID_HEX + 1];
    pid_t pid;                  /* the process that opened it */
    pthread_t opener;           /* and the thread */
    int shut;                   /* released at process exit (client.c) */
    struct dl_client *live_prev, *live_next; /* client.c's open clients */
    uint64_t next_owner;
    uint64_t next_seq;          /* request ids: the Lua thread adds, the
                                   watchdog reads (atomic) */
    uint32_t fair_voids;        /* cancels of fair attempts begun (under
                                   mu): acquire.c take_grant */
    int evictable;              /* the server may evict keys it needs */
    dl_log log;                 /* messages for connect{ log = fn } */
} dl_client;

/* Whether this process is the one that opened c. */
int dl_client_same_process(const dl_client *c);

/* With c->mu held: mark h lost for reason (once), count it and flag the
 * notice for the Lua thread; an explicit owner's holds (h->count, in
 * tenancy h->token) are queued for the watchdog's DROP (registry.h:
 * dl_registry_orphan_share). Used by both threads. */
void dl_client_lose(dl_client *c, dl_hold *h, const char *reason);

/* With c->mu held: whether another owner of this client holds l's lock
 * until until_us at least (registry.h: dl_registry_other_owner; never
 * for a permit); if so, say who in buf: "held by another coroutine of
 * this client" or "held by owner \"x\" of this client". */
int dl_client_held_here(dl_client *c, const dl_lockref *l, int64_t until_us,
                        char *buf, size_t n);

/* With c->mu held: DL_ENOTHELD, "not held", and who holds l's lock if
 * another owner of this client does (dl_client_held_here). */
dl_status dl_client_not_held(dl_client *c, const dl_lockref *l, char *err,
                             size_t errlen);

/* l names h's lock and owner (pointing into h). */
void dl_hold_lockref(const dl_hold *h, dl_lockref *l);

/* The DROP of h's holds by this client (held and not lost). Returns 0
 * when there is nothing to drop. */
int dl_client_drop_op(const dl_client *c, const dl_hold *h, dl_lockref *l,
                      dl_op *op);

/* With c->mu held: a hold with nothing left (no holds, nothing pending)
 * goes; its lock reference is handed back through *unref (the first), or
 * queued to be dropped. */
void dl_client_tidy(dl_client *c, dl_hold *h, int *unref);

#pragma GCC visibility pop
#endif
