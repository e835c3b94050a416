/* SPDX-License-Identifier: MIT
 * wire.c: the bytes between hiredis and the socket (wire.h): a command in
 * RESP, written with send() or through TLS, and the replies read into
 * hiredis's reader. A context that failed here is marked as hiredis marks
 * its own (ctx->err, ctx->errstr): unusable, for its owner to drop.
 */
#define _GNU_SOURCE
#include "redis/wire.h"

#include <hiredis/sds.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* "<c><n>\r\n" at p; returns the end. */
static char *put_len(char *p, char c, size_t n)
{
    *p++ = c;
    p += dl_fmt_i64(p, (int64_t)n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* What redisAppendCommandArgv does, without its sdscatfmt per argument
 * (a renewal call carries 4 per hold: doc/performance.md). */
int dl_wire_append(redisContext *ctx, int argc, const char **argv,
                   const size_t *lens)
{
    size_t room = 24;                   /* "*<argc>\r\n" */
    for (int i = 0; i < argc; i++)      /* "$<len>\r\n<arg>\r\n" */
        room += (lens ? lens[i] : strlen(argv[i])) + 26;
    sds o = room < INT_MAX ? sdsMakeRoomFor(ctx->obuf, room) : NULL;
    if (!o)
        return -1;
    ctx->obuf = o;
    char *start = o + sdslen(o), *p = put_len(start, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        p = put_len(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    sdsIncrLen(o, (int)(p - start));
    return 0;
}

int dl_wire_failed(redisContext *ctx, ssize_t how, const char *msg,
                   int *eno)
{
    *eno = how == DL_TLS_EIO ? errno : 0;
    ctx->err = how == DL_TLS_EIO ? REDIS_ERR_IO : how == DL_TLS_EOF
               ? REDIS_ERR_EOF : REDIS_ERR_OTHER;
    snprintf(ctx->errstr, sizeof ctx->errstr, "%s", how == DL_TLS_EIO ?
             strerror(*eno) : how == DL_TLS_EOF ?
             "Server closed the connection" : msg);
    return REDIS_ERR;
}

/* A plain socket is written with send(MSG_NOSIGNAL), so that one the
 * server closed gives EPIPE instead of raising SIGPIPE (hiredis itself
 * writes with write()). */
int dl_wire_send(redisContext *ctx, dl_tls *tls, int *eno)
{
    char msg[DL_ERRLEN];
    if (tls && sdslen(ctx->obuf) > 0) {
        int rc = dl_tls_write(tls, ctx->fd, ctx->obuf, sdslen(ctx->obuf),
                              msg, sizeof msg);
        if (rc != 0)
            return dl_wire_failed(ctx, rc, msg, eno);
        sdsclear(ctx->obuf);
    }
    while (sdslen(ctx->obuf) > 0) {
        ssize_t n = send(ctx->fd, ctx->obuf, sdslen(ctx->obuf), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EPIPE;
            return dl_wire_failed(ctx, DL_TLS_EIO, NULL, eno);
        }
        sdsrange(ctx->obuf, (int)n, -1);
    }
    return REDIS_OK;
}

/* For TLS, after the first read whatever else is already there is taken
 * too, so that no whole record stays in the session. */
int dl_wire_fill(redisContext *ctx, dl_tls *tls, int wait, int *eno)
{
    char buf[16384], msg[DL_ERRLEN];
    for (int fed = 0;; fed = 1) {
        ssize_t n;
        if (tls) {
            n = dl_tls_read(tls, ctx->fd, buf, sizeof buf, wait, msg,
                            sizeof msg);
        } else {
            n = recv(ctx->fd, buf, sizeof buf, wait ? 0 : MSG_DONTWAIT);
            if (n == 0)
                n = DL_TLS_EOF;
            else if (n < 0 && errno == EINTR)
                continue;
            else if (n < 0 && !wait && (errno == EAGAIN ||
                                        errno == EWOULDBLOCK))
                n = 0;
        }
        if (n < 0 && fed)       /* the reader has bytes: they go first, */
            return REDIS_OK;    /* the failure is met again next time */
        if (n < 0)
            return dl_wire_failed(ctx, n, msg, eno);
        if (n == 0)
            return REDIS_OK;
        if (redisReaderFeed(ctx->reader, buf, (size_t)n) != REDIS_OK) {
            ctx->err = REDIS_ERR_PROTOCOL;
            snprintf(ctx->errstr, sizeof ctx->errstr, "%s",
                     ctx->reader->errstr);
            return REDIS_ERR;
        }
        if (!tls)
            return REDIS_OK;    /* the socket itself tells poll() the rest */
        wait = 0;
    }
}
