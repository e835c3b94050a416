/* SPDX-License-Identifier: MIT
 * conn.c: one blocking hiredis connection (conn.h): connecting and its
 * set-up, timeouts, the reconnect and its backoff, the log of its ups and
 * downs, and the one resend of a command on a link found dead. The only
 * writer of a dl_conn's fields.
 *
 * hiredis rules this file follows: a context that reported an error is
 * unusable and must be freed (we drop it and reconnect on the next call);
 * redisSetTimeout bounds each read/write with SO_RCVTIMEO/SO_SNDTIMEO, so
 * a timed-out command shows up as an I/O error with errno EAGAIN.
 * hiredis connects, formats commands into ctx->obuf and parses replies
 * with ctx->reader; wire.c moves the bytes in between.
 */
#define _GNU_SOURCE
#include "redis/conn.h"
#include "redis/wire.h"

#include <hiredis/sds.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static struct timeval to_tv(int64_t us)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (suseconds_t)(us % 1000000);
    return tv;
}

/* Bound each read and write on c by us (0: none), and a whole reply by
 * about that (get_reply). */
static int set_timeout(dl_conn *c, int64_t us)
{
    c->read_us = us;
    return redisSetTimeout(c->ctx, to_tv(us));
}

/* Tell the log once that c went down (lost) or could not connect. */
static void tell_down(dl_conn *c, const char *how, const char *why)
{
    c->up = 0;
    if (c->down_told)
        return;
    c->down_told = 1;
    dl_log_say(c->log, DL_LOG_WARN, "%s connection %s: %s",
               c->role ? c->role : "a", how, why);
}

static const char *where(const dl_conn *c, char *buf, size_t n)
{
    if (c->ep.path)
        snprintf(buf, n, "%s", c->ep.path);
    else
        snprintf(buf, n, "%s:%d", c->ep.host ? c->ep.host : "?", c->ep.port);
    return buf;
}

int dl_conn_init(dl_conn *c, const dl_endpoint *ep,
                 int64_t connect_timeout_us, int64_t command_timeout_us)
{
    memset(c, 0, sizeof *c);
    c->connect_timeout_us = connect_timeout_us;
    c->command_timeout_us = command_timeout_us;
    return dl_endpoint_copy(&c->ep, ep);
}

void dl_conn_free(dl_conn *c)
{
    c->up = 0;                  /* closing is not losing */
    dl_conn_drop(c);
    dl_endpoint_free(&c->ep);
}

void dl_conn_retarget(dl_conn *c)
{
    dl_conn_drop(c);
    if (c->resolver)
        c->resolve_next = 1;
}

void dl_conn_tell(dl_conn *c, dl_log *log, const char *role)
{
    c->log = log;
    c->role = role;
}

void dl_conn_follow(dl_conn *c, const dl_resolver *r, const uint64_t *moved,
                    int first)
{
    c->resolver = r;
    c->moved = moved;
    c->resolve_next = first;
}

void dl_conn_move_to(dl_conn *c, const char *host, int port)
{
    char *h = strdup(host);
    if (!h) {
        dl_conn_retarget(c);
        return;
    }
    dl_conn_drop(c);
    free(c->ep.host);
    free(c->ep.path);
    c->ep.path = NULL;
    c->ep.host = h;
    c->ep.port = port;
    c->resolve_next = 0;
    c->retry_at_us = c->backoff_us = 0;
}

void dl_conn_note_scripts(dl_conn *c, int fcall)
{
    c->scripts_epoch = c->epoch;
    c->fcall = fcall;
}

int dl_conn_fcall(const dl_conn *c)
{
    return c->fcall;
}

int dl_conn_has_scripts(const dl_conn *c)
{
    return c->scripts_epoch == c->epoch;
}

void dl_conn_drop(dl_conn *c)
{
    if (c->up) {
        char addr[128], why[160];
        snprintf(why, sizeof why, "closed (%s)", where(c, addr, sizeof addr));
        tell_down(c, "dropped", why);
    }
    dl_tls_close(c->tls);
    c->tls = NULL;
    if (c->ctx) {
        redisFree(c->ctx);
        c->ctx = NULL;
    }
}

