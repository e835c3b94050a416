/* SPDX-License-Identifier: MIT
 * inspect.c: who is who, for diagnostics: dl_inspect_lock reads a lock
 * (the read-only inspect script), and CLIENT LIST on its server to put
 * on its owners the labels their clients named their connections with
 * (client.h, DL_CLIENT_NAME_PREFIX).
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "redis/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

static int is_id(const char *s, size_t n)
{
    if (n < DL_ID_HEX)
        return 0;
    for (size_t i = 0; i < DL_ID_HEX; i++)
        if (hexval((unsigned char)s[i]) < 0)
            return 0;
    return 1;
}

/* The label of client id in a CLIENT LIST reply, decoded (malloc), or
 * NULL. */
static char *label_of(const redisReply *list, const char *id)
{
    if (!list || list->type != REDIS_REPLY_STRING)
        return NULL;
    char want[sizeof DL_CLIENT_NAME_PREFIX + DL_ID_HEX + 8];
    snprintf(want, sizeof want, " name=" DL_CLIENT_NAME_PREFIX "%s:", id);
    const char *at = strstr(list->str, want);
    if (!at)
        return NULL;
    at += strlen(want);
    size_t n = strcspn(at, " \r\n");
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (at[i] == '%' && i + 2 < n && hexval(at[i + 1]) >= 0 &&
            hexval(at[i + 2]) >= 0) {
            *o++ = (char)(hexval(at[i + 1]) * 16 + hexval(at[i + 2]));
            i += 2;
        } else {
            *o++ = at[i];
        }
    }
    *o = '\0';
    return out;
}

void dl_inspect_free(dl_inspect *in)
{
    for (size_t i = 0; i < in->nowners; i++) {
        free(in->owners[i].owner);
        free(in->owners[i].label);
    }
    free(in->owners);
    memset(in, 0, sizeof *in);
}

static int64_t int_of(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

/* Which client acts for owner o (of n bytes): a coroutine owner starts
 * with its client's id; an explicit one is named by the requesters
 * "<client id>|<owner>" recorded beside it. */
static void client_of(const char *o, size_t n, const redisReply *reqs,
                      char *id)
{
    id[0] = '\0';
    if (is_id(o, n) && n > DL_ID_HEX && o[DL_ID_HEX] == ':') {
        memcpy(id, o, DL_ID_HEX);
        id[DL_ID_HEX] = '\0';
        return;
    }
    for (size_t i = 0; i < reqs->elements; i++) {
        const redisReply *q = reqs->element[i];
        if (q->type == REDIS_REPLY_STRING && q->len == DL_ID_HEX + 1 + n &&
            is_id(q->str, q->len) && q->str[DL_ID_HEX] == '|' &&
            memcmp(q->str + DL_ID_HEX + 1, o, n) == 0) {
            memcpy(id, q->str, DL_ID_HEX);
            id[DL_ID_HEX] = '\0';
            return;
        }
    }
}

/* Fill in from an inspect reply r (held) and CLIENT LIST. 0, or -1 out
 * of memory. */
static int decode(const redisReply *r, const redisReply *list,
                  dl_inspect *in)
{
    const redisReply *owners = r->element[3], *reqs = r->element[4];
    const redisReply *writer = r->element[7];
    in->token = int_of(r->element[1]);
    int64_t queued = int_of(r->element[5]), subs = int_of(r->element[6]);
    in->waiters = queued > subs ? queued : subs;
    size_t n = owners->elements / 2;
    if (!(in->owners = calloc(n ? n : 1, sizeof *in->owners)))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const redisReply *o = owners->element[2 * i];
        dl_inspect_owner *w = &in->owners[in->nowners++];
        size_t len = o->len;
        w->count = int_of(owners->element[2 * i + 1]);
        client_of(o->str, len, reqs, w->client);
        if (len >= 2 && o->str[len - 2] == '\0' && o->str[len - 1] == 'r') {
            w->mode = 'r';                       /* a read half's owner */
            len -= 2;
        } else if (writer->len == o->len &&
                   memcmp(writer->str, o->str, o->len) == 0) {
            w->mode = 'w';
        }
        w->coroutine = is_id(o->str, len) && len > DL_ID_HEX + 1 &&
                       o->str[DL_ID_HEX] == ':' &&
                       strspn(o->str + DL_ID_HEX + 1, "0123456789") ==
                           len - DL_ID_HEX - 1;
        if (!(w->owner = malloc(len + 1)))
            return -1;
        memcpy(w->owner, o->str, len);
        w->owner[len] = '\0';
        w->ownerlen = len;
        if (w->client[0])
            w->label = label_of(list, w->client);
    }
    return 0;
}

