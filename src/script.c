/* SPDX-License-Identifier: MIT
 * script.c: the Redis-side half of dlock.
 *
 * DATA. A lock is one hash P{name}: n = holds in all, t = fencing token
 * of the current (or last) tenancy, "o"..owner = that owner's holds,
 * "q"..requester = the last request of that requester that took effect
 * ("<seq>", or "<seq>!" for a cancelled acquire, "<seq>:0|1" for force),
 * and "k"..requester = until when (ms, server time) a resend or a late
 * copy of that request may still come: twice its lease or keep_ms (m:
 * below, PRUNE_FN).
 * A requester is one client acting for one owner: owners shared between
 * clients add up, and each client's requests are told apart. The hash
 * lives while held (TTL = the lease) and, once free (n = 0), stays as a
 * record for as long as a resend may come (TTL = the releaser's lease),
 * so a resent release still finds that it ran. Tokens come from one
 * counter per Cluster slot, P{tag}:fence (at most 16,384 keys per
 * prefix, whatever the number of names); a new tenancy's token is above
 * both that counter and the lock's last t, so it never goes back while
 * either key survives.
 *
 * RESENDS. Every acquire, release and force carries a request id (seq,
 * new per attempt, the same on a resend, increasing per client). A script
 * that finds its own seq recorded answers as the first run did and
 * changes nothing; one that finds a later seq recorded is a stale copy
 * (a resend overtaken by newer requests) and changes nothing either. A
 * client
 * has at most one unsettled request per requester: before a new one it
 * finishes the old (resends a release; cancels an acquire with VOID,
 * which undoes it if it ran and records "<seq>!" so a late arrival is
 * refused). Replies:
 *   acquire: {1, count, token} | {0, pttl_ms} busy | {-1} lost (the hold
 *            the client believes in is gone, or another tenancy's) |
 *            {-2} cancelled or stale
 *   release: {1, remaining}    | {-1} lost
 *   renew:   per key 1 renewed | 0 gone | -1 another owner's tenancy
 */
#include "script.h"

#include <stdio.h>
#include <string.h>

/* Request records kept in one lock hash before a new tenancy prunes the
 * old ones (a string, spliced into the acquire script). */
#define RECORDS_MAX "64"

/* Take d holds of owner field of (mine of them) out of lock k; n holds
 * in all remain; free: keep the record ARGV[keep] ms, publish on
 * ARGV[ch] with verb ARGV[ch + 1]. A Lua function, spliced in. */
#define TAKE_OUT_THEN(FREED) \
    "local function take_out(k, of, mine, d, n, keep, ch, msg)\n" \
    "  if d >= mine then d = mine; redis.call('hdel', k, of)\n" \
    "  else redis.call('hincrby', k, of, -d) end\n" \
    "  n = math.max(n - d, 0)\n" \
    "  redis.call('hset', k, 'n', n)\n" \
    "  if n <= 0 then\n" \
    FREED \
    "  end\n" \
    "  return n\n" \
    "end\n"
#define ANNOUNCE \
    "    redis.call('pexpire', k, ARGV[keep])\n" \
    "    redis.call(ARGV[ch + 1], ARGV[ch], msg)\n"
#define TAKE_OUT TAKE_OUT_THEN(ANNOUNCE)

/* The start of every acquire: read the lock (f: n, this owner's holds,
 * its requester's record, t, then FIELDS), answer a resend as the first
 * run did, and refuse a stale or cancelled request. */
#define ACQUIRE_HEAD(FIELDS) \
    "local k, of, qf = KEYS[1], 'o' .. ARGV[1], 'q' .. ARGV[2]\n" \
    "local f = redis.call('hmget', k, 'n', of, qf, 't'" FIELDS ")\n" \
    "local mine, t = tonumber(f[2] or '0'), tonumber(f[4] or '0')\n" \
    "local last, seq = tonumber((f[3] or '0'):match('^%d+')), tonumber(ARGV[3])\n" \
    "if f[3] == ARGV[3] then\n" \
    "  if mine == 0 then return {-1} end\n" \
    "  return {1, mine, t}\n" \
    "end\n" \
    "if last >= seq then return {-2} end\n"

/* A reentry (ARGV[5] holds expected) whose hold is gone is lost. */
#define REENTRY_CHECK \
    "if tonumber(ARGV[5]) > 0 and (mine == 0 or t ~= tonumber(ARGV[6])) then\n" \
    "  return {-1}\n" \
    "end\n"

/* Past RECORDS_MAX fields, prune(k, now, keep) drops the request records
 * no request can still come for: k<requester> passed (or none: an older
 * client's record), and that requester's owner holds nothing (a
 * requester is "<client id>|<owner>" or the owner); never field keep,
 * and no k-field whose record is gone stays. A record that a resend or a
 * late copy may still meet stays, over the limit if need be: the hash
 * holds at most one per requester active within the last two leases.
 * Each prune reads the whole hash: while it stays over the limit, m =
 * the time (ms) before which no prune runs again, a second later. A Lua
 * function, spliced in; PRUNE_RECORDS calls it (k, now, qf set). */
