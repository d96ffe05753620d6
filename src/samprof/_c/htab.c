/* htab: open-addressing hash table, byte-string keys, linear probing.
 *
 * Invariant: filled < capacity * 3 / 4, so every probe sequence reaches an
 * empty slot. Deleted slots are tombstones until the next resize. */
#include "htab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define HTAB_EMPTY 0
#define HTAB_DELETED 1

/* Eight bytes per step: stack keys are hundreds of bytes (a 4-byte
 * location id per frame), hashed once per sample, and a byte-at-a-time hash
 * spent most of a sample's collection cost on them. Each word is multiplied
 * in (64x64->128, folded), as wyhash and rapidhash do; the tail is read
 * zero-padded, and the length is mixed in so keys that differ only by
 * trailing zeros still differ. */
static inline uint64_t
htab_mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t
htab_hash(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = htab_mix(h ^ w, 0xA0761D6478BD642FULL);
    }
    if (i < len) {
        uint64_t w = 0;
        memcpy(&w, p + i, len - i);
        h = htab_mix(h ^ w, 0xE7037ED1A0B428DBULL);
    }
    /* A final avalanche, so masking by capacity spreads pointer keys. */
    h = htab_mix(h ^ (h >> 32), 0x8EBC6AF09C88C6E3ULL);
    return h | 2;
}

int
htab_init(htab_t *t, size_t capacity_hint)
{
    size_t cap = 16;
    while (cap < capacity_hint) {
        cap <<= 1;
    }
    memset(t, 0, sizeof(*t));
    t->entries = calloc(cap, sizeof(htab_entry_t));
    if (t->entries == NULL) {
        return -1;
    }
    t->capacity = cap;
    return 0;
}

void
htab_clear(htab_t *t)
{
    for (size_t i = 0; i < t->capacity; i++) {
        if (t->entries[i].hash > HTAB_DELETED) {
            free(t->entries[i].key);
        }
    }
    if (t->entries != NULL) {
        memset(t->entries, 0, t->capacity * sizeof(htab_entry_t));
    }
    t->used = t->filled = t->key_bytes = 0;
}

void
htab_free(htab_t *t)
{
    htab_clear(t);
    free(t->entries);
    memset(t, 0, sizeof(*t));
}

/* Short keys (a code address and offset, a thread id) are compared inline:
 * a call to memcmp cost more than the comparison. */
static inline int
htab_key_equal(const uint8_t *a, const void *b, size_t len)
{
    if (len == 16) {
        uint64_t x[2], y[2];
        memcpy(x, a, 16);
        memcpy(y, b, 16);
        return x[0] == y[0] && x[1] == y[1];
    }
    if (len == 4) {
        uint32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        return x == y;
    }
    return memcmp(a, b, len) == 0;
}

/* Returns the slot holding key, or the first empty slot of its probe
 * sequence (reporting the first tombstone seen through *tomb). */
static htab_entry_t *
htab_find(const htab_t *t, uint64_t h, const void *key, size_t len,
          htab_entry_t **tomb)
{
    /* A power of two, and never full: the probe below ends. */
    assert(t->capacity != 0 && (t->capacity & (t->capacity - 1)) == 0);
    assert(t->filled < t->capacity);
    size_t mask = t->capacity - 1;
    size_t i = (size_t)h & mask;
    if (tomb != NULL) {
        *tomb = NULL;
    }
    for (;;) {
        htab_entry_t *e = &t->entries[i];
        if (e->hash == HTAB_EMPTY) {
            return e;
        }
        if (e->hash == HTAB_DELETED) {
            if (tomb != NULL && *tomb == NULL) {
                *tomb = e;
            }
        }
        else if (e->hash == h && e->key_len == len
                 && htab_key_equal(e->key, key, len)) {
            return e;
        }
        i = (i + 1) & mask;
    }
}

static int
htab_resize(htab_t *t, size_t new_cap)
{
    htab_entry_t *old = t->entries;
    size_t old_cap = t->capacity;
    htab_entry_t *fresh = calloc(new_cap, sizeof(htab_entry_t));
    if (fresh == NULL) {
        return -1;
    }
    t->entries = fresh;
    t->capacity = new_cap;
    t->filled = t->used;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].hash > HTAB_DELETED) {
            htab_entry_t *e =
                htab_find(t, old[i].hash, old[i].key, old[i].key_len, NULL);
            *e = old[i];
        }
    }
    free(old);
    return 0;
}

int
htab_get(const htab_t *t, const void *key, size_t len, uint64_t *value)
{
    if (t->capacity == 0) {
        return 0;
    }
    htab_entry_t *e = htab_find(t, htab_hash(key, len), key, len, NULL);
    if (e->hash == HTAB_EMPTY) {
        return 0;
    }
    *value = e->value;
    return 1;
}

int
htab_put(htab_t *t, const void *key, size_t len, uint64_t value)
{
    if ((t->filled + 1) * 4 >= t->capacity * 3) {
        /* Mostly tombstones: rehash in place at the same size. */
        size_t cap =
            t->used * 2 >= t->capacity / 2 ? t->capacity * 2 : t->capacity;
        if (htab_resize(t, cap) < 0) {
            return -1;
        }
    }
    uint64_t h = htab_hash(key, len);
    htab_entry_t *tomb;
    htab_entry_t *e = htab_find(t, h, key, len, &tomb);
    if (e->hash != HTAB_EMPTY) {
        e->value = value;
        return 0;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL) {
        return -1;
    }
    memcpy(copy, key, len);
    if (tomb != NULL) {
        e = tomb;
    }
    else {
        t->filled++;
    }
    e->hash = h;
    e->key = copy;
    e->key_len = (uint32_t)len;
    e->value = value;
    t->used++;
    t->key_bytes += len;
    /* The load (tombstones included) stays below 3/4 of the capacity. */
    assert(t->used <= t->filled && t->filled * 4 < t->capacity * 3);
    return 0;
}

int
htab_del(htab_t *t, const void *key, size_t len)
{
    if (t->capacity == 0) {
        return 0;
    }
    htab_entry_t *e = htab_find(t, htab_hash(key, len), key, len, NULL);
    if (e->hash == HTAB_EMPTY) {
        return 0;
    }
    free(e->key);
    t->key_bytes -= e->key_len;
    e->key = NULL;
    e->hash = HTAB_DELETED;
    t->used--;
    return 1;
}
