/* SPDX-License-Identifier: MIT
 * sentinel.c: finding the master through Sentinel (sentinel.h): the
 * resolver the master's connections ask, the +switch-master news the Lua
 * thread reads as each operation begins, and the watchdog's probe beside
 * its renewals. It knows no node: it moves the connections it was given.
 */
#define _GNU_SOURCE
#include "redis/sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWITCH_MASTER "+switch-master"

/* The host (copied) and port of a GET-MASTER-ADDR-BY-NAME reply: 0, or
 * -1 when it names none (an unknown master) or out of memory. */
static int master_addr(const redisReply *r, char **host, int *port)
{
    *host = NULL;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    *port = atoi(r->element[1]->str);
    *host = *port > 0 ? strdup(r->element[0]->str) : NULL;
    return *host ? 0 : -1;
}

/* Ask sentinel i where the master is, on a connection of its own: 0 with
 * *host (the caller frees it) and *port; -1 with err; -2 out of memory. */
static int ask(const dl_sentinel *s, size_t i, char **host, int *port,
               char *err, size_t errlen)
{
    dl_conn sc;
    redisReply *r;
    *host = NULL;
    if (dl_conn_init(&sc, &s->o.at[i], s->o.connect_timeout_us,
                     s->o.command_timeout_us) != 0)
        return -2;
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            s->o.master };
    if (dl_conn_call(&sc, 3, argv, NULL, &r, err, errlen) == DL_OK) {
        if (master_addr(r, host, port) != 0)
            snprintf(err, errlen, "sentinel %s:%d does not know master "
                     "'%s'", s->o.at[i].host ? s->o.at[i].host : "?",
                     s->o.at[i].port, s->o.master);
        freeReplyObject(r);
    }
    dl_conn_free(&sc);
    return *host ? 0 : -1;
}

/* The resolver of the master's connections: ask each sentinel in turn,
 * from the one that answered last (a hung one costs a timeout once). */
static int sentinel_resolve(void *ud, dl_endpoint *out, char *err,
                            size_t errlen)
{
    dl_sentinel *s = ud;
    char last[DL_ERRLEN] = "no sentinel answered";
    memset(out, 0, sizeof *out);
    size_t first = __atomic_load_n(&s->answered, __ATOMIC_RELAXED);
    for (size_t k = 0; k < s->o.n; k++) {
        size_t i = (first + k) % s->o.n;
        char *host;
        int port;
        int no = ask(s, i, &host, &port, last, sizeof last);
        if (no == -2)
            break;
        if (no)
            continue;
        if (dl_endpoint_copy(out, s->o.tmpl) != 0) {
            free(host);
            continue;
        }
        free(out->host);
        free(out->path);
        out->path = NULL;
        out->host = host;
        out->port = port;
        dl_log_say(s->o.log, DL_LOG_INFO, "sentinel %s:%d: master '%s' is "
                   "at %s:%d", s->o.at[i].host ? s->o.at[i].host : "?",
                   s->o.at[i].port, s->o.master, host, port);
        __atomic_store_n(&s->answered, i, __ATOMIC_RELAXED);
        return 0;
    }
    dl_fail(err, errlen, DL_ECONN, "%s", last);
    return -1;
}

/* c asks the sentinels before its first connect, and before each one
 * after a failure. */
static void follow_master(dl_sentinel *s, dl_conn *c)
{
    dl_conn_follow(c, &s->resolver, NULL, 1);
}

void dl_sentinel_init(dl_sentinel *s, const dl_sentinel_opts *o)
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->resolver.resolve = sentinel_resolve;
    s->resolver.ud = s;
    s->resolver.master_only = 1;
    if (!o->cmd || !o->sub || !o->wd)
        return;
    follow_master(s, o->cmd);
    follow_master(s, &o->sub->conn);
    follow_master(s, o->wd);
}

void dl_sentinel_free(dl_sentinel *s)
{
    if (s->news_init)
        dl_waiter_free(&s->news);
    if (s->probe_init)
        dl_conn_free(&s->probe);
    for (size_t i = 0; i < s->o.n; i++)
        dl_endpoint_free(&s->o.at[i]);
    free(s->o.at);
    free(s->o.master);
    memset(s, 0, sizeof *s);
}

/* ---- the Lua thread's news ------------------------------------------ */

