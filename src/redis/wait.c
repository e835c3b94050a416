/* SPDX-License-Identifier: MIT
 * wait.c: the subscriber connection.
 *
 * DESIGN. A waiter must never miss the release it waits for, yet expiry
 * publishes nothing. So the client (1) subscribes and waits for the
 * confirmation, (2) counts the messages on the channel and retries the
 * acquire, and only then (3) waits, bounded by the holder's remaining TTL
 * and the caller's wait, and retries when the count has grown. Messages
 * for any cached channel are counted as they are read, by whichever
 * acquire reads them, so one that arrives between a failed try and the
 * wait still wakes the waiter, and every coroutine waiting on one channel
 * sees it. Besides the SUBSCRIBE round trip, only dl_wait_fds (util.c)
 * blocks: the waiting itself may be a poll() or a yield to the caller's
 * event loop (client.h). hiredis is used only as a reply parser here: poll() says
 * when to read, then dl_conn_pump/redisGetReplyFromReader consume what is
 * there.
 */
#include "redis/wait.h"

#include <sys/socket.h>

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

int dl_waiter_init(dl_waiter *w, const dl_endpoint *ep,
                   int64_t connect_timeout_us, int sharded)
{
    memset(w, 0, sizeof *w);
    w->sharded = sharded;
    /* No socket timeout: every read here follows a poll() that said so. */
    return dl_conn_init(&w->conn, ep, connect_timeout_us, 0);
}

static void forget_all(dl_waiter *w)
{
    for (int i = 0; i < w->nsubs; i++)
        free(w->subs[i].chan);
    w->nsubs = 0;
}

void dl_waiter_free(dl_waiter *w)
{
    forget_all(w);
    dl_conn_free(&w->conn);
}

static dl_sub *find(dl_waiter *w, const char *chan, size_t len)
{
    for (int i = 0; i < w->nsubs; i++)
        if (w->subs[i].len == len && memcmp(w->subs[i].chan, chan, len) == 0)
            return &w->subs[i];
    return NULL;
}

int dl_waiter_subscribed(dl_waiter *w, const char *chan, size_t len)
{
    return w->conn.ctx && !dl_conn_moved(&w->conn) &&
           find(w, chan, len) != NULL;
}

static int is(const redisReply *e, const char *word)
{
    size_t n = strlen(word);
    return e->type == REDIS_REPLY_STRING && e->len == n &&
           memcmp(e->str, word, n) == 0;
}

/* Count a message on s, and keep its text if it is short. */
static void note(dl_sub *s, const redisReply *r)
{
    s->note_us[s->count % DL_WAIT_NOTES] = dl_now_us();
    char *at = s->notes[s->count++ % DL_WAIT_NOTES];
    const redisReply *m = r->elements >= 3 ? r->element[2] : NULL;
    at[0] = '\0';
    if (m && m->type == REDIS_REPLY_STRING && m->len < DL_WAIT_NOTE_LEN) {
        memcpy(at, m->str, m->len);
        at[m->len] = '\0';
    }
}

/* Consume every complete reply already read. Returns 1 if the
 * subscription to (chan, len) was confirmed among them, -1 on a protocol
 * error, else 0. */
static int drain(dl_waiter *w, const char *chan, size_t len)
{
    int confirmed = 0;
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(w->conn.ctx, &v) != REDIS_OK)
            return -1;
        if (!v)
            return confirmed;
        w->rx_us = dl_now_us();
        redisReply *r = v;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            redisReply *kind = r->element[0], *name = r->element[1];
            if (is(kind, "message") || is(kind, "smessage")) {
                dl_sub *s = find(w, name->str, name->len);
                if (s)
                    note(s, r);
            } else if ((is(kind, "subscribe") || is(kind, "ssubscribe")) &&
                       chan && name->len == len &&
                       memcmp(name->str, chan, len) == 0) {
                confirmed = 1;
            }
        }
        freeReplyObject(r);
    }
}


static void broken(dl_waiter *w)
{
    forget_all(w);
    /* Shut down, not only closed: an event loop may watch a copy of the
     * socket (dlock/sched.lua), which then turns readable and wakes its
     * waits. (Only here, where this process decides the link is dead: a
     * forked child's close must leave its parent's sockets alone.) */
    if (w->conn.ctx && w->conn.ctx->fd >= 0)
        (void)shutdown(w->conn.ctx->fd, SHUT_RDWR);
    if (w->conn.ctx && w->conn.ctx->err) {   /* lost: say why, and drop */
        char err[DL_ERRLEN];
        dl_conn_error(&w->conn, err, sizeof err);
    } else {
        dl_conn_drop(&w->conn);
    }
}

static void evict_lru(dl_waiter *w)
{
    int lru = 0;
    for (int i = 1; i < w->nsubs; i++)
        if (w->subs[i].used < w->subs[lru].used)
            lru = i;
    const char *argv[2] = { w->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE",
                            w->subs[lru].chan };
    size_t lens[2] = { strlen(argv[0]), w->subs[lru].len };
    /* The reply is drained with the other traffic; nothing waits for it. */
    (void)redisAppendCommandArgv(w->conn.ctx, 2, argv, lens);
    free(w->subs[lru].chan);
    w->subs[lru] = w->subs[--w->nsubs];
}

