/* SPDX-License-Identifier: MIT
 * redlock.c: Redlock, as the Redis documentation gives it.
 *
 * DESIGN. Every operation is sent to all N masters at once (one pipelined
 * write per master, then the replies, the whole bounded by the command
 * timeout) and succeeds with N/2+1 agreeing answers. An acquire is valid
 * for lease - elapsed - drift, measured from before it was sent; a failed
 * fresh acquire is undone on every master, "even the instances it
 * believed it was not able to lock". Fencing: each master keeps its own
 * counter; the token of a hold is the highest among the quorum that
 * granted it, and when the quorum's counters differ that value is written
 * back to them before the acquire returns. Any two quorums share a master,
 * so the next quorum's counter is above every token handed out before, as
 * long as the masters keep their data (see README, "Scaling out").
 */
#define _GNU_SOURCE
#include "redlock.h"

#include <stdlib.h>
#include <string.h>

static void free_all(redisReply **rs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rs[i])
            freeReplyObject(rs[i]);
}

static dl_status no_quorum(dl_client *c, size_t replied, const char *what,
                           char *err, size_t errlen)
{
    return dl_fail(err, errlen, DL_EQUORUM, "quorum: %s: only %zu of %zu "
                   "servers answered", what, replied, c->topo.nnodes);
}

int64_t dl_redlock_drift_us(const dl_client *c, int64_t ms)
{
    return c->topo.kind == DL_TOPO_REDLOCK ? ms * 10 + 2000 : 0;
}

/* Take this owner's field out of the lock on every master. */
static void undo(dl_client *c, const char **argv, size_t *lens,
                 const dl_lockref *l)
{
    const char *dargv[DL_SCRIPT_HEAD + 4];
    size_t dlens[DL_SCRIPT_HEAD + 4];
    redisReply *rs[DL_MAX_NODES];
    dargv[3] = argv[3]; dlens[3] = lens[3];         /* key */
    dargv[4] = argv[5]; dlens[4] = lens[5];         /* owner */
    dargv[5] = l->chan; dlens[5] = l->chanlen;
    dargv[6] = c->pubverb; dlens[6] = strlen(c->pubverb);
    dl_topology_fan(&c->topo, &c->scripts, DL_S_DROP, 1, 7, dargv, dlens,
                    rs);
    free_all(rs, c->topo.nnodes);
}

/* Raise every granting master's fencing counter to token. Returns how
 * many confirmed. */
static size_t write_back(dl_client *c, const dl_lockref *l, int64_t token)
{
    char tok_s[24];
    const char *argv[DL_SCRIPT_HEAD + 2];
    size_t lens[DL_SCRIPT_HEAD + 2];
    redisReply *rs[DL_MAX_NODES];
    snprintf(tok_s, sizeof tok_s, "%lld", (long long)token);
    argv[3] = l->fence; lens[3] = l->fencelen;
    argv[4] = tok_s;    lens[4] = strlen(tok_s);
    dl_topology_fan(&c->topo, &c->scripts, DL_S_FENCE, 1, 5, argv, lens, rs);
    size_t ok = 0;
    for (size_t i = 0; i < c->topo.nnodes; i++)
        ok += rs[i] && rs[i]->type == REDIS_REPLY_INTEGER;
    free_all(rs, c->topo.nnodes);
    return ok;
}

dl_status dl_redlock_attempt(dl_client *c, const dl_lockref *l,
                             const char **argv, size_t *lens, int64_t t0,
                             int64_t ms, int64_t expect, dl_attempt *a,
                             char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum;
    size_t ok = 0, lost = 0, busy = 0;
    int64_t tmin = INT64_MAX, tmax = 0, pttl = INT64_MAX;
    char rerr[DL_ERRLEN] = "";
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, DL_S_ACQUIRE, 2,
                                     8, argv, lens, rs);
    for (size_t i = 0; i < n; i++) {
        int64_t code, x = 0, y = 0;
        if (!rs[i])
            continue;
        if (rs[i]->type == REDIS_REPLY_ERROR) {
            dl_reply_error(rs[i], rerr, sizeof rerr);
            continue;
        }
        if (dl_reply_int(rs[i], 0, &code) ||
            (code != -1 && dl_reply_int(rs[i], 1, &x)) ||
            (code == 1 && dl_reply_int(rs[i], 2, &y)))
            continue;
        if (code == 1) {
            ok++;
            tmin = y < tmin ? y : tmin;
            tmax = y > tmax ? y : tmax;
        } else if (code == 0) {
            busy++;
            pttl = x < pttl ? x : pttl;
        } else {
            lost++;
        }
    }
    free_all(rs, n);
    memset(a, 0, sizeof *a);
    int64_t validity = ms * 1000 - (dl_now_us() - t0) -
                       dl_redlock_drift_us(c, ms);
    if (ok >= q && validity > 0 && tmin != tmax &&
        write_back(c, l, tmax) < q)
        validity = 0;                   /* cannot vouch for the token */
    if (ok >= q && validity > 0 &&
        ms * 1000 - (dl_now_us() - t0) - dl_redlock_drift_us(c, ms) > 0) {
        a->outcome = 1;
        a->count = expect + 1;
        a->token = tmax;
        return DL_OK;
    }
    if (expect == 0 && ok > 0)
        undo(c, argv, lens, l);
    if (replied < q)
        return no_quorum(c, replied, "acquire", err, errlen);
    if (expect > 0) {                   /* a reentry: is the hold gone? */
        if (lost > n - q) {
            a->outcome = -1;
            return DL_OK;
        }
        return dl_fail(err, errlen, DL_EQUORUM, "quorum: acquire: %zu of "
                       "%zu servers confirmed the hold", ok, n);
    }
    if (ok + busy + lost == 0 && *rerr)
        return dl_fail(err, errlen, DL_EREDIS, "%s", rerr);
    a->outcome = 0;
    a->pttl_ms = pttl == INT64_MAX ? 0 : pttl;
    a->split = busy < q;                /* nobody holds a quorum */
    return DL_OK;
}

