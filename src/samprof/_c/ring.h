/* ring: the bounded sample buffer between signal handlers and the collector.
 *
 * Many producers (signal handlers on any thread), one consumer (whoever holds
 * the GIL and drains: the collector thread, stop(), or a code-object death
 * hook). Lock-free: a producer claims a slot with one CAS and publishes it
 * with a release store; a full ring makes the producer drop its sample and
 * count it. Slots are fixed size so the handler never allocates. */
#ifndef SAMPROF_RING_H
#define SAMPROF_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One Python frame as captured by the signal handler. The code object is
 * borrowed: it stays alive until the sample is drained, because every code
 * object's death drains the ring first (see symbols.c). */
typedef struct {
    void *code;     /* PyCodeObject * */
    int32_t offset; /* byte offset of the executing instruction, -1 unknown */
    int32_t unused;
} ring_frame_t;

enum {
    RING_NO_PYTHON = 1 << 0, /* thread had no Python thread state */
    RING_TRUNCATED = 1 << 1, /* stack deeper than max_depth: root part cut */
    RING_TORN = 1 << 2,      /* walk gave up on an implausible frame */
    RING_COLLECTOR = 1 << 3, /* sample of samprof's own collector thread */
    RING_OFF_CPU = 1 << 4,   /* wall mode: thread used no CPU this interval */
    RING_IN_GC = 1 << 5,     /* the cyclic GC was running in this thread */
};

typedef struct {
    _Atomic uint64_t seq; /* Vyukov sequence number: publication protocol */
    int32_t tid;          /* native thread id of the sampled thread */
    uint32_t weight;      /* sampling periods this sample stands for */
    uint16_t depth;       /* frames captured, leaf first */
    uint16_t flags;       /* RING_* */
    uint32_t labels;      /* label-set id active in the thread, 0 = none */
    uint8_t source;       /* which timer delivered it (sampler_source_t) */
    uint8_t unused[7];
    ring_frame_t frames[]; /* max_depth entries */
} ring_slot_t;

typedef struct {
    uint8_t *slots;        /* capacity * stride bytes, allocated at start */
    size_t stride;         /* bytes per slot */
    uint64_t mask;         /* capacity - 1, capacity a power of two */
    uint32_t max_depth;    /* frames per slot */
    _Atomic uint64_t head; /* next position producers claim */
    uint64_t tail; /* next position the consumer reads; consumer only */
} ring_t;

/* Allocates capacity (rounded up to a power of two) slots of max_depth
 * frames. Returns 0, or -1 when out of memory. Not signal-safe. */
int ring_init(ring_t *r, size_t capacity, uint32_t max_depth);
/* Frees the slots. No producer may be running. */
void ring_free(ring_t *r);
/* Claims a slot for writing, or returns NULL when the ring is full.
 * Runs in signal context: lock-free, no allocation. */
ring_slot_t *ring_claim(ring_t *r);
/* Makes a claimed slot visible to the consumer. Runs in signal context. */
void ring_publish(ring_t *r, ring_slot_t *slot);
/* Returns the oldest published slot, or NULL when none is ready. The caller
 * must hand it back with ring_release before peeking again. Consumer only. */
ring_slot_t *ring_peek(ring_t *r);
/* Returns a slot obtained from ring_peek to the producers. Consumer only. */
void ring_release(ring_t *r, ring_slot_t *slot);
/* Published or in-progress slots not yet consumed. Consumer only. */
uint64_t ring_pending(ring_t *r);

#endif
