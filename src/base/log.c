/* SPDX-License-Identifier: MIT
 * log.c: the queue of log messages (log.h).
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void dl_log_init(dl_log *lg, int on)
{
    memset(lg, 0, sizeof *lg);
    lg->on = on;
    pthread_mutex_init(&lg->mu, NULL);
}

void dl_log_free(dl_log *lg)
{
    pthread_mutex_destroy(&lg->mu);
}

const char *dl_log_level(int level)
{
    return level == DL_LOG_WARN ? "warn" : "info";
}

void dl_log_say(dl_log *lg, int level, const char *fmt, ...)
{
    if (!lg || !lg->on)
        return;
    char text[DL_LOG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&lg->mu);
    dl_log_msg *same = NULL;    /* e.g. every connection after a failover */
    for (size_t i = 0; i < lg->n && !same; i++)
        if (lg->q[i].level == level && strcmp(lg->q[i].text, text) == 0)
            same = &lg->q[i];
    if (same) {
        same->repeats++;
    } else if (lg->n < DL_LOG_MAX) {
        dl_log_msg *m = &lg->q[lg->n++];
        m->level = level;
        m->repeats = 0;
        memcpy(m->text, text, sizeof text);
    } else {
        lg->dropped++;
    }
    __atomic_store_n(&lg->pending, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lg->mu);
}

size_t dl_log_take(dl_log *lg, dl_log_msg *out, size_t max)
{
    if (!__atomic_load_n(&lg->pending, __ATOMIC_ACQUIRE) || max == 0)
        return 0;
    pthread_mutex_lock(&lg->mu);
    size_t n = lg->n < max ? lg->n : max;
    memcpy(out, lg->q, n * sizeof *out);
    memmove(lg->q, lg->q + n, (lg->n - n) * sizeof *out);
    lg->n -= n;
    if (lg->n == 0 && lg->dropped && n < max) {
        out[n].level = DL_LOG_WARN;
        out[n].repeats = 0;
        snprintf(out[n].text, sizeof out[n].text, "%llu log messages were "
                 "dropped (more than %d queued)",
                 (unsigned long long)lg->dropped, DL_LOG_MAX);
        lg->dropped = 0;
        n++;
    }
    if (lg->n == 0 && !lg->dropped)
        __atomic_store_n(&lg->pending, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lg->mu);
    return n;
}
