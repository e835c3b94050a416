/* SPDX-License-Identifier: MIT
 * registry.h: the holds one client believes it has, shared by the Lua
 * thread and the watchdog thread under the client's mutex (state.h, THE
 * THREAD RULE): every function here expects the caller to hold it.
 */
#ifndef DLOCK_REGISTRY_H
#define DLOCK_REGISTRY_H

#include "redis/lockid.h"

#pragma GCC visibility push(hidden)

typedef struct dl_hold {
    uint64_t id;                /* unique within the client, never reused */
    struct dl_hold *hnext;      /* hash bucket chain */
    size_t at;                  /* its index in the registry's all[] */
    struct dl_hold *onext;      /* orphan list */
    dl_lockid ident;            /* its strings inline after the struct */
    uint64_t owner_num;         /* coroutine owner number; 0: explicit */
    int64_t count;              /* this client's holds for this owner
                                   (a release already called is not one) */
    int64_t local;              /* of them, reentries taken here without
                                   a round trip: Redis counts count - local
                                   (dl_hold_counted) */
    int64_t token;              /* fencing token of this hold */
    int64_t lease_ms;           /* TTL set at acquire and each renewal */
    int64_t acquired_us;        /* monotonic time of the fresh acquire */
    int64_t deadline_us;        /* lease may have run out after this */
    int64_t renew_at_us;        /* watchdog renews at or after this */
    int64_t retry_at_us;        /* a failed renewal: not again before */
    uint64_t pend_seq;          /* a pending request's id (pend, below) */
    int64_t pend_token;         /* a release's token */
    int64_t pend_count;         /* a release's: the holds Redis counted
                                   before it (0: the hold is in the hash,
                                   below) */
    int64_t pend_ms;            /* how long Redis keeps its record */
    int64_t pend_retry_us;      /* the watchdog resends it after this */
    int64_t pend_until_us;      /* and gives up after this */
    const char *lost;           /* NULL, or why the hold was lost */
    uint64_t gen;               /* bumped on every confirmed count change and extend */
    uint64_t drop_after;        /* an orphan share: the last request id its
                                   client sent before the loss (0: any) */
    int ref;                    /* Lua ref of the lock object, DL_NOREF */
    /* Small states, a byte each (100,000 holds: doc/performance.md). */
    unsigned char kind;         /* DL_KIND_* (op.h) */
    unsigned char watchdog;     /* renewed by the watchdog */
    unsigned char warned;       /* held past warn_hold, and logged */
    unsigned char check;        /* a forced release was heard: ask Redis
                                   whether this (fixed-lease) hold is still
                                   the lock's, at the next pass */
    unsigned char final;        /* its lease ends at max_hold: no renewal */
    unsigned char pend;         /* a request whose outcome is unknown:
                                   DL_PEND_VOID or DL_PEND_RELEASE */
    unsigned char pend_lua;     /* ... and the Lua thread has it on the
                                   wire: the watchdog leaves it alone */
    unsigned char pend_fresh;   /* an acquire's: it expected no hold (a
                                   cancel may take back a fair grant its
                                   client never saw, lib/cancel.lua) */
    unsigned char finished;     /* count 0, nothing pending: the Lua
                                   thread unlinks and frees it */
    unsigned char inflight;     /* a renewal of it is on the wire */
    unsigned char dead;         /* unlinked while inflight: watchdog frees */
    unsigned char hashed;       /* granted in the lock's hash (or by a fair
                                   grant): its release looks there first */
} dl_hold;

enum { DL_PEND_NONE, DL_PEND_VOID, DL_PEND_RELEASE };

/* The holds of h that Redis counts (a DROP takes out no more). */
static inline int64_t dl_hold_counted(const dl_hold *h)
{
    return h->count - h->local;
}

/* A lost-hold notice for the Lua thread: call on_lost(lock ref, reason),
 * then unref. reason NULL: only unref (the hold went away silently). */
typedef struct dl_event {
    int ref;
    const char *reason;
} dl_event;

typedef struct dl_registry {
    dl_hold **buckets;
    size_t nbuckets;
    dl_hold **all;              /* every linked hold, in no order: one
                                   array, for the watchdog's walk over
                                   100,000 holds (DL_REGISTRY_EACH) */
    size_t count, capall;
    uint64_t next_id;
    dl_event *events;
    size_t nevents, capevents;
    dl_hold *orphans;           /* unlinked; the watchdog DROPs then frees */
} dl_registry;

/* for (DL_REGISTRY_EACH(reg, i, h)) { ... }: every linked hold h, from
 * the last; the body may unlink h (and no other hold). */
#define DL_REGISTRY_EACH(reg, i, h) \
    size_t i = (reg)->count; i-- > 0 && ((h) = (reg)->all[i], 1);

int dl_registry_init(dl_registry *reg);
/* Free every hold, orphan and event. */
void dl_registry_free(dl_registry *reg);

/* The linked hold of the lock's key and owner, or NULL. */
dl_hold *dl_registry_find(dl_registry *reg, const dl_lockid *ident);

/* A linked hold of the lock's key (any kind but a permit) by an owner
 * other than ident's (a read half's owner is its writer's), that counts
 * holds, is not lost, and lasts from now to until (monotonic us): renewed
 * by the watchdog, or a lease not over before until; NULL if none. It
 * walks every hold. */
dl_hold *dl_registry_other_owner(dl_registry *reg, const dl_lockid *ident,
                                 int64_t now, int64_t until);

/* A new linked hold with count 0 and a copy of the lock's identity;
 * NULL if out of memory. */
dl_hold *dl_registry_add(dl_registry *reg, const dl_lockid *ident);

/* Unlink h and free it, or leave it to the watchdog if a renewal of it is
 * in flight. The caller has dealt with h->ref. */
void dl_registry_remove(dl_registry *reg, dl_hold *h);
void dl_registry_unlink(dl_registry *reg, dl_hold *h);

/* Queue a notice; returns 0, or -1 if out of memory. */
int dl_registry_push_event(dl_registry *reg, int ref, const char *reason);

/* Move every hold of coroutine owner owner_num to the orphan list (their
 * refs become reason-less notices). Returns how many moved. */
size_t dl_registry_orphan(dl_registry *reg, uint64_t owner_num);

/* Queue for the watchdog's DROP (as an orphan) a copy of h's holds as
 * they are now: h->count holds of h's owner in tenancy h->token, unless a
 * request of its requester later than request id after ran there (a new
 * hold of the same tenancy). h itself is left as it is. Returns 0, or -1
 * if out of memory. */
int dl_registry_orphan_share(dl_registry *reg, const dl_hold *h,
                             uint64_t after);

#pragma GCC visibility pop
#endif
