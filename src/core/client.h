/* SPDX-License-Identifier: MIT
 * client.h: the client as the binding calls it: client.c's calls, and
 * the entry points of acquire.c, release.c, extend.c, inspect.c and
 * command.c (waiting.h: an acquire's wait abandoned).
 */
#ifndef DLOCK_CLIENT_H
#define DLOCK_CLIENT_H

#include "core/state.h"

#pragma GCC visibility push(hidden)

/* What the Lua thread may read of a hold without I/O. */
typedef struct dl_holdinfo {
    int64_t count;              /* 0 when not held or lost */
    int64_t token;
    int held;                   /* count > 0, not lost, deadline ahead */
    int watchdog;
    const char *lost;           /* reason, or NULL */
} dl_holdinfo;

/* Connect, load the scripts and start the watchdog. Takes ownership of
 * opts' strings in every case. */
dl_status dl_client_open(dl_client **out, dl_client_opts *opts,
                         char *err, size_t errlen);

/* Release every hold (best effort), stop and join the watchdog, close
 * connections, free. In a forked child: free only, no I/O. */
void dl_client_close(dl_client *c);

/* Lua thread, in each operation below that may talk to Redis (not
 * close), before it sends anything: hear of a Sentinel failover
 * (sentinel.h: dl_sentinel_news). Inline: it is on every lock path. */
static inline void dl_client_enter(dl_client *c)
{
    dl_sentinel_news(&c->topo.sentinel);
}

/* How to acquire, and what came of it besides the status. */
typedef struct dl_acquire_args {
    int64_t wait_us;            /* < 0 waits forever, 0 tries once */
    int64_t lease_ms;           /* a fixed lease; 0: watchdog mode */
    int64_t renew_ms;           /* watchdog mode's lease; 0: the client's */
    int ref;                    /* the caller's reference to its lock
                                   object, kept by a fresh hold */
    int ref_kept;               /* out: whether it was */
    int64_t busy_ms;            /* out, on DL_ETIMEOUT: the holder's TTL
                                   as the last attempt saw it; -1 unknown */
    int held_here;              /* out, on DL_ETIMEOUT: a blocking wait
                                   ended at once, as another owner of this
                                   client holds the lock (it could not
                                   release it while the wait blocks) */
} dl_acquire_args;

/* Internal: an acquire step wants to wait (below). */
#define DL_EWAIT DL_INTERNAL(3, DL_ETIMEOUT)

/* One acquire between its steps. Zero it, set args, and call
 * dl_acquire_step until it returns anything but DL_EWAIT. */
typedef struct dl_acquire {
    dl_acquire_args args;
    int started, waited;
    int64_t until_us;           /* the caller's wait ends; INT64_MAX never */
    int64_t since_us;           /* when the acquire began */
    uint64_t seen;              /* release messages counted before the
                                   last attempt (wait.h) */
    int64_t wake_us;            /* DL_EWAIT: come back by this time */
    int fds[DL_MAX_NODES];      /* ... or when one of these is readable */
    size_t nfds;
    uint64_t serial;            /* the socket fds[0] is (conn.h) */
    int drained;                /* a socket the last step read messages
                                   from, that other waiters of this state
                                   may be waiting on; -1: none */
    uint64_t reg_seq;           /* a fair lock's: the attempt that queued
                                   last (0: none), sent at reg_t0 for a
                                   lease of reg_ms, watchdog or not, with
                                   reg_secret (its grant carries it) */
    uint64_t reg_secret;
    uint32_t reg_voids;         /* the client's fair_voids when it queued */
    int64_t reg_t0, reg_ms;
    int reg_watchdog;
    int64_t nap_us;             /* the last nap after a server out of
                                   reach (it doubles) */
    int64_t claim_ms;           /* an attempt of this wait, asking for a
                                   lease of claim_ms, claimed a place as a
                                   waiter (a lock's longest waiter, a
                                   place in a fair lock's or semaphore's
                                   queue); 0: none */
    int waiting;                /* the last step returned DL_EWAIT */
    int blocks;                 /* the steps run back to back on the
                                   thread of the client's owners (the
                                   blocking dl_acquire_blocking) */
} dl_acquire;

/* Take l, or learn that it is busy. Returns DL_OK (acquired), a final
 * error, or DL_EWAIT: the caller waits until op->wake_us or until one of
 * op->fds is readable, however it likes (poll, or yield to an event
 * loop; waking early is fine), then calls again. Each step holds nothing
 * between calls but op, so a step may follow other calls on c. A reentry
 * keeps the mode and lease of the hold it joins. */
dl_status dl_acquire_step(dl_client *c, const dl_lockref *l,
                          dl_acquire *op, char *err, size_t errlen);

/* The blocking acquire: the steps, with poll() between them. */
dl_status dl_acquire_blocking(dl_client *c, const dl_lockref *l,
                              dl_acquire_args *a, char *err, size_t errlen);

/* Release one hold. *remaining gets the count left; *unref gets a lock
 * reference the caller must drop (DL_NOREF if none). */
dl_status dl_release(dl_client *c, const dl_lockref *l,
                     int64_t *remaining, int *unref,
                     char *err, size_t errlen);

dl_status dl_extend(dl_client *c, const dl_lockref *l,
                    int64_t lease_ms, char *err, size_t errlen);
/* *ttl_ms < 0 when the key is absent. */
dl_status dl_client_ttl(dl_client *c, const dl_lockref *l, int64_t *ttl_ms,
                        char *err, size_t errlen);
