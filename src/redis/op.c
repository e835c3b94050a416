/* SPDX-License-Identifier: MIT
 * op.c: each lock operation's script, arguments and reply, as data. A
 * script's keys and arguments go where its header (src/redis/scripts/) says,
 * by name: scripts.h has each one's layout.
 */
#define _GNU_SOURCE
#include "redis/op.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dl_script_layout *layout(const dl_op *op)
{
    return dl_script_layout_of((dl_script_id)op->id);
}

/* A script's op takes its keys and arguments where its header in
 * src/redis/scripts/ puts them (scripts.h); a command's, in order (add). */
static void init(dl_op *op, const char *name, int id, const char *key,
                 size_t keylen, dl_decode_fn decode)
{
    memset(op, 0, sizeof *op);
    op->name = name;
    op->id = id;
    op->argc = id == DL_OP_COMMAND ? 0 : DL_SCRIPT_HEAD;
    op->nkeys = id == DL_OP_COMMAND ? 0 : layout(op)->nkeys;
    op->key = key;
    op->keylen = keylen;
    op->decode = decode;
}

static void add(dl_op *op, const char *s, size_t n)
{
    assert(op->argc < DL_OP_ARGS);
    op->argv[op->argc] = s;
    op->lens[op->argc++] = n;
}

static void add_s(dl_op *op, const char *s)
{
    add(op, s, strlen(s));
}

/* A number as text, kept in op (at most DL_OP_NUMS per op); *n: its
 * length. */
static const char *num(dl_op *op, int64_t v, size_t *n)
{
    assert(op->nnum < DL_OP_NUMS);
    char *b = op->num[op->nnum++];
    *n = dl_fmt_i64(b, v);
    return b;
}

static void add_i(dl_op *op, int64_t v)
{
    size_t n;
    const char *s = num(op, v, &n);
    add(op, s, n);
}

/* The argv slot of KEYS[i] or ARGV[i] (i from 1: 0 is a name the script
 * does not take, a builder's mistake). */
static int key_slot(const dl_op *op, int k)
{
    assert(layout(op)->key[k] > 0);
    return DL_SCRIPT_HEAD + layout(op)->key[k] - 1;
}

static int arg_slot(const dl_op *op, int a)
{
    assert(layout(op)->arg[a] > 0);
    return DL_SCRIPT_HEAD + op->nkeys + layout(op)->arg[a] - 1;
}

static void put(dl_op *op, int i, const char *s, size_t n)
{
    assert(i < DL_OP_ARGS && !op->argv[i]);
    op->argv[i] = s;
    op->lens[i] = n;
    if (op->argc <= i)
        op->argc = i + 1;
}

/* Key k (DL_KEY_*) or argument a (DL_ARG_*) of op's script. */
static void key(dl_op *op, int k, const char *s, size_t n)
{
    put(op, key_slot(op, k), s, n);
}

static void arg(dl_op *op, int a, const char *s, size_t n)
{
    put(op, arg_slot(op, a), s, n);
}

static void arg_s(dl_op *op, int a, const char *s)
{
    arg(op, a, s, strlen(s));
}

static void arg_i(dl_op *op, int a, int64_t v)
{
    size_t n;
    const char *s = num(op, v, &n);
    arg(op, a, s, n);
}

/* Every key and argument of op's script is there (one group of them,
 * for a script that takes one per hold: batch.c adds up the groups). */
static void done(const dl_op *op)
{
    const dl_script_layout *y = layout(op);
    assert(op->argc == DL_SCRIPT_HEAD + y->nkeys + y->nargs);
    for (int i = DL_SCRIPT_HEAD; i < op->argc; i++)
        assert(op->argv[i]);
    (void)y;
}

/* ---- replies -------------------------------------------------------- */

static int is_int(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_INTEGER;
}

/* Whether r is an array of n elements whose first is an integer (code). */
static int shaped(const redisReply *r, size_t n, int64_t *code)
{
    return !dl_reply_int(r, 0, code) && r->elements ==
           (size_t)(*code == 1 ? n : *code == 0 && n == 3 ? 2 : 1);
}

/* token (> 0: count 1, short) | {1, count, token} | {0, pttl} | {-1} lost
 * | {-2} refused: try again. The shape shows the form (DL_FORM_*). */
