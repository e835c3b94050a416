/* SPDX-License-Identifier: MIT
 * redlock.c: Redlock, as the Redis documentation gives it.
 *
 * DESIGN. Every operation is sent to all N masters at once (one pipelined
 * write per master, then the replies, the whole bounded by the command
 * timeout) and succeeds with N/2+1 agreeing answers. An acquire is valid
 * for lease - elapsed - drift, measured from before it was sent; a failed
 * fresh acquire is undone on every master, "even the instances it
 * believed it was not able to lock" (client.c cancels it with VOID,
 * which also refuses it where it arrives late). Fencing: each master keeps its own
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

/* Raise every granting master's fencing counter to token. Returns how
 * many confirmed. */
static size_t write_back(dl_client *c, const dl_lockref *l, int64_t token)
{
    char tok_s[24];
    const char *argv[DL_SCRIPT_HEAD + 4];
    size_t lens[DL_SCRIPT_HEAD + 4];
    redisReply *rs[DL_MAX_NODES];
    snprintf(tok_s, sizeof tok_s, "%lld", (long long)token);
    argv[3] = l->fence; lens[3] = l->fencelen;
    argv[4] = l->key;   lens[4] = l->keylen;
    argv[5] = tok_s;    lens[5] = strlen(tok_s);
    argv[6] = l->owner; lens[6] = l->ownerlen;
    dl_topology_fan(&c->topo, &c->scripts, 0, DL_S_FENCE, 2, 7, argv, lens,
                    rs);
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
    size_t ok = 0, lost = 0, busy = 0, unsure = 0;
    int64_t tmin = INT64_MAX, tmax = 0, pttl = INT64_MAX;
    char rerr[DL_ERRLEN] = "";
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, 0, DL_S_ACQUIRE,
                                     2, 11, argv, lens, rs);
    for (size_t i = 0; i < n; i++) {
        int64_t code, x = 0, y = 0;
        if (!rs[i]) {
            unsure++;               /* it may run there, or have run */
            continue;
        }
        if (rs[i]->type == REDIS_REPLY_ERROR) {
            dl_reply_error(rs[i], rerr, sizeof rerr);
            continue;
        }
        if (dl_reply_int(rs[i], 0, &code) ||
            (code >= 0 && dl_reply_int(rs[i], 1, &x)) ||
            (code == 1 && dl_reply_int(rs[i], 2, &y)))
            continue;
        if (code == 1) {
            ok++;
            tmin = y < tmin ? y : tmin;
            tmax = y > tmax ? y : tmax;
        } else if (code == 0) {
            busy++;
            pttl = x < pttl ? x : pttl;
        } else if (code == -1) {
            lost++;
        }
    }
    free_all(rs, n);
    memset(a, 0, sizeof *a);
    a->maybe = ok > 0 || unsure > 0;    /* to be cancelled if not taken */
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

dl_status dl_redlock_settle(dl_client *c, int wd, dl_script_id id,
                            int argc, const char **argv, size_t *lens,
                            int64_t *code, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum, ok = 0, lost = 0;
    redisReply *rs[DL_MAX_NODES];
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, wd, id, 1, argc,
                                     argv, lens, rs);
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!rs[i])
            continue;
        if (id == DL_S_VOID)
            ok += rs[i]->type == REDIS_REPLY_INTEGER;
        else if (dl_reply_int(rs[i], 0, &v) == 0) {
            ok += v == 1;
            lost += v == -1;
        }
    }
    free_all(rs, n);
    *code = ok >= q ? 1 : -1;
    if (ok >= q || lost > n - q)
        return DL_OK;
    return no_quorum(c, replied < q ? replied : ok,
                     id == DL_S_VOID ? "cancel" : "release", err, errlen);
}

dl_status dl_redlock_extend(dl_client *c, const char **argv, size_t *lens,
                            int *ok_out, char *err, size_t errlen)
{
    size_t n = c->topo.nnodes, q = (size_t)c->topo.quorum, ok = 0, no = 0;
    redisReply *rs[DL_MAX_NODES];
    dl_topology_fan(&c->topo, &c->scripts, 0, DL_S_EXTEND, 1, 7, argv, lens,
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
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, 0, DL_S_TTL, 1,
                                     4, argv, lens, rs);
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
    size_t replied = dl_topology_fan(&c->topo, &c->scripts, 0, DL_S_FORCE, 1,
                                     9, argv, lens, rs);
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
    size_t replied = dl_topology_fan(&c->topo, NULL, 0, -1, 0, 1, argv,
                                     lens, rs);
    free_all(rs, c->topo.nnodes);
    return replied < (size_t)c->topo.quorum
               ? no_quorum(c, replied, "ping", err, errlen) : DL_OK;
}
