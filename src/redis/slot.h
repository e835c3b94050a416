/* SPDX-License-Identifier: MIT
 * slot.h: Redis Cluster hash slots, pure functions of a key (a leaf: it
 * knows no node and no connection). */
#ifndef DL_SLOT_H
#define DL_SLOT_H

#include <stddef.h>

#pragma GCC visibility push(hidden)

#define DL_SLOTS 16384         /* hash slots in a Redis Cluster */

/* The CRC16 hash slot (0..16383) of key, honouring a {hash tag}. */
unsigned dl_slot_of(const char *key, size_t len);

/* Write to buf (n bytes) a hash tag whose slot is slot (the same tag for
 * the same slot, in every process); returns its length. */
int dl_slot_tag(unsigned slot, char *buf, size_t n);

#pragma GCC visibility pop

#endif
