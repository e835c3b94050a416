/* SPDX-License-Identifier: MIT
 * client.c: the lock operations, run on the Lua thread.
 *
 * Lock order: c->mu is the only mutex. It is never held across I/O:
 * each operation reads what it needs from the registry, drops the mutex,
 * runs one script (on one node, or on every Redlock master at once), then
 * retakes it to record what Redis confirmed. Holds are unlinked only on
 * this thread, so a hold found before the I/O is still valid after it
 * (the watchdog may have marked it lost meanwhile). Every acquire and
 * release attempt carries a new request id; one whose reply is lost stays
 * pending on its hold until pending.c has ended it.
 */
#define _GNU_SOURCE
#include "client.h"
#include "pending.h"
#include "redlock.h"
#include "watchdog.h"

#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Learn the script SHAs on every reachable node (Redlock needs a quorum;
 * Cluster also learns its slot map here). */
static dl_status load_scripts(dl_client *c, char *err, size_t errlen)
{
    dl_topology *t = &c->topo;
    size_t ok = 0, need = t->kind == DL_TOPO_REDLOCK ? (size_t)t->quorum : 1;
    size_t seeds = t->nnodes;
    dl_status st = DL_ECONN;
    for (size_t i = 0; i < seeds; i++) {
        if (t->kind == DL_TOPO_CLUSTER &&
            (st = dl_topology_refresh(t, i, 0, err, errlen)) != DL_OK)
            continue;
        st = dl_scripts_load(&t->nodes[i]->cmd, &c->scripts, err, errlen);
        if (st == DL_OK)
            ok++;
        if (st == DL_OK && t->kind != DL_TOPO_REDLOCK)
            break;
    }
    if (ok >= need)
        return DL_OK;
    if (t->kind == DL_TOPO_REDLOCK)
        return dl_fail(err, errlen, DL_EQUORUM, "quorum: only %zu of %zu "
                       "servers reachable", ok, t->nnodes);
    return st;
}

/* An eviction policy that can pick lock keys ends holds early and can
 * reset fencing counters: remember it for stats (CONFIG may be denied:
 * then nothing is known). */
static void check_eviction(dl_client *c)
{
    char err[DL_ERRLEN];
    const char *argv[3] = { "CONFIG", "GET", "maxmemory-policy" };
    redisReply *r;
    if (dl_conn_call(&c->topo.nodes[0]->cmd, 3, argv, NULL, &r, err,
                     sizeof err) != DL_OK)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        c->evictable = strncmp(r->element[1]->str, "allkeys-", 8) == 0 ||
                       strncmp(r->element[1]->str, "volatile-", 9) == 0;
    freeReplyObject(r);
}

int dl_client_evictable(const dl_client *c)
{
    return c->evictable;
}

/* ---- release at process exit ---------------------------------------
 * A program that ends with exit() (os.exit without closing its state)
 * skips every __gc, and its locks would stay until their leases ran out.
 * An atexit handler releases, best effort, the holds of every client
 * that the exiting thread opened in this process: a client of another
 * thread may be in use right now, and a forked child's copies are not
 * its own. It never frees (a __gc may still come, e.g. from a host's own
 * exit handler) and runs at most once per client. */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static dl_client *live;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void release_all(dl_client *c);

/* Stop the watchdog and release every hold, once. */
static void shut(dl_client *c)
{
    if (c->shut)
        return;
    c->shut = 1;
    dl_watchdog_stop(c);
    if (c->scripts.loaded)
        release_all(c);
}

static void at_exit(void)
{
    pthread_mutex_lock(&live_mu);
    for (dl_client *c = live; c; c = c->live_next)
        if (dl_client_same_process(c) &&
            pthread_equal(c->opener, pthread_self()))
            shut(c);
    pthread_mutex_unlock(&live_mu);
}

/* The list's lock is held across fork(), so that a child never inherits
 * it locked by a thread that does not exist there. */
static void fork_prepare(void) { pthread_mutex_lock(&live_mu); }
static void fork_resume(void) { pthread_mutex_unlock(&live_mu); }

/* The handlers must never outlive this module's code. glibc ties them to
 * the object and drops them when it is unloaded, but other runtimes (a
 * sanitizer's atexit, another libc) keep them and would call into unmapped
 * memory after lua_close unloaded us. So the module pins itself first
 * (RTLD_NODELETE: it stays mapped until the process ends), and registers
 * nothing if it cannot. */
