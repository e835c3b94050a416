/* SPDX-License-Identifier: MIT
 * state.h: what one client is, as the files below the public API share
 * it, and the operations on its holds that more than one file uses
 * (state.c; the watchdog uses dl_state_drop_op and dl_state_lockref). It
 * names the watchdog only by pointer, so that none of them needs the
 * others' headers: client.h sits on top of all of them.
 *
 * THE THREAD RULE. Two threads touch a client: the Lua thread (every
 * call of the API) and its watchdog thread (watchdog.c, notice.c). The
 * fields both touch, and what guards each:
 *   c->mu (the client's mutex):
 *     c->reg: every hold and every field of one (registry.h), the
 *       notices, the orphans; a hold the watchdog has in flight
 *       (h->inflight) is unlinked by the Lua thread but not freed:
 *       marked h->dead, the watchdog frees it once it has the reply;
 *     c->stats;
 *     c->sweep (the watchdog sets it, the Lua thread sweeps);
 *     c->wd->next_wake_us, c->wd->sleeping, c->wd->stopping;
 *     c->topo.nodes[], nnodes, slots, asked[], and each node's named,
 *       was_named and (Cluster) ep; a node is never freed before close,
 *       so a pointer read under mu may be used without it;
 *   atomics:
 *     c->pending (release/acquire: a hint read without mu; written
 *       under mu too);
 *     c->next_seq (the Lua thread adds, the watchdog reads);
 *     each node's moved (ep changed this many times);
 *     c->topo.sentinel.answered (relaxed: where to ask first),
 *       wd_retarget and lua_retarget (acquire/release: a thread tells the
 *       other that the master moved);
 *   the log's own mutex: c->log (log.h; its pending is atomic).
 * Each connection is one thread's (conn.h): a node's cmd and sub and the
 * Sentinel news are the Lua thread's; a node's wd, the Sentinel probe,
 * the notice subscriptions (c->wd->ear) and the rest of *c->wd are the
 * watchdog's, but c->wd->running and c->wd->thread (the Lua thread's)
 * and c->wd->wake[] (read-only once the thread starts). c->opts, c->scripts, c->id, c->notice, c->pubverb,
 * c->evictable and the topology's timeouts are read-only once the
 * watchdog starts; the rest of c is the Lua thread's. Mutexes nest
 * live_mu (client.c), then c->mu, then the log's; c->mu is never held
 * across blocking I/O (under it the watchdog only reads notice sockets
 * without blocking, dl_notice_heard_forced, and writes its wake pipe). Holds are unlinked only on the Lua thread, so a hold it
 * found before its I/O is still valid after it (the watchdog may have
 * marked it lost meanwhile).
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

/* Locks whose form the client remembers (dl_client.hashed): a lock's key
 * picks one of these, and two that share one cost probes (a conversion to
 * the hash at worst), never a wrong answer. */
#define DL_FORM_HINTS 1024

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
    int functions;              /* FCALL where the server takes dlock's
                                   function library (script.h) */
} dl_client_opts;

/* Free what opts owns. */
void dl_state_opts_free(dl_client_opts *opts);

typedef struct dl_stats {
    uint64_t acquired, released, renewed, lost, waits, timeouts;
    uint64_t renew_batches, renew_errors, wakeups;
    uint64_t unconfirmed;       /* releases never confirmed before their
                                   lease ran out */
} dl_stats;

typedef struct dl_client {
    pthread_mutex_t mu;         /* the thread rule: above */
    dl_registry reg;
    dl_stats stats;
    int pending;                /* notices or finished holds wait */
    int sweep;                  /* finished holds wait to be freed */
    dl_client_opts opts;
    unsigned char hashed[DL_FORM_HINTS];    /* by a hash of a lock's key:
                                   its last acquire found the lock in its
                                   hash form (a hint only: acquire.c) */
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
    uint64_t next_seq;          /* the last request id given */
    uint32_t fair_voids;        /* cancels of fair attempts begun
                                   (acquire.c take_grant) */
    int evictable;              /* the server may evict keys it needs */
    dl_log log;                 /* messages for connect{ log = fn } */
} dl_client;

/* Whether this process is the one that opened c. */
int dl_state_same_process(const dl_client *c);

/* With c->mu held: whether another owner of this client holds l's lock
 * until until_us at least (registry.h: dl_registry_other_owner; never
 * for a permit); if so, say who in buf: "held by another coroutine of
 * this client" or "held by owner \"x\" of this client". */
int dl_state_held_here(dl_client *c, const dl_lockref *l, int64_t until_us,
                       char *buf, size_t n);

/* With c->mu held: DL_ENOTHELD, "not held", and who holds l's lock if
 * another owner of this client does (dl_state_held_here). */
dl_status dl_state_not_held(dl_client *c, const dl_lockref *l, char *err,
                            size_t errlen);

/* l names h's lock and owner (pointing into h). */
void dl_state_lockref(const dl_hold *h, dl_lockref *l);

/* The DROP of h's holds by this client (held and not lost). Returns 0
 * when there is nothing to drop. */
int dl_state_drop_op(const dl_client *c, const dl_hold *h, dl_lockref *l,
                     dl_op *op);

/* Without c->mu: the token of l's hold as its owner holds it now (and
 * since when, *since_us): DL_OK; else DL_ENOTHELD (dl_state_not_held),
 * or DL_ELOST for a hold known lost. */
dl_status dl_state_holding(dl_client *c, const dl_lockref *l,
                           int64_t *token, int64_t *since_us, char *err,
                           size_t errlen);

/* With c->mu held: one count of h is over (local: one of those taken
 * here alone, h->local); the local counts never outnumber those left. */
void dl_state_count_out(dl_hold *h, int local);

/* With c->mu held: a hold with nothing left (no holds, nothing pending)
 * goes; its lock reference is handed back through *unref (the first), or
 * queued to be dropped. */
void dl_state_tidy(dl_client *c, dl_hold *h, int *unref);

/* With c->mu held: l's hold, created if absent and create. NULL when
 * absent, or (with *st and err) when it cannot be created. */
dl_hold *dl_state_hold(dl_client *c, const dl_lockref *l, int create,
                       dl_status *st, char *err, size_t errlen);

/* With c->mu held: the hint of the form l's lock is in (its scripts'
 * README.md, THE SHORT FORM): 1 when the last acquire of its key found
 * its hash (it was busy, or had a second requester), and the scripts then
 * look there first; else, or once it is gone and made anew, the short
 * form. acquire.c writes it from each reply that shows the form. */
unsigned char *dl_state_form_hint(dl_client *c, const dl_lockref *l);

#pragma GCC visibility pop
#endif