static void acquire_vote(const redisReply *r, dl_vote *v)
{
    int64_t code;
    v->kind = DL_V_BAD;
    if (is_int(r) && r->integer > 0) {
        v->kind = DL_V_YES, v->x = 1, v->y = r->integer;
        v->form = DL_FORM_SHORT;
        return;
    }
    if (!shaped(r, 3, &code))
        return;
    if (code == 1 && !dl_reply_int(r, 1, &v->x) && !dl_reply_int(r, 2, &v->y))
        v->kind = DL_V_YES, v->form = v->x == 1 ? DL_FORM_HASH : 0;
    else if (code == 0 && !dl_reply_int(r, 1, &v->x))
        v->kind = DL_V_BUSY, v->x = v->x < 0 ? 0 : v->x,  /* the TTL */
        v->form = DL_FORM_HASH;
    else if (code == -1)
        v->kind = DL_V_NO;
    else if (code == -2)
        v->kind = DL_V_BUSY;            /* x 0: at once */
}

/* remaining (>= 0) | -1 lost; or {1, remaining} | {-1} */
static void release_vote(const redisReply *r, dl_vote *v)
{
    int64_t code;
    v->kind = DL_V_BAD;
    if (is_int(r)) {
        v->kind = r->integer >= 0 ? DL_V_YES : r->integer == -1 ? DL_V_NO
                  : DL_V_BAD;
        v->x = r->integer >= 0 ? r->integer : 0;
        return;
    }
    if (!shaped(r, 2, &code))
        return;
    if (code == 1 && !dl_reply_int(r, 1, &v->x))
        v->kind = DL_V_YES;
    else if (code == -1)
        v->kind = DL_V_NO;
}

/* Any integer: done. */
static void done_vote(const redisReply *r, dl_vote *v)
{
    v->kind = is_int(r) ? DL_V_YES : DL_V_BAD;
    v->x = is_int(r) ? r->integer : 0;
}

/* 1 | 0 */
static void bool_vote(const redisReply *r, dl_vote *v)
{
    v->kind = !is_int(r) ? DL_V_BAD : r->integer == 1 ? DL_V_YES : DL_V_NO;
}

/* The TTL while held (-1: none), -2 when free */
static void ttl_vote(const redisReply *r, dl_vote *v)
{
    v->kind = !is_int(r) ? DL_V_BAD : r->integer == -2 ? DL_V_NO : DL_V_YES;
    v->x = is_int(r) && r->integer >= 0 ? r->integer : INT64_MAX;
}

static void reply_vote(const redisReply *r, dl_vote *v)
{
    v->kind = r && r->type != REDIS_REPLY_ERROR ? DL_V_YES : DL_V_BAD;
}

/* 1 renewed | 0 gone | -1 another owner's tenancy */
static void renew_vote(const redisReply *r, dl_vote *v)
{
    v->kind = !is_int(r) ? DL_V_BAD
              : r->integer == 1 ? DL_V_YES
              : r->integer == 0 ? DL_V_NO
              : r->integer == -1 ? DL_V_TAKEN : DL_V_BAD;
}

/* ---- operations ----------------------------------------------------- */

/* Who asks, and which request this is. */
static void add_request(dl_op *op, const dl_lockref *l, uint64_t seq)
{
    arg(op, DL_ARG_OWNER, l->ident.owner, l->ident.ownerlen);
    arg(op, DL_ARG_REQ, l->ident.req, l->ident.reqlen);
    arg_i(op, DL_ARG_SEQ, (int64_t)seq);
}

/* How long a freed lock keeps its record, and where its release is
 * announced (a fair lock's scripts take no channel: a grant goes to the
 * waiter's own). */
static void add_freeing(dl_op *op, const dl_lockref *l, int64_t keep_ms,
                        const char *pub)
{
    arg_i(op, DL_ARG_KEEP_MS, keep_ms);
    if (layout(op)->arg[DL_ARG_CHAN])
        arg(op, DL_ARG_CHAN, l->ident.chan, l->ident.chanlen);
    arg_s(op, DL_ARG_PUB, pub);
}