static void register_at_exit(void)
{
    Dl_info self;
    if (!dladdr((void *)at_exit, &self) || !self.dli_fname ||
        !dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
        return;
    (void)atexit(at_exit);
    (void)pthread_atfork(fork_prepare, fork_resume, fork_resume);
}

static void go_live(dl_client *c)
{
    (void)pthread_once(&exit_once, register_at_exit);
    pthread_mutex_lock(&live_mu);
    c->live_next = live;
    if (live)
        live->live_prev = c;
    live = c;
    pthread_mutex_unlock(&live_mu);
}

static void leave_live(dl_client *c)
{
    pthread_mutex_lock(&live_mu);
    if (c->live_prev)
        c->live_prev->live_next = c->live_next;
    else if (live == c)
        live = c->live_next;
    if (c->live_next)
        c->live_next->live_prev = c->live_prev;
    pthread_mutex_unlock(&live_mu);
}

dl_status dl_client_open(dl_client **out, dl_client_opts *opts,
                         char *err, size_t errlen)
{
    *out = NULL;
    dl_client *c = calloc(1, sizeof *c);
    if (!c) {
        dl_client_opts_free(opts);
        return dl_fail(err, errlen, DL_ECONN, "out of memory");
    }
    c->opts = *opts;
    memset(opts, 0, sizeof *opts);
    c->pid = getpid();
    c->opener = pthread_self();
    pthread_mutex_init(&c->mu, NULL);
    c->pubverb = c->opts.topo == DL_TOPO_CLUSTER ? "spublish" : "publish";
    /* A renewal must come back well within the lease it protects. */
    int64_t third = c->opts.lease_ms * 1000 / 3;
    int64_t cmd = c->opts.command_timeout_us;
    dl_status st = dl_topology_init(&c->topo, c->opts.topo, &c->mu,
                                    c->opts.eps, c->opts.neps,
                                    c->opts.master, &c->opts.tmpl,
                                    c->opts.connect_timeout_us, cmd,
                                    cmd > 0 && cmd < third ? cmd : third,
                                    err, errlen);
    c->opts.eps = NULL;
    c->opts.neps = 0;
    c->opts.master = NULL;
    if (st == DL_OK && dl_registry_init(&c->reg) != 0)
        st = dl_fail(err, errlen, DL_ECONN, "out of memory");
    if (st == DL_OK && dl_random_hex(c->id, DL_ID_BYTES) != 0)
        st = dl_fail(err, errlen, DL_ECONN, "no randomness for the client id");
    if (st == DL_OK)
        st = load_scripts(c, err, errlen);
    if (st == DL_OK)
        check_eviction(c);
    if (st == DL_OK)
        st = dl_watchdog_start(c, err, errlen);
    if (st != DL_OK) {
        dl_client_close(c);
        return st;
    }
    go_live(c);
    *out = c;
    return DL_OK;
}

/* Best effort: take this client's holds out of every lock, waking
 * waiters where a lock becomes free. One pipelined round trip on one
 * server; one call per hold elsewhere. */
static void release_all(dl_client *c)
{
    char err[DL_ERRLEN], bufs[3][24];
    dl_topology *t = &c->topo;
    int pipelined = t->kind == DL_TOPO_SINGLE || t->kind == DL_TOPO_SENTINEL;
    size_t sent = 0;
    dl_hold *lists[2] = { c->reg.head, c->reg.orphans };
    for (int i = 0; i < 2; i++) {
        for (dl_hold *h = lists[i]; h; h = i ? h->onext : h->next) {
            const char *argv[DL_SCRIPT_HEAD + 7];
            size_t lens[DL_SCRIPT_HEAD + 7];
            redisReply *r, *rs[DL_MAX_NODES];
            dl_client_pending_end(c, 0, h);  /* end it first */
            if (!dl_client_drop_args(c, h, argv, lens, bufs))
                continue;
            if (pipelined) {
                if (dl_script_append(&t->nodes[0]->cmd, &c->scripts,
                                     DL_S_DROP, 1, 10, argv, lens, err,
                                     sizeof err) != DL_OK)
                    return;
                sent++;
            } else if (t->kind == DL_TOPO_REDLOCK) {
                dl_topology_fan(t, &c->scripts, 0, DL_S_DROP, 1, 10, argv,
                                lens, rs);
                for (size_t k = 0; k < t->nnodes; k++)
                    if (rs[k])
                        freeReplyObject(rs[k]);
            } else if (dl_topology_eval(t, &c->scripts, 0, h->key,
                                        h->keylen, DL_S_DROP, 1, 10, argv,
                                        lens, &r, err, sizeof err) == DL_OK) {
                freeReplyObject(r);
            }
        }
    }
    for (size_t i = 0; i < sent; i++) {
        redisReply *r;
        if (dl_conn_read(&t->nodes[0]->cmd, &r, err, sizeof err) != DL_OK)
            return;
        freeReplyObject(r);
    }
}

void dl_client_close(dl_client *c)
{
    if (!c)
        return;
    leave_live(c);
    if (dl_client_same_process(c)) {
        shut(c);
        pthread_mutex_destroy(&c->mu);
    } else {
        /* A forked child: the watchdog thread does not exist here and the
         * parent's holds are not ours to release. Free memory only;
         * closing our copies of the sockets sends nothing. */
        if (c->wd)
            c->wd->running = 0;
        dl_watchdog_stop(c);
    }
    dl_topology_free(&c->topo);
    dl_registry_free(&c->reg);
    dl_client_opts_free(&c->opts);
    free(c);
}

static void fmt_i64(char *buf, size_t n, int64_t v, const char **argv,
                    size_t *len)
{
    snprintf(buf, n, "%lld", (long long)v);
    *argv = buf;
    *len = strlen(buf);
}

/* With c->mu held: a hold with nothing left (no holds, nothing pending)
 * goes; its lock reference is handed back through *unref. */
static void tidy(dl_client *c, dl_hold *h, int *unref)
{
    if (h->count > 0 || h->pend != DL_PEND_NONE || h->pend_lua)
        return;
    if (*unref == DL_NOREF)
        *unref = h->ref;
    else if (h->ref != DL_NOREF)
        dl_registry_push_event(&c->reg, h->ref, NULL);
    h->ref = DL_NOREF;
    dl_registry_remove(&c->reg, h);
}

/* With c->mu held: end h's pending request from the Lua thread before a
 * new one is sent for it. Returns with c->mu held; DL_OK once it ended. */
static dl_status settle(dl_client *c, dl_hold *h, char *err, size_t errlen)
{
    dl_pending p;
    int done;
    int64_t code, left;
    dl_client_pending_copy(h, &p);
    h->pend_lua = 1;
    pthread_mutex_unlock(&c->mu);
    dl_status st = dl_client_pending_io(c, 0, &p, &done, &code, &left, err,
                                        errlen);
    pthread_mutex_lock(&c->mu);
    h->pend_lua = 0;
    if (done)
        dl_client_pending_done(c, h, p.seq, code);
    h->finished = 0;            /* this thread decides what becomes of h */
    return done ? DL_OK : st;
}

/* With c->mu held: h's request seq is on the wire from this thread. */
static void begin_request(dl_client *c, dl_hold *h, int kind, int64_t ms,
                          int64_t until_us)
{
    h->pend = kind;
    h->pend_lua = 1;
    h->pend_seq = ++c->next_seq;
    h->pend_token = h->token;
    h->pend_ms = ms;
    h->pend_until_us = until_us;
}

/* With c->mu held: its reply did not come; the watchdog ends it. */
static void leave_to_watchdog(dl_client *c, dl_hold *h)
{
    h->pend_lua = 0;
    h->pend_retry_us = dl_now_us();
    dl_watchdog_poke(c, 0);
}

/* With c->mu held: record a successful acquire of h, sent at t0, valid
 * for ms less drift_us. */
static void record_acquire(dl_client *c, dl_hold *h, const dl_lockref *l,
                           int64_t tok, int64_t t0, int64_t ms,
                           int64_t drift_us, int watchdog, int ref,
                           int *ref_kept)
{
    if (h->count <= 0 || h->lost) {         /* a fresh hold */
        h->lost = NULL;
        h->count = 0;
        h->watchdog = watchdog;
        h->acquired_us = t0;
        h->owner_num = l->owner_num;
        if (h->ref != DL_NOREF)
            dl_registry_push_event(&c->reg, h->ref, NULL);
        h->ref = ref;
        *ref_kept = 1;
    }
    h->count++;
    h->token = tok;
    h->lease_ms = ms;
    h->gen++;
    h->deadline_us = t0 + ms * 1000 - drift_us;
    h->renew_at_us = t0 + ms * 1000 / 3;
    h->retry_at_us = 0;
    h->final = watchdog && c->opts.max_hold_ms > 0 &&
               t0 + ms * 1000 >= h->acquired_us + c->opts.max_hold_ms * 1000;
    c->stats.acquired++;
    dl_watchdog_poke(c, h->watchdog ? h->renew_at_us : h->deadline_us);
}

/* One acquire attempt on the node that owns the lock. */
static dl_status attempt_one(dl_client *c, const dl_lockref *l,
                             const char **argv, size_t *lens,
                             dl_attempt *a, char *err, size_t errlen)
{
    redisReply *r;
    int64_t code = 0, x = 0, y = 0;
    dl_status st = dl_topology_eval(&c->topo, &c->scripts, 0, l->key,
                                    l->keylen, DL_S_ACQUIRE, 2, 11, argv,
                                    lens, &r, err, errlen);
    if (st == DL_EAGAIN) {      /* slot mid-migration: the one-key form */
        const char *argv1[DL_SCRIPT_HEAD + 7];
        size_t lens1[DL_SCRIPT_HEAD + 7];
        argv1[3] = argv[3];
        lens1[3] = lens[3];
        for (int i = 5; i < 11; i++) {
            argv1[i - 1] = argv[i];
            lens1[i - 1] = lens[i];
        }
        st = dl_topology_eval(&c->topo, &c->scripts, 0, l->key, l->keylen,
                              DL_S_ACQUIRE1, 1, 10, argv1, lens1, &r, err,
                              errlen);
    }
    if (st != DL_OK)
        return st;
    /* {1, count, token} | {0, pttl} | {-1} | {-2} */
    int bad = dl_reply_int(r, 0, &code) || code < -2 || code > 1 ||
              (code == 0 && dl_reply_int(r, 1, &x)) ||
              (code == 1 && (dl_reply_int(r, 1, &x) ||
                             dl_reply_int(r, 2, &y)));
    freeReplyObject(r);
    if (bad)
        return dl_fail(err, errlen, DL_EREDIS, "unexpected acquire reply");
    memset(a, 0, sizeof *a);
    a->outcome = (int)code;
    a->pttl_ms = code == 0 ? x : 0;
    a->token = y;
    return DL_OK;
}

/* After a fresh acquire with sync_replicas: WAIT for the replicas. */
static dl_status sync_replicas(dl_client *c, const dl_lockref *l,
                               char *err, size_t errlen)
{
    char n_s[16], t_s[24];
    snprintf(n_s, sizeof n_s, "%d", c->opts.sync_replicas);
    snprintf(t_s, sizeof t_s, "%lld", (long long)c->opts.sync_timeout_ms);
    const char *wargv[3] = { "WAIT", n_s, t_s };
    redisReply *r;
    /* WAIT blocks up to sync_timeout: the reply must be given that long. */
    int64_t bound = c->opts.sync_timeout_ms * 1000 + c->topo.command_timeout_us;
    dl_conn *conn = &c->topo.nodes[dl_topology_route(&c->topo, l->key,
                                                     l->keylen)]->cmd;
    dl_conn_read_timeout(conn, bound);
    dl_status st = dl_topology_call(&c->topo, l->key, l->keylen, 3, wargv,
                                    NULL, &r, err, errlen);
    dl_conn_read_timeout(conn, 0);
    if (st != DL_OK)
        return st;
    long long acked = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (acked >= c->opts.sync_replicas)
        return DL_OK;
    return dl_fail(err, errlen, DL_EQUORUM, "quorum: only %lld of %d "
                   "replicas confirmed the lock within %lld ms", acked,
                   c->opts.sync_replicas, (long long)c->opts.sync_timeout_ms);
}

static size_t waiters(dl_client *c, const dl_lockref *l, dl_waiter **ws);

/* Subscribe the waiters ws (see waiters()) to l's channel, where the
 * release will be announced. Returns how many subscriptions are new: the
 * caller retries before it waits. */
static size_t subscribe(dl_client *c, const dl_lockref *l, dl_waiter **ws,
                        size_t *nws)
{
    char err[DL_ERRLEN];
    size_t fresh = 0;
    *nws = waiters(c, l, ws);
    for (size_t i = 0; i < *nws; i++)
        if (!dl_waiter_subscribed(ws[i], l->chan, l->chanlen) &&
            dl_waiter_subscribe(ws[i], l->chan, l->chanlen, err, sizeof err)
                == DL_OK)
            fresh++;
    return fresh;
}

/* With c->mu held: l's hold, ready for a new request (its pending one
 * ended), created if absent. NULL with err when it cannot be. */
static dl_hold *ready_hold(dl_client *c, const dl_lockref *l, int create,
                           dl_status *st, char *err, size_t errlen)
{
    dl_hold *h = dl_registry_find(&c->reg, l->key, l->keylen, l->owner,
                                  l->ownerlen);
    *st = DL_OK;
    if (h && h->pend != DL_PEND_NONE &&
        (*st = settle(c, h, err, errlen)) != DL_OK) {
        int unref = DL_NOREF;
        tidy(c, h, &unref);
        if (unref != DL_NOREF)
            dl_registry_push_event(&c->reg, unref, NULL);
        return NULL;
    }
    if (h || !create)
        return h;
    h = dl_registry_add(&c->reg, l->key, l->keylen, l->fence, l->fencelen,
                        l->chan, l->chanlen, l->owner, l->ownerlen, l->req,
                        l->reqlen);
    if (!h)
        *st = dl_fail(err, errlen, DL_EREDIS, "out of memory");
    return h;
}

/* The waiters that carry l's release messages: every Redlock master's, or
 * the lock's node's. Returns how many are in ws. */
static size_t waiters(dl_client *c, const dl_lockref *l, dl_waiter **ws)
{
    dl_topology *t = &c->topo;
    size_t lo = 0, hi = t->nnodes, n = 0;
    if (t->kind != DL_TOPO_REDLOCK) {
        lo = dl_topology_route(t, l->key, l->keylen);
        hi = lo + 1;
    }
    for (size_t i = lo; i < hi; i++)
        ws[n++] = &t->nodes[i]->sub;
    return n;
}

/* With c->mu held: what the next attempt on h sends. A reentry keeps its
 * hold's mode and lease; a fresh hold takes the call's. */
static void plan_attempt(dl_client *c, dl_hold *h, const dl_acquire *op,
                         int64_t now, int64_t *expect, int64_t *token,
                         int *watchdog, int64_t *ms)
{
    const dl_acquire_args *a = &op->args;
    int64_t left_us = c->opts.max_hold_ms * 1000;   /* 0: no cap */
    *expect = *token = 0;
    if (!h->lost && h->count > 0) {
        *expect = h->count;
        *token = h->token;
        *watchdog = h->watchdog;
        *ms = *watchdog || !a->lease_ms ? h->lease_ms : a->lease_ms;
        if (left_us > 0) {
            left_us += h->acquired_us - now;
            if (left_us < 1000)
                left_us = 1000;
        }
    } else {
        *watchdog = a->lease_ms == 0;
        *ms = !*watchdog ? a->lease_ms : a->renew_ms ? a->renew_ms
                                                     : c->opts.lease_ms;
    }
    if (*watchdog && left_us > 0 && *ms * 1000 > left_us)
        *ms = left_us / 1000;               /* never past max_hold */
}

/* Come back at until_us, or earlier when one of fds is readable. */
static dl_status wait_for(dl_acquire *op, const int *fds, size_t nfds,
                          int64_t until_us)
{
    op->nfds = nfds;
    if (nfds)
        memcpy(op->fds, fds, nfds * sizeof *fds);
    op->wake_us = until_us < op->until_us ? until_us : op->until_us;
    return DL_EWAIT;
}

dl_status dl_client_acquire_step(dl_client *c, const dl_lockref *l,
                                 dl_acquire *op, char *err, size_t errlen)
{
    dl_acquire_args *args = &op->args;
    int redlock = c->topo.kind == DL_TOPO_REDLOCK, unref = DL_NOREF;
    dl_waiter *ws[DL_MAX_NODES];
    size_t nws = waiters(c, l, ws), nlive;
    int woke = 0;
    dl_status st;
    if (!op->started) {
        int64_t now = dl_now_us();
        op->started = 1;
        op->until_us = args->wait_us < 0 ? INT64_MAX : now + args->wait_us;
        args->ref_kept = 0;
        args->busy_ms = -1;
    } else if (op->nfds || op->wake_us) {   /* back from a wait: why? */
        uint64_t seen = dl_waiter_count(ws, nws, l->chan, l->chanlen, &nlive);
        int64_t now = dl_now_us();
        if (seen == op->seen && now < op->wake_us && nlive == op->nfds)
            return DL_EWAIT;                /* early: wait on */
        woke = seen != op->seen;
    }
    op->nfds = 0;
    op->wake_us = 0;

    pthread_mutex_lock(&c->mu);
    if (woke)
        c->stats.wakeups++;
    dl_hold *h;
    for (;;) {
        h = ready_hold(c, l, 1, &st, err, errlen);  /* its last try ended */
        if (!h)
            break;
        int64_t expect, token, ms;
        int watchdog;
        plan_attempt(c, h, op, dl_now_us(), &expect, &token, &watchdog, &ms);
        char ms_s[24], exp_s[24], seq_s[24], tok_s[24];
        const char *argv[DL_SCRIPT_HEAD + 8];
        size_t lens[DL_SCRIPT_HEAD + 8];
        argv[3] = l->key;   lens[3] = l->keylen;
        argv[4] = l->fence; lens[4] = l->fencelen;
        argv[5] = l->owner; lens[5] = l->ownerlen;
        argv[6] = l->req;   lens[6] = l->reqlen;
        fmt_i64(ms_s, sizeof ms_s, ms, &argv[8], &lens[8]);
        fmt_i64(exp_s, sizeof exp_s, expect, &argv[9], &lens[9]);
        fmt_i64(tok_s, sizeof tok_s, token, &argv[10], &lens[10]);
        begin_request(c, h, DL_PEND_VOID, ms, dl_now_us() + ms * 1000 +
                      c->topo.command_timeout_us);
        fmt_i64(seq_s, sizeof seq_s, (int64_t)h->pend_seq, &argv[7],
                &lens[7]);
        pthread_mutex_unlock(&c->mu);

        /* Releases counted from here on wake this acquire. */
        op->seen = dl_waiter_count(ws, nws, l->chan, l->chanlen, &nlive);
        dl_topology_sentinel_news(&c->topo);
        int64_t t0 = dl_now_us();
        dl_attempt a;
        st = redlock ? dl_redlock_attempt(c, l, argv, lens, t0, ms, expect,
                                          &a, err, errlen)
                     : attempt_one(c, l, argv, lens, &a, err, errlen);
        if (st == DL_OK && a.outcome == 1 && c->opts.sync_replicas > 0 &&
            expect == 0)
            st = sync_replicas(c, l, err, errlen);  /* shortfall: undone */

        pthread_mutex_lock(&c->mu);
        int64_t now = dl_now_us();
        if (st == DL_EAGAIN && args->wait_us != 0 && now < op->until_us) {
            h->pend = DL_PEND_NONE;         /* it did not run: try again */
            h->pend_lua = 0;
            st = wait_for(op, NULL, 0, now + 50000);
            break;
        }
        if (st != DL_OK) {                  /* it may have run: cancel it */
            char e2[DL_ERRLEN];
            if (st == DL_EQUORUM && a.outcome == 1)  /* take it back now */
                (void)settle(c, h, e2, sizeof e2);
            if (h->pend != DL_PEND_NONE)
                leave_to_watchdog(c, h);
            break;
        }
        if (a.outcome == 1) {
            h->pend = DL_PEND_NONE;
            h->pend_lua = 0;
            record_acquire(c, h, l, a.token, t0, ms,
                           dl_redlock_drift_us(c, ms), watchdog, args->ref,
                           &args->ref_kept);
            break;
        }
        h->pend_lua = 0;                    /* Redlock: the watchdog or */
        if (!a.maybe)                       /* the next try undoes it */
            h->pend = DL_PEND_NONE;
        if (a.outcome == -1) {              /* a reentry found it gone */
            dl_client_lose(c, h, LOST_GONE);
            st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost);
            break;
        }
        /* Busy: a.pttl_ms is the holder's remaining TTL. */
        if (args->wait_us == 0 || now >= op->until_us) {
            c->stats.timeouts++;
            if (a.pttl_ms >= 0) {           /* as of this last attempt */
                args->busy_ms = a.pttl_ms - (now - t0) / 1000;
                if (args->busy_ms < 0)
                    args->busy_ms = 0;
            }
            st = dl_fail(err, errlen, DL_ETIMEOUT, "timeout");
            if (h->pend != DL_PEND_NONE)
                leave_to_watchdog(c, h);
            break;
        }
        if (!op->waited) {
            op->waited = 1;
            c->stats.waits++;
        }
        if (a.split) {                      /* Redlock split vote */
            st = wait_for(op, NULL, 0, now + 1000 +
                          (int64_t)(dl_random_u32() % 10000));
            break;
        }
        pthread_mutex_unlock(&c->mu);
        if (subscribe(c, l, ws, &nws) > 0) {
            pthread_mutex_lock(&c->mu);
            continue;               /* subscribed: retry before waiting */
        }
        uint64_t seen = dl_waiter_count(ws, nws, l->chan, l->chanlen, &nlive);
        pthread_mutex_lock(&c->mu);
        if (seen != op->seen) {             /* released meanwhile */
            c->stats.wakeups++;
            continue;
        }
        int fds[DL_MAX_NODES];
        size_t nfds = dl_waiter_fds(ws, nws, l->chan, l->chanlen, fds);
        int64_t bound = a.pttl_ms > 0 ? a.pttl_ms * 1000 + 1000 : 100000;
        if (nfds == 0 && bound > 100000)    /* no subscriber: nap */
            bound = 100000;
        st = wait_for(op, fds, nfds, now + bound);
        break;
    }
    if (h) {
        tidy(c, h, &unref);
        if (unref != DL_NOREF)
            dl_registry_push_event(&c->reg, unref, NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

dl_status dl_client_acquire(dl_client *c, const dl_lockref *l,
                            dl_acquire_args *args, char *err, size_t errlen)
{
    dl_acquire op;
    memset(&op, 0, sizeof op);
    op.args = *args;
    dl_status st;
    while ((st = dl_client_acquire_step(c, l, &op, err, errlen)) == DL_EWAIT)
        dl_wait_fds(op.fds, op.nfds, op.wake_us);
    *args = op.args;
    return st;
}

dl_status dl_client_release(dl_client *c, const dl_lockref *l,
                            int64_t *remaining, int *unref,
                            char *err, size_t errlen)
{
    dl_status st;
    *unref = DL_NOREF;
    *remaining = 0;
    pthread_mutex_lock(&c->mu);
    dl_hold *h = ready_hold(c, l, 0, &st, err, errlen);
    if (!h || h->count <= 0) {
        if (h)
            tidy(c, h, unref);
        pthread_mutex_unlock(&c->mu);
        return st != DL_OK ? st : dl_fail(err, errlen, DL_ENOTHELD,
                                          "not held");
    }
    if (h->lost) {                          /* each release reports it */
        const char *why = h->lost;
        h->count--;
        tidy(c, h, unref);
        pthread_mutex_unlock(&c->mu);
        return dl_fail(err, errlen, DL_ELOST, "%s", why);
    }
    /* From here the hold is one fewer, whatever Redis answers: a hold
     * whose count reaches 0 is never renewed again. */
    begin_request(c, h, DL_PEND_RELEASE, h->lease_ms, h->deadline_us);
    h->count--;
    h->gen++;
    dl_pending p;
    dl_client_pending_copy(h, &p);
    pthread_mutex_unlock(&c->mu);

    dl_topology_sentinel_news(&c->topo);
    int done;
    int64_t code, left;
    st = dl_client_pending_io(c, 0, &p, &done, &code, &left, err, errlen);

    pthread_mutex_lock(&c->mu);
    h->pend_lua = 0;
    if (done) {
        dl_client_pending_done(c, h, p.seq, code);
        h->finished = 0;
        if (code == 1)
            *remaining = c->topo.kind == DL_TOPO_REDLOCK ? h->count : left;
        else
            st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost ? h->lost
                                                              : LOST_GONE);
    } else {
        leave_to_watchdog(c, h);
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, "; the release is being completed "
                 "in the background");
    }
    tidy(c, h, unref);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* The lock's token as this owner holds it: 0 when not held. */
static int64_t held_token(dl_client *c, const dl_lockref *l,
                          const char **lost)
{
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, l->key, l->keylen, l->owner,
                                  l->ownerlen);
    int64_t tok = h && h->count > 0 ? h->token : 0;
    *lost = h && h->count > 0 ? h->lost : NULL;
    pthread_mutex_unlock(&c->mu);
    return tok;
}

dl_status dl_client_extend(dl_client *c, const dl_lockref *l,
                           int64_t lease_ms, char *err, size_t errlen)
{
    const char *lost;
    int64_t tok = held_token(c, l, &lost);
    if (!tok)
        return dl_fail(err, errlen, DL_ENOTHELD, "not held");
    if (lost)
        return dl_fail(err, errlen, DL_ELOST, "%s", lost);

    char ms_s[24], tok_s[24];
    const char *argv[DL_SCRIPT_HEAD + 4];
    size_t lens[DL_SCRIPT_HEAD + 4];
    argv[3] = l->key;   lens[3] = l->keylen;
    argv[4] = l->owner; lens[4] = l->ownerlen;
    fmt_i64(ms_s, sizeof ms_s, lease_ms, &argv[5], &lens[5]);
    fmt_i64(tok_s, sizeof tok_s, tok, &argv[6], &lens[6]);
    dl_topology_sentinel_news(&c->topo);
    int64_t t0 = dl_now_us();
    int ok;
    dl_status st;
    if (c->topo.kind == DL_TOPO_REDLOCK) {
        st = dl_redlock_extend(c, argv, lens, &ok, err, errlen);
    } else {
        redisReply *r;
        st = dl_topology_eval(&c->topo, &c->scripts, 0, l->key, l->keylen,
                              DL_S_EXTEND, 1, 7, argv, lens, &r, err,
                              errlen);
        if (st == DL_OK) {
            ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
        }
    }
    if (st != DL_OK)
        return st;

    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, l->key, l->keylen, l->owner,
                                  l->ownerlen);
    if (!h || h->count <= 0) {
        st = dl_fail(err, errlen, DL_ENOTHELD, "not held");
    } else if (ok) {
        h->deadline_us = t0 + lease_ms * 1000 - dl_redlock_drift_us(c,
                                                                    lease_ms);
        if (!h->watchdog)
            h->lease_ms = lease_ms;
        h->renew_at_us = t0 + lease_ms * 1000 / 3;
        dl_watchdog_poke(c, h->watchdog ? h->renew_at_us : h->deadline_us);
    } else {
        dl_client_lose(c, h, LOST_GONE);
        st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

dl_status dl_client_ttl(dl_client *c, const dl_lockref *l, int64_t *ttl_ms,
                        char *err, size_t errlen)
{
    dl_topology_sentinel_news(&c->topo);
    const char *argv[DL_SCRIPT_HEAD + 1];
    size_t lens[DL_SCRIPT_HEAD + 1];
    argv[3] = l->key;
    lens[3] = l->keylen;
    if (c->topo.kind == DL_TOPO_REDLOCK)
        return dl_redlock_ttl(c, argv, lens, ttl_ms, err, errlen);
    redisReply *r;
    dl_status st = dl_topology_eval(&c->topo, &c->scripts, 0, l->key,
                                    l->keylen, DL_S_TTL, 1, 4, argv, lens,
                                    &r, err, errlen);
    if (st != DL_OK)
        return st;
    if (r->type == REDIS_REPLY_INTEGER)
        *ttl_ms = r->integer;
    else
        st = dl_fail(err, errlen, DL_EREDIS, "bad TTL reply");
    freeReplyObject(r);
    return st;
}

dl_status dl_client_force_release(dl_client *c, const dl_lockref *l,
                                  int *existed, char *err, size_t errlen)
{
    /* One request id per call, the same on a resend: a resend that finds
     * it recorded answers as the first run did and deletes nothing. */
    char seq_s[24], keep_s[24];
    const char *argv[DL_SCRIPT_HEAD + 6];
    size_t lens[DL_SCRIPT_HEAD + 6];
    argv[3] = l->key;  lens[3] = l->keylen;
    argv[4] = c->id;   lens[4] = strlen(c->id);
    fmt_i64(seq_s, sizeof seq_s, (int64_t)++c->next_seq, &argv[5], &lens[5]);
    fmt_i64(keep_s, sizeof keep_s, c->opts.lease_ms, &argv[6], &lens[6]);
    argv[7] = l->chan; lens[7] = l->chanlen;
    argv[8] = c->pubverb; lens[8] = strlen(c->pubverb);
    dl_topology_sentinel_news(&c->topo);
    if (c->topo.kind == DL_TOPO_REDLOCK)
        return dl_redlock_force(c, argv, lens, existed, err, errlen);
    redisReply *r;
    dl_status st = dl_topology_eval(&c->topo, &c->scripts, 0, l->key,
                                    l->keylen, DL_S_FORCE, 1, 9, argv, lens,
                                    &r, err, errlen);
    if (st != DL_OK)
        return st;
    *existed = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return DL_OK;
}

dl_status dl_client_ping(dl_client *c, char *err, size_t errlen)
{
    const char *argv[1] = { "PING" };
    dl_topology_sentinel_news(&c->topo);
    if (c->topo.kind == DL_TOPO_REDLOCK)
        return dl_redlock_ping(c, argv, err, errlen);
    redisReply *r;
    dl_status st = dl_topology_call(&c->topo, "", 0, 1, argv, NULL, &r, err,
                                    errlen);
    if (st == DL_OK)
        freeReplyObject(r);
    return st;
}

void dl_client_hold_info(dl_client *c, const dl_lockref *l, dl_holdinfo *hi)
{
    memset(hi, 0, sizeof *hi);
    int64_t now = dl_now_us();
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, l->key, l->keylen, l->owner,
                                  l->ownerlen);
    if (h && h->count > 0) {
        hi->lost = h->lost;
        hi->held = !h->lost && now < h->deadline_us;
        hi->watchdog = h->watchdog;
        if (hi->held) {
            hi->count = h->count;
            hi->token = h->token;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* With c->mu held: free the holds the watchdog finished. */
static void sweep(dl_client *c)
{
    dl_hold *h = c->reg.head, *next;
    c->sweep = 0;
    for (; h; h = next) {
        next = h->next;
        if (!h->finished || h->count > 0 || h->pend != DL_PEND_NONE ||
            h->pend_lua)
            continue;
        int unref = DL_NOREF;
        tidy(c, h, &unref);
        if (unref != DL_NOREF)
            dl_registry_push_event(&c->reg, unref, NULL);
    }
}

size_t dl_client_take_events(dl_client *c, dl_event *buf, size_t max)
{
    if (!__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&c->mu);
    if (c->sweep)
        sweep(c);
    size_t n = c->reg.nevents < max ? c->reg.nevents : max;
    if (n > 0) {                        /* events may be NULL: none yet */
        memcpy(buf, c->reg.events, n * sizeof *buf);
        memmove(c->reg.events, c->reg.events + n,
                (c->reg.nevents - n) * sizeof *buf);
        c->reg.nevents -= n;
    }
    if (c->reg.nevents == 0)
        __atomic_store_n(&c->pending, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
    return n;
}

void dl_client_owner_gone(dl_client *c, uint64_t owner_num)
{
    pthread_mutex_lock(&c->mu);
    if (dl_registry_orphan(&c->reg, owner_num) > 0)
        dl_watchdog_poke(c, 0);
    if (c->reg.nevents)
        __atomic_store_n(&c->pending, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
}

void dl_client_stats(dl_client *c, dl_stats *out, size_t *held)
{
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    for (dl_hold *h = c->reg.head; h; h = h->next)
        if (h->watchdog && !h->lost && h->count > 0)
            n++;
    pthread_mutex_unlock(&c->mu);
    *held = n;
}
