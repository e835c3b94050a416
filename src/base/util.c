/* SPDX-License-Identifier: MIT
 * util.c: error text, the monotonic clock, waiting on fds, random ids.
 */
#define _GNU_SOURCE
#include "base/dlock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

const char *dl_strerror(dl_status st)
{
    switch (DL_SHOWN_AS(st)) {
    case DL_OK:       return "ok";
    case DL_ETIMEOUT: return "timeout";
    case DL_ENOTHELD: return "not held";
    case DL_ELOST:    return "lost";
    case DL_ECONN:    return "connection";
    case DL_EQUORUM:  return "quorum";
    case DL_EREDIS:   return "redis";
    }
    return "redis";
}

int64_t dl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int dl_poll_ms(int64_t us)
{
    /* poll() takes an int of ms: a lease of 25 days would wrap negative
     * (wait forever). Longer waits poll again. */
    if (us <= 0)
        return 0;
    return us >= INT64_C(3600000000) ? 3600000 : (int)((us + 999) / 1000);
}

void dl_wait_fds(const int *fds, size_t n, int64_t until_us)
{
    struct pollfd p[64];
    if (n > 64)
        n = 64;
    for (size_t i = 0; i < n; i++) {
        p[i].fd = fds[i];
        p[i].events = POLLIN;
        p[i].revents = 0;
    }
    for (int64_t left; (left = until_us - dl_now_us()) > 0;) {
        int k = poll(p, (nfds_t)n, dl_poll_ms(left));
        if (k != 0 && !(k < 0 && errno == EINTR))
            return;             /* readable, or an error the next read sees */
    }
}

static int fill_random(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)r;
    }
    if (got == n)
        return 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0 && errno != EINTR)
            break;
        if (r > 0)
            got += (size_t)r;
    }
    close(fd);
    return got == n ? 0 : -1;
}

int dl_random_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char buf[64];
    if (nbytes > sizeof buf || fill_random(buf, nbytes) != 0)
        return -1;
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[buf[i] >> 4];
        out[2 * i + 1] = hex[buf[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

dl_status dl_fail(char *err, size_t errlen, dl_status st, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

uint32_t dl_random_u32(void)
{
    /* From the kernel each time: never the host's random() sequence, and
     * different in every process and after every fork. */
    uint32_t v = 0;
    if (fill_random((unsigned char *)&v, sizeof v) != 0)
        v = (uint32_t)dl_now_us();
    return v;
}

int dl_grow(void *p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(*(void **)p, c * sz);
    if (!q)
        return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

size_t dl_fmt_i64(char *out, int64_t v)
{
    char tmp[24];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    out[len] = '\0';
    return len;
}

dl_status dl_oom(char *err, size_t errlen)
{
    return dl_fail(err, errlen, DL_ECONN, "out of memory");
}