dl_status dl_conn_error(dl_conn *c, char *err, size_t errlen)
{
    char addr[128];
    const char *what = "connection lost";
    c->stale = 0;
    if (c->ctx && c->ctx->err) {
        int eno = c->eno ? c->eno : errno;
        c->stale = c->ctx->err == REDIS_ERR_EOF ||
                   (c->ctx->err == REDIS_ERR_IO &&
                    (eno == ECONNRESET || eno == EPIPE));
        what = c->ctx->errstr;
        if (c->ctx->err == REDIS_ERR_IO &&
            (eno == EAGAIN || eno == EWOULDBLOCK))
            what = "timed out";
        else if (c->ctx->err == REDIS_ERR_EOF)
            what = "server closed the connection";
        /* TLS 1.3 ends the handshake before the server checks the client's
         * certificate: its refusal (an alert, then a close) may reach us
         * as a reset that discards the alert. */
        if (c->tls && !c->replied && c->stale)
            what = "TLS: the server closed the connection before its first "
                   "reply (does it want a client certificate? tls.cert_file "
                   "and tls.key_file)";
    }
    /* out of reach, but for a refusal told only by a reset (TLS) */
    dl_status st = c->tls && !c->replied && c->stale ? DL_ECONN : DL_EDOWN;
    dl_fail(err, errlen, st, "%s (%s)", what, where(c, addr, sizeof addr));
    if (c->up)
        tell_down(c, "lost", err);
    dl_conn_drop(c);
    return st;
}

/* Whatever is queued, written (wire.h). */
static int send_all(dl_conn *c)
{
    return dl_wire_send(c->ctx, c->tls, &c->eno);
}

/* Read into the reply reader, waiting or not (wire.h). */
static int fill(dl_conn *c, int wait)
{
    return dl_wire_fill(c->ctx, c->tls, wait, &c->eno);
}

/* Read one reply; whatever is queued is sent first, by send_all. Each
 * read waits at most the socket's timeout; the whole reply, too, must
 * come within it (give or take one read), so that a server that drips
 * its reply a byte at a time cannot hold the caller without bound. */
static int get_reply(dl_conn *c, void **r)
{
    *r = NULL;
    if (send_all(c) != REDIS_OK)
        return REDIS_ERR;
    int64_t until = c->read_us > 0 ? dl_now_us() + c->read_us : 0;
    for (;;) {
        if (redisGetReplyFromReader(c->ctx, r) != REDIS_OK)
            return REDIS_ERR;
        if (*r) {
            c->replied = 1;
            return REDIS_OK;
        }
        if (until && dl_now_us() > until) {
            errno = EAGAIN;                 /* told as "timed out" */
            return dl_wire_failed(c->ctx, DL_TLS_EIO, NULL, &c->eno);
        }
        if (fill(c, 1) != REDIS_OK)
            return REDIS_ERR;
    }
}

int dl_conn_pump(dl_conn *c)
{
    return c->ctx && fill(c, 0) == REDIS_OK ? 0 : -1;
}

/* A server that wants credentials refuses every command with NOAUTH (none
 * were sent) or WRONGPASS: that is a connection failure, told with the
 * address, like a failed AUTH. Frees r and drops the link when so. */
static int refused(dl_conn *c, redisReply *r, char *err, size_t errlen)
{
    if (r->type != REDIS_REPLY_ERROR || (strncmp(r->str, "NOAUTH", 6) != 0 &&
                                         strncmp(r->str, "WRONGPASS", 9) != 0))
        return 0;
    char addr[128];
    dl_fail(err, errlen, DL_ECONN, "%s (%s)%s", r->str,
            where(c, addr, sizeof addr), c->ep.password ? "" :
            "; no password was given: connect{ password = ... } or "
            "redis://:password@host");
    freeReplyObject(r);
    tell_down(c, "refused", err);
    dl_conn_drop(c);
    return 1;
}

/* Run a set-up command on a fresh context; any error reply fails, but
 * for a command that may be refused (what == NULL: CLIENT SETNAME, which
 * an ACL may forbid; the name is only for diagnostics). */
