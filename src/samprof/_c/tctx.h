/* tctx: the calling thread's context, as every sampler reads it: its
 * native id, whether it is inside the cyclic garbage collector, whether it is
 * one of samprof's own threads, and its heap sampling state.
 *
 * Each thread writes only its own context, and samplers read it on that
 * same thread: the CPU signal handler, the GC callback, the allocator
 * hooks. So it lives in thread-local storage of the initial-exec model,
 * whose accesses never call into the dynamic linker or malloc (the
 * general-dynamic model's first access can: docs/design.md §2). Every
 * reader below is async-signal-safe; the writers are called only by the
 * thread itself, outside signal context. */
#ifndef SAMPROF_TCTX_H
#define SAMPROF_TCTX_H

#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TCTX_TLS __thread __attribute__((tls_model("initial-exec")))

/* The storage behind the accessors; use the accessors. */
extern TCTX_TLS int32_t tctx_tid_cache;     /* gettid(), 0 = not read yet */
extern TCTX_TLS uint8_t tctx_gc_depth_flag; /* 1 inside the cyclic GC */
extern TCTX_TLS uint8_t tctx_samprof_flag;  /* 1 on samprof's own threads */

/* A thread's heap sampling state (heap.c): a countdown of allocated bytes
 * to the next sample, drawn at one rate, with its own random numbers.
 * While busy, the countdown is parked out of reach (the saved value comes
 * back when busy drops to 0), so that the hooks' common path needs no test
 * of its own. */
typedef struct {
    int64_t countdown; /* bytes to allocate before the next sample */
    int64_t saved;     /* the countdown while parked */
    uint64_t rng;      /* xorshift64* state, 0 = not seeded yet */
    uint64_t drawn_at; /* the rate countdown was drawn at; 0: none */
    uint32_t busy;     /* > 0: allocations are not counted (samprof's own
                          work, or one of samprof's own threads) */
} tctx_heap_t;
extern TCTX_TLS tctx_heap_t tctx_heap_state;

/* The native thread id, read once per thread. Async-signal-safe (gettid
 * is a plain system call). */
static inline int32_t
tctx_tid(void)
{
    if (tctx_tid_cache == 0) {
        tctx_tid_cache = (int32_t)syscall(SYS_gettid);
    }
    return tctx_tid_cache;
}

/* Forgets the cached id: a forked child's only thread has a new one.
 * Async-signal-safe. */
static inline void
tctx_forget_tid(void)
{
    tctx_tid_cache = 0;
}

/* Whether the thread is inside a collection of the cyclic GC (between the
 * gc.callbacks "start" and "stop" phases). */
static inline int
tctx_in_gc(void)
{
    return tctx_gc_depth_flag;
}

static inline void
tctx_set_in_gc(int in_gc)
{
    tctx_gc_depth_flag = (uint8_t)(in_gc != 0);
}

/* Whether the thread is samprof's own (the collector, the wall sampler):
 * its CPU is samprof's cost, shown apart from the program's. */
static inline int
tctx_is_samprof_thread(void)
{
    return tctx_samprof_flag;
}

/* Marks the calling thread as samprof's: its allocations are never
 * counted either. */
static inline void
tctx_mark_samprof_thread(void)
{
    tctx_samprof_flag = 1;
    tctx_heap_state.busy = 1;
    tctx_heap_state.countdown = INT64_MAX;
}

/* The thread's heap sampling state. */
static inline tctx_heap_t *
tctx_heap(void)
{
    return &tctx_heap_state;
}

#endif