dl_status dl_redlock_release(dl_client *c, const char **argv, size_t *lens,
                             int64_t *code, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum, ok = 0, lost = 0;
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, DL_S_RELEASE, 2,
                                     10, argv, lens, rs);
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (rs[i] && dl_reply_int(rs[i], 0, &v) == 0) {
            ok += v == 1;
            lost += v == -1;
        }
    }
    free_all(rs, n);
    if (ok >= q) {
        *code = 1;
        return DL_OK;
    }
    if (lost > n - q) {
        *code = -1;
        return DL_OK;
    }
    return no_quorum(c, replied < q ? replied : ok, "release", err, errlen);
}

dl_status dl_redlock_extend(dl_client *c, const char **argv, size_t *lens,
                            int *ok_out, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum, ok = 0, no = 0;
    redisReply *rs[DL_MAX_NODES];
    dl_topology_fan(&c->topo, &c->scripts, DL_S_EXTEND, 1, 6, argv, lens,
                    rs);
    for (size_t i = 0; i < n; i++) {
        if (rs[i] && rs[i]->type == REDIS_REPLY_INTEGER) {
            ok += rs[i]->integer == 1;
            no += rs[i]->integer != 1;
        }
    }
    free_all(rs, n);
    *ok_out = ok >= q;
    if (ok >= q || no > n - q)
        return DL_OK;
    return no_quorum(c, ok + no, "extend", err, errlen);
}

static int desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

dl_status dl_redlock_ttl(dl_client *c, const char **argv, size_t *lens,
                         int64_t *ttl_ms, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum, k = 0;
    int64_t v[DL_MAX_NODES];
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, NULL, -1, 0, 2, argv, lens,
                                     rs);
    for (size_t i = 0; i < n; i++)
        if (rs[i] && rs[i]->type == REDIS_REPLY_INTEGER &&
            rs[i]->integer != -2)
            v[k++] = rs[i]->integer < 0 ? INT64_MAX : rs[i]->integer;
    free_all(rs, n);
    if (replied < q)
        return no_quorum(c, replied, "ttl", err, errlen);
    qsort(v, k, sizeof *v, desc);
    *ttl_ms = k >= q ? (v[q - 1] == INT64_MAX ? -1 : v[q - 1]) : -2;
    return DL_OK;
}

dl_status dl_redlock_force(dl_client *c, const char **argv, size_t *lens,
                           int *existed, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum;
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, DL_S_FORCE, 1, 6,
                                     argv, lens, rs);
    *existed = 0;
    for (size_t i = 0; i < n; i++)
        if (rs[i] && rs[i]->type == REDIS_REPLY_INTEGER && rs[i]->integer)
            *existed = 1;
    free_all(rs, n);
    return replied < q ? no_quorum(c, replied, "force_release", err, errlen)
                       : DL_OK;
}

dl_status dl_redlock_ping(dl_client *c, const char **argv,
                          char *err, size_t errlen)
{
    redisReply *rs[DL_MAX_NODES];
    size_t lens[1] = { strlen(argv[0]) };
    size_t replied = dl_topology_fan(&c->topo, NULL, -1, 0, 1, argv, lens,
                                     rs);
    free_all(rs, c->topo.nnodes);
    return replied < (size_t)c->topo.quorum
               ? no_quorum(c, replied, "ping", err, errlen) : DL_OK;
}
