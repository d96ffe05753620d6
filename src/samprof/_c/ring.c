/* ring: bounded MPSC sample queue (Dmitry Vyukov's sequence-number scheme).
 *
 * Each slot's seq says whose turn it is: seq == pos means free for the
 * producer claiming position pos; seq == pos + 1 means published for the
 * consumer reading pos; the consumer sets seq = pos + capacity to free it for
 * the next lap. Only atomics are used, so producers may run in signal
 * handlers, including two handlers on two threads at once. */
#include "ring.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static ring_slot_t *
ring_at(const ring_t *r, uint64_t pos)
{
    return (ring_slot_t *)(r->slots + (size_t)(pos & r->mask) * r->stride);
}

int
ring_init(ring_t *r, size_t capacity, uint32_t max_depth)
{
    size_t cap = 2;
    while (cap < capacity) {
        cap <<= 1;
    }
    memset(r, 0, sizeof(*r));
    r->stride = sizeof(ring_slot_t) + (size_t)max_depth * sizeof(ring_frame_t);
    r->stride =
        (r->stride + 63) & ~(size_t)63; /* one slot per cache line run */
    r->slots = aligned_alloc(64, cap * r->stride);
    if (r->slots == NULL) {
        return -1;
    }
    /* Touch every page now so the handler never takes a page fault that
     * the kernel must satisfy by allocating. */
    memset(r->slots, 0, cap * r->stride);
    r->mask = cap - 1;
    r->max_depth = max_depth;
    for (uint64_t i = 0; i < cap; i++) {
        atomic_store_explicit(&ring_at(r, i)->seq, i, memory_order_relaxed);
    }
    atomic_store(&r->head, 0);
    r->tail = 0;
    return 0;
}

void
ring_free(ring_t *r)
{
    free(r->slots);
    r->slots = NULL;
}

ring_slot_t *
ring_claim(ring_t *r)
{
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        ring_slot_t *s = ring_at(r, pos);
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                return s;
            }
            /* pos was reloaded by the failed CAS: retry. */
        }
        else if (dif < 0) {
            return NULL; /* full: the consumer has not freed this lap yet */
        }
        else {
            pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
    }
}

void
ring_publish(ring_t *r, ring_slot_t *slot)
{
    (void)r;
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_relaxed);
    atomic_store_explicit(&slot->seq, seq + 1, memory_order_release);
}

ring_slot_t *
ring_peek(ring_t *r)
{
    ring_slot_t *s = ring_at(r, r->tail);
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq != r->tail + 1) {
        return NULL; /* empty, or its producer is still writing */
    }
    return s;
}

void
ring_release(ring_t *r, ring_slot_t *slot)
{
    /* Slots are consumed in order, each once its producer published it. */
    assert(slot == ring_at(r, r->tail));
    assert(atomic_load_explicit(&slot->seq, memory_order_relaxed)
           == r->tail + 1);
    atomic_store_explicit(&slot->seq, r->tail + r->mask + 1,
                          memory_order_release);
    r->tail++;
}

uint64_t
ring_pending(ring_t *r)
{
    return atomic_load_explicit(&r->head, memory_order_acquire) - r->tail;
}
