/* SPDX-License-Identifier: MIT
 * exec.h: the executor. It runs any operation (op.h) on any topology: it
 * turns the operation into a call (script.h: dl_call), sends it to the
 * node that owns its key (cluster.h follows the redirects, script.c
 * answers NOSCRIPT, conn.c resends on a link found dead) or to every
 * Redlock master at once (topology.h), and counts the answers against
 * the quorum with validity and drift, here and nowhere else. Lua thread,
 * or the watchdog with op->wd.
 */
#ifndef DLOCK_EXEC_H
#define DLOCK_EXEC_H

#include "redis/op.h"
#include "redis/cluster.h"

#pragma GCC visibility push(hidden)

/* Votes counted over the servers an operation went to. */
typedef struct dl_tally {
    uint32_t yes, busy, no, taken, bad, none;
    int64_t busy_min;           /* shortest TTL among busy votes */
    int64_t ymin, ymax;         /* y among yes votes (tokens) */
    int form;                   /* the votes' forms, or-ed (op.h) */
} dl_tally;

void dl_exec_tally(dl_tally *tl, const dl_vote *v);

/* What an operation came to. */
typedef struct dl_result {
    int kind;                   /* DL_V_YES, _BUSY, _NO or _TAKEN */
    int64_t x, y;               /* YES: the answer (Redlock: x the
                                   quorum-th largest, y the highest) */
    int64_t busy_ms;            /* BUSY: the holder's TTL, 0 unknown */
    int split;                  /* BUSY on Redlock: nobody has a quorum */
    int maybe;                  /* not YES, yet it ran, or may still run,
                                   on some server: to be cancelled */
    uint32_t yes;               /* servers that said yes */
    int form;                   /* the votes' forms, or-ed (op.h) */
    int64_t t0;                 /* when it was sent (dl_now_us) */
} dl_result;

/* Run op. DL_OK with *res when its outcome is known; an error status
 * (err says why) when it is not: no reply, or no quorum either way. */
dl_status dl_exec(dl_topology *t, const dl_scripts *s, dl_op *op,
                  dl_result *res, char *err, size_t errlen);

/* The call that sends op: op's arguments, whose script head the call
 * writes. */
void dl_exec_call_of(dl_op *op, dl_call *call);

/* The outcome of tl, op's votes, under op's rule (op.h) on t. valid: a
 * grant's validity has not run out; rerr (or NULL): the text of an error
 * reply among them. Used by dl_exec and by batches. */
dl_status dl_exec_verdict(const dl_topology *t, const dl_op *op,
                          const dl_tally *tl, int valid, const char *rerr,
                          dl_result *res, char *err, size_t errlen);

/* Many operations at once (batch.c): every call written to every node
 * before any reply is read, so one round trip however many. Operations
 * of a batchable script (op->batch > 1: RENEW) that go to one node and one
 * Cluster slot share script calls of up to op->batch keys. Replies are
 * read from each connection in the order sent, so each operation is
 * counted on its own answer. NOSCRIPT is answered by loading the scripts
 * and a second round; ASK and TRYAGAIN (a slot migrating) by sending that
 * call's operations one by one; MOVED and READONLY by learning the new
 * map or master for the next time (those operations count as failed). */
typedef struct dl_chunk {
    uint32_t node, first, m;    /* order[first..first+m) on node */
    int redo;                   /* answered NOSCRIPT: send again */
    int single;                 /* answered ASK/TRYAGAIN: one by one */
} dl_chunk;

/* The most keys and arguments one operation of a batchable script takes
 * (rw_renew's: its lock, req, lease_ms, token, chan and pub). */
#define DL_BATCH_GROUP 6

typedef struct dl_batch {
    dl_op *ops;                 /* ops[0..n), the caller's */
    size_t n;
    dl_tally *tallies;          /* out: each op's votes, the caller's */
    uint64_t *order;            /* scratch, kept between runs */
    size_t norder, caporder;
    dl_chunk *chunks;
    size_t nchunks, capchunks;
    const char *argv[DL_SCRIPT_HEAD + DL_OP_BATCH * DL_BATCH_GROUP];
    size_t lens[DL_SCRIPT_HEAD + DL_OP_BATCH * DL_BATCH_GROUP];
} dl_batch;

/* Run b->ops on the watchdog's connections if wd, else the Lua thread's.
 * Returns the number of script calls made. */
size_t dl_batch_run(dl_topology *t, const dl_scripts *s, int wd,
                    dl_batch *b);

/* The outcome of b->ops[i], from b->tallies[i], as dl_exec_verdict. */
dl_status dl_batch_verdict(const dl_topology *t, const dl_batch *b,
                           size_t i, dl_result *res, char *err,
                           size_t errlen);

/* Free b's scratch (not ops or tallies). */
void dl_batch_free(dl_batch *b);

/* The clock-drift allowance of a lease of ms (0 off Redlock): 1% plus
 * 2 ms, as the Redis documentation suggests. */
int64_t dl_exec_drift_us(const dl_topology *t, int64_t ms);

/* What the topology means to the lock operations, asked here so that
 * they never look at it themselves. */

/* Learn the script SHAs on every reachable node: one server's, or a
 * quorum of Redlock masters' (Cluster also learns its slot map). */
dl_status dl_exec_load_scripts(dl_topology *t, dl_scripts *s, char *err,
                               size_t errlen);

/* How many servers' answers make an outcome: a quorum of the Redlock
 * masters, else 1. */
size_t dl_exec_quorum(const dl_topology *t);

/* Whether every operation goes to several servers (Redlock): then one
 * server's answer (a grant message, a count) is no outcome. */
int dl_exec_fans_out(const dl_topology *t);

/* The subscriber connections that carry the messages of the lock whose
 * key is key: every Redlock master's, or the key's node's. Returns how
 * many are in ws (room for DL_MAX_NODES). */
size_t dl_exec_waiters(dl_topology *t, const char *key, size_t len,
                       dl_waiter **ws);

/* Whether t routes each key by its slot (Cluster). */
int dl_exec_by_slot(const dl_topology *t);

/* Whether keys a and b are served by one node and may share a script
 * (Cluster: the same slot; elsewhere always). */
int dl_exec_same_node(const dl_topology *t, const char *a, size_t alen,
                      const char *b, size_t blen);

/* The verbs that publish to a lock's channel and count its subscribers:
 * Cluster's sharded ones there, else the plain ones. */
const char *dl_exec_publish_verb(const dl_topology *t);
const char *dl_exec_numsub_verb(const dl_topology *t);

#pragma GCC visibility pop
#endif
