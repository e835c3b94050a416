/* SPDX-License-Identifier: MIT
 * dlock.h: types and helpers shared by every file of the C core.
 * No core file includes lua.h; only src/binding/ do.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

/* What the core headers declare stays inside the module, however it is
 * built (a luarocks builtin build passes no -fvisibility=hidden): each
 * wraps its declarations in push(hidden) ... pop. Only luaopen_dlock_core
 * is exported. */
#pragma GCC visibility push(hidden)

/* The stable error codes of the public API. dl_strerror() is the only
 * place their text is spelled out. */
typedef enum {
    DL_OK = 0,
    DL_ETIMEOUT,    /* "timeout"    */
    DL_ENOTHELD,    /* "not held"   */
    DL_ELOST,       /* "lost"       */
    DL_ECONN,       /* "connection" */
    DL_EQUORUM,     /* "quorum"     */
    DL_EREDIS       /* "redis"      */
} dl_status;

/* Internal codes travel in a dl_status too, but are none of the public
 * ones: each is declared beside what returns it (reply.h, cluster.h,
 * client.h), with the public code a user sees should one reach them
 * (dl_strerror). */
#define DL_INTERNAL(n, shown_as) ((dl_status)((n) << 4 | (shown_as)))
#define DL_SHOWN_AS(st) ((dl_status)((unsigned)(st) & 15u))

#define DL_ERRLEN 256           /* size of every caller-owned err buffer */
#define DL_ID_BYTES 16          /* 128 random bits per client id */
#define DL_ID_HEX (2 * DL_ID_BYTES)
#define DL_MAX_LEASE_MS (INT64_C(1) << 45) /* ~1100 years; PEXPIRE-safe */
#define DL_NOREF (-2)           /* "no Lua reference"; equals LUA_NOREF */

const char *dl_strerror(dl_status st);

/* Microseconds on CLOCK_MONOTONIC. Shared by all processes of one host. */
int64_t dl_now_us(void);

/* Block until one of fds is readable or until_us (monotonic) passes. */
void dl_wait_fds(const int *fds, size_t n, int64_t until_us);

/* A poll() timeout for us microseconds: rounded up, never negative,
 * at most an hour (callers loop until their deadline). */
int dl_poll_ms(int64_t us);

/* Fill out[0..2*nbytes] with lowercase hex of nbytes random bytes from the
 * kernel, NUL-terminated. Returns 0, or -1 if no randomness was available. */
int dl_random_hex(char *out, size_t nbytes);

/* A random number from the kernel (for jitter): independent in every
 * process and after every fork; never touches random()'s seed. */
uint32_t dl_random_u32(void);

/* Grow the array *p (of *cap elements of size sz, doubling) to hold n.
 * Returns 0, or -1 out of memory (*p and *cap unchanged). */
int dl_grow(void *p, size_t *cap, size_t n, size_t sz);

/* v in decimal at out (room for 21 bytes), NUL-terminated; returns its
 * length. (printf's machinery, for the numbers of every command.) */
size_t dl_fmt_i64(char *out, int64_t v);

/* snprintf into err (may be NULL), never overflowing; returns st. */
dl_status dl_fail(char *err, size_t errlen, dl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Out of memory, reported alike everywhere: "connection: out of memory"
 * (the request was not sent, or its outcome is not known). Returns
 * DL_ECONN. */
dl_status dl_oom(char *err, size_t errlen);

#pragma GCC visibility pop
#endif
