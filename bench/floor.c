/* SPDX-License-Identifier: MIT
 * floor.c: the fastest lock cycle any hiredis-based lock can reach on this
 * server: one blocking hiredis connection (TCP_NODELAY), and per cycle
 *   SET key token NX PX 30000           (acquire, 1 round trip)
 *   EVALSHA <compare-and-delete> 1 key token   (release, 1 round trip)
 * the same two round trips as one dlock acquire + release.
 *
 * Usage: floor HOST PORT SECONDS [NKEYS TAG]
 * Prints one line: "cycles elapsed_s p50_us p99_us". With NKEYS, the
 * cycles go over NKEYS keys floor:<TAG>:{<i>} in turn (M7, capacity).
 * Built by `make bench` into build/bench/floor.
 */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_CYCLES 5000000

static const char CAD[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('del', KEYS[1])\n"
    "end\n"
    "return 0\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static redisReply *call(redisContext *c, int want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r || r->type != want) {
        fprintf(stderr, "floor: %s: %s\n", fmt,
                !r ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str
                                                              : "bad reply");
        exit(1);
    }
    return r;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: floor HOST PORT SECONDS [NKEYS TAG]\n");
        return 2;
    }
    long nkeys = argc == 6 ? atol(argv[4]) : 0;
    const char *tag = argc == 6 ? argv[5] : "";
    double secs = atof(argv[3]);
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout(argv[1], atoi(argv[2]), tv);
    if (!c || c->err) {
        fprintf(stderr, "floor: connect: %s\n", c ? c->errstr : "no memory");
        return 1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    redisSetTimeout(c, tv);

    redisReply *r = call(c, REDIS_REPLY_STRING, "SCRIPT LOAD %s", CAD);
    char sha[41];
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);

    double *lat = malloc(MAX_CYCLES * sizeof *lat);
    if (!lat)
        return 1;
    char key[96] = "floor:{lock}";
    char token[32];
    long n = 0, i = 0;
    double t = now_s(), warm = t + 0.1, start = 0, stop = 0;
    for (; n < MAX_CYCLES; i++) {
        double t0 = now_s();
        if (!start && t0 >= warm)
            start = t0, stop = t0 + secs;   /* the first 0.1 s warms up */
        if (start && t0 >= stop)
            break;
        snprintf(token, sizeof token, "%ld", i);
        if (nkeys > 0)
            snprintf(key, sizeof key, "floor:%s:{%ld}", tag, i % nkeys);
        freeReplyObject(call(c, REDIS_REPLY_STATUS,
                             "SET %s %s NX PX 30000", key, token));
        r = call(c, REDIS_REPLY_INTEGER, "EVALSHA %s 1 %s %s", sha, key,
                 token);
        if (r->integer != 1) {
            fprintf(stderr, "floor: compare-and-delete missed\n");
            return 1;
        }
        freeReplyObject(r);
        if (start)
            lat[n++] = now_s() - t0;
    }
    double elapsed = now_s() - start;
    qsort(lat, (size_t)n, sizeof *lat, cmp);
    printf("%ld %.6f %.1f %.1f\n", n, elapsed, n ? lat[n / 2] * 1e6 : 0.0,
           n ? lat[(long)(n * 0.99)] * 1e6 : 0.0);
    free(lat);
    redisFree(c);
    return 0;
}
