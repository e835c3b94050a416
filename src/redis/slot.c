/* SPDX-License-Identifier: MIT
 * slot.c: Redis Cluster hash slots: CRC16 of a key's hash tag, and a
 * short tag for each slot (the fencing counter a slot's locks share).
 */
#include "redis/slot.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* CRC16-CCITT (XModem), as Redis Cluster specifies it. */
static uint16_t crc_table[256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void make_crc_table(void)
{
    for (unsigned i = 0; i < 256; i++) {
        unsigned crc = i << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
        crc_table[i] = (uint16_t)crc;
    }
}

/* A byte at a time (each call into a lock hashes its name: lua_lock.c) */
static unsigned crc16(const char *buf, size_t len)
{
    pthread_once(&crc_table_once, make_crc_table);
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = ((crc << 8) ^ crc_table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]) & 0xffff;
    return crc;
}

unsigned dl_slot_of(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (DL_SLOTS - 1);
    }
    return crc16(key, len) & (DL_SLOTS - 1);
}

/* For each slot, the smallest decimal number whose hash slot it is: a
 * hash tag that puts a key on that slot. Found once per process. */
static uint32_t slot_tags[DL_SLOTS];
static pthread_once_t slot_tags_once = PTHREAD_ONCE_INIT;

static void find_slot_tags(void)
{
    size_t left = DL_SLOTS;
    char buf[16];
    for (uint32_t i = 0; i < DL_SLOTS; i++)
        slot_tags[i] = UINT32_MAX;
    for (uint32_t v = 0; left > 0; v++) {
        int n = snprintf(buf, sizeof buf, "%u", (unsigned)v);
        unsigned s = crc16(buf, (size_t)n) & (DL_SLOTS - 1);
        if (slot_tags[s] == UINT32_MAX) {
            slot_tags[s] = v;
            left--;
        }
    }
}

int dl_slot_tag(unsigned slot, char *buf, size_t n)
{
    pthread_once(&slot_tags_once, find_slot_tags);
    return snprintf(buf, n, "%u", (unsigned)slot_tags[slot & (DL_SLOTS - 1)]);
}

