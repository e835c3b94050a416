/* SPDX-License-Identifier: MIT
 * reply.c: what a Redis reply means to dlock (reply.h).
 */
#include "redis/reply.h"

#include <string.h>

dl_status dl_reply_error(const redisReply *r, char *err, size_t errlen)
{
    if (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0)
        return dl_fail(err, errlen, DL_EMOVED, "%s", r->str);
    static const char *const transient[] = { "LOADING", "BUSY ",
                                             "MASTERDOWN", NULL };
    for (int i = 0; transient[i]; i++)
        if (strncmp(r->str, transient[i], strlen(transient[i])) == 0)
            return dl_fail(err, errlen, DL_EDOWN, "server not ready: %s",
                           r->str);
    return dl_fail(err, errlen, DL_EREDIS, "%s", r->str);
}

int dl_reply_int(const redisReply *r, size_t i, int64_t *v)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements <= i ||
        r->element[i]->type != REDIS_REPLY_INTEGER)
        return -1;
    *v = r->element[i]->integer;
    return 0;
}
