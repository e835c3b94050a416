/* SPDX-License-Identifier: MIT
 * client.c: a client's life: opening it, closing it, releasing its holds
 * at process exit (and after a fork, freeing only); the calls that touch
 * no hold (ttl, available, force_release, ping); and what the Lua thread
 * takes or reads of it (notices, log messages, hold info, stats, holds
 * held long, a collected coroutine's holds).
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "core/pending.h"
#include "redis/exec.h"
#include "core/watchdog.h"

#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


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

/* P"forced", where the clients of prefix P hear of forced releases. */
static char *notice_channel(dl_client *c)
{
    size_t n = c->opts.prefixlen + sizeof "forced";
    char *s = malloc(n);
    if (s) {
        memcpy(s, c->opts.prefix, c->opts.prefixlen);
        memcpy(s + c->opts.prefixlen, "forced", sizeof "forced");
        c->noticelen = n - 1;
    }
    return s;
}

int dl_client_evictable(const dl_client *c)
{
    return c->evictable;
}

int dl_client_fans_out(const dl_client *c)
{
    return dl_exec_fans_out(&c->topo);
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
        if (dl_state_same_process(c) &&
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

/* The CLIENT SETNAME of every connection of client id (client.h); NULL
 * when out of memory. Redis wants a name without spaces or other bytes
 * outside '!'..'~': those, and '%', are %XX-escaped. */
static char *client_name(const char *id, const char *label, size_t len)
{
    size_t n = strlen(DL_CLIENT_NAME_PREFIX) + strlen(id) + 1 + 3 * len + 1;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    p += snprintf(p, n, DL_CLIENT_NAME_PREFIX "%s:", id);
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

/* Every connection names itself (client_name), the
 * label by default "<host name>:<pid>". 0, or -1 out of memory. */
static int name_endpoints(dl_client *c)
{
    char dflt[300], host[256] = "";
    const char *label = c->opts.label;
    if (!label) {
        if (gethostname(host, sizeof host - 1) != 0)
            snprintf(host, sizeof host, "?");
        snprintf(dflt, sizeof dflt, "%s:%ld", host, (long)getpid());
        label = dflt;
    }
    char *name = client_name(c->id, label, strlen(label));
    if (!name)
        return -1;
    int bad = 0;
    for (size_t i = 0; i < c->opts.neps; i++)
        bad |= !(c->opts.eps[i].name = strdup(name));
    bad |= !(c->opts.tmpl.name = strdup(name));
    free(name);
    return bad ? -1 : 0;
}

dl_status dl_client_open(dl_client **out, dl_client_opts *opts,
                         char *err, size_t errlen)
{
    *out = NULL;
    dl_client *c = calloc(1, sizeof *c);
    if (!c) {
        dl_state_opts_free(opts);
        return dl_oom(err, errlen);
    }
    c->opts = *opts;
    memset(opts, 0, sizeof *opts);
    c->pid = getpid();
    c->opener = pthread_self();
    pthread_mutex_init(&c->mu, NULL);
    dl_log_init(&c->log, c->opts.log);
    /* A renewal must come back well within the lease it protects. */
    int64_t third = c->opts.lease_ms * 1000 / 3;
    int64_t cmd = c->opts.command_timeout_us;
    dl_status st = DL_OK;
    if (dl_random_hex(c->id, DL_ID_BYTES) != 0)
        st = dl_fail(err, errlen, DL_ECONN, "no randomness for the client id");
    else if (name_endpoints(c) != 0 || !(c->notice = notice_channel(c)))
        st = dl_oom(err, errlen);
    if (st != DL_OK) {
        free(c->notice);
        dl_state_opts_free(&c->opts);
        pthread_mutex_destroy(&c->mu);
        dl_log_free(&c->log);
        free(c);
        return st;
    }
    int unverified = dl_tls_config_unverified(c->opts.tmpl.tlscfg);
    for (size_t i = 0; i < c->opts.neps; i++)
        unverified |= dl_tls_config_unverified(c->opts.eps[i].tlscfg);
    if (unverified)                     /* once per client */
        dl_log_say(&c->log, DL_LOG_WARN, "tls.verify = false: the servers' "
                   "certificates are not checked, so anyone on the path "
                   "can pose as a server (for tests only)");
    dl_topology_opts to = {
        .kind = c->opts.topo, .mu = &c->mu, .eps = c->opts.eps,
        .neps = c->opts.neps, .master = c->opts.master, .tmpl = &c->opts.tmpl,
        .connect_timeout_us = c->opts.connect_timeout_us,
        .command_timeout_us = cmd,
        .wd_timeout_us = cmd > 0 && cmd < third ? cmd : third, .log = &c->log
    };
    st = dl_topology_init(&c->topo, &to, err, errlen);
    c->pubverb = dl_exec_publish_verb(&c->topo);
    c->opts.eps = NULL;
    c->opts.neps = 0;
    c->opts.master = NULL;
    if (st == DL_OK && dl_registry_init(&c->reg) != 0)
        st = dl_oom(err, errlen);
    c->scripts.functions = c->opts.functions;
    if (st == DL_OK)
        st = dl_exec_load_scripts(&c->topo, &c->scripts, err, errlen);
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
 * waiters where a lock becomes free: every DROP pipelined, one round
 * trip (out of memory: none; their leases run out). */
static void release_all(dl_client *c)
{
    dl_hold *h;
    size_t n = 0;
    for (DL_REGISTRY_EACH(&c->reg, i, h)) {
        dl_pending_end(c, 0, h);     /* end it first */
        n++;
    }
    for (h = c->reg.orphans; h; h = h->onext) {
        dl_pending_end(c, 0, h);
        n++;
    }
    dl_batch b;
    memset(&b, 0, sizeof b);
    b.ops = malloc((n ? n : 1) * sizeof *b.ops);
    b.tallies = malloc((n ? n : 1) * sizeof *b.tallies);
    dl_lockref l;
    if (b.ops && b.tallies) {
        for (DL_REGISTRY_EACH(&c->reg, i, h))
            b.n += (size_t)dl_state_drop_op(c, h, &l, &b.ops[b.n]);
        for (h = c->reg.orphans; h; h = h->onext)
            b.n += (size_t)dl_state_drop_op(c, h, &l, &b.ops[b.n]);
    }
    if (b.n)
        (void)dl_batch_run(&c->topo, &c->scripts, 0, &b);
    dl_batch_free(&b);
    free(b.ops);
    free(b.tallies);
}

void dl_client_close(dl_client *c)
{
    if (!c)
        return;
    leave_live(c);
    int same = dl_state_same_process(c);
    if (same) {
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
    dl_state_opts_free(&c->opts);
    free(c->notice);
    if (same)                   /* a child's copy may be locked: as mu */
        dl_log_free(&c->log);
    free(c);
}

/* Run op, built from the caller's arguments alone, at an entry point. */
static dl_status run(dl_client *c, dl_op *op, dl_result *res, char *err,
                     size_t errlen)
{
    dl_client_enter(c);
    return dl_exec(&c->topo, &c->scripts, op, res, err, errlen);
}

dl_status dl_client_ttl(dl_client *c, const dl_lockref *l, int64_t *ttl_ms,
                        char *err, size_t errlen)
{
    dl_op op;
    dl_result res;
    dl_op_ttl(&op, l);
    dl_status st = run(c, &op, &res, err, errlen);
    if (st == DL_OK)
        *ttl_ms = res.kind != DL_V_YES ? -2 : res.x == INT64_MAX ? -1
                                                                : res.x;
    return st;
}

dl_status dl_client_available(dl_client *c, const dl_lockref *l,
                              int64_t *free_n, char *err, size_t errlen)
{
    dl_op op;
    dl_result res;
    dl_op_free(&op, l);
    dl_status st = run(c, &op, &res, err, errlen);
    if (st == DL_OK && (res.x < 0 || res.x > l->permits))
        st = dl_fail(err, errlen, DL_EREDIS, "unexpected available reply");
    *free_n = st == DL_OK ? res.x : 0;
    return st;
}

dl_status dl_client_force_release(dl_client *c, const dl_lockref *l,
                                  int *existed, char *err, size_t errlen)
{
    /* One request id per call, the same on a resend: a resend that finds
     * it recorded answers as the first run did and deletes nothing. */
    dl_op op;
    dl_result res;
    dl_op_force(&op, l, c->id, __atomic_add_fetch(&c->next_seq, 1,
                                                  __ATOMIC_RELAXED),
                c->opts.lease_ms, c->pubverb, c->notice);
    dl_status st = run(c, &op, &res, err, errlen);
    *existed = st == DL_OK && res.yes > 0;
    return st;
}

dl_status dl_client_ping(dl_client *c, char *err, size_t errlen)
{
    dl_op op;
    dl_result res;
    dl_op_ping(&op);
    return run(c, &op, &res, err, errlen);
}

void dl_client_warn(dl_client *c, const char *msg)
{
    dl_log_say(&c->log, DL_LOG_WARN, "%s", msg);
}

size_t dl_client_take_log(dl_client *c, dl_log_msg *buf, size_t max)
{
    return dl_log_take(&c->log, buf, max);
}

void dl_client_hold_info(dl_client *c, const dl_lockref *l, dl_holdinfo *hi)
{
    memset(hi, 0, sizeof *hi);
    int64_t now = dl_now_us();
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
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
    dl_hold *h;
    c->sweep = 0;
    for (DL_REGISTRY_EACH(&c->reg, i, h)) {
        if (!h->finished || h->count > 0 || h->pend != DL_PEND_NONE ||
            h->pend_lua)
            continue;
        int unref = DL_NOREF;
        dl_state_tidy(c, h, &unref);
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

char **dl_client_held_long(dl_client *c, size_t *n)
{
    int64_t warn_us = c->opts.warn_hold_ms * 1000, now = dl_now_us();
    size_t k = 0, bytes = 0, len;
    char **out = NULL;
    *n = 0;
    if (warn_us <= 0)
        return NULL;
    pthread_mutex_lock(&c->mu);
    for (int pass = 0; pass < 2; pass++) {
        char *p = out ? (char *)(out + k) : NULL;
        k = 0;
        dl_hold *h;
        for (DL_REGISTRY_EACH(&c->reg, i, h)) {
            if (h->lost || h->count <= 0 || now - h->acquired_us < warn_us)
                continue;
            const char *name = dl_lockid_name(&h->ident, c->opts.prefixlen,
                                              &len);
            if (p) {
                memcpy(p, name, len);
                p[len] = '\0';
                out[k] = p;
                p += len + 1;
            }
            bytes += len + 1;
            k++;
        }
        if (!pass && (k == 0 || !(out = malloc(k * sizeof *out + bytes))))
            break;
    }
    pthread_mutex_unlock(&c->mu);
    *n = out ? k : 0;
    return out;
}

void dl_client_stats(dl_client *c, dl_stats *out, size_t *held)
{
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    dl_hold *h;
    for (DL_REGISTRY_EACH(&c->reg, i, h))
        if (h->watchdog && !h->lost && h->count > 0)
            n++;
    pthread_mutex_unlock(&c->mu);
    *held = n;
}
