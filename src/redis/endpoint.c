/* SPDX-License-Identifier: MIT
 * endpoint.c: where a Redis server is: URL parsing, and the endpoint's
 * copy and free (its TLS set-up is shared, counted).
 */
#define _GNU_SOURCE
#include "redis/endpoint.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- URL parsing ---------------------------------------------------- */

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Percent-decode s[0..n) into a new NUL-terminated string. NULL on a bad
 * escape, an embedded NUL, or (with *oom set) no memory. */
static char *decode(const char *s, size_t n, int *oom)
{
    char *out = malloc(n + 1), *o = out;
    if (!out) {
        *oom = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= n || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0)
                goto bad;
            ch = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
            i += 2;
        }
        if (ch == 0)
            goto bad;
        *o++ = (char)ch;
    }
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

/* Parse a decimal integer in [lo, hi] from s[0..n). */
/* What the URL parser reports: the first thing wrong, never the
 * credentials themselves. */
typedef struct urlerr {
    char *buf;
    size_t len;
    int oom;                    /* it was no memory, not the URL */
} urlerr;

static int bad(urlerr *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int bad(urlerr *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->buf, e->len, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_int(const char *s, size_t n, long lo, long hi, int *out)
{
    long v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* A number part of the URL: port, db. At most 40 bytes are quoted. */
static int parse_num(urlerr *e, const char *what, const char *s, size_t n,
                     long lo, long hi, int *out)
{
    if (parse_int(s, n, lo, hi, out) == 0)
        return 0;
    return bad(e, "%s '%.*s' is not a whole number from %ld to %ld", what,
               (int)(n > 40 ? 40 : n), s, lo, hi);
}

static const char *memfind(const char *s, const char *end, char ch)
{
    const char *p = memchr(s, ch, (size_t)(end - s));
    return p ? p : end;
}

static int decode_part(urlerr *e, const char *what, char **out,
                       const char *s, size_t n)
{
    if ((*out = decode(s, n, &e->oom)))
        return 0;
    if (e->oom)
        return bad(e, "out of memory");
    return bad(e, "the %s has a bad %%-escape", what);
}

/* userinfo "[user][:pass]". A user without a password cannot log in
 * (AUTH needs a password), and is nearly always a password written
 * without its colon. */
static int parse_userinfo(urlerr *e, dl_endpoint *ep, const char *s,
                          const char *end)
{
    const char *colon = memfind(s, end, ':');
    if (colon > s && decode_part(e, "user name", &ep->username, s,
                                 (size_t)(colon - s)) != 0)
        return -1;
    if (colon < end && decode_part(e, "password", &ep->password, colon + 1,
                                   (size_t)(end - colon - 1)) != 0)
        return -1;
    if (ep->username && !ep->password)
        return bad(e, "a user name without a password (\"user@host\"); "
                   "a password alone is written redis://:password@host");
    return 0;
}

/* "?db=N" */
static int parse_query(urlerr *e, dl_endpoint *ep, const char *s,
                       const char *end)
{
    if (s == end || s + 1 == end)
        return 0;
    const char *eq = memfind(s + 1, end, '=');
    if (eq - s != 3 || memcmp(s + 1, "db", 2) != 0)
        return bad(e, "unknown query parameter '%.*s' (only ?db=N is "
                   "known)", (int)((eq - s - 1) > 40 ? 40 : eq - s - 1),
                   s + 1);
    if (eq == end)
        return bad(e, "db without a value");
    return parse_num(e, "db", eq + 1, (size_t)(end - eq - 1), 0, INT_MAX,
                     &ep->db);
}

/* The last '@' in s[0..end), or NULL. Userinfo ends there, as in URL
 * parsers: a password may hold '/', '?', ':' or '@' written plainly, and
 * nothing after the host may hold an '@'. */
static const char *last_at(const char *s, const char *end)
{
    const char *at = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == '@')
            at = p;
    return at;
}

/* The userinfo from *s to at (none: at is NULL), parsed; *s then starts
 * after the "@". */
static int take_userinfo(urlerr *e, dl_endpoint *ep, const char **s,
                         const char *at)
{
    if (!at)
        return 0;
    if (parse_userinfo(e, ep, *s, at) != 0)
        return -1;
    *s = at + 1;
    return 0;
}

static int parse_tcp(urlerr *e, dl_endpoint *ep, const char *s,
                     const char *end)
{
    if (take_userinfo(e, ep, &s, last_at(s, end)) != 0)
        return -1;
    const char *q = memfind(s, end, '?');
    const char *slash = memfind(s, q, '/');
    const char *hend, *rest;
    if (s < slash && *s == '[') {           /* [ipv6] */
        hend = memfind(s, slash, ']');
        if (hend == slash)
            return bad(e, "an IPv6 address without its closing ']'");
        if (decode_part(e, "host", &ep->host, s + 1,
                        (size_t)(hend - s - 1)) != 0)
            return -1;
        rest = hend + 1;
    } else {
        hend = memfind(s, slash, ':');
        if (hend > s && decode_part(e, "host", &ep->host, s,
                                    (size_t)(hend - s)) != 0)
            return -1;
        rest = hend;
    }
    if (!ep->host && !(ep->host = strdup("127.0.0.1"))) {
        e->oom = 1;
        return bad(e, "out of memory");
    }
    ep->port = 6379;
    if (rest < slash) {
        if (*rest != ':')
            return bad(e, "expected ':port' or '/db' after the host, got "
                       "'%.*s'", (int)((slash - rest) > 40 ? 40 :
                                       slash - rest), rest);
        if (parse_num(e, "port", rest + 1, (size_t)(slash - rest - 1), 1,
                      65535, &ep->port) != 0)
            return -1;
    }
    if (slash < q && q - slash > 1 &&
        parse_num(e, "db", slash + 1, (size_t)(q - slash - 1), 0, INT_MAX,
                  &ep->db) != 0)
        return -1;
    return parse_query(e, ep, q, end);
}

static int parse_unix(urlerr *e, dl_endpoint *ep, const char *s,
                      const char *end)
{
    /* unix://[userinfo@]/path: userinfo ends at the last "@/" */
    const char *at = NULL;
    for (const char *p = s; p + 1 < end; p++)
        if (p[0] == '@' && p[1] == '/')
            at = p;
    if (take_userinfo(e, ep, &s, at) != 0)
        return -1;
    const char *q = memfind(s, end, '?');
    const char *slash = memfind(s, q, '/');
    if (s != slash || q - s < 2)
        return bad(e, "expected an absolute socket path: unix:///path");
    if (decode_part(e, "path", &ep->path, s, (size_t)(q - s)) != 0)
        return -1;
    return parse_query(e, ep, q, end);
}

int dl_endpoint_parse(dl_endpoint *ep, const char *url, size_t len,
                      char *err, size_t errlen)
{
    memset(ep, 0, sizeof *ep);
    const char *end = url + len;
    urlerr e = { err, errlen, 0 };
    int rc;
    if (memchr(url, '\0', len))
        return bad(&e, "contains a NUL byte");
    if (len >= 8 && memcmp(url, "redis://", 8) == 0)
        rc = parse_tcp(&e, ep, url + 8, end);
    else if (len >= 7 && memcmp(url, "unix://", 7) == 0)
        rc = parse_unix(&e, ep, url + 7, end);
    else if (len >= 9 && memcmp(url, "rediss://", 9) == 0) {
        ep->tls = 1;
        rc = parse_tcp(&e, ep, url + 9, end);
    } else {
        /* quote what looks like a scheme, never userinfo */
        const char *colon = memchr(url, ':', len);
        size_t n = colon ? (size_t)(colon - url) : 0;
        if (colon && (memchr(url, '@', len) || n > 20))
            colon = NULL, n = 0;
        return bad(&e, "%s%.*s%sexpected redis://[[user]:password@]host"
                   "[:port][/db] (rediss:// for TLS) or unix:///path[?db=N]",
                   colon ? "scheme '" : "", (int)(n > 20 ? 20 : n), url,
                   colon ? "' is not known; " : "no scheme; ");
    }
    if (rc != 0)
        dl_endpoint_free(ep);
    return rc != 0 && e.oom ? DL_URL_OOM : rc;
}

void dl_endpoint_free(dl_endpoint *ep)
{
    free(ep->host);
    free(ep->path);
    free(ep->username);
    free(ep->password);
    free(ep->name);
    dl_tls_config_unref(ep->tlscfg);
    memset(ep, 0, sizeof *ep);
}

static int dup_opt(char **dst, const char *src)
{
    *dst = NULL;
    return src && !(*dst = strdup(src)) ? -1 : 0;
}

int dl_endpoint_copy(dl_endpoint *dst, const dl_endpoint *src)
{
    memset(dst, 0, sizeof *dst);
    dst->port = src->port;
    dst->db = src->db;
    dst->tls = src->tls;
    dst->tlscfg = dl_tls_config_ref(src->tlscfg);
    if (dup_opt(&dst->host, src->host) || dup_opt(&dst->path, src->path) ||
        dup_opt(&dst->username, src->username) ||
        dup_opt(&dst->password, src->password) ||
        dup_opt(&dst->name, src->name)) {
        dl_endpoint_free(dst);
        return -1;
    }
    return 0;
}