#define PRUNE_FN \
    "local function prune(k, now, keep)\n" \
    "  if redis.call('hlen', k) <= " RECORDS_MAX " then return end\n" \
    "  if tonumber(redis.call('hget', k, 'm') or '0') > now then return end\n" \
    "  local all, h = redis.call('hgetall', k), {}\n" \
    "  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end\n" \
    "  for y in pairs(h) do\n" \
    "    local c, r = y:sub(1, 1), y:sub(2)\n" \
    "    if c == 'q' and y ~= keep and tonumber(h['k' .. r] or '0') <= now and\n" \
    "       not h['o' .. (r:match('^[^|]*|(.*)$') or r)] then\n" \
    "      redis.call('hdel', k, y, 'k' .. r)\n" \
    "    elseif c == 'k' and not h['q' .. r] then\n" \
    "      redis.call('hdel', k, y)\n" \
    "    end\n" \
    "  end\n" \
    "  if redis.call('hlen', k) > " RECORDS_MAX " then redis.call('hset', k, 'm', now + 1000)\n" \
    "  else redis.call('hdel', k, 'm') end\n" \
    "end\n"
#define PRUNE_RECORDS "prune(k, now, qf)\n"

/* The value of k<requester> for a record written now by a request with
 * lease (or keep_ms) MS: a resend comes within the requester's lease. */
#define KEEP_UNTIL(MS) "now + 2 * tonumber(" MS ")"

/* c = a new tenancy's token from the slot's counter (KEYS[2]), above t. */
#define MINT_COUNTER \
    "  local c = redis.call('incr', KEYS[2])\n" \
    "  if c <= t then\n" \
    "    c = t + 1\n" \
    "    redis.call('set', KEYS[2], string.format('%d', c))\n" \
    "  end\n"

/* now = the server's clock in ms (TIME: never a client's clock). */
#define NOW \
    "local tm = redis.call('time')\n" \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"

/* Holders with a lease of their own (e<owner> = its end, ms): take out
 * those whose lease ran out, and those with no holds left. n = the holds
 * that remain, first = the earliest lease end among them (or nil). */
#define PRUNE_LEASES \
    "local n, first = tonumber(f[1] or '0'), nil\n" \
    "if n > 0 then\n" \
    "  local all, h = redis.call('hgetall', k), {}\n" \
    "  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end\n" \
    "  for name, v in pairs(h) do\n" \
    "    if name:sub(1, 1) == 'e' then\n" \
    "      local o = 'o' .. name:sub(2)\n" \
    "      local c = tonumber(h[o] or '0')\n" \
    "      if c == 0 or tonumber(v) <= now then\n" \
    "        redis.call('hdel', k, name, o)\n" \
    "        n = n - c\n" \
    "        if o == of then mine = 0 end\n" \
    "      elseif not first or tonumber(v) < first then first = tonumber(v) end\n" \
    "    end\n" \
    "  end\n" \
    "  if n < 0 then n = 0 end\n" \
    "  redis.call('hset', k, 'n', n)\n" \
    "end\n"

/* The release script after its take_out; WAKE runs once a hold was
 * taken out. */
#define RELEASE_BODY(WAKE) \
    "local k, of, qf = KEYS[1], 'o' .. ARGV[1], 'q' .. ARGV[2]\n" \
    NOW \
    "local f = redis.call('hmget', k, of, qf, 'n', 't')\n" \
    "local mine = tonumber(f[1] or '0')\n" \
    "local last = tonumber((f[2] or '0'):match('^%d+'))\n" \
    "if last >= tonumber(ARGV[3]) then return {1, mine} end\n" \
    "if mine == 0 or f[4] ~= ARGV[4] then return {-1} end\n" \
    "redis.call('hset', k, qf, ARGV[3], 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[5]") ")\n" \
    "take_out(k, of, mine, 1, tonumber(f[3] or '1'), 5, 6, ARGV[4])\n" \
    WAKE \
    "return {1, mine - 1}\n"
#define RELEASE(WAKE) TAKE_OUT RELEASE_BODY(WAKE)

/* A fresh acquire (no hold expected) by a coroutine owner (owner =
 * requester: one client's own) that finds holds of that owner finds a
 * hold its client does not know of: a copy a failover or a restore
 * brought back, or one its client gave up as lost. It is dropped, never
 * joined (joined, it would count one hold too many, and never free). An
 * explicit owner's fresh acquire joins: that is what sharing it means. */
#define DROP_UNKNOWN \
    "if mine > 0 and ARGV[5] == '0' and ARGV[1] == ARGV[2] then\n" \
    "  redis.call('hdel', k, of, 'e' .. ARGV[1])\n" \
    "  n, mine = math.max(n - mine, 0), 0\n" \
    "  redis.call('hset', k, 'n', n)\n" \
    "end\n"

/* A hold joining a tenancy (a reentry, a shared owner) raises the TTL to
 * its lease, never lowers it: other holds of the tenancy rely on it. */
#define RAISE_TTL(MS) \
    "if redis.call('pttl', k) < tonumber(" MS ") then\n" \
    "  redis.call('pexpire', k, " MS ")\n" \
    "end\n"

/* The acquire script around MINT, which sets c to a new tenancy's token
 * (above t, the lock's last one). */
