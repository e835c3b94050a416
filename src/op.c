/* SPDX-License-Identifier: MIT
 * op.c: each lock operation's script, arguments and reply, as data.
 */
#define _GNU_SOURCE
#include "op.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void init(dl_op *op, const char *name, int id, int nkeys,
                 const char *key, size_t keylen, dl_decode_fn decode)
{
    memset(op, 0, sizeof *op);
    op->name = name;
    op->id = id;
    op->nkeys = nkeys;
    op->argc = id == DL_OP_COMMAND ? 0 : DL_SCRIPT_HEAD;
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

/* A number as text, kept in op (at most four per op). */
static void add_i(dl_op *op, int64_t v)
{
    assert(op->nnum < DL_OP_NUMS);
    char *b = op->num[op->nnum++];
    snprintf(b, sizeof op->num[0], "%lld", (long long)v);
    add_s(op, b);
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

/* {1, count, token} | {0, pttl} | {-1} lost | {-2} refused: try again */
static void acquire_vote(const redisReply *r, dl_vote *v)
{
    int64_t code;
    v->kind = DL_V_BAD;
    if (!shaped(r, 3, &code))
        return;
    if (code == 1 && !dl_reply_int(r, 1, &v->x) && !dl_reply_int(r, 2, &v->y))
        v->kind = DL_V_YES;
    else if (code == 0 && !dl_reply_int(r, 1, &v->x))
        v->kind = DL_V_BUSY, v->x = v->x < 0 ? 0 : v->x;  /* the TTL */
    else if (code == -1)
        v->kind = DL_V_NO;
    else if (code == -2)
        v->kind = DL_V_BUSY;            /* x 0: at once */
}

/* {1, remaining} | {-1} lost */
static void release_vote(const redisReply *r, dl_vote *v)
{
    int64_t code;
    v->kind = DL_V_BAD;
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

/* ARGV owner requester seq: who asks, and which request this is. */
static void add_request(dl_op *op, const dl_lockref *l, uint64_t seq)
{
    add(op, l->ident.owner, l->ident.ownerlen);
    add(op, l->ident.req, l->ident.reqlen);
    add_i(op, (int64_t)seq);
}

/* ARGV keep_ms chan pub: how long a freed lock keeps its record, and
 * where its release is announced. */
static void add_freeing(dl_op *op, const dl_lockref *l, int64_t keep_ms,
                        const char *pub)
{
    add_i(op, keep_ms);
    add(op, l->ident.chan, l->ident.chanlen);
    add_s(op, pub);
}

/* KEYS: the lock, then the fencing counter and the queue of waiters
 * where the kind's script for the op takes them. */
static void add_keys(dl_op *op, const dl_lockref *l, int counter, int queue)
{
    add(op, l->ident.key, l->ident.keylen);
    if (counter)
        add(op, l->ident.fence, l->ident.fencelen);
    if (queue)
        add(op, l->ident.queue, l->ident.queuelen);
    op->nkeys = op->argc - DL_SCRIPT_HEAD;
}

void dl_op_acquire(dl_op *op, const dl_lockref *l, uint64_t seq, int64_t ms,
                   int64_t expect, int64_t token, int waits, const char *pub,
                   uint64_t secret)
{
    static const int ids[] = {
        [DL_KIND_LOCK] = DL_S_ACQUIRE, [DL_KIND_READ] = DL_S_RW_ACQUIRE,
        [DL_KIND_WRITE] = DL_S_RW_ACQUIRE, [DL_KIND_SEM] = DL_S_SEM_ACQUIRE,
        [DL_KIND_FAIR] = DL_S_FAIR_ACQUIRE };
    init(op, "acquire", ids[l->kind], 0, l->ident.key, l->ident.keylen,
         acquire_vote);
    add_keys(op, l, l->kind != DL_KIND_SEM,
             l->kind == DL_KIND_SEM || l->kind == DL_KIND_FAIR);
    add_request(op, l, seq);
    add_i(op, ms);
    add_i(op, expect);
    add_i(op, token);
    if (l->kind == DL_KIND_SEM)
        add_i(op, l->permits);
    else if (l->kind == DL_KIND_FAIR) { /* queue if busy; how to grant;
                                           what a grant to it carries */
        add_s(op, waits ? "1" : "0");
        add_s(op, pub);
        assert(op->nnum < DL_OP_NUMS);
        char *b = op->num[op->nnum++];
        snprintf(b, sizeof op->num[0], DL_FAIR_SECRET_FMT,
                 (unsigned long long)secret);
        add_s(op, b);
    } else if (l->kind) {               /* which half, and its writer */
        add_s(op, l->kind == DL_KIND_READ ? "r" : waits ? "W" : "w");
        add(op, l->writer ? l->writer : "", l->writer ? l->writerlen : 0);
    }
    /* A fresh hold competes (a shortfall: busy); a reentry must be
     * confirmed (a shortfall: not known). */
    op->rule = expect ? DL_RULE_VOTE : DL_RULE_CONTEND;
    op->lease_ms = ms;
    op->lock = l;
}

int dl_op_one_key(const dl_op *op, dl_op *alt)
{
    /* A reentry only (ARGV expected > 0): a new tenancy needs its token
     * from the counter, and waits for the migration to end. */
    int expect = DL_SCRIPT_HEAD + 2 + 4;
    if (op->id != DL_S_ACQUIRE || op->argc <= expect ||
        (op->lens[expect] == 1 && op->argv[expect][0] == '0'))
        return 0;
    init(alt, op->name, DL_S_ACQUIRE1, 1, op->key, op->keylen, op->decode);
    add(alt, op->argv[DL_SCRIPT_HEAD], op->lens[DL_SCRIPT_HEAD]);
    for (int i = DL_SCRIPT_HEAD + 2; i < op->argc; i++)
        add(alt, op->argv[i], op->lens[i]);   /* op's numbers outlive alt */
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
    init(fence, "fence", DL_S_FENCE, 2, l->ident.key, l->ident.keylen,
         done_vote);
    add(fence, l->ident.fence, l->ident.fencelen);
    add(fence, l->ident.key, l->ident.keylen);
    add_i(fence, token);
    add(fence, l->ident.owner, l->ident.ownerlen);
    fence->wd = op->wd;
    return 1;
}

void dl_op_release(dl_op *op, const dl_lockref *l, uint64_t seq,
                   int64_t token, int64_t keep_ms, const char *pub)
{
    int sem = l->kind == DL_KIND_SEM, fair = l->kind == DL_KIND_FAIR;
    init(op, "release", sem ? DL_S_SEM_RELEASE : fair ? DL_S_FAIR_RELEASE
                                                    : DL_S_RELEASE,
         0, l->ident.key, l->ident.keylen, release_vote);
    add_keys(op, l, fair, sem || fair);
    add_request(op, l, seq);
    add_i(op, token);
    add_freeing(op, l, keep_ms, pub);
}

void dl_op_void(dl_op *op, const dl_lockref *l, uint64_t seq,
                int64_t keep_ms, const char *pub, int fresh)
{
    int fair = l->kind == DL_KIND_FAIR;
    init(op, "cancel", fair ? DL_S_FAIR_VOID : DL_S_VOID, 0, l->ident.key,
         l->ident.keylen, done_vote);
    add_keys(op, l, fair, fair);
    add_request(op, l, seq);
    add_freeing(op, l, keep_ms, pub);
    if (fair)                   /* may take back a grant it never saw */
        add_s(op, fresh ? "1" : "0");
}

/* Whether l's holders have leases of their own (readers, writers and
 * permits: e<owner> fields), renewed by RW_RENEW. */
static int own_leases(const dl_lockref *l)
{
    return l->kind == DL_KIND_READ || l->kind == DL_KIND_WRITE ||
           l->kind == DL_KIND_SEM;
}

/* KEYS lock; ARGV owner lease_ms token: extend and renew alike. */
static void lease_op(dl_op *op, const char *name, int id, dl_decode_fn d,
                     const dl_lockref *l, int64_t ms, int64_t token)
{
    init(op, name, id, 1, l->ident.key, l->ident.keylen, d);
    add(op, l->ident.key, l->ident.keylen);
    add(op, l->ident.owner, l->ident.ownerlen);
    add_i(op, ms);
    add_i(op, token);
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

void dl_op_extend(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token)
{
    if (own_leases(l)) {
        lease_op(op, "extend", DL_S_RW_RENEW, first_vote, l, ms, token);
    } else {
        lease_op(op, "extend", DL_S_EXTEND, bool_vote, l, ms, token);
        add_s(op, dl_op_extend_lowers(l) ? "0" : "1");  /* shared: raise only */
    }
}

void dl_op_ttl(dl_op *op, const dl_lockref *l)
{
    init(op, "ttl", DL_S_TTL, 1, l->ident.key, l->ident.keylen, ttl_vote);
    add(op, l->ident.key, l->ident.keylen);
    op->rule = DL_RULE_READ;
}

void dl_op_force(dl_op *op, const dl_lockref *l, const char *req,
                 uint64_t seq, int64_t keep_ms, const char *pub)
{
    init(op, "force_release", DL_S_FORCE, 1, l->ident.key, l->ident.keylen,
         bool_vote);
    add(op, l->ident.key, l->ident.keylen);
    add_s(op, req);
    add_i(op, (int64_t)seq);
    add_freeing(op, l, keep_ms, pub);
    op->rule = DL_RULE_READ;
}

void dl_op_drop(dl_op *op, const dl_lockref *l, int64_t count,
                int64_t token, int64_t keep_ms, const char *pub)
{
    int fair = l->kind == DL_KIND_FAIR;
    init(op, "drop", fair ? DL_S_FAIR_DROP : DL_S_DROP, 0, l->ident.key,
         l->ident.keylen,
         done_vote);
    add_keys(op, l, fair, fair);
    add(op, l->ident.owner, l->ident.ownerlen);
    add_i(op, count);
    add_i(op, token);
    add_freeing(op, l, keep_ms, pub);
    op->rule = DL_RULE_READ;
}

void dl_op_ping(dl_op *op)
{
    init(op, "ping", DL_OP_COMMAND, 0, "", 0, reply_vote);
    add_s(op, "PING");
    op->rule = DL_RULE_READ;
}

void dl_op_free(dl_op *op, const dl_lockref *l)
{
    init(op, "available", DL_S_SEM_FREE, 1, l->ident.key, l->ident.keylen,
         done_vote);
    add(op, l->ident.key, l->ident.keylen);
    add_i(op, l->permits);
    op->rule = DL_RULE_READ;
}

void dl_op_sync(dl_op *op, const dl_lockref *l, int n, int64_t ms)
{
    init(op, "wait", DL_OP_COMMAND, 0, l->ident.key, l->ident.keylen,
         done_vote);
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
    init(op, "inspect", DL_S_INSPECT, 2, l->ident.key, l->ident.keylen,
         inspect_vote);
    add(op, l->ident.key, l->ident.keylen);
    add(op, l->ident.queue, l->ident.queuelen);
    add(op, l->ident.chan, l->ident.chanlen);
    add_s(op, verb);
    op->rule = DL_RULE_READ;
    op->keep = keep;
}

void dl_op_clients(dl_op *op, const dl_lockref *l, redisReply **keep)
{
    init(op, "client list", DL_OP_COMMAND, 0, l->ident.key, l->ident.keylen,
         reply_vote);
    add_s(op, "CLIENT");
    add_s(op, "LIST");
    op->rule = DL_RULE_READ;
    op->keep = keep;
}

void dl_op_renew(dl_op *op, const dl_lockref *l, int64_t ms, int64_t token)
{
    lease_op(op, "renew", own_leases(l) ? DL_S_RW_RENEW : DL_S_RENEW,
             renew_vote, l, ms, token);
    op->batch = DL_OP_BATCH;
}