static dl_status setup_cmd(dl_conn *c, int argc, const char **argv,
                           const char *what, char *err, size_t errlen)
{
    void *v = NULL;
    if (redisAppendCommandArgv(c->ctx, argc, argv, NULL) != REDIS_OK ||
        get_reply(c, &v) != REDIS_OK || !v)
        return dl_conn_error(c, err, errlen);
    redisReply *r = v;
    dl_status st = DL_OK;
    if (!what && refused(c, r, err, errlen))   /* told plainly, as later */
        return DL_ECONN;
    if (r->type == REDIS_REPLY_ERROR && what) {
        char addr[128];
        st = dl_fail(err, errlen, DL_ECONN, "%s failed: %s (%s)", what,
                     r->str, where(c, addr, sizeof addr));
        dl_conn_drop(c);
    }
    freeReplyObject(r);
    return st;
}

static uint64_t serials;        /* connections made in the process */

/* Remember why a connect failed and, when the attempt cost time (a host
 * that does not answer), back off (bounded) before the next one, so that
 * a dead server costs one timeout, not one per call. A refused connection
 * costs nothing and is tried again at once. */
static dl_status back_off(dl_conn *c, const char *why, dl_status st)
{
    tell_down(c, "failed", why);
    if (c->resolver)
        c->resolve_next = 1;
    if (dl_now_us() - c->attempt_us < 5000)
        return st;
    snprintf(c->why, sizeof c->why, "%s", why);
    c->why_st = st;
    c->backoff_us = c->backoff_us ? c->backoff_us * 2 : DL_BACKOFF_MIN_US;
    if (c->backoff_us > DL_BACKOFF_MAX_US)
        c->backoff_us = DL_BACKOFF_MAX_US;
    c->retry_at_us = dl_now_us() + c->backoff_us;
    return st;
}

static dl_status connect_failed(dl_conn *c, char *err, size_t errlen)
{
    return back_off(c, err, dl_conn_error(c, err, errlen));
}

/* The TLS handshake on a fresh connection, bounded by the connect
 * timeout. */
static dl_status start_tls(dl_conn *c, char *err, size_t errlen)
{
    char addr[128], why[DL_ERRLEN];
    if (!c->ep.tlscfg)          /* connect{} sets it up for every address */
        snprintf(why, sizeof why, "TLS is not set up for this address");
    else if (c->connect_timeout_us > 0 &&
             set_timeout(c, c->connect_timeout_us) != REDIS_OK)
        snprintf(why, sizeof why, "cannot set the socket's timeouts");
    else if ((c->tls = dl_tls_open(c->ep.tlscfg, c->ctx->fd,
                                   c->ep.host, why, sizeof why)))
        return DL_OK;
    dl_fail(err, errlen, DL_ECONN, "%s (%s)", why,
            where(c, addr, sizeof addr));
    dl_conn_drop(c);
    return DL_ECONN;
}

int dl_conn_moved(const dl_conn *c)
{
    return c->moved &&
           __atomic_load_n(c->moved, __ATOMIC_ACQUIRE) != c->moved_seen;
}

/* Open c's socket, not yet set up. */
static dl_status open_socket(dl_conn *c, char *err, size_t errlen)
{
    const dl_endpoint *ep = &c->ep;
    if (!ep->path && !ep->host)
        return dl_fail(err, errlen, DL_ECONN, "no address to connect to");
    struct timeval tv = to_tv(c->connect_timeout_us);
    c->ctx = ep->path ? redisConnectUnixWithTimeout(ep->path, tv)
                      : redisConnectWithTimeout(ep->host, ep->port, tv);
    if (!c->ctx)
        return dl_oom(err, errlen);
    if (c->ctx->err)
        return connect_failed(c, err, errlen);
    c->read_us = c->connect_timeout_us;     /* hiredis set it so */
    int fd = c->ctx->fd, one = 1;
    (void)fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    if (!ep->path)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return DL_OK;
}

