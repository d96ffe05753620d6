/* ring: the bounded sample buffer between signal handlers and the collector,
 * and the backlog behind it.
 *
 * Many producers (signal handlers on any thread), consumers one at a time
 * (the consumer lock). Producers are lock-free: one claims a slot with one
 * CAS and publishes it with a release store; a full ring makes the producer
 * drop its sample and count it. Slots are fixed size so the handler never
 * allocates.
 *
 * Turning frames into names needs the GIL, which any C call may hold for
 * seconds, far longer than the ring lasts. So a consumer that needs no GIL
 * (the collector's round thread) moves published samples out of a filling
 * ring into the backlog: growable memory of compact records, where a
 * sample identical to a recent one of its thread only adds its weight, up
 * to RING_BACKLOG_MAX_BYTES. GIL holders then read the backlog first, then
 * the ring (ring_next). Code pointers stay borrowed in the backlog too:
 * every code object's death reads both first (collect.c). */
#ifndef SAMPROF_RING_H
#define SAMPROF_RING_H

#include <pthread.h>
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

/* The most memory the backlog may hold. Beyond it samples are dropped and
 * counted as buffer-full drops (ring_backlog_dropped). At 1 kHz on 2 busy
 * CPUs, samples 50 frames deep that never repeat fill it in ~10 s of GIL
 * hold; a C call's own samples repeat and take one record per thread. */
#define RING_BACKLOG_MAX_BYTES ((size_t)16 << 20)

typedef struct ring_chunk ring_chunk_t;

/* One sample as a consumer reads it, from a ring slot or a backlog record:
 * count samples of the same thread, stack, flags and labels, weighing
 * weight sampling periods in all. */
typedef struct {
    const ring_frame_t *frames; /* depth entries, leaf first */
    int32_t tid;
    uint32_t weight;
    uint32_t count;
    uint32_t labels;
    uint16_t depth;
    uint16_t flags;
    uint8_t source;
} ring_sample_t;

typedef struct {
    uint8_t *slots;        /* capacity * stride bytes, allocated at start */
    size_t stride;         /* bytes per slot */
    uint64_t mask;         /* capacity - 1, capacity a power of two */
    uint32_t max_depth;    /* frames per slot */
    _Atomic uint64_t head; /* next position producers claim */
    /* next position consumers read: written under the lock, read by
     * ring_pending without it */
    _Atomic uint64_t tail;

    /* Everything below is under the consumer lock. */
    pthread_mutex_t lock;
    void *held;          /* the slot ring_next returned, to release */
    ring_chunk_t *first; /* the backlog's chunks, oldest first */
    ring_chunk_t *last;  /* where records are appended */
    ring_chunk_t *read;  /* the chunk ring_next reads next */
    size_t read_off;     /* its offset there */
    size_t bytes;        /* memory the chunks take */
    void *recent[4];     /* the latest records, candidates to merge into */
    unsigned n_recent;
    /* backlog records not yet read: raised before the ring's tail moves,
     * so that ring_pending never misses a sample in transit */
    _Atomic uint64_t records;
    uint64_t spilled;         /* samples moved into the backlog */
    uint64_t dropped;         /* samples the full backlog refused */
    uint64_t dropped_periods; /* their weight */
    size_t peak_bytes;        /* the most memory the backlog took */
} ring_t;

/* Allocates capacity (rounded up to a power of two) slots of max_depth
 * frames. Returns 0, or -1 when out of memory. Not signal-safe. */
int ring_init(ring_t *r, size_t capacity, uint32_t max_depth);
/* Frees the slots and the backlog. No producer or consumer may be running. */
void ring_free(ring_t *r);
/* Claims a slot for writing, or returns NULL when the ring is full.
 * Runs in signal context: lock-free, no allocation. */
ring_slot_t *ring_claim(ring_t *r);
/* Makes a claimed slot visible to the consumer. Runs in signal context. */
void ring_publish(ring_t *r, ring_slot_t *slot);

/* The consumer lock: whoever reads samples holds it. Lock order: the GIL
 * (if taken at all) before it; nothing is taken while it is held. */
void ring_lock(ring_t *r);
/* Also hands back the slot the last ring_next returned. */
void ring_unlock(ring_t *r);
/* Under the lock: fills out with the oldest sample, backlog first, and
 * returns 1, or returns 0 when none is ready (slots still being written
 * stay in the ring). out's memory is valid until the next call or
 * ring_unlock. */
int ring_next(ring_t *r, ring_sample_t *out);
/* Moves the ring's published samples into the backlog, if at least
 * min_pending are waiting. Takes the lock; needs no GIL and runs no Python
 * code. Returns the number moved. */
uint64_t ring_spill(ring_t *r, uint64_t min_pending);
/* Samples waiting to be read: published or in-progress slots, and backlog
 * records. May be called without the lock: it may count a sample another
 * consumer is reading, but never misses one. */
uint64_t ring_pending(ring_t *r);
/* Capacity in slots. */
uint64_t ring_capacity(const ring_t *r);
/* Under the lock, or when no consumer runs: the backlog's counters. */
typedef struct {
    uint64_t spilled, dropped, dropped_periods;
    size_t peak_bytes;
} ring_backlog_stats_t;
ring_backlog_stats_t ring_backlog_stats(ring_t *r);

#endif
