/* ring: bounded MPSC sample queue (Dmitry Vyukov's sequence-number scheme)
 * and its backlog.
 *
 * Each slot's seq says whose turn it is: seq == pos means free for the
 * producer claiming position pos; seq == pos + 1 means published for the
 * consumer reading pos; the consumer sets seq = pos + capacity to free it for
 * the next lap. Only atomics are used, so producers may run in signal
 * handlers, including two handlers on two threads at once.
 *
 * The backlog is a list of chunks holding records appended in order and
 * read in order; once all are read, the chunks are freed. Only consumers
 * touch it, under the consumer lock. */
#include "ring.h"

#include <assert.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

/* Backlog memory comes in chunks of this size (more for one record of a
 * very deep stack). */
#define RING_CHUNK_BYTES ((size_t)256 << 10)

struct ring_chunk {
    ring_chunk_t *next;
    size_t size; /* bytes of data */
    size_t used; /* bytes of records written */
    alignas(16) uint8_t data[];
};

/* A sample in the backlog: a slot without its unused frames. */
typedef struct {
    int32_t tid;
    uint32_t weight;
    uint32_t count;
    uint32_t labels;
    uint16_t depth;
    uint16_t flags;
    uint8_t source;
    uint8_t unused[3];
    ring_frame_t frames[]; /* depth entries */
} ring_record_t;

static size_t
ring_record_size(uint16_t depth)
{
    return sizeof(ring_record_t) + (size_t)depth * sizeof(ring_frame_t);
}

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
    atomic_store(&r->tail, 0);
    atomic_store(&r->records, 0);
    pthread_mutex_init(&r->lock, NULL);
    return 0;
}

/* Frees the backlog's chunks: all its records have been read. Lock. */
static void
ring_backlog_reset(ring_t *r)
{
    ring_chunk_t *c = r->first;
    while (c != NULL) {
        ring_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    r->first = r->last = r->read = NULL;
    r->read_off = 0;
    r->bytes = 0;
    r->n_recent = 0;
    atomic_store(&r->records, 0);
}

void
ring_free(ring_t *r)
{
    if (r->slots == NULL) {
        return;
    }
    ring_backlog_reset(r);
    pthread_mutex_destroy(&r->lock);
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

/* ----------------------------- consumers ------------------------------ */

/* The oldest published slot, or NULL when none is ready. Lock. */
static ring_slot_t *
ring_peek(ring_t *r)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    ring_slot_t *s = ring_at(r, tail);
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq != tail + 1) {
        return NULL; /* empty, or its producer is still writing */
    }
    return s;
}

/* Hands a slot from ring_peek back to the producers. Lock. */
static void
ring_release(ring_t *r, ring_slot_t *slot)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    /* Slots are consumed in order, each once its producer published it. */
    assert(slot == ring_at(r, tail));
    assert(atomic_load_explicit(&slot->seq, memory_order_relaxed) == tail + 1);
    atomic_store_explicit(&slot->seq, tail + r->mask + 1,
                          memory_order_release);
    atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
}

void
ring_lock(ring_t *r)
{
    pthread_mutex_lock(&r->lock);
}

void
ring_unlock(ring_t *r)
{
    if (r->held != NULL) {
        ring_release(r, r->held);
        r->held = NULL;
    }
    pthread_mutex_unlock(&r->lock);
}

/* Adds slot's sample to a recent record of the same thread and stack, if
 * there is one. Returns 1 if it did. Lock. */
static int
ring_backlog_merge(ring_t *r, const ring_slot_t *slot)
{
    for (unsigned i = 0; i < r->n_recent; i++) {
        ring_record_t *rec = r->recent[i];
        if (rec->tid == slot->tid && rec->depth == slot->depth
            && rec->flags == slot->flags && rec->labels == slot->labels
            && rec->source == slot->source
            && rec->weight <= UINT32_MAX - slot->weight
            && rec->count < UINT32_MAX
            && memcmp(rec->frames, slot->frames,
                      (size_t)slot->depth * sizeof(ring_frame_t))
                   == 0) {
            rec->weight += slot->weight;
            rec->count++;
            return 1;
        }
    }
    return 0;
}

/* Copies slot's sample into the backlog. Returns 0, or -1 when the backlog
 * is at its limit or out of memory. Lock. */
