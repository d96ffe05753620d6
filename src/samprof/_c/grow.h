/* grow: the one way the core grows an array (profile tables, thread
 * registries, encode buffers). Not for signal context: it calls realloc. */
#ifndef SAMPROF_GROW_H
#define SAMPROF_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Grows *arr, an array of elem-byte elements with room for *cap, so that
 * it has room for at least need: doubling from 64, so appends cost O(1)
 * amortized. 0, or -1 when out of memory (*arr and *cap unchanged). */
static inline int
grow_array(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return 0;
    }
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2) {
            return -1;
        }
        n *= 2;
    }
    if (n > SIZE_MAX / elem) {
        return -1;
    }
    void *p = realloc(*arr, n * elem);
    if (p == NULL) {
        return -1;
    }
    *arr = p;
    *cap = n;
    return 0;
}

/* grow_array for a typed array and its capacity field. */
#define GROW(arr, cap, need) \
    grow_array((void **)&(arr), &(cap), (need), sizeof(*(arr)))

#endif