/* Whether c is set to host:port (a resolved address). */
static int conn_at(const dl_conn *c, const char *host, int port)
{
    return c->ep.host && !c->ep.path && c->ep.port == port &&
           strcmp(c->ep.host, host) == 0;
}

/* Lua thread: the master's command and subscriber connections ask the
 * sentinels again before their next use, and the watchdog's too when
 * wd. */
static void lua_retarget(dl_sentinel *s, int wd)
{
    dl_conn_retarget(s->o.cmd);
    dl_waiter_free(s->o.sub);           /* its subscriptions go with it */
    if (dl_waiter_init(s->o.sub, s->o.tmpl, s->o.connect_timeout_us, 0) == 0) {
        follow_master(s, &s->o.sub->conn);
        dl_conn_tell(&s->o.sub->conn, s->o.log, "subscriber");
    }
    if (!wd)
        return;
    dl_log_say(s->o.log, DL_LOG_INFO, "failover: the sentinels announced "
               "a new master for '%s'; reconnecting", s->o.master);
    __atomic_store_n(&s->wd_retarget, 1, __ATOMIC_RELEASE);
}

/* Lua thread, on a new subscription: a failover announced while there was
 * none was not heard. Ask the sentinel now listened to where the master
 * is; if the command connection is elsewhere, send every connection to
 * the sentinels again. */
static void news_missed(dl_sentinel *s)
{
    char err[DL_ERRLEN], *host;
    int port = 0;
    if (s->o.cmd->resolve_next || !s->o.cmd->ep.host)
        return;                         /* it asks before connecting */
    if (ask(s, s->news_from, &host, &port, err, sizeof err) != 0)
        return;
    if (!conn_at(s->o.cmd, host, port))
        lua_retarget(s, 1);
    free(host);
}

/* Lua thread: the news waiter, subscribed; 0, or -1 when not now. A
 * broken one starts again on the next sentinel (the first time, on the
 * first). */
static int news_listen(dl_sentinel *s)
{
    char err[DL_ERRLEN];
    size_t len = sizeof SWITCH_MASTER - 1;
    dl_waiter *w = &s->news;
    if (!s->news_init || s->news_dead ||
        (!w->conn.ctx && !w->conn.retry_at_us)) {
        if (s->news_init) {
            dl_waiter_free(w);
            s->news_from = (s->news_from + 1) % s->o.n;
        }
        s->news_dead = 0;
        s->news_init = dl_waiter_init(w, &s->o.at[s->news_from],
                                      s->o.connect_timeout_us, 0) == 0;
        if (!s->news_init)
            return -1;
    }
    if (dl_waiter_subscribed(w, SWITCH_MASTER, len))
        return 0;
    if (dl_waiter_subscribe(w, SWITCH_MASTER, len, err, sizeof err) != DL_OK)
        return -1;
    s->news_seen = 0;                   /* a new subscription counts anew */
    news_missed(s);
    return 0;
}

void dl_sentinel_news(dl_sentinel *s)
{
    if (s->o.n == 0)
        return;
    if (__atomic_exchange_n(&s->lua_retarget, 0, __ATOMIC_ACQ_REL))
        lua_retarget(s, 0);             /* the watchdog found a new master */
    if (news_listen(s) != 0)
        return;
    /* What the socket holds is read first: a notice (and the answer to
     * the last PING) that came while the client was idle is there. */
    size_t live;
    dl_waiter *w = &s->news;
    uint64_t seen = dl_waiter_count(&w, 1, SWITCH_MASTER,
                                    sizeof SWITCH_MASTER - 1, &live);
    if (!live)
        return;                         /* broken: the next sentinel next */
    if (seen != s->news_seen) {
        s->news_seen = seen;
        lua_retarget(s, 1);
    }
    /* A sentinel that hangs (rather than closing) would keep us deaf to
     * failovers: one that answers no PING within 2 s is left for the next. */
    if (dl_waiter_alive(w, 500000, 2000000 + s->o.connect_timeout_us,
                        &s->news_ping_us) != 0)
        s->news_dead = 1;
}

/* ---- the watchdog's probe ------------------------------------------- */

static void probe_next(dl_sentinel *s)
{
    if (s->probe_init)
        dl_conn_free(&s->probe);
    s->probe_init = 0;
    s->probe_from = (s->probe_from + 1) % s->o.n;
}

