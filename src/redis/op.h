/* SPDX-License-Identifier: MIT
 * op.h: the lock operations as data. An operation is one script (or one
 * plain command) with its keys and arguments, the key that routes it, how
 * one server's reply decodes into a vote, and how the votes of several
 * servers add up (exec.h runs it). The builders here are the one place
 * that builds each script's call; where each key and argument goes is
 * the script's header's word (src/redis/scripts/), through scripts.h.
 */
#ifndef DLOCK_OP_H
#define DLOCK_OP_H

#include "redis/lockid.h"
#include "redis/script.h"

#pragma GCC visibility push(hidden)

/* One lock as one owner sees it: its identity (lockid.h, with this
 * call's owner and requester) and what an operation needs beside it. */
typedef struct dl_lockref {
    dl_lockid ident;
    uint64_t owner_num;         /* coroutine owner number; 0: explicit */
    int kind;                   /* DL_KIND_* */
    const char *writer;         /* a reader's: its owner's write-lock owner */
    size_t writerlen;
    int64_t permits;            /* a permit's: the semaphore's size */
} dl_lockref;

/* What one server answered. */
enum {
    DL_V_NONE,                  /* no reply (it may have run, or may yet) */
    DL_V_YES,                   /* granted, done, present */
    DL_V_BUSY,                  /* another owner holds it: x its TTL */
    DL_V_NO,                    /* the hold (or key) is not there */
    DL_V_TAKEN,                 /* another owner's tenancy is there */
    DL_V_BAD                    /* an error or an unexpected reply */
};

/* An acquire's reply shows which form its lock is in (its scripts'
 * README.md, THE SHORT FORM): a bit of each, in dl_vote.form. */
#define DL_FORM_SHORT 1         /* a hold granted in the short form */
#define DL_FORM_HASH 2          /* a hold granted, or busy, in the hash */

typedef struct dl_vote {
    int kind;
    int64_t x, y;               /* acquire: count, token; release: count
                                   left; ttl: the TTL (INT64_MAX: none) */
    int form;                   /* acquire: DL_FORM_*, 0 not known */
} dl_vote;

typedef void (*dl_decode_fn)(const redisReply *r, dl_vote *v);

/* How a quorum's shortfall reads (Redlock; one server always decides):
 * VOTE: an error (the outcome is not known); CONTEND: busy, try again;
 * READ: absent. */
enum { DL_RULE_VOTE, DL_RULE_CONTEND, DL_RULE_READ };

#define DL_OP_COMMAND (-1)      /* id of a plain command */
#define DL_OP_BATCH 100         /* keys per call of a batchable script */
#define DL_OP_ARGS (DL_SCRIPT_HEAD + DL_SCRIPT_ARGC_MAX)
#define DL_OP_NUMS 6            /* numbers per op at most (acquire: 5) */

/* One operation. Builders fill it in place: argv may point into num, so
 * an op is never copied. */
typedef struct dl_op {
    const char *name;           /* for errors: "acquire", ... */
    int id;                     /* script id, or DL_OP_COMMAND */
    int nkeys, argc;            /* argc counts the DL_SCRIPT_HEAD slots */
    const char *argv[DL_OP_ARGS];
    size_t lens[DL_OP_ARGS];
    char num[DL_OP_NUMS][24];   /* the numbers among argv, as text */
    int nnum;
    const char *key;            /* routes it on Cluster */
    size_t keylen;
    dl_decode_fn decode;
    int rule;
    int wd;                     /* on the watchdog's connections */
    int64_t lease_ms;           /* a grant, valid for lease - elapsed -
                                   drift (Redlock) */
    int64_t block_us;           /* the server may wait this long first */
    const char *lead;           /* or NULL: a one-word command sent just
                                   before the script, its reply dropped
                                   (op.c: a PING before one that may grant
                                   a fair lock) */
    const dl_lockref *lock;     /* acquire: for its one-key form and the
                                   fencing write-back */
    int batch;                  /* > 1: calls may carry this many ops of
                                   this script (one key each), and decode
                                   reads one element of the reply */
    redisReply **keep;          /* non-NULL: each server's reply is put
                                   here (keep[i]: Redlock master i; else
                                   keep[0]) for the caller to free */
    const char **xargv;         /* non-NULL: the call's argc arguments are
                                   these (the caller's), not argv */
    size_t *xlens;
} dl_op;

/* The arguments op's call sends. */
#define DL_OP_ARGV(op) ((op)->xargv ? (op)->xargv : (op)->argv)
#define DL_OP_LENS(op) ((op)->xlens ? (op)->xlens : (op)->lens)

/* Take l as attempt a: a fresh hold when expect is 0, else join the hold
 * of count expect and token, for ms, as request seq. waits: the caller
 * will wait if it is busy (a writer then keeps new readers out; a fair
 * lock's waiter queues, with secret: a grant to it carries that,
 * src/redis/scripts/). A fair lock that is free passes to its first
 * waiter, announced with pub. A default lock's waiter says how long it has waited (waited_ms):
 * one that starves has the lock reserved for it (lib/waiter.lua). */