/* Owners come in (owner string, count) pairs. */
static int owner_pairs(const redisReply *o)
{
    if (o->type != REDIS_REPLY_ARRAY || o->elements % 2 != 0)
        return 0;
    for (size_t i = 0; i < o->elements; i += 2)
        if (o->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    return 1;
}

static int well_formed(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements == 8 &&
           r->element[0]->type == REDIS_REPLY_INTEGER &&
           r->element[0]->integer == 1 &&
           r->element[1]->type == REDIS_REPLY_STRING &&
           owner_pairs(r->element[3]) &&
           r->element[4]->type == REDIS_REPLY_ARRAY &&
           r->element[7]->type == REDIS_REPLY_STRING;
}

static void free_kept(redisReply **rs)
{
    for (size_t i = 0; i < DL_MAX_NODES; i++)
        if (rs[i])
            freeReplyObject(rs[i]);
}

dl_status dl_inspect_lock(dl_client *c, const char *name, size_t len,
                          int *held, dl_inspect *in, char *err,
                          size_t errlen)
{
    dl_client_enter(c);
    const char *pfx = c->opts.prefix;
    size_t plen = c->opts.prefixlen;
    char *buf = malloc(dl_lockid_size(plen, len, DL_KIND_ANY, "", 0));
    *held = 0;
    memset(in, 0, sizeof *in);
    if (!buf)
        return dl_oom(err, errlen);
    /* P{name}, P{name}:q, P{name}:ch */
    dl_lockref l;
    memset(&l, 0, sizeof l);
    dl_lockid_spec spec = { pfx, plen, name, len, DL_KIND_ANY, "", NULL, 0 };
    dl_lockid_build(&l.ident, buf, &spec);

    redisReply *rs[DL_MAX_NODES] = { 0 }, *ls[DL_MAX_NODES] = { 0 };
    dl_op op;
    dl_result res;
    dl_op_inspect(&op, &l, dl_exec_numsub_verb(&c->topo), rs);
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    size_t best = DL_MAX_NODES;         /* held: the reply with the highest
                                           token (Redlock), else the one */
    for (size_t i = 0; st == DL_OK && res.kind == DL_V_YES &&
                       i < DL_MAX_NODES; i++)
        if (well_formed(rs[i]) && (best == DL_MAX_NODES ||
                                   int_of(rs[i]->element[1]) >
                                   int_of(rs[best]->element[1])))
            best = i;
    if (st == DL_OK && res.kind == DL_V_YES && best == DL_MAX_NODES)
        st = dl_fail(err, errlen, DL_EREDIS, "unexpected inspect reply");
    if (best < DL_MAX_NODES) {
        in->ttl_ms = res.x;             /* Redlock: what a quorum has */
        char e[DL_ERRLEN];              /* no labels: still an answer */
        dl_op_clients(&op, &l, ls);
        (void)dl_exec(&c->topo, &c->scripts, &op, &res, e, sizeof e);
        if (decode(rs[best], ls[best], in) != 0) {
            dl_inspect_free(in);
            st = dl_oom(err, errlen);
        } else {
            *held = 1;
        }
    }
    free_kept(rs);
    free_kept(ls);
    free(buf);
    return st;
}