static int probe_open(dl_sentinel *s)
{
    if (s->probe_init)
        return 0;
    int64_t ct = s->o.wd_timeout_us < s->o.connect_timeout_us
                     ? s->o.wd_timeout_us : s->o.connect_timeout_us;
    if (dl_conn_init(&s->probe, &s->o.at[s->probe_from], ct,
                     s->o.wd_timeout_us) != 0)
        return -1;
    s->probe_init = 1;
    return 0;
}

void dl_sentinel_wd_resolve(dl_sentinel *s)
{
    char err[DL_ERRLEN];
    if (s->o.n > 0 && !s->o.wd->ep.host && !s->o.wd->ep.path)
        (void)dl_conn_ensure(s->o.wd, err, sizeof err);
}

void dl_sentinel_wd_follow(dl_sentinel *s)
{
    if (__atomic_exchange_n(&s->wd_retarget, 0, __ATOMIC_ACQ_REL))
        dl_conn_retarget(s->o.wd);
}

int dl_sentinel_probe_send(dl_sentinel *s)
{
    char err[DL_ERRLEN];
    if (s->o.n == 0)
        return 0;
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                            s->o.master };
    int64_t until = dl_now_us() + s->o.wd_timeout_us;
    /* Each sentinel once at most, within the watchdog's timeout; a link
     * found dead on writing is replaced once on the same sentinel. */
    for (size_t k = 0; k < s->o.n; k++) {
        for (int again = 0; again < 2; again++) {
            if (probe_open(s) != 0)
                return 0;
            int reused = s->probe.ctx != NULL;
            if (dl_conn_append(&s->probe, 3, argv, NULL, err, sizeof err)
                    == DL_OK &&
                dl_conn_flush(&s->probe, err, sizeof err) == DL_OK)
                return 1;
            if (!reused)
                break;
        }
        probe_next(s);
        if (dl_now_us() >= until)
            break;
    }
    return 0;
}

/* The probe's answer: the master's host (the caller frees it) and port,
 * or NULL. */
static char *probe_answer(dl_sentinel *s, int64_t until_us, int *port)
{
    char err[DL_ERRLEN], *host = NULL;
    dl_conn *pc = &s->probe;
    redisReply *r = NULL;
    int64_t left = until_us - dl_now_us();
    /* The answer came beside the renewals: it is there by now, unless
     * the sentinel is slow. */
    dl_conn_read_timeout(pc, left > 1000 ? left : 1000);
    dl_status st = dl_conn_read(pc, &r, err, sizeof err);
    dl_conn_read_timeout(pc, 0);
    if (st != DL_OK && pc->stale) {     /* closed while idle: once more */
        const char *argv[3] = { "SENTINEL", "get-master-addr-by-name",
                                s->o.master };
        st = dl_conn_call(pc, 3, argv, NULL, &r, err, sizeof err);
    }
    if (st == DL_OK) {
        (void)master_addr(r, &host, port);
        freeReplyObject(r);
    }
    return host;
}

int dl_sentinel_probe_check(dl_sentinel *s, int sent, int64_t until_us)
{
    if (s->o.n == 0)
        return DL_PROBE_SAME;
    if (!sent)
        return DL_PROBE_UNKNOWN;
    int port = 0;
    char *host = probe_answer(s, until_us, &port);
    if (!host) {                        /* no answer, or none usable */
        probe_next(s);
        return DL_PROBE_UNKNOWN;
    }
    if (conn_at(s->o.wd, host, port)) {
        free(host);
        return DL_PROBE_SAME;
    }
    /* The sentinel names another master: the watchdog's connection goes
     * there (to the address this sentinel gave, checked with ROLE on
     * connecting), and the Lua thread's asks again before its next use. */
    const dl_endpoint *at = &s->o.at[s->probe_from];
    dl_log_say(s->o.log, DL_LOG_INFO, "sentinel %s:%d: master '%s' is at "
               "%s:%d", at->host ? at->host : "?", at->port, s->o.master,
               host, port);
    dl_conn_move_to(s->o.wd, host, port);
    free(host);
    __atomic_store_n(&s->lua_retarget, 1, __ATOMIC_RELEASE);
    return DL_PROBE_MOVED;
}