typedef struct dl_attempt {
    uint64_t seq;               /* its request id */
    int64_t ms;                 /* the lease it asks for */
    int64_t expect;             /* 0: a fresh hold; else the count it joins */
    int64_t token;              /* ... and that hold's token */
    int waits;                  /* the caller waits if it is busy */
    uint64_t secret;            /* a fair waiter's */
    int64_t waited_ms;          /* how long the caller has waited */
    const char *pub;            /* the verb that announces a grant */
    int watchdog;               /* (not sent: the hold is renewed by the
                                   watchdog) */
    int hashed;                 /* its client last saw the lock as its
                                   hash: the scripts look there first */
} dl_attempt;
void dl_op_acquire(dl_op *op, const dl_lockref *l, const dl_attempt *a);
/* The form of op for a slot mid-migration (its keys not all on one node;
 * an empty queue counts as missing): 1 when op has one, a script of the
 * lock's key alone (a reentrant acquire, without the counter; any
 * acquire of a semaphore's permit; a fair lock's release, drop and
 * cancel, and a semaphore's release, which then pass nothing on; a
 * semaphore's cancel, as a lock's, without the queue). A
 * fresh acquire of a lock waits for the migration to end. */
int dl_op_one_key(const dl_op *op, dl_op *alt);
/* Raise the fencing counter (and l's token, where l's requester holds
 * it; where op is its last request and its hold the only one, even down:
 * fence.lua) to token: 1 when op's grants carry tokens that must agree. */
int dl_op_unify(const dl_op *op, int64_t token, dl_op *fence);

/* Release one hold of l with token, of the count its client had (0: it
 * last saw the lock as its hash, where the scripts then look first); a
 * freed lock keeps its record keep_ms and announces it with pub
 * ("publish" or "spublish"). */
void dl_op_release(dl_op *op, const dl_lockref *l, uint64_t seq,
                   int64_t token, int64_t count, int64_t keep_ms,
                   const char *pub);
/* Cancel acquire seq of l: undo it if it ran, refuse it if it comes;
 * fresh: that attempt expected no hold (a fair grant to it that its
 * client never saw is taken back too). */
void dl_op_void(dl_op *op, const dl_lockref *l, uint64_t seq,
                int64_t keep_ms, const char *pub, int fresh);
/* pub: how a lock freed meanwhile is announced (a reader whose lease ran
 * out is taken out, rw_renew.lua). */
void dl_op_extend(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token,
                  const char *pub);
/* Whether l's extend sets the TTL exactly (it may lower it): a coroutine
 * owner's plain or fair lock. Every other extend only raises it. */
int dl_op_extend_lowers(const dl_lockref *l);
void dl_op_ttl(dl_op *op, const dl_lockref *l);
/* Free l whoever holds it, as request seq of requester req; its holders'
 * clients hear of it on the channel notice. */
void dl_op_force(dl_op *op, const dl_lockref *l, const char *req,
                 uint64_t seq, int64_t keep_ms, const char *pub,
                 const char *notice);
/* Take count holds of l's owner out, if its tenancy is token's (0: any)
 * and no request of its requester later than request id after ran there
 * (0: no check). */
void dl_op_drop(dl_op *op, const dl_lockref *l, int64_t count,
                int64_t token, uint64_t after, int64_t keep_ms,
                const char *pub);
void dl_op_ping(dl_op *op);
/* How many of a semaphore's permits are free. */
void dl_op_free(dl_op *op, const dl_lockref *l);
/* WAIT for n replicas, at most ms, on l's node. */
void dl_op_sync(dl_op *op, const dl_lockref *l, int n, int64_t ms);

/* Who holds l (its key, queue and channel), changing nothing; verb is
 * "numsub", or "shardnumsub" on Cluster. A held lock votes yes with x its
 * TTL (ms) and y its token. Every server's reply is kept in keep. */
void dl_op_inspect(dl_op *op, const dl_lockref *l, const char *verb,
                   redisReply **keep);
/* CLIENT LIST on l's server (every Redlock master), the replies kept. */
void dl_op_clients(dl_op *op, const dl_lockref *l, redisReply **keep);

/* A user's command (client:call): argv[0..argc) with lens, sent to the
 * node of key (its first key; "" for any). Its reply is kept in keep[0];
 * an error reply is an error status with its text. The arrays are the
 * caller's, and must outlive the op. */
void dl_op_command(dl_op *op, const char *key, size_t keylen, int argc,
                   const char **argv, size_t *lens, redisReply **keep);

/* The room a guard needs in front of its command (below). */
#define DL_OP_GUARD_HEAD (DL_SCRIPT_HEAD + 5)   /* lock, data, owner, token,
                                                   cmd */

/* A guarded command: the user's argv[0..argc) (lens), run only while the
 * hold of token is still the lock's current tenancy (guard.lua), with data
 * (dlen) declared as the command's key; its reply kept in keep[0]. x and
 * xl are the caller's arrays of DL_OP_GUARD_HEAD + argc slots, which the
 * call is built in, and must outlive the op. */
typedef struct dl_guarded {
    int64_t token;
    int argc;
    const char **argv;
    const size_t *lens;
    const char *data;
    size_t dlen;
    const char **x;
    size_t *xl;
    redisReply **keep;
} dl_guarded;

/* Run the guarded command g on l's hold. */
void dl_op_guard(dl_op *op, const dl_lockref *l, const dl_guarded *g);

/* Set l's TTL to ms if its tenancy is still token's (batchable); pub as
 * dl_op_extend's. */
void dl_op_renew(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token,
                 const char *pub);

#pragma GCC visibility pop
#endif