#define ACQUIRE(MINT) \
    PRUNE_FN \
    ACQUIRE_HEAD("") \
    NOW \
    REENTRY_CHECK \
    "local n = tonumber(f[1] or '0')\n" \
    DROP_UNKNOWN \
    "if mine == 0 and n > 0 then return {0, redis.call('pttl', k)} end\n" \
    "if n <= 0 then\n" \
    PRUNE_RECORDS \
    MINT \
    "  t, mine = c, 1\n" \
    "  redis.call('hset', k, 'n', 1, of, 1, qf, ARGV[3], 't',\n" \
    "             string.format('%d', t), 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    "  redis.call('pexpire', k, ARGV[4])\n" \
    "  return {1, mine, t}\n" \
    "end\n" \
    "mine = redis.call('hincrby', k, of, 1)\n" \
    "redis.call('hset', k, 'n', n + 1, qf, ARGV[3], 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    RAISE_TTL("ARGV[4]") \
    "return {1, mine, t}\n"

/* Cancel acquire seq; UNQUEUE runs when the cancel is not stale. A fair
 * lock's cancel of a fresh attempt (ARGV[7] = "1": its client knew of no
 * hold) also takes back a grant made to the requester under an earlier
 * seq that its client never saw (g = the requester): that attempt may
 * never have reached Redis. After the client takes a grant from its
 * message, its next attempt is a reentry, never fresh. */
#define VOID_BODY(UNQUEUE) \
    "local k, of, qf = KEYS[1], 'o' .. ARGV[1], 'q' .. ARGV[2]\n" \
    "local f = redis.call('hmget', k, of, qf, 'n', 'g')\n" \
    "local last = tonumber((f[2] or '0'):match('^%d+'))\n" \
    NOW \
    "if f[2] == ARGV[3] .. '!' or last > tonumber(ARGV[3]) then\n" \
    "  return 1\n" \
    "end\n" \
    "redis.call('hset', k, qf, ARGV[3] .. '!', 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    UNQUEUE \
    "local mine = tonumber(f[1] or '0')\n" \
    "if (f[2] == ARGV[3] or (ARGV[7] == '1' and f[4] == ARGV[2])) and mine > 0 then\n" \
    "  take_out(k, of, mine, 1, tonumber(f[3] or '1'), 4, 5, 'void')\n" \
    "elseif redis.call('pttl', k) == -1 then\n" \
    "  redis.call('pexpire', k, ARGV[4])\n" \
    "end\n" \
    "return 1\n"

#define DROP_BODY \
    "local k, of = KEYS[1], 'o' .. ARGV[1]\n" \
    "local f = redis.call('hmget', k, of, 't', 'n')\n" \
    "local mine = tonumber(f[1] or '0')\n" \
    "if mine == 0 or (ARGV[3] ~= '0' and f[2] ~= ARGV[3]) then return 0 end\n" \
    "take_out(k, of, mine, tonumber(ARGV[2]), tonumber(f[3] or '1'), 4, 5, 'drop')\n" \
    "return 1\n"

/* ---- the fair lock --------------------------------------------------
 * Waiters queue in arrival order, and a freed lock goes to the first live
 * one inside the script that frees it. The queue is one hash, KEYS[3], a
 * doubly linked list of requesters: H = the first, T = the last, c = how
 * many, "n"..r / "p"..r = the one after / before r ("" at the ends), and
 * "r"..r = "until:seq:ms" (r's registration: live until `until`, ms of
 * server time, for its acquire seq, asking for a lease of ms), and
 * "s"..r = that attempt's secret (below). A waiter renews its
 * registration each time it comes back (within FAIR_BACK_MS + 1 s); one
 * that does not (dead, stopped) is dropped when it reaches the head. A
 * grant is a new tenancy like any acquire's: o<owner> = 1,
 * q<requester> = its seq (so a cancel of that acquire takes it back, and
 * passes it on), g = the requester, and a lease of at most FAIR_GRANT_MS
 * until the new holder's client renews it: a grant to a waiter that has
 * gone ends within that. The grant is published to that waiter's client
 * alone, on <lock>:ch:<client id>, as "seq:secret:token". g = r says:
 * r holds one hold here that its client may not know of (a grant, or an
 * acquire whose reply it did not see); a fresh acquire by r adopts it
 * (answers granted, adds nothing), as often as it asks, until r's client
 * shows it knows: a reentry, release or cancel by r clears g (another
 * requester of the same owner never does).
 *
 * THE SECRET. The channel is no proof: anyone allowed to PUBLISH there
 * can send "seq:token" (the client id is in CLIENT LIST, a seq is a small
 * count). So each queued attempt brings a random secret of its own
 * (ARGV[9]: 16 hex digits from the kernel, new with each seq, the same
 * in every resend of that seq), kept next to its registration as
 * "s"..r; a grant publishes it, and the waiter takes a message as its
 * grant only with its own seq and secret (else it claims the grant with
 * an attempt, below). Forging one takes reading the queue key: the trust
 * of writing the lock's keys, which breaks any lock anyway. The secret
 * comes before the token, so that the waiter looks its grant up by
 * "seq:secret:" (wait.h keeps the last few messages, and finds the first
 * with a prefix): a forged "seq:..." never hides the real grant. Set and
 * dropped with the registration, by one script each time, so that they
 * always agree (replicas and AOF get both or neither). What each state
 * leaves to a grant's message:
 *   - a resend of attempt seq (same secret) registers the same again;
 *   - a retry (a new attempt, a new seq) re-registers with a new secret:
 *     a grant to the old seq is published with the old one, and the
 *     waiter, which waits with the new seq, refuses it by its seq, as
 *     before; the grant stands (q<r> = that seq, g = r) and its next
 *     look adopts it, or its cancel passes it on;
 *   - a stale resend of an older seq that lands after a newer attempt re-
 *     registers the older seq and secret: a grant to it is refused by its
 *     seq and adopted as above (or dropped, once r's record passed it);
 *   - a lost reply: the client cancels that attempt (VOID): unqueued,
 *     secret and all, "seq!" recorded, a grant already made taken back
 *     and passed on with the next waiter's own secret; the message of
 *     the grant taken back names a seq no wait of that client waits on;
 *   - a registration that lapsed (the waiter stopped or died) is dropped
 *     with its secret when it reaches the head: never granted;
 *   - a restart that kept the data (RDB, AOF) keeps each registration
 *     with its secret: as before the restart;
 *   - the queue key expired or was lost (a restart without persistence,
 *     a failover to a replica behind): no registration, no grant; the
 *     waiter's next look registers again with a new seq and secret. A
 *     replica that has an older registration of the waiter grants to
 *     that seq, with that seq's secret: refused by its seq, adopted;
 *   - Redlock: one attempt sends one secret to every master; the waiter
 *     counts a master's grant only with its seq and secret.
 * A registration without a secret (written by a client of an older
 * version) is granted as before, "seq:token": such a client trusts the
 * channel; this one never takes a message without its secret (a grant by
 * an older client's script is claimed by its next look). A message
 * too long for the waiter's note (wait.h: a seq of more than 10 digits
 * with a 19-digit token) or lost is claimed by the next look too. */
#define FAIR_REG_MS "3000"
#define STR_(x) #x
#define STR(x) STR_(x)
#define FAIR_GRANT_MS STR(DL_FAIR_GRANT_MS)
#define FAIR_BACK_MS "1000"

#define FAIR_QUEUE \
    "local Q = KEYS[3]\n" \
    "local function unqueue(r)\n" \
    "  local f = redis.call('hmget', Q, 'n' .. r, 'p' .. r)\n" \
    "  if not f[1] then return end\n" \
    "  local n, p = f[1], f[2] or ''\n" \
    "  redis.call('hset', Q, p == '' and 'H' or 'n' .. p, n)\n" \
    "  redis.call('hset', Q, n == '' and 'T' or 'p' .. n, p)\n" \
    "  redis.call('hdel', Q, 'n' .. r, 'p' .. r, 'r' .. r, 's' .. r)\n" \
    "  redis.call('hincrby', Q, 'c', -1)\n" \
    "end\n" \
    "local function register(r, seq, ms, now, secret)\n" \
    "  if redis.call('hexists', Q, 'n' .. r) == 0 then\n" \
    "    local t = redis.call('hget', Q, 'T') or ''\n" \
    "    redis.call('hset', Q, t == '' and 'H' or 'n' .. t, r)\n" \
    "    redis.call('hset', Q, 'T', r, 'p' .. r, t, 'n' .. r, '')\n" \
    "    redis.call('hincrby', Q, 'c', 1)\n" \
    "  end\n" \
    "  redis.call('hset', Q, 'r' .. r, string.format('%d:%s:%s',\n" \
    "             now + " FAIR_REG_MS ", seq, ms), 's' .. r, secret)\n" \
    "  redis.call('pexpire', Q, 2 * " FAIR_REG_MS ")\n" \
    "end\n" \
    "local function head(now)\n" \
    "  for _ = 1, 10000 do\n" \
    "    local r = redis.call('hget', Q, 'H') or ''\n" \
    "    if r == '' then return nil end\n" \
    "    local reg = redis.call('hmget', Q, 'r' .. r, 's' .. r)\n" \
    "    local u, seq, ms = (reg[1] or ''):match('^(%d+):(%d+):(%d+)$')\n" \
    "    if u and tonumber(u) > now then return r, seq, ms, reg[2] or '' end\n" \
    "    if redis.call('hexists', Q, 'n' .. r) == 0 then\n" \
    "      redis.call('del', Q)\n"      /* not a list: start over */ \
    "      return nil\n" \
    "    end\n" \
    "    unqueue(r)\n" \
    "  end\n" \
    "end\n"

/* pass_on(k, me, pub, keep): lock k is free: grant it to the first live
 * waiter, unless that is requester me (who takes it itself). A waiter
 * whose registration is older than its last request that took effect is
 * stale (that request ended its wait): dropped. Returns the requester
 * granted, "me", or nil when nobody waits. A new tenancy drops old
 * request records past RECORDS_MAX, but field keep (the caller's). */
#define FAIR_PASS_ON \
    FAIR_QUEUE \
    PRUNE_FN \
    "local function pass_on(k, me, pub, keep)\n" \
    NOW \
    "  local r, seq, ms, secret\n" \
    "  repeat\n" \
    "    r, seq, ms, secret = head(now)\n" \
    "    if not r then return nil end\n" \
    "    unqueue(r)\n" \
    "    if r == me then return 'me' end\n" \
    "    local done = (redis.call('hget', k, 'q' .. r) or '0'):match('^%d+')\n" \
    "  until tonumber(done) < tonumber(seq)\n" \
    "  local t = tonumber(redis.call('hget', k, 't') or '0')\n" \
    MINT_COUNTER \
    "  prune(k, now, keep)\n" \
    "  local tok = string.format('%d', c)\n" \
    "  redis.call('hset', k, 'n', 1, 'o' .. (r:match('^[^|]*|(.*)$') or r), 1,\n" \
    "             'q' .. r, seq, 'k' .. r, " KEEP_UNTIL("ms") ", 't', tok, 'g', r)\n" \
    "  redis.call('pexpire', k, math.min(tonumber(ms), " FAIR_GRANT_MS "))\n" \
    "  if secret ~= '' then secret = secret .. ':' end\n" \
    "  redis.call(pub, k .. ':ch:' .. r:match('^[^|:]*'), seq .. ':' .. secret .. tok)\n" \
    "  return r\n" \
    "end\n"

/* The caller (requester ARGV[2]) knows what it holds: no hold to adopt. */
#define FAIR_KNOWN \
    "if redis.call('hget', KEYS[1], 'g') == ARGV[2] then\n" \
    "  redis.call('hdel', KEYS[1], 'g')\n" \
    "end\n"

/* A fair lock's take_out: a freed lock passes on, or keeps its record
 * (ARGV[2] is the caller's requester in release and void). */
#define FAIR_TAKE_OUT \
    FAIR_PASS_ON \
    TAKE_OUT_THEN( \
    "    redis.call('hdel', k, 'g')\n" \
    "    if not pass_on(k, nil, ARGV[ch + 1], 'q' .. ARGV[2]) then\n" \
    "      redis.call('pexpire', k, ARGV[keep])\n" \
    "    end\n")

/* KEYS lock counter queue; ARGV owner requester seq lease_ms expected
 * token waits ("1": register if busy) pub secret (of this attempt's
 * registration, above). Busy: {0, the time to come back}, at most
 * FAIR_BACK_MS for a registered waiter. */
#define FAIR_ACQUIRE \
    FAIR_PASS_ON \
    ACQUIRE_HEAD(", 'g'") \
    NOW \
    REENTRY_CHECK \
    "local n, lease = tonumber(f[1] or '0'), tonumber(ARGV[4])\n" \
    "if mine > 0 and ARGV[5] == '0' and f[5] == ARGV[2] then\n" \
    "  redis.call('hset', k, qf, ARGV[3], 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    RAISE_TTL("ARGV[4]") \
    "  unqueue(ARGV[2])\n" \
    "  return {1, mine, t}\n" \
    "end\n" \
    DROP_UNKNOWN \
    "if n <= 0 then\n" \
    "  local r = pass_on(k, ARGV[2], ARGV[8], qf)\n" \
    "  if r and r ~= 'me' then n = 1 end\n" \
    "end\n" \
    "if n <= 0 then\n" \
    PRUNE_RECORDS \
    MINT_COUNTER \
    "  redis.call('hset', k, 'n', 1, of, 1, qf, ARGV[3], 't',\n" \
    "             string.format('%d', c), 'g', ARGV[2],\n" \
    "             'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    "  redis.call('pexpire', k, lease)\n" \
    "  return {1, 1, c}\n" \
    "end\n" \
    "if mine == 0 then\n" \
    "  local p = redis.call('pttl', k)\n" \
    "  if ARGV[7] == '1' then\n" \
    "    register(ARGV[2], ARGV[3], ARGV[4], now, ARGV[9] or '')\n" \
    "    p = math.min(p, " FAIR_BACK_MS ")\n" \
    "  end\n" \
    "  return {0, p}\n" \
    "end\n" \
    "mine = redis.call('hincrby', k, of, 1)\n" \
    "redis.call('hset', k, 'n', n + 1, qf, ARGV[3], 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n" \
    "if f[5] == ARGV[2] then redis.call('hdel', k, 'g') end\n" \
    RAISE_TTL("ARGV[4]") \
    "unqueue(ARGV[2])\n" \
    "return {1, mine, t}\n"

static const char *const src[DL_S_COUNT] = {
    /* KEYS lock counter; ARGV owner requester seq lease_ms expected token */
    [DL_S_ACQUIRE] = ACQUIRE(MINT_COUNTER),

    /* The same with KEYS lock only, for a reentry while its slot is mid-
     * migration (TRYAGAIN: the lock and its counter are on two nodes for
     * now). A reentry mints nothing; a new tenancy needs the counter (a
     * token minted without it could come out below a later one), so a
     * fresh acquire is not sent here (op.c), and is told busy if it is. */
    [DL_S_ACQUIRE1] = ACQUIRE("  do return {0, 10} end\n"),

    /* KEYS lock; ARGV owner requester seq token keep_ms chan pub */
    [DL_S_RELEASE] = RELEASE(""),

    /* KEYS lock; ARGV owner requester seq keep_ms chan pub */
    [DL_S_VOID] = TAKE_OUT VOID_BODY(""),

    /* KEYS lock...; ARGV owner lease_ms token per key */
    [DL_S_RENEW] =
        "local r = {}\n"
        "for i = 1, #KEYS do\n"
        "  local f = redis.call('hmget', KEYS[i], 'o' .. ARGV[3 * i - 2], 't', 'n')\n"
        "  if f[1] and f[2] == ARGV[3 * i] then\n"  /* never lowered (above) */
        "    if redis.call('pttl', KEYS[i]) < tonumber(ARGV[3 * i - 1]) then\n"
        "      redis.call('pexpire', KEYS[i], ARGV[3 * i - 1])\n"
        "    end\n"
        "    r[i] = 1\n"
        "  elseif tonumber(f[3] or '0') > 0 then r[i] = -1\n"
        "  else r[i] = 0 end\n"
        "end\n"
        "return r\n",

    /* KEYS lock; ARGV owner lease_ms token shared ("1": an explicit
     * owner, whose other clients may rely on a longer lease: raised only) */
    [DL_S_EXTEND] =
        "local f = redis.call('hmget', KEYS[1], 'o' .. ARGV[1], 't')\n"
        "if f[1] and f[2] == ARGV[3] then\n"
        "  if ARGV[4] == '1' and redis.call('pttl', KEYS[1]) >= tonumber(ARGV[2]) then\n"
        "    return 1\n"
        "  end\n"
        "  return redis.call('pexpire', KEYS[1], ARGV[2])\n"
        "end\n"
        "return 0\n",

    /* KEYS lock; ARGV requester seq keep_ms chan pub */
    [DL_S_FORCE] =
        "local k, qf = KEYS[1], 'q' .. ARGV[1]\n"
        NOW
        "local f = redis.call('hmget', k, qf, 'n')\n"
        "if f[1] == ARGV[2] .. ':1' then return 1 end\n"
        "if f[1] == ARGV[2] .. ':0' then return 0 end\n"
        "local held = tonumber(f[2] or '0') > 0\n"
        "if held then\n"
        "  for _, x in ipairs(redis.call('hkeys', k)) do\n"
        "    if x:sub(1, 1) == 'o' then redis.call('hdel', k, x) end\n"
        "  end\n"
        "  redis.call('hset', k, 'n', 0)\n"
        "  redis.call(ARGV[5], ARGV[4], 'force')\n"
        "end\n"
        "redis.call('hset', k, qf, ARGV[2] .. (held and ':1' or ':0'),\n"
        "           'k' .. ARGV[1], " KEEP_UNTIL("ARGV[3]") ")\n"
        "redis.call('pexpire', k, ARGV[3])\n"
        "return held and 1 or 0\n",

    /* KEYS lock; ARGV owner count token(0: any) keep_ms chan pub */
    [DL_S_DROP] = TAKE_OUT DROP_BODY,

    /* KEYS counter lock; ARGV token owner: raise the counter (and the
     * lock's token, where owner holds it) to token */
    [DL_S_FENCE] =
        "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then\n"
        "  redis.call('set', KEYS[1], ARGV[1])\n"
        "end\n"
        "if redis.call('hexists', KEYS[2], 'o' .. ARGV[2]) == 1 then\n"
        "  redis.call('hset', KEYS[2], 't', ARGV[1])\n"
        "end\n"
        "return 1\n",

    /* KEYS lock: its TTL while held, else -2 */
    [DL_S_TTL] =
        "if tonumber(redis.call('hget', KEYS[1], 'n') or '0') > 0 then\n"
        "  return redis.call('pttl', KEYS[1])\n"
        "end\n"
        "return -2\n",

    /* The read-write lock: the lock hash as above, plus w = the owner of
     * the write hold (while o<w> > 0), x = until when a waiting writer
     * keeps new readers out (ms, server time), and e<owner> = until when
     * a reader's own lease runs (ms). Readers share a tenancy and its
     * token; a reader whose lease ran out is taken out by the next
     * acquire (so a dead reader blocks writers for its own lease only),
     * and a busy writer is told the time to the first reader's end. The
     * key lives as long as its longest hold: a new tenancy sets its TTL
     * (whatever a freed lock's record had), later holds only raise it.
     * KEYS lock counter; ARGV owner requester seq lease_ms expected token
     * kind ("r", "w", or "W": a writer that will wait) writer */
    [DL_S_RW_ACQUIRE] =
        PRUNE_FN
        ACQUIRE_HEAD(", 'w', 'x'")
        NOW
        PRUNE_LEASES
        REENTRY_CHECK
        DROP_UNKNOWN
        "local writer = f[5] and tonumber(redis.call('hget', k, 'o' .. f[5]) or '0') > 0\n"
        "local lease, x = tonumber(ARGV[4]), tonumber(f[6] or '0')\n"
        "local wr = ARGV[7] ~= 'r'\n"
        "if mine == 0 and wr and n > 0 then\n"
        "  local p = redis.call('pttl', k)\n"
        "  if ARGV[7] == 'W' then\n"
        "    redis.call('hset', k, 'x', now + math.max(p, 0) + 2000)\n"
        "  end\n"
        "  if not writer and first then p = math.max(first - now, 1) end\n"
        "  return {0, p}\n"
        "end\n"
        "if mine == 0 and ARGV[7] == 'r' and not (writer and f[5] == ARGV[8]) then\n"
        "  if writer or (n > 0 and x > now) then return {0, redis.call('pttl', k)} end\n"
        "  if x > now then return {0, x - now} end\n"
        "end\n"
        "if n <= 0 then\n"
        PRUNE_RECORDS
        MINT_COUNTER
        "  t = c\n"
        "  redis.call('hset', k, 't', string.format('%d', t))\n"
        "  redis.call('hdel', k, 'w')\n"
        "else\n"
        PRUNE_RECORDS
        "end\n"
        "mine = redis.call('hincrby', k, of, 1)\n"
        "redis.call('hset', k, 'n', n + 1, qf, ARGV[3], 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n"
        "if wr then\n"
        "  redis.call('hset', k, 'w', ARGV[1])\n"
        "  redis.call('hdel', k, 'x')\n"
        "else\n"
        "  local e = tonumber(redis.call('hget', k, 'e' .. ARGV[1]) or '0')\n"
        "  redis.call('hset', k, 'e' .. ARGV[1], math.max(e, now + lease))\n"
        "end\n"
        "if n <= 0 or redis.call('pttl', k) < lease then\n"
        "  redis.call('pexpire', k, lease)\n"  /* a new tenancy: its own */
        "end\n"
        "return {1, mine, t}\n",

    /* The semaphore: the lock hash with one holder per permit (o<id> = 1,
     * e<id> = the end of its lease, ms, server time; t = 0: permits have
     * no fencing token), and KEYS[2], a sorted set of the requesters
     * waiting for a permit, scored by the end of their registration.
     * KEYS lock queue; ARGV owner requester seq lease_ms expected token
     * permits. A busy answer's TTL is the time to the first permit's end,
     * at most 1 s: the waiter comes back by then, which renews its
     * registration (3 s), so a dead waiter leaves the queue by itself. */
    [DL_S_SEM_ACQUIRE] =
        PRUNE_FN
        ACQUIRE_HEAD(", 'l'")
        NOW
        PRUNE_LEASES
        DROP_UNKNOWN
        "if n > 0 and f[5] and f[5] ~= ARGV[7] then\n"
        "  return redis.error_reply(string.format('semaphore: Redis keeps %s "
        "permits for this name while it is held, this client names %s', "
        "f[5], ARGV[7]))\n"
        "end\n"
        "if n >= tonumber(ARGV[7]) then\n"
        "  redis.call('zadd', KEYS[2], now + 3000, ARGV[2])\n"
        "  redis.call('pexpire', KEYS[2], 6000)\n"
        "  return {0, math.min(first and math.max(first - now, 1) or 1000, 1000)}\n"
        "end\n"
        "if n <= 0 then\n"
        PRUNE_RECORDS
        "else\n"
        PRUNE_RECORDS
        "end\n"
        "mine = redis.call('hincrby', k, of, 1)\n"
        "local e = math.max(tonumber(redis.call('hget', k, 'e' .. ARGV[1]) or '0'),\n"
        "                   now + tonumber(ARGV[4]))\n"
        "redis.call('hset', k, 'n', n + 1, qf, ARGV[3], 't', '0', 'l', ARGV[7],\n"
        "           'e' .. ARGV[1], e, 'k' .. ARGV[2], " KEEP_UNTIL("ARGV[4]") ")\n"
        "redis.call('zrem', KEYS[2], ARGV[2])\n"
        "if n <= 0 or redis.call('pttl', k) < tonumber(ARGV[4]) then\n"
        "  redis.call('pexpire', k, ARGV[4])\n"
        "end\n"
        "return {1, mine, 0}\n",

    /* KEYS lock queue; ARGV as RELEASE. A freed permit wakes one waiter:
     * the first live one in the queue, through its client's channel
     * (lock:ch:<client id>; the requester starts with the client id). */
    [DL_S_SEM_RELEASE] = RELEASE(
        NOW
        "redis.call('zremrangebyscore', KEYS[2], '-inf', now)\n"
        "local w = redis.call('zrange', KEYS[2], 0, 0)[1]\n"
        "if w then\n"
        "  redis.call('zrem', KEYS[2], w)\n"
        "  redis.call(ARGV[7], k .. ':ch:' .. w:match('^[^|:]*'), 'permit')\n"
        "end\n"),

    /* KEYS lock; ARGV permits: how many are free now. */
    [DL_S_SEM_FREE] =
        "local k = KEYS[1]\n"
        NOW
        "local all, h, used = redis.call('hgetall', k), {}, 0\n"
        "for i = 1, #all, 2 do h[all[i]] = all[i + 1] end\n"
        "for name, v in pairs(h) do\n"
        "  if name:sub(1, 1) == 'e' and tonumber(v) > now and\n"
        "     tonumber(h['o' .. name:sub(2)] or '0') > 0 then used = used + 1 end\n"
        "end\n"
        "local permits = tonumber(ARGV[1])\n"   /* while held, Redis's */
        "if tonumber(h.n or '0') > 0 and h.l then permits = tonumber(h.l) end\n"
        "return math.max(permits - used, 0)\n",

    /* KEYS lock...; ARGV (owner lease_ms token)... of read-write holds: a
     * reader's own lease is renewed too, unless it already ran out (then
     * the reader is gone: taken out, answered 0). */
    [DL_S_RW_RENEW] =
        NOW
        "local r = {}\n"
        "for i = 1, #KEYS do\n"
        "  local k, o = KEYS[i], ARGV[3 * i - 2]\n"
        "  local lease = tonumber(ARGV[3 * i - 1])\n"
        "  local f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o)\n"
        "  if f[1] and f[4] and tonumber(f[4]) <= now then\n"
        "    redis.call('hdel', k, 'o' .. o, 'e' .. o)\n"
        "    redis.call('hset', k, 'n', math.max(tonumber(f[3] or '0') - tonumber(f[1]), 0))\n"
        "    r[i] = 0\n"
        "  elseif f[1] and f[2] == ARGV[3 * i] then\n"
        "    if f[4] then\n"   /* never lowered: a shared owner's other */
        "      redis.call('hset', k, 'e' .. o, math.max(tonumber(f[4]), now + lease))\n"
        "    end\n"
        "    if redis.call('pttl', k) < lease then redis.call('pexpire', k, lease) end\n"
        "    r[i] = 1\n"
        "  elseif tonumber(f[3] or '0') > 0 then r[i] = -1\n"
        "  else r[i] = 0 end\n"
        "end\n"
        "return r\n",

    /* The fair lock (above). KEYS lock counter queue, then ARGV as the
     * lock's: release, cancel and drop pass a freed lock on. */
    [DL_S_FAIR_ACQUIRE] = FAIR_ACQUIRE,
    [DL_S_FAIR_RELEASE] = FAIR_TAKE_OUT RELEASE_BODY(FAIR_KNOWN),
    [DL_S_FAIR_VOID] = FAIR_TAKE_OUT VOID_BODY("unqueue(ARGV[2])\n" FAIR_KNOWN),
    [DL_S_FAIR_DROP] = FAIR_TAKE_OUT DROP_BODY,

    /* Who holds the lock, for diagnostics; changes nothing. KEYS lock
     * queue; ARGV chan verb ("numsub" or "shardnumsub"). Free: {0}. Held:
     * {1, token, pttl, {owner, count, ...}, {requester, ...}, queued,
     * subscribers, writer}: the owners whose holds have not run out, the
     * requesters "<client id>|<owner>" recorded (which clients act for an
     * explicit owner), a fair lock's or a semaphore's live queue, and the
     * clients listening on the lock's channel (waiters, and clients that
     * waited lately: their subscriptions stay). */
    [DL_S_INSPECT] =
        "local k = KEYS[1]\n"
        NOW
        "local all, h = redis.call('hgetall', k), {}\n"
        "for i = 1, #all, 2 do h[all[i]] = all[i + 1] end\n"
        "if tonumber(h.n or '0') <= 0 then return {0} end\n"
        "local owners, reqs = {}, {}\n"
        "for name, v in pairs(h) do\n"
        "  local c, rest = name:sub(1, 1), name:sub(2)\n"
        "  if c == 'o' and tonumber(v) > 0 and\n"
        "     tonumber(h['e' .. rest] or now + 1) > now then\n"
        "    owners[#owners + 1] = rest\n"
        "    owners[#owners + 1] = v\n"
        "  elseif c == 'q' and rest:find('|', 1, true) then\n"
        "    reqs[#reqs + 1] = rest\n"
        "  end\n"
        "end\n"
        "if #owners == 0 then return {0} end\n"
        "local queued, kind = 0, redis.call('type', KEYS[2]).ok\n"
        "if kind == 'hash' then queued = tonumber(redis.call('hget', KEYS[2], 'c') or '0')\n"
        "elseif kind == 'zset' then queued = redis.call('zcount', KEYS[2], now, '+inf') end\n"
        "local subs = redis.call('pubsub', ARGV[2], ARGV[1])[2]\n"
        "return {1, h.t or '0', redis.call('pttl', k), owners, reqs, queued,\n"
        "        subs, h.w or ''}\n",
};

const char *dl_script_source(dl_script_id id, const char **name)
{
    static const char *const names[DL_S_COUNT] = {
        "acquire", "acquire1", "release", "void", "renew", "extend", "force",
        "drop", "fence", "ttl", "rw_acquire", "rw_renew", "sem_acquire",
        "sem_release", "sem_free", "fair_acquire", "fair_release",
        "fair_void", "fair_drop", "inspect"
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
    /* A script that may grant a fair lock goes behind a PING, so that its
     * grant is written to the new holder before its reply to the caller
     * (conn.h): the next holder does not wait for the releaser. Not after
     * ASKING, which must come right before the script. */
    int grants = !asking && (id == DL_S_FAIR_RELEASE ||
                             id == DL_S_FAIR_VOID || id == DL_S_FAIR_DROP);
    return dl_conn_call_led(c, grants ? "PING" : NULL, argc, argv, lens, out,
                            err, errlen);
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