/* Who we are, on a fresh connection: AUTH, SELECT, CLIENT SETNAME. */
static dl_status introduce(dl_conn *c, char *err, size_t errlen)
{
    const dl_endpoint *ep = &c->ep;
    dl_status st = DL_OK;
    if (ep->password) {
        const char *argv[3] = { "AUTH", ep->username, ep->password };
        int argc = 3;
        if (!ep->username) {
            argv[1] = ep->password;
            argc = 2;
        }
        st = setup_cmd(c, argc, argv, "AUTH", err, errlen);
    }
    if (st == DL_OK && ep->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", ep->db);
        const char *argv[2] = { "SELECT", db };
        st = setup_cmd(c, 2, argv, "SELECT", err, errlen);
    }
    if (st == DL_OK && ep->name) {          /* who this is, in CLIENT LIST */
        const char *argv[3] = { "CLIENT", "SETNAME", ep->name };
        st = setup_cmd(c, 3, argv, NULL, err, errlen);
    }
    return st;
}

/* Sentinel gave this address: make sure it is a master now (a sentinel
 * that has not caught up may name a demoted one). */
static dl_status check_master(dl_conn *c, char *err, size_t errlen)
{
    void *v = NULL;
    const char *argv[1] = { "ROLE" };
    if (redisAppendCommandArgv(c->ctx, 1, argv, NULL) != REDIS_OK ||
        get_reply(c, &v) != REDIS_OK || !v)
        return dl_conn_error(c, err, errlen);
    redisReply *r = v;
    int master = r->type == REDIS_REPLY_ERROR ||    /* not allowed */
                 (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                  r->element[0]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[0]->str, "master") == 0);
    freeReplyObject(r);
    if (master)
        return DL_OK;
    char addr[128];
    dl_fail(err, errlen, DL_EDOWN, "%s is not a master (ROLE); asking the "
            "sentinels again", where(c, addr, sizeof addr));
    dl_conn_drop(c);
    return DL_EDOWN;
}

/* A fresh socket made ready for commands: TLS, timeouts, introduce, and
 * check_master where a resolver wants one. A failure is backed off. */
static dl_status set_up(dl_conn *c, char *err, size_t errlen)
{
    /* A connection without a command timeout (the subscriber's) still
     * bounds its set-up commands, by the connect timeout. */
    int64_t setup_us = c->command_timeout_us > 0 ? c->command_timeout_us
                                                 : c->connect_timeout_us;
    dl_status st;
    if (c->ep.tls && (st = start_tls(c, err, errlen)) != DL_OK)
        return back_off(c, err, st);
    if (setup_us > 0 && set_timeout(c, setup_us) != REDIS_OK)
        return connect_failed(c, err, errlen);
    if ((st = introduce(c, err, errlen)) != DL_OK ||
        (c->resolver && c->resolver->master_only &&
         (st = check_master(c, err, errlen)) != DL_OK))
        return back_off(c, err, st);
    if (c->command_timeout_us == 0 && setup_us > 0 &&
        set_timeout(c, 0) != REDIS_OK)
        return connect_failed(c, err, errlen);
    return DL_OK;
}

/* c is connected and set up: count it, and tell the log it is back. */
static void came_up(dl_conn *c)
{
    c->backoff_us = 0;
    c->retry_at_us = 0;
    c->epoch++;
    c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    if (c->down_told || c->epoch > 1) {
        char addr[128];
        dl_log_say(c->log, DL_LOG_INFO, "%s connection to %s %sconnected",
                   c->role ? c->role : "a", where(c, addr, sizeof addr),
                   c->epoch > 1 ? "re" : "");
    }
    c->down_told = 0;
    c->up = 1;
}

dl_status dl_conn_ensure(dl_conn *c, char *err, size_t errlen)
{
    /* Another address now: go there, but only between calls, never with
     * a command queued or a reply half read (a pipeline in progress). */
    if (dl_conn_moved(c) &&
        (!c->ctx || (sdslen(c->ctx->obuf) == 0 &&
                     c->ctx->reader->pos == c->ctx->reader->len))) {
        dl_conn_retarget(c);
        c->moved_seen = __atomic_load_n(c->moved, __ATOMIC_ACQUIRE);
        c->retry_at_us = c->backoff_us = 0;
    }
    if (c->ctx)
        return DL_OK;
    if (c->retry_at_us && dl_now_us() < c->retry_at_us)
        return dl_fail(err, errlen, c->why_st, "%s (retrying in %lld ms)",
                       c->why, (long long)((c->retry_at_us - dl_now_us())
                                           / 1000 + 1));
    c->attempt_us = dl_now_us();
    c->eno = 0;
    c->replied = 0;
    if (c->resolve_next && c->resolver) {
        dl_endpoint ep;
        if (c->resolver->resolve(c->resolver->ud, &ep, err, errlen) != 0)
            return back_off(c, err, DL_EDOWN);
        dl_endpoint_free(&c->ep);
        c->ep = ep;
        c->resolve_next = 0;
    }
    dl_status st;
    if ((st = open_socket(c, err, errlen)) != DL_OK ||
        (st = set_up(c, err, errlen)) != DL_OK)
        return st;
    came_up(c);
    return DL_OK;
}