/* The keys of l that op's script takes: the lock, its slot's fencing
 * counter, its queue of waiters. */
static void add_keys(dl_op *op, const dl_lockref *l)
{
    const dl_script_layout *y = layout(op);
    if (y->key[DL_KEY_LOCK])
        key(op, DL_KEY_LOCK, l->ident.key, l->ident.keylen);
    if (y->key[DL_KEY_COUNTER])
        key(op, DL_KEY_COUNTER, l->ident.fence, l->ident.fencelen);
    if (y->key[DL_KEY_QUEUE])
        key(op, DL_KEY_QUEUE, l->ident.queue, l->ident.queuelen);
}

void dl_op_acquire(dl_op *op, const dl_lockref *l, const dl_attempt *a)
{
    int waits = a->waits;
    static const int ids[] = {
        [DL_KIND_LOCK] = DL_S_ACQUIRE, [DL_KIND_READ] = DL_S_RW_ACQUIRE,
        [DL_KIND_WRITE] = DL_S_RW_ACQUIRE, [DL_KIND_SEM] = DL_S_SEM_ACQUIRE,
        [DL_KIND_FAIR] = DL_S_FAIR_ACQUIRE };
    init(op, "acquire", ids[l->kind], l->ident.key, l->ident.keylen,
         acquire_vote);
    add_keys(op, l);
    add_request(op, l, a->seq);
    arg_i(op, DL_ARG_LEASE_MS, a->ms);
    arg_i(op, DL_ARG_EXPECT, a->expect);
    arg_i(op, DL_ARG_TOKEN, a->token);
    if (l->kind == DL_KIND_LOCK)        /* how long it waited; -1: won't */
        arg_i(op, DL_ARG_WAITED, waits ? a->waited_ms : -1);
    else if (l->kind == DL_KIND_SEM) {  /* queue if busy */
        arg_i(op, DL_ARG_PERMITS, l->permits);
        arg_s(op, DL_ARG_WAITS, waits ? "1" : "0");
    } else if (l->kind == DL_KIND_FAIR) { /* queue if busy; how to grant;
                                           what a grant to it carries */
        arg_s(op, DL_ARG_WAITS, waits ? "1" : "0");
        arg_s(op, DL_ARG_PUB, a->pub);
        assert(op->nnum < DL_OP_NUMS);
        char *b = op->num[op->nnum++];
        snprintf(b, sizeof op->num[0], DL_FAIR_SECRET_FMT,
                 (unsigned long long)a->secret);
        arg_s(op, DL_ARG_SECRET, b);
    } else if (l->kind) {               /* which half, and its writer */
        arg_s(op, DL_ARG_KIND,
              l->kind == DL_KIND_READ ? "r" : waits ? "W" : "w");
        arg(op, DL_ARG_WRITER, l->writer ? l->writer : "",
            l->writer ? l->writerlen : 0);
    }
    if (layout(op)->arg[DL_ARG_FORM])   /* where to look first */
        arg_s(op, DL_ARG_FORM, a->hashed ? "h" : "s");
    done(op);
    /* A fresh hold competes (a shortfall: busy); a reentry must be
     * confirmed (a shortfall: not known). */
    op->rule = a->expect ? DL_RULE_VOTE : DL_RULE_CONTEND;
    op->lease_ms = a->ms;
    op->lock = l;
}

/* The one-key form of each multi-key script (src/redis/scripts/<name>1.lua),
 * for a slot mid-migration; reentry: an acquire that takes it only as a
 * reentry (expect > 0): a new tenancy needs its token from the counter,
 * and waits for the migration to end. A permit has no token: any acquire
 * of one may. */
static const struct { int id, alt, reentry; } one_keys[] = {
    { DL_S_ACQUIRE, DL_S_ACQUIRE1, 1 },
    { DL_S_FAIR_ACQUIRE, DL_S_FAIR_ACQUIRE1, 1 },
    { DL_S_SEM_ACQUIRE, DL_S_SEM_ACQUIRE1, 0 },
    { DL_S_FAIR_RELEASE, DL_S_FAIR_RELEASE1, 0 },
    { DL_S_SEM_RELEASE, DL_S_SEM_RELEASE1, 0 },
    { DL_S_FAIR_DROP, DL_S_FAIR_DROP1, 0 },
    { DL_S_FAIR_VOID, DL_S_FAIR_VOID1, 0 },
    { DL_S_SEM_VOID, DL_S_VOID, 0 },    /* (a place it queued lapses in 3 s) */
};