/* How many of the semaphore l's permits (l->permits) are free now. */
dl_status dl_client_available(dl_client *c, const dl_lockref *l,
                              int64_t *free_n, char *err, size_t errlen);
dl_status dl_client_force_release(dl_client *c, const dl_lockref *l,
                                  int *existed, char *err, size_t errlen);
dl_status dl_client_ping(dl_client *c, char *err, size_t errlen);

void dl_client_hold_info(dl_client *c, const dl_lockref *l, dl_holdinfo *hi);

/* Queue a warning for the client's log function (if it has one). */
void dl_client_warn(dl_client *c, const char *msg);

/* Take up to max queued notices. */
size_t dl_client_take_events(dl_client *c, dl_event *buf, size_t max);

/* Take up to max queued log messages (the Lua thread; log.h). */
size_t dl_client_take_log(dl_client *c, dl_log_msg *buf, size_t max);

/* Whether notices or log messages wait to be taken: a hint read without
 * the lock, with acquire ordering (the takers above lock). Inline: every
 * call into the binding asks it. */
static inline int dl_client_has_news(const dl_client *c)
{
    return __atomic_load_n(&c->pending, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&c->log.pending, __ATOMIC_ACQUIRE);
}

/* The client's id: DL_ID_HEX hex digits, NUL-terminated. */
static inline const char *dl_client_id(const dl_client *c)
{
    return c->id;
}

/* The key prefix of connect{ prefix }, *len its length (it may hold NUL
 * bytes). */
static inline const char *dl_client_prefix(const dl_client *c, size_t *len)
{
    *len = c->opts.prefixlen;
    return c->opts.prefix;
}

/* A new owner number for a coroutine of c, never given before (the Lua
 * thread only). */
static inline uint64_t dl_client_next_owner(dl_client *c)
{
    return ++c->next_owner;
}

/* The coroutine behind owner_num was collected: its holds are released
 * by the watchdog, not renewed. */
void dl_client_owner_gone(dl_client *c, uint64_t owner_num);

void dl_client_stats(dl_client *c, dl_stats *out, size_t *held);

/* The names of the locks held past connect{ warn_hold } (not lost), n of
 * them, in one block the caller frees; NULL when none (or no memory). */
char **dl_client_held_long(dl_client *c, size_t *n);

/* One owner of a lock, as inspection finds it. */
typedef struct dl_inspect_owner {
    char *owner;                /* as stored, a read half's "\0r" cut */
    size_t ownerlen;
    int64_t count;              /* its holds */
    char client[DL_ID_HEX + 1]; /* the client acting for it; "" unknown */
    char *label;                /* that client's label; NULL unknown */
    int mode;                   /* 'r' a reader, 'w' a writer, else 0 */
    int coroutine;              /* a coroutine owner: "<client id>:<n>" */
} dl_inspect_owner;

typedef struct dl_inspect {
    int64_t token, ttl_ms;
    int64_t waiters;            /* approximate: see dl_inspect_lock */
    size_t nowners;
    dl_inspect_owner *owners;
} dl_inspect;

/* Who holds lock name now, with no effect on it: DL_OK and *held = 0
 * when it is free, else *in filled (free it with dl_inspect_free). The
 * waiters are a fair lock's or a semaphore's queue, or else the clients
 * listening on the lock's channel (those that waited for it lately too).
 * Labels come from CLIENT LIST on the lock's server. */
dl_status dl_inspect_lock(dl_client *c, const char *name, size_t len,
                          int *held, dl_inspect *in, char *err,
                          size_t errlen);
void dl_inspect_free(dl_inspect *in);

/* Every connection of a client names itself (CLIENT SETNAME, once, when
 * it connects: nothing on the lock path) DL_CLIENT_NAME_PREFIX "<client
 * id>:<label>", the label %XX-escaped where Redis would refuse a byte
 * (and '%'): dl_inspect_lock reads the labels back from CLIENT LIST. */
#define DL_CLIENT_NAME_PREFIX "dlock:"

/* Whether the (first) server's maxmemory-policy may evict lock keys: an
 * allkeys-* policy (volatile-* ones may too: every lock key has a TTL). */
int dl_client_evictable(const dl_client *c);

/* Whether each lock is kept on several servers at once (Redlock), each
 * counting on its own. */
int dl_client_fans_out(const dl_client *c);

/* command.c: the user's commands. Run argv[0..argc) (lens) on the server of
 * its first key, argv[1] (any server when it has none): DL_OK with *out
 * the reply, for the caller to free; an error reply is DL_EREDIS with
 * its text. Not on Redlock (dl_client_fans_out): no one server. */
dl_status dl_command_call(dl_client *c, int argc, const char **argv,
                          size_t *lens, redisReply **out, char *err,
                          size_t errlen);

/* The same, run only while l's hold is still the lock's current tenancy
 * (its owner holds it, with this hold's token): else nothing runs, and
 * DL_ELOST (the hold is lost here too). DL_ENOTHELD when l's owner holds
 * no hold here; DL_ELOST at once for a hold known lost. */
dl_status dl_command_guard(dl_client *c, const dl_lockref *l, int argc,
                           const char **argv, const size_t *lens,
                           redisReply **out, char *err, size_t errlen);

/* Whether key goes to the server l's key goes to, and may be used in one
 * script with it (Cluster: the same slot; elsewhere always). */
int dl_command_same_slot(dl_client *c, const dl_lockref *l, const char *key,
                         size_t keylen);

#pragma GCC visibility pop
#endif