dl_status dl_conn_flush(dl_conn *c, char *err, size_t errlen)
{
    if (!c->ctx)
        return dl_fail(err, errlen, DL_EDOWN, "connection lost");
    if (send_all(c) != REDIS_OK)
        return dl_conn_error(c, err, errlen);
    return DL_OK;
}

void dl_conn_read_timeout(dl_conn *c, int64_t us)
{
    if (!c->ctx)
        return;
    if (us <= 0)
        us = c->command_timeout_us;
    if (us > 0)
        (void)set_timeout(c, us);
}

dl_status dl_conn_append(dl_conn *c, int argc, const char **argv,
                         const size_t *lens, char *err, size_t errlen)
{
    dl_status st = dl_conn_ensure(c, err, errlen);
    if (st != DL_OK)
        return st;
    if (dl_wire_append(c->ctx, argc, argv, lens) != 0) {
        /* What was queued before it would answer as this one's: gone. */
        dl_conn_drop(c);
        return dl_oom(err, errlen);
    }
    return DL_OK;
}

dl_status dl_conn_read(dl_conn *c, redisReply **out, char *err, size_t errlen)
{
    void *r = NULL;
    *out = NULL;
    if (!c->ctx)
        return dl_fail(err, errlen, DL_EDOWN, "connection lost");
    if (get_reply(c, &r) != REDIS_OK || !r)
        return dl_conn_error(c, err, errlen);
    if (refused(c, r, err, errlen))
        return DL_ECONN;
    *out = r;
    return DL_OK;
}

/* Write lead (if any) and the command, read the command's reply. */
static dl_status send_read(dl_conn *c, const char *lead, int argc,
                           const char **argv, const size_t *lens,
                           redisReply **out, char *err, size_t errlen)
{
    redisReply *r;
    dl_status st;
    if (lead && (st = dl_conn_append(c, 1, &lead, NULL, err, errlen)) != DL_OK)
        return st;
    if ((st = dl_conn_append(c, argc, argv, lens, err, errlen)) != DL_OK)
        return st;
    if (lead) {
        if ((st = dl_conn_read(c, &r, err, errlen)) != DL_OK)
            return st;
        freeReplyObject(r);
    }
    return dl_conn_read(c, out, err, errlen);
}

dl_status dl_conn_call(dl_conn *c, int argc, const char **argv,
                       const size_t *lens, redisReply **out,
                       char *err, size_t errlen)
{
    return dl_conn_call_led(c, NULL, argc, argv, lens, out, err, errlen);
}

dl_status dl_conn_call_led(dl_conn *c, const char *lead, int argc,
                           const char **argv, const size_t *lens,
                           redisReply **out, char *err, size_t errlen)
{
    *out = NULL;
    int reused = c->ctx != NULL;
    dl_status st = send_read(c, lead, argc, argv, lens, out, err, errlen);
    if (st == DL_OK) {
        if ((*out)->type != REDIS_REPLY_ERROR || !c->resolver ||
            !c->resolver->master_only ||
            strncmp((*out)->str, "READONLY", 8) != 0)
            return DL_OK;
        /* Sentinel: the master was demoted. Find the new one, resend. */
        freeReplyObject(*out);
        *out = NULL;
        dl_conn_retarget(c);
    } else if (!reused || !c->stale) {
        return st;
    }
    return send_read(c, lead, argc, argv, lens, out, err, errlen);
}