int dl_op_one_key(const dl_op *op, dl_op *alt)
{
    size_t i = 0, n = sizeof one_keys / sizeof one_keys[0];
    while (i < n && one_keys[i].id != op->id)
        i++;
    if (i == n)
        return 0;
    if (one_keys[i].reentry) {
        int expect = arg_slot(op, DL_ARG_EXPECT);
        if (op->lens[expect] == 1 && op->argv[expect][0] == '0')
            return 0;
    }
    /* op's keys and arguments, those the one-key script takes (op's
     * numbers outlive alt) */
    init(alt, op->name, one_keys[i].alt, op->key, op->keylen, op->decode);
    for (int k = 0; k < DL_KEY_NAMES; k++)
        if (layout(alt)->key[k])
            key(alt, k, op->argv[key_slot(op, k)], op->lens[key_slot(op, k)]);
    for (int a = 0; a < DL_ARG_NAMES; a++)
        if (layout(alt)->arg[a])
            arg(alt, a, op->argv[arg_slot(op, a)], op->lens[arg_slot(op, a)]);
    done(alt);
    alt->rule = op->rule;
    alt->wd = op->wd;
    alt->lease_ms = op->lease_ms;
    alt->lock = op->lock;
    return 1;
}

int dl_op_unify(const dl_op *op, int64_t token, dl_op *fence)
{
    const dl_lockref *l = op->lock;
    if (op->id != DL_S_ACQUIRE && op->id != DL_S_ACQUIRE1 &&
        op->id != DL_S_RW_ACQUIRE && op->id != DL_S_FAIR_ACQUIRE)
        return 0;
    init(fence, "fence", DL_S_FENCE, l->ident.key, l->ident.keylen, done_vote);
    add_keys(fence, l);
    arg_i(fence, DL_ARG_TOKEN, token);
    arg(fence, DL_ARG_REQ, l->ident.req, l->ident.reqlen);
    int seq = arg_slot(op, DL_ARG_SEQ);     /* (op outlives its fence) */
    arg(fence, DL_ARG_SEQ, op->argv[seq], op->lens[seq]);
    done(fence);
    fence->wd = op->wd;
    return 1;
}

/* A script that may grant a fair lock to its next waiter goes behind a
 * PING, so that the grant is written to the new holder before the reply
 * to this caller (conn.h: dl_conn_call_led): the next holder does not
 * wait for the releaser. */
static void may_grant(dl_op *op)
{
    op->lead = "PING";
}

void dl_op_release(dl_op *op, const dl_lockref *l, uint64_t seq,
                   int64_t token, int64_t count, int64_t keep_ms,
                   const char *pub)
{
    int sem = l->kind == DL_KIND_SEM, fair = l->kind == DL_KIND_FAIR;
    init(op, "release", sem ? DL_S_SEM_RELEASE : fair ? DL_S_FAIR_RELEASE
                                                    : DL_S_RELEASE,
         l->ident.key, l->ident.keylen, release_vote);
    add_keys(op, l);
    add_request(op, l, seq);
    arg_i(op, DL_ARG_TOKEN, token);
    add_freeing(op, l, keep_ms, pub);
    if (layout(op)->arg[DL_ARG_COUNT])  /* 0: looked for in the hash first */
        arg_i(op, DL_ARG_COUNT, l->kind == DL_KIND_LOCK || fair ? count : 0);
    done(op);
    if (fair)
        may_grant(op);
}

void dl_op_void(dl_op *op, const dl_lockref *l, uint64_t seq,
                int64_t keep_ms, const char *pub, int fresh)
{
    int fair = l->kind == DL_KIND_FAIR, sem = l->kind == DL_KIND_SEM;
    init(op, "cancel", fair ? DL_S_FAIR_VOID : sem ? DL_S_SEM_VOID : DL_S_VOID,
         l->ident.key, l->ident.keylen, done_vote);
    add_keys(op, l);
    add_request(op, l, seq);
    add_freeing(op, l, keep_ms, pub);
    if (fair)                   /* may take back a grant it never saw */
        arg_s(op, DL_ARG_FRESH, fresh ? "1" : "0");
    done(op);
    if (fair)
        may_grant(op);
}