dl_status dl_waiter_subscribe(dl_waiter *w, const char *chan, size_t len,
                              char *err, size_t errlen)
{
    if (dl_waiter_subscribed(w, chan, len))
        return DL_OK;
    uint64_t epoch = w->conn.epoch;
    if (dl_conn_ensure(&w->conn, err, errlen) != DL_OK) {
        forget_all(w);
        return DL_ECONN;
    }
    if (w->conn.epoch != epoch)         /* a new connection: none of the */
        forget_all(w);                  /* old subscriptions are on it  */
    if (w->nsubs == DL_WAIT_MAX_SUBS)
        evict_lru(w);
    char *copy = malloc(len + 1);
    if (!copy)
        return dl_oom(err, errlen);
    memcpy(copy, chan, len);
    copy[len] = '\0';
    const char *argv[2] = { w->sharded ? "SSUBSCRIBE" : "SUBSCRIBE", chan };
    size_t lens[2] = { strlen(argv[0]), len };
    if (redisAppendCommandArgv(w->conn.ctx, 2, argv, lens) != REDIS_OK ||
        dl_conn_flush(&w->conn, err, errlen) != DL_OK) {
        free(copy);
        broken(w);
        return DL_ECONN;
    }
    dl_sub *s = &w->subs[w->nsubs++];
    s->chan = copy;
    s->len = len;
    s->count = 0;
    memset(s->notes, 0, sizeof s->notes);
    s->used = ++w->tick;
    int64_t bound = w->conn.connect_timeout_us > 0 ? w->conn.connect_timeout_us
                                                   : 1000000;
    int64_t deadline = dl_now_us() + bound;
    for (;;) {
        int c = drain(w, chan, len);
        if (c > 0)
            return DL_OK;
        int rd = c < 0 ? -1 : 0;
        if (rd == 0) {
            int64_t left = deadline - dl_now_us();
            struct pollfd p = { .fd = w->conn.ctx->fd, .events = POLLIN };
            int n = left > 0 ? poll(&p, 1, dl_poll_ms(left)) : 0;
            if (n < 0 && errno == EINTR)
                continue;
            if (n > 0)
                rd = dl_conn_pump(&w->conn) == 0 ? 1 : -1;
            else if (n < 0)
                rd = -1;
            else if (dl_now_us() < deadline)
                continue;               /* poll rounds: look again */
        }
        if (rd <= 0) {
            broken(w);
            return dl_fail(err, errlen, DL_ECONN, rd == 0 ?
                           "SUBSCRIBE not confirmed in time" :
                           "subscriber connection lost");
        }
    }
}

/* Take in what w's socket holds now, without blocking. */
static void pump(dl_waiter *w)
{
    struct pollfd p = { .fd = w->conn.ctx->fd, .events = POLLIN };
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    if (n < 0 || (n > 0 && dl_conn_pump(&w->conn) != 0) ||
        drain(w, NULL, 0) < 0)
        broken(w);
}

uint64_t dl_waiter_count(dl_waiter **ws, size_t n, const char *chan,
                         size_t len, size_t *live)
{
    uint64_t total = 0;
    *live = 0;
    for (size_t i = 0; i < n; i++) {
        dl_waiter *w = ws[i];
        if (!w->conn.ctx || !find(w, chan, len))
            continue;
        pump(w);
        dl_sub *s = w->conn.ctx ? find(w, chan, len) : NULL;
        if (!s)
            continue;
        s->used = ++w->tick;
        total += s->count;
        (*live)++;
    }
    return total;
}

uint64_t dl_waiter_seen(dl_waiter **ws, size_t n, const char *chan,
                        size_t len)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        dl_sub *s = ws[i]->conn.ctx ? find(ws[i], chan, len) : NULL;
        if (s)
            total += s->count;
    }
    return total;
}

const char *dl_waiter_note(dl_waiter **ws, size_t n, const char *chan,
                           size_t len, const char *prefix)
{
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < n; i++) {
        dl_sub *s = ws[i]->conn.ctx ? find(ws[i], chan, len) : NULL;
        for (int j = 0; s && j < DL_WAIT_NOTES; j++)
            if (strncmp(s->notes[j], prefix, plen) == 0)
                return s->notes[j];
    }
    return NULL;
}

int dl_waiter_heard(dl_waiter **ws, size_t n, const char *chan, size_t len,
                    const char *msg, size_t mlen, int64_t since_us)
{
    if (mlen == 0 || mlen >= DL_WAIT_NOTE_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        dl_sub *s = ws[i]->conn.ctx ? find(ws[i], chan, len) : NULL;
        for (int j = 0; s && j < DL_WAIT_NOTES; j++)
            if (s->note_us[j] >= since_us &&
                memcmp(s->notes[j], msg, mlen) == 0 &&
                s->notes[j][mlen] == '\0')
                return 1;
    }
    return 0;
}

size_t dl_waiter_fds(dl_waiter **ws, size_t n, const char *chan, size_t len,
                     int *fds)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ws[i]->conn.ctx && find(ws[i], chan, len))
            fds[k++] = ws[i]->conn.ctx->fd;
    return k;
}

uint64_t dl_waiter_serial(dl_waiter **ws, size_t n, const char *chan,
                          size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (ws[i]->conn.ctx && find(ws[i], chan, len))
            return ws[i]->conn.serial;
    return 0;
}

int dl_waiter_alive(dl_waiter *w, int64_t interval_us, int64_t dead_us,
                    int64_t *next_ping_us)
{
    char err[DL_ERRLEN];
    int64_t now = dl_now_us();
    if (!w->conn.ctx || now < *next_ping_us)
        return 0;
    if (w->rx_us && now - w->rx_us > dead_us) {
        broken(w);
        return -1;
    }
    const char *argv[1] = { "PING" };
    if (redisAppendCommandArgv(w->conn.ctx, 1, argv, NULL) != REDIS_OK ||
        dl_conn_flush(&w->conn, err, sizeof err) != DL_OK) {
        broken(w);
        return -1;
    }
    *next_ping_us = now + interval_us;
    return 0;
}
