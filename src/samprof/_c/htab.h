/* htab: an open-addressing hash table from byte-string keys to uint64 values.
 *
 * Used by the collector for every interning job (strings, stacks, code
 * objects, locations, threads). Keys are copied into the table. Not
 * signal-safe and not thread-safe: callers say what protects each table. */
#ifndef SAMPROF_HTAB_H
#define SAMPROF_HTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t hash;    /* 0 = empty, 1 = deleted, else hash | 2 */
    uint32_t key_len; /* bytes in key */
    uint8_t *key;     /* malloc'ed copy of the key */
    uint64_t value;
} htab_entry_t;

typedef struct {
    htab_entry_t *entries; /* capacity slots */
    size_t capacity;       /* power of two */
    size_t used;           /* live entries */
    size_t filled;         /* live + deleted entries */
    size_t key_bytes;      /* bytes held by key copies, for memory caps */
} htab_t;

/* Initializes an empty table. Returns 0, or -1 when out of memory. */
int htab_init(htab_t *t, size_t capacity_hint);
/* Frees every key and the slot array; the table can be initialized again. */
void htab_free(htab_t *t);
/* Removes every entry, keeping the allocation. */
void htab_clear(htab_t *t);
/* Looks key up. Returns 1 and stores the value in *value when found, else 0.
 */
int htab_get(const htab_t *t, const void *key, size_t len, uint64_t *value);
/* Inserts or replaces. Returns 0, or -1 when out of memory (table unchanged).
 */
int htab_put(htab_t *t, const void *key, size_t len, uint64_t value);
/* Removes key if present. Returns 1 when it was present, else 0. */
int htab_del(htab_t *t, const void *key, size_t len);
/* The hash used by the table (64 bit, eight bytes per step); exported for
 * tests. */
uint64_t htab_hash(const void *key, size_t len);

#endif