/* Whether l's holders have leases of their own (readers, writers and
 * permits: e<owner> fields), renewed by RW_RENEW. */
static int own_leases(const dl_lockref *l)
{
    return l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE ||
           l->kind == DL_KIND_SEM;
}

/* The lock, requester, lease and token: extend and renew alike (a hold
 * is its requester's own: a shared owner's other clients' never renew
 * it), after init; RW_RENEW's also where a lock it frees is announced. */
static void lease_args(dl_op *op, const dl_lockref *l, int64_t ms,
                       int64_t token, const char *pub)
{
    add_keys(op, l);
    arg(op, DL_ARG_REQ, l->ident.req, l->ident.reqlen);
    arg_i(op, DL_ARG_LEASE_MS, ms);
    arg_i(op, DL_ARG_TOKEN, token);
    if (op->id == DL_S_RW_RENEW) {
        arg(op, DL_ARG_CHAN, l->ident.chan, l->ident.chanlen);
        arg_s(op, DL_ARG_PUB, pub);
    }
}

/* A read-write hold's extend is its renewal: one element, 1 or not. */
static void first_vote(const redisReply *r, dl_vote *v)
{
    v->kind = DL_V_BAD;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        bool_vote(r->element[0], v);
}

int dl_op_extend_lowers(const dl_lockref *l)
{
    return !own_leases(l) && l->owner_num != 0;
}

void dl_op_extend(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token,
                  const char *pub)
{
    if (own_leases(l))
        init(op, "extend", DL_S_RW_RENEW, l->ident.key, l->ident.keylen,
             first_vote);
    else                        /* an explicit owner's: raised only */
        init(op, "extend", DL_S_EXTEND, l->ident.key, l->ident.keylen,
             bool_vote);
    lease_args(op, l, ms, token, pub);
    done(op);
}

void dl_op_ttl(dl_op *op, const dl_lockref *l)
{
    init(op, "ttl", DL_S_TTL, l->ident.key, l->ident.keylen, ttl_vote);
    add_keys(op, l);
    done(op);
    op->rule = DL_RULE_READ;
}

void dl_op_force(dl_op *op, const dl_lockref *l, const char *req,
                 uint64_t seq, int64_t keep_ms, const char *pub,
                 const char *notice)
{
    init(op, "force_release", DL_S_FORCE, l->ident.key, l->ident.keylen,
         bool_vote);
    add_keys(op, l);
    arg_s(op, DL_ARG_REQ, req);
    arg_i(op, DL_ARG_SEQ, (int64_t)seq);
    add_freeing(op, l, keep_ms, pub);
    arg_s(op, DL_ARG_NOTICE, notice);
    done(op);
    op->rule = DL_RULE_READ;
}

void dl_op_drop(dl_op *op, const dl_lockref *l, int64_t count,
                int64_t token, uint64_t after, int64_t keep_ms,
                const char *pub)
{
    int fair = l->kind == DL_KIND_FAIR;
    init(op, "drop", fair ? DL_S_FAIR_DROP : DL_S_DROP, l->ident.key,
         l->ident.keylen, done_vote);
    add_keys(op, l);
    arg(op, DL_ARG_OWNER, l->ident.owner, l->ident.ownerlen);
    arg_i(op, DL_ARG_COUNT, count);
    arg_i(op, DL_ARG_TOKEN, token);
    add_freeing(op, l, keep_ms, pub);
    arg(op, DL_ARG_REQ, l->ident.req, l->ident.reqlen);
    arg_i(op, DL_ARG_AFTER, (int64_t)after);
    done(op);
    op->rule = DL_RULE_READ;
    if (fair)
        may_grant(op);
}

void dl_op_ping(dl_op *op)
{
    init(op, "ping", DL_OP_COMMAND, "", 0, reply_vote);
    add_s(op, "PING");
    op->rule = DL_RULE_READ;
}

