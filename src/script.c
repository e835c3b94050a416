/* SPDX-License-Identifier: MIT
 * script.c: the Redis-side half of dlock.
 *
 * Retry safety: acquire and release take the count the client believes
 * this owner holds ("expected"). A resent acquire finds count ==
 * expected + 1 and does not count twice; a resent release finds count ==
 * expected - 1 and does not decrement twice.
 *
 * The last release of a hold is the hard case: when its reply is lost,
 * the resend finds the hold gone, and other owners may have taken and
 * released the lock meanwhile. The fence hash tells the two endings apart.
 * The holder of a lock always has token == fence.n; a release records
 * fence.rel = its token; a fresh acquire that finds fence.rel != n - 1
 * (the previous hold expired or was deleted) adds n - 1 to fence.lost,
 * the last 16 such tokens. So hold t was released by its owner if
 * fence.n == t and fence.rel == t, or if fence.n > t and t is not in
 * fence.lost. When more than 16 holds were lost since t (t is older than
 * all of fence.lost) the answer is unknown and taken as lost. A counter
 * below t means Redis lost data: lost. Replies are arrays:
 *   acquire: {1, count, token} | {0, pttl_ms} (busy) | {-1} (lost)
 *   release: {1, remaining}    | {-1} (lost)
 *   renew:   per key 1 (renewed) | 0 (key gone) | -1 (another owner);
 *            its ARGV is owner, lease (ms) per key, in KEYS order
 */
#include "script.h"

#include <stdio.h>
#include <string.h>

/* How many lost-hold tokens fence.lost keeps (a string, spliced into the
 * scripts below). */
#define LOST_KEEP "16"

static const char *const src[DL_S_COUNT] = {
    [DL_S_ACQUIRE] =
        "local p = redis.call('pttl', KEYS[1])\n"
        "local e, n = tonumber(ARGV[3]), 0\n"
        "if p ~= -2 then\n"
        "  n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')\n"
        "end\n"
        "if n == 0 then\n"
        "  if e > 0 then return {-1} end\n"
        "  if p ~= -2 then return {0, p} end\n"
        "  local t = redis.call('hincrby', KEYS[2], 'n', 1)\n"
        "  if t > 1 and tonumber(redis.call('hget', KEYS[2], 'rel')) ~= t - 1 then\n"
        "    local k = 0\n"
        "    local l = ((t - 1) .. ' ' .. (redis.call('hget', KEYS[2], 'lost') or ''))\n"
        "      :gsub('%d+ ', function(w) k = k + 1; if k > " LOST_KEEP " then return '' end end)\n"
        "    redis.call('hset', KEYS[2], 'lost', l)\n"
        "  end\n"
        "  redis.call('hset', KEYS[1], ARGV[1], 1)\n"
        "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
        "  return {1, 1, t}\n"
        "end\n"
        "if n ~= e + 1 then n = redis.call('hincrby', KEYS[1], ARGV[1], 1) end\n"
        "redis.call('pexpire', KEYS[1], ARGV[2])\n"
        "return {1, n, tonumber(redis.call('hget', KEYS[2], 'n'))}\n",

    [DL_S_RELEASE] =
        "local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')\n"
        "local e = tonumber(ARGV[2])\n"
        "if n > 0 and n == e - 1 then return {1, n} end\n"
        "if n == 0 then\n"
        "  if e ~= 1 then return {-1} end\n"
        "  local f = redis.call('hmget', KEYS[2], 'n', 'rel', 'lost')\n"
        "  local cur, t = tonumber(f[1] or '0'), tonumber(ARGV[3])\n"
        "  if cur == t and f[2] == ARGV[3] then return {1, 0} end\n"
        "  if cur <= t then return {-1} end\n"
        "  local k, old = 0, t\n"
        "  for w in (f[3] or ''):gmatch('%d+') do\n"
        "    k, old = k + 1, tonumber(w)\n"
        "    if old == t then return {-1} end\n"
        "  end\n"
        "  if k >= " LOST_KEEP " and t < old then return {-1} end\n"
        "  return {1, 0}\n"
        "end\n"
        "if n > 1 then\n"
        "  return {1, redis.call('hincrby', KEYS[1], ARGV[1], -1)}\n"
        "end\n"
        "redis.call('del', KEYS[1])\n"
        "redis.call('hset', KEYS[2], 'rel', ARGV[3])\n"
        "redis.call(ARGV[5], ARGV[4], ARGV[3])\n"
        "return {1, 0}\n",

    [DL_S_RENEW] =
        "local r = {}\n"
        "for i = 1, #KEYS do\n"
        "  if redis.call('hexists', KEYS[i], ARGV[2 * i - 1]) == 1 then\n"
        "    redis.call('pexpire', KEYS[i], ARGV[2 * i])\n"
        "    r[i] = 1\n"
        "  elseif redis.call('exists', KEYS[i]) == 1 then r[i] = -1\n"
        "  else r[i] = 0 end\n"
        "end\n"
        "return r\n",

    [DL_S_EXTEND] =
        "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"
        "  return redis.call('pexpire', KEYS[1], ARGV[2])\n"
        "end\n"
        "return 0\n",

    [DL_S_FORCE] =
        "if redis.call('del', KEYS[1]) == 1 then\n"
        "  redis.call(ARGV[2], ARGV[1], 'force')\n"
        "  return 1\n"
        "end\n"
        "return 0\n",

    [DL_S_DROP] =
        "if redis.call('hdel', KEYS[1], ARGV[1]) == 1\n"
        "   and redis.call('exists', KEYS[1]) == 0 then\n"
        "  redis.call(ARGV[3], ARGV[2], 'drop')\n"
        "end\n"
        "return 1\n",

    [DL_S_FENCE] =
        "local n = tonumber(redis.call('hget', KEYS[1], 'n') or '0')\n"
        "if n < tonumber(ARGV[1]) then\n"
        "  redis.call('hset', KEYS[1], 'n', ARGV[1])\n"
        "end\n"
        "return 1\n",
};

