/* SPDX-License-Identifier: MIT
 * inspect.c: who is who, for diagnostics. Each connection of a client
 * names itself "dlock:<client id>:<label>" (CLIENT SETNAME, once, when it
 * connects: nothing on the lock path), and dl_client_inspect reads a
 * lock (the read-only inspect script) and CLIENT LIST on its server to
 * put labels on its owners.
 */
#define _GNU_SOURCE
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_PREFIX "dlock:"

/* A label goes into a client name, which Redis wants without spaces or
 * other bytes outside '!'..'~': those, and '%', are %XX-escaped. */
char *dl_client_name(const char *id, const char *label, size_t len)
{
    size_t n = strlen(NAME_PREFIX) + strlen(id) + 1 + 3 * len + 1;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    p += snprintf(p, n, NAME_PREFIX "%s:", id);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)label[i];
        if (ch < '!' || ch > '~' || ch == '%')
            p += snprintf(p, 4, "%%%02X", ch);
        else
            *p++ = (char)ch;
    }
    *p = '\0';
    return s;
}

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
    char want[sizeof NAME_PREFIX + DL_ID_HEX + 8];
    snprintf(want, sizeof want, " name=" NAME_PREFIX "%s:", id);
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
    in->ttl_ms = int_of(r->element[2]);
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

static int well_formed(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return 0;
    if (r->element[0]->integer == 0)
        return 1;
    return r->elements == 8 && r->element[3]->type == REDIS_REPLY_ARRAY &&
           r->element[4]->type == REDIS_REPLY_ARRAY &&
           r->element[7]->type == REDIS_REPLY_STRING;
}

static int64_t token_of(const redisReply *r)
{
    return r->element[0]->integer ? int_of(r->element[1]) : -1;
}

/* Redlock: held when a quorum of masters says so; the owners of the one
 * with the highest token, the TTL that a quorum still has. */
static const redisReply *pick(redisReply **rs, size_t n, int quorum,
                              int64_t *ttl_ms)
{
    const redisReply *best = NULL;
    int64_t ttls[DL_MAX_NODES];
    size_t held = 0;
    for (size_t i = 0; i < n; i++) {
        if (!well_formed(rs[i]) || !rs[i]->element[0]->integer)
            continue;
        ttls[held++] = int_of(rs[i]->element[2]);
        if (!best || token_of(rs[i]) > token_of(best))
            best = rs[i];
    }
    if (held < (size_t)quorum)
        return NULL;
    for (size_t i = 0; i < held; i++)           /* descending, small n */
        for (size_t j = i + 1; j < held; j++)
            if (ttls[j] > ttls[i]) {
                int64_t x = ttls[i];
                ttls[i] = ttls[j];
                ttls[j] = x;
            }
    *ttl_ms = ttls[quorum - 1];
    return best;
}

dl_status dl_client_inspect(dl_client *c, const char *name, size_t len,
                            int *held, dl_inspect *in, char *err,
                            size_t errlen)
{
    dl_topology *t = &c->topo;
    size_t plen = c->opts.prefixlen, klen = plen + len + 2;
    char *buf = malloc(3 * klen + 8);
    *held = 0;
    memset(in, 0, sizeof *in);
    if (!buf)
        return dl_fail(err, errlen, DL_ECONN, "out of memory");
    /* P{name}, P{name}:q, P{name}:ch */
    char *key = buf, *queue = buf + klen + 1, *chan = queue + klen + 3;
    memcpy(key, c->opts.prefix, plen);          /* name may hold NULs */
    key[plen] = '{';
    memcpy(key + plen + 1, name, len);
    memcpy(key + plen + 1 + len, "}", 2);
    memcpy(queue, key, klen);
    memcpy(queue + klen, ":q", 3);
    memcpy(chan, key, klen);
    memcpy(chan + klen, ":ch", 4);
    const char *argv[DL_SCRIPT_HEAD + 4] = { 0 };
    size_t lens[DL_SCRIPT_HEAD + 4] = { 0 };
    argv[3] = key;   lens[3] = klen;
    argv[4] = queue; lens[4] = klen + 2;
    argv[5] = chan;  lens[5] = klen + 3;
    argv[6] = t->kind == DL_TOPO_CLUSTER ? "shardnumsub" : "numsub";
    lens[6] = strlen(argv[6]);
    const char *list_argv[2] = { "CLIENT", "LIST" };
    size_t list_lens[2] = { 6, 4 };
    redisReply *rs[DL_MAX_NODES] = { 0 }, *ls[DL_MAX_NODES] = { 0 };
    const redisReply *r = NULL, *list = NULL;
    dl_status st = DL_OK;
    size_t n = 1;
    if (t->kind == DL_TOPO_REDLOCK) {
        n = t->nnodes;
        size_t got = dl_topology_fan(t, &c->scripts, 0, DL_S_INSPECT, 2,
                                     DL_SCRIPT_HEAD + 4, argv, lens, rs);
        size_t good = 0;
        for (size_t i = 0; i < n; i++) {
            if (well_formed(rs[i]))
                good++;
            else if (rs[i] && rs[i]->type == REDIS_REPLY_ERROR &&
                     st == DL_OK)       /* a refusal is not "free" */
                st = dl_reply_error(rs[i], err, errlen);
        }
        if (got < (size_t)t->quorum)
            st = dl_fail(err, errlen, DL_EQUORUM, "quorum: only %zu of %zu "
                         "servers answered", got, t->nnodes);
        else if (good >= (size_t)t->quorum)
            st = DL_OK;
        else if (st == DL_OK)
            st = dl_fail(err, errlen, DL_EREDIS, "inspect: bad reply");
        if (st == DL_OK && (r = pick(rs, n, t->quorum, &in->ttl_ms)))
            dl_topology_fan(t, &c->scripts, 0, -1, 0, 2, list_argv,
                            list_lens, ls);
    } else {
        st = dl_topology_run(t, &c->scripts, 0, key, klen, DL_S_INSPECT, 2,
                             DL_SCRIPT_HEAD + 4, argv, lens, &rs[0], err,
                             errlen);
        if (st == DL_OK && !well_formed(rs[0]))
            st = dl_fail(err, errlen, DL_EREDIS, "inspect: bad reply");
        if (st == DL_OK && rs[0]->element[0]->integer) {
            r = rs[0];
            char e[DL_ERRLEN];          /* no labels: still an answer */
            (void)dl_topology_run(t, &c->scripts, 0, key, klen, -1, 0, 2,
                                  list_argv, list_lens, &ls[0], e, sizeof e);
        }
    }
    if (st == DL_OK && r) {
        for (size_t i = 0; i < n; i++)          /* the node r came from */
            if (rs[i] == r)
                list = ls[i];
        int64_t ttl = in->ttl_ms;
        if (decode(r, list, in) != 0) {
            dl_inspect_free(in);
            st = dl_fail(err, errlen, DL_ECONN, "out of memory");
        } else {
            if (t->kind == DL_TOPO_REDLOCK)
                in->ttl_ms = ttl;
            *held = 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (rs[i])
            freeReplyObject(rs[i]);
        if (ls[i])
            freeReplyObject(ls[i]);
    }
    free(buf);
    return st;
}
