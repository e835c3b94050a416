/* SPDX-License-Identifier: MIT
 * client.h: one dlock client: its command connection (Lua thread), its
 * subscriber connection (Lua thread), its hold registry (shared, under
 * mu) and its watchdog thread. The lock operations of the public API.
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "conn.h"
#include "registry.h"
#include "script.h"
#include "topology.h"
#include "watchdog.h"

#include <pthread.h>
#include <sys/types.h>

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
    int64_t connect_timeout_us;
    int64_t command_timeout_us;
    int sync_replicas;          /* WAIT for this many replicas; 0: no */
    int64_t sync_timeout_ms;
} dl_client_opts;

/* Free what opts owns. */
void dl_client_opts_free(dl_client_opts *opts);

typedef struct dl_stats {
    uint64_t acquired, released, renewed, lost, waits, timeouts;
    uint64_t renew_batches, renew_errors, wakeups;
    uint64_t unconfirmed;       /* releases never confirmed before their
                                   lease ran out */
} dl_stats;

/* The identity of one lock as one owner sees it. The requester names
 * this client acting for this owner: the owner itself for a coroutine
 * owner (it embeds the client id), "<client id>|<owner>" for an explicit
 * one, which other clients may share. */
typedef struct dl_lockref {
    const char *key, *fence, *chan, *owner, *req;
    size_t keylen, fencelen, chanlen, ownerlen, reqlen;
    uint64_t owner_num;         /* coroutine owner number; 0: explicit */
} dl_lockref;

/* What the Lua thread may read of a hold without I/O. */
typedef struct dl_holdinfo {
    int64_t count;              /* 0 when not held or lost */
    int64_t token;
    int held;                   /* count > 0, not lost, deadline ahead */
    int watchdog;
    const char *lost;           /* reason, or NULL */
} dl_holdinfo;

typedef struct dl_client {
    pthread_mutex_t mu;         /* guards reg, stats, wd.next_wake_us and
                                   topo's node list and slot map */
    dl_registry reg;
    dl_stats stats;
    int pending;                /* notices queued; read unlocked as a hint */
    int sweep;                  /* finished holds wait to be freed */
    dl_client_opts opts;
    dl_topology topo;
    dl_watchdog wd;
    dl_scripts scripts;         /* read-only once open */
    const char *pubverb;        /* "publish", or "spublish" on Cluster */
    char id[DL_ID_HEX + 1];
    pid_t pid;                  /* the process that opened it */
    uint64_t next_owner;
    uint64_t next_seq;          /* request ids; Lua thread only */
    int evictable;              /* the server may evict keys it needs */
} dl_client;

/* A request of a hold whose outcome is not known yet, as copied under
 * c->mu: what it takes to settle it without the mutex. */
typedef struct dl_pending {
    int kind;                   /* DL_PEND_VOID or DL_PEND_RELEASE */
    uint64_t seq;
    int64_t token, ms;
    dl_lockref l;               /* strings of the hold, which outlives the
                                   call (holds are freed on the Lua thread,
                                   or by the watchdog once not in flight) */
    int done;                   /* the watchdog's result of it */
    int64_t code;
} dl_pending;

/* DROP arguments for h (argv[3..9], text in bufs): this client's holds.
 * 0: nothing to drop. */
int dl_client_drop_args(const dl_client *c, const dl_hold *h,
                        const char **argv, size_t *lens, char bufs[3][24]);

/* With c->mu held: copy h's pending request. */
void dl_client_pending_copy(const dl_hold *h, dl_pending *p);

/* Without the mutex: resend p's release, or cancel its acquire (VOID),
 * on the watchdog's connections if wd. *done when the outcome is known:
 * *code 1 (released, or cancelled), -1 (a release found the hold gone);
 * *left gets a release's remaining count. */
dl_status dl_client_pending_io(dl_client *c, int wd, const dl_pending *p,
                               int *done, int64_t *code, int64_t *left,
                               char *err, size_t errlen);

/* With c->mu held: the outcome of h's request seq is known. Reports a
 * lost release (on_lost), counts a confirmed one, and marks h finished
 * when nothing is left of it. */
void dl_client_pending_done(dl_client *c, dl_hold *h, uint64_t seq,
                            int64_t code);

/* Connect, load the scripts and start the watchdog. Takes ownership of
 * opts' strings in every case. */
dl_status dl_client_open(dl_client **out, dl_client_opts *opts,
                         char *err, size_t errlen);

/* Release every hold (best effort), stop and join the watchdog, close
 * connections, free. In a forked child: free only, no I/O. */
void dl_client_close(dl_client *c);

/* Whether this process is the one that opened c. */
int dl_client_same_process(const dl_client *c);

/* Acquire l. wait_us < 0 waits forever, 0 tries once. lease_ms 0 means
 * watchdog mode. ref is the caller's reference to its lock object, kept
 * by a fresh hold; *ref_kept says whether it was. */
dl_status dl_client_acquire(dl_client *c, const dl_lockref *l,
                            int64_t wait_us, int64_t lease_ms, int ref,
                            int *ref_kept, char *err, size_t errlen);

/* Release one hold. *remaining gets the count left; *unref gets a lock
 * reference the caller must drop (DL_NOREF if none). */
dl_status dl_client_release(dl_client *c, const dl_lockref *l,
                            int64_t *remaining, int *unref,
                            char *err, size_t errlen);

dl_status dl_client_extend(dl_client *c, const dl_lockref *l,
                           int64_t lease_ms, char *err, size_t errlen);
/* *ttl_ms < 0 when the key is absent. */
dl_status dl_client_ttl(dl_client *c, const dl_lockref *l, int64_t *ttl_ms,
                        char *err, size_t errlen);
dl_status dl_client_force_release(dl_client *c, const dl_lockref *l,
                                  int *existed, char *err, size_t errlen);
dl_status dl_client_ping(dl_client *c, char *err, size_t errlen);

void dl_client_hold_info(dl_client *c, const dl_lockref *l, dl_holdinfo *hi);

/* Integer element i of an array reply: 0, or -1 if there is none. */
int dl_reply_int(const redisReply *r, size_t i, int64_t *v);

/* Take up to max queued notices. */
size_t dl_client_take_events(dl_client *c, dl_event *buf, size_t max);

/* The coroutine behind owner_num was collected: its holds are released
 * by the watchdog, not renewed. */
void dl_client_owner_gone(dl_client *c, uint64_t owner_num);

void dl_client_stats(dl_client *c, dl_stats *out, size_t *held);

/* Whether the (first) server's maxmemory-policy may evict lock keys: an
 * allkeys-* policy (volatile-* ones may too: every lock key has a TTL). */
int dl_client_evictable(const dl_client *c);

/* With c->mu held: mark h lost for reason (once), count it and flag the
 * notice for the Lua thread. Used by both threads. */
void dl_client_lose(dl_client *c, dl_hold *h, const char *reason);

#endif