static int
ring_backlog_add(ring_t *r, const ring_slot_t *slot)
{
    if (ring_backlog_merge(r, slot)) {
        return 0;
    }
    size_t need = ring_record_size(slot->depth);
    ring_chunk_t *c = r->last;
    if (c == NULL || c->size - c->used < need) {
        size_t size = need > RING_CHUNK_BYTES ? need : RING_CHUNK_BYTES;
        size_t total = sizeof(ring_chunk_t) + size;
        if (r->bytes + total > RING_BACKLOG_MAX_BYTES) {
            return -1;
        }
        c = malloc(total);
        if (c == NULL) {
            return -1;
        }
        c->next = NULL;
        c->size = size;
        c->used = 0;
        if (r->last != NULL) {
            r->last->next = c;
        }
        else {
            r->first = r->read = c;
            r->read_off = 0;
        }
        r->last = c;
        r->bytes += total;
        if (r->bytes > r->peak_bytes) {
            r->peak_bytes = r->bytes;
        }
    }
    ring_record_t *rec = (ring_record_t *)(c->data + c->used);
    c->used += need;
    rec->tid = slot->tid;
    rec->weight = slot->weight;
    rec->count = 1;
    rec->labels = slot->labels;
    rec->depth = slot->depth;
    rec->flags = slot->flags;
    rec->source = slot->source;
    memcpy(rec->frames, slot->frames,
           (size_t)slot->depth * sizeof(ring_frame_t));
    /* Counted before the slot is released (ring_pending). */
    atomic_fetch_add(&r->records, 1);
    /* The newest record first: one thread's run of identical samples
     * merges on the first compare. */
    unsigned n = r->n_recent < 4 ? r->n_recent + 1 : 4;
    memmove(&r->recent[1], &r->recent[0], (n - 1) * sizeof(r->recent[0]));
    r->recent[0] = rec;
    r->n_recent = n;
    return 0;
}

uint64_t
ring_spill(ring_t *r, uint64_t min_pending)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (head - tail < min_pending || head == tail) {
        return 0;
    }
    uint64_t moved = 0;
    ring_lock(r);
    ring_slot_t *slot;
    while ((slot = ring_peek(r)) != NULL) {
        if (ring_backlog_add(r, slot) < 0) {
            r->dropped++;
            r->dropped_periods += slot->weight;
        }
        else {
            r->spilled++;
        }
        ring_release(r, slot);
        moved++;
    }
    ring_unlock(r);
    return moved;
}

int
ring_next(ring_t *r, ring_sample_t *out)
{
    if (r->held != NULL) {
        ring_release(r, r->held);
        r->held = NULL;
    }
    while (r->read != NULL) {
        ring_chunk_t *c = r->read;
        if (r->read_off < c->used) {
            ring_record_t *rec = (ring_record_t *)(c->data + r->read_off);
            r->read_off += ring_record_size(rec->depth);
            /* A record read may no longer be merged into. */
            r->n_recent = 0;
            atomic_fetch_sub(&r->records, 1);
            out->frames = rec->frames;
            out->tid = rec->tid;
            out->weight = rec->weight;
            out->count = rec->count;
            out->labels = rec->labels;
            out->depth = rec->depth;
            out->flags = rec->flags;
            out->source = rec->source;
            return 1;
        }
        r->read = c->next;
        r->read_off = 0;
    }
    if (r->first != NULL) {
        ring_backlog_reset(r); /* all read: the last record is not in use */
    }
    ring_slot_t *slot = ring_peek(r);
    if (slot == NULL) {
        return 0;
    }
    r->held = slot;
    out->frames = slot->frames;
    out->tid = slot->tid;
    out->weight = slot->weight;
    out->count = 1;
    out->labels = slot->labels;
    out->depth = slot->depth;
    out->flags = slot->flags;
    out->source = slot->source;
    return 1;
}

uint64_t
ring_pending(ring_t *r)
{
    /* tail before records: a sample moved into the backlog is counted in
     * records before tail moves past it (ring_backlog_add), so whichever
     * tail this reads, the sample is in one of the two counts. */
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t records = atomic_load(&r->records);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    return head - tail + records;
}

uint64_t
ring_capacity(const ring_t *r)
{
    return r->mask + 1;
}

ring_backlog_stats_t
ring_backlog_stats(ring_t *r)
{
    ring_backlog_stats_t st = {r->spilled, r->dropped, r->dropped_periods,
                               r->peak_bytes};
    return st;
}