const char *dl_script_source(dl_script_id id, const char **name)
{
    static const char *const names[DL_S_COUNT] = {
        "acquire", "release", "renew", "extend", "force", "drop", "fence"
    };
    *name = names[id];
    return src[id];
}

/* SCRIPT LOAD every script on c with one pipelined round trip. With
 * fill, record the SHAs there; else check them against known. */
static dl_status load_on(dl_conn *c, dl_scripts *fill, const dl_scripts *known,
                         char *err, size_t errlen)
{
    for (int i = 0; i < DL_S_COUNT; i++) {
        const char *argv[3] = { "SCRIPT", "LOAD", src[i] };
        if (dl_conn_append(c, 3, argv, NULL, err, errlen) != DL_OK)
            return DL_ECONN;
    }
    dl_status st = DL_OK;
    for (int i = 0; i < DL_S_COUNT; i++) {
        redisReply *r;
        if (dl_conn_read(c, &r, err, errlen) != DL_OK)
            return DL_ECONN;
        if (st == DL_OK && r->type == REDIS_REPLY_ERROR)
            st = dl_reply_error(r, err, errlen);
        else if (st == DL_OK && (r->type != REDIS_REPLY_STRING || r->len != 40
                                 || (known && memcmp(known->sha[i], r->str,
                                                     40) != 0)))
            st = dl_fail(err, errlen, DL_EREDIS, "SCRIPT LOAD: bad reply");
        else if (st == DL_OK && fill)
            memcpy(fill->sha[i], r->str, 41);
        freeReplyObject(r);
    }
    if (st == DL_OK)
        c->scripts_epoch = c->epoch;
    return st;
}

dl_status dl_scripts_load(dl_conn *c, dl_scripts *s, char *err, size_t errlen)
{
    dl_status st = load_on(c, s, NULL, err, errlen);
    s->loaded = st == DL_OK;
    return st;
}

dl_status dl_scripts_ready(dl_conn *c, const dl_scripts *s, int again,
                           char *err, size_t errlen)
{
    if (dl_conn_ensure(c, err, errlen) != DL_OK)
        return DL_ECONN;
    if (!again && c->scripts_epoch == c->epoch)
        return DL_OK;
    return load_on(c, NULL, s, err, errlen);
}

static void fill_head(const dl_scripts *s, dl_script_id id, int nkeys,
                      const char **argv, size_t *lens, char *nk, size_t nksz)
{
    snprintf(nk, nksz, "%d", nkeys);
    argv[0] = "EVALSHA";
    lens[0] = 7;
    argv[1] = s->sha[id];
    lens[1] = 40;
    argv[2] = nk;
    lens[2] = strlen(nk);
}

int dl_script_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

dl_status dl_script_append(dl_conn *c, const dl_scripts *s, dl_script_id id,
                           int nkeys, int argc, const char **argv,
                           size_t *lens, char *err, size_t errlen)
{
    char nk[16];
    if (dl_scripts_ready(c, s, 0, err, errlen) != DL_OK)
        return DL_ECONN;
    fill_head(s, id, nkeys, argv, lens, nk, sizeof nk);
    return dl_conn_append(c, argc, argv, lens, err, errlen);
}

/* ASKING (if asked) and one EVALSHA; the reply as it came. */
static dl_status call_once(dl_conn *c, const dl_scripts *s, int asking,
                           dl_script_id id, int nkeys, int argc,
                           const char **argv, size_t *lens,
                           redisReply **out, char *err, size_t errlen)
{
    char nk[16];
    if (asking) {
        const char *a[1] = { "ASKING" };
        if (dl_conn_call(c, 1, a, NULL, out, err, errlen) != DL_OK)
            return DL_ECONN;
        freeReplyObject(*out);
    }
    fill_head(s, id, nkeys, argv, lens, nk, sizeof nk);
    return dl_conn_call(c, argc, argv, lens, out, err, errlen);
}

dl_status dl_script_eval(dl_conn *c, const dl_scripts *s, int asking,
                         dl_script_id id, int nkeys, int argc,
                         const char **argv, size_t *lens,
                         redisReply **out, char *err, size_t errlen)
{
    *out = NULL;
    if (dl_scripts_ready(c, s, 0, err, errlen) != DL_OK)
        return DL_ECONN;
    dl_status st = call_once(c, s, asking, id, nkeys, argc, argv, lens, out,
                             err, errlen);
    if (st == DL_OK && dl_script_noscript(*out)) {
        /* The server lost them (SCRIPT FLUSH, a restart we did not see):
         * load them again and resend, ASKING included. */
        freeReplyObject(*out);
        *out = NULL;
        if (dl_scripts_ready(c, s, 1, err, errlen) != DL_OK)
            return DL_ECONN;
        st = call_once(c, s, asking, id, nkeys, argc, argv, lens, out, err,
                       errlen);
    }
    if (st == DL_OK && (*out)->type == REDIS_REPLY_ERROR) {
        st = dl_reply_error(*out, err, errlen);
        freeReplyObject(*out);
        *out = NULL;
    }
    return st;
}