void dl_op_command(dl_op *op, const char *key, size_t keylen, int argc,
                   const char **argv, size_t *lens, redisReply **keep)
{
    init(op, "call", DL_OP_COMMAND, key, keylen, reply_vote);
    op->argc = argc;
    op->xargv = argv;
    op->xlens = lens;
    op->keep = keep;
    op->rule = DL_RULE_VOTE;
}

void dl_op_guard(dl_op *op, const dl_lockref *l, const dl_guarded *g)
{
    int argc = g->argc;
    const char **x = g->x;
    size_t *xl = g->xl;
    init(op, "guard", DL_S_GUARD, l->ident.key, l->ident.keylen,
         reply_vote);
    add_keys(op, l);
    key(op, DL_KEY_DATA, g->data, g->dlen);
    arg(op, DL_ARG_OWNER, l->ident.owner, l->ident.ownerlen);
    arg_i(op, DL_ARG_TOKEN, g->token);
    arg(op, DL_ARG_CMD, g->argv[0], g->lens[0]);
    done(op);
    assert(op->argc == DL_OP_GUARD_HEAD);
    /* the command's own arguments follow ARGV[3] (cmd) */
    memcpy(x, op->argv, sizeof *x * (size_t)op->argc);
    memcpy(xl, op->lens, sizeof *xl * (size_t)op->argc);
    for (int i = 1; i < argc; i++) {
        x[op->argc + i - 1] = g->argv[i];
        xl[op->argc + i - 1] = g->lens[i];
    }
    op->argc += argc - 1;
    op->xargv = x;
    op->xlens = xl;
    op->keep = g->keep;
    op->rule = DL_RULE_VOTE;
}

void dl_op_free(dl_op *op, const dl_lockref *l)
{
    init(op, "available", DL_S_SEM_FREE, l->ident.key, l->ident.keylen,
         done_vote);
    add_keys(op, l);
    arg_i(op, DL_ARG_PERMITS, l->permits);
    done(op);
    op->rule = DL_RULE_READ;
}

void dl_op_sync(dl_op *op, const dl_lockref *l, int n, int64_t ms)
{
    init(op, "wait", DL_OP_COMMAND, l->ident.key, l->ident.keylen, done_vote);
    add_s(op, "WAIT");
    add_i(op, n);
    add_i(op, ms);
    op->block_us = ms * 1000;
}

/* {0} free | {1, token, pttl, owners, requesters, queued, subs, writer} */
static void inspect_vote(const redisReply *r, dl_vote *v)
{
    int64_t code;
    v->kind = DL_V_BAD;
    if (dl_reply_int(r, 0, &code) || (code != 0 && code != 1))
        return;
    v->kind = code ? DL_V_YES : DL_V_NO;
    if (code && r->elements >= 3 && !dl_reply_int(r, 2, &v->x) &&
        r->element[1]->type == REDIS_REPLY_STRING)
        v->y = strtoll(r->element[1]->str, NULL, 10);
    else if (code)
        v->kind = DL_V_BAD;
}

void dl_op_inspect(dl_op *op, const dl_lockref *l, const char *verb,
                   redisReply **keep)
{
    init(op, "inspect", DL_S_INSPECT, l->ident.key, l->ident.keylen,
         inspect_vote);
    add_keys(op, l);
    arg(op, DL_ARG_CHAN, l->ident.chan, l->ident.chanlen);
    arg_s(op, DL_ARG_VERB, verb);
    done(op);
    op->rule = DL_RULE_READ;
    op->keep = keep;
}

void dl_op_clients(dl_op *op, const dl_lockref *l, redisReply **keep)
{
    init(op, "client list", DL_OP_COMMAND, l->ident.key, l->ident.keylen,
         reply_vote);
    add_s(op, "CLIENT");
    add_s(op, "LIST");
    op->rule = DL_RULE_READ;
    op->keep = keep;
}

void dl_op_renew(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token,
                 const char *pub)
{
    init(op, "renew", own_leases(l) ? DL_S_RW_RENEW : DL_S_RENEW,
         l->ident.key, l->ident.keylen, renew_vote);
    lease_args(op, l, ms, token, pub);
    done(op);
    op->batch = DL_OP_BATCH;
}
