/* heap: the sampled heap profiler, Go's scheme (docs/design.md §8) on
 * Python's allocators. Hooks on the MEM and OBJ domains sample allocations
 * as a Poisson process over allocated bytes, record the stack of each
 * sampled one, and remember sampled blocks until they are freed, so that a
 * profile shows what was allocated and what is still in use.
 *
 * One heap profile runs at a time per process, beside a CPU or wall
 * profile or alone. Everything here runs with the GIL held: the MEM and
 * OBJ domains may only be called with it, and it protects the live-block
 * table, the session and the hooks' state. */
#ifndef SAMPROF_HEAP_H
#define SAMPROF_HEAP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "pb.h"

/* Mean bytes between samples by default: Go's MemProfileRate. */
#define HEAP_DEFAULT_RATE (512 * 1024)
/* Sampled blocks tracked at once by default; more are counted as
 * untracked (docs/safety.md). */
#define HEAP_DEFAULT_MAX_LIVE 65536

typedef struct {
    uint64_t rate;      /* mean bytes between samples; 1: every allocation */
    uint32_t max_depth; /* frames kept per stack */
    size_t max_live;    /* sampled blocks tracked at once */
    size_t max_samples; /* distinct samples before the stack table is full */
    PyObject *hidden_file; /* samprof's own files (collect_init's) */
    PyObject *labelsets;   /* registered label sets (collect_init's) */
} heap_config_t;

typedef struct {
    uint64_t rate;
    uint64_t sampled;   /* allocations sampled */
    uint64_t live;      /* sampled blocks tracked now */
    uint64_t untracked; /* sampled blocks the live table had no room
                           for: allocated, but their frees not seen */
    uint64_t torn;      /* stacks that could not be read */
    uint64_t truncated; /* stacks cut at max_depth */
    uint64_t unknown_frames;
    uint64_t lost; /* samples the profile could not store */
    uint64_t stack_table_full;
    uint64_t hooks_lost; /* 1 once a snapshot found our hooks no longer
                            called (someone restored the allocators
                            found before us): frees are missed since */
    uint64_t profile_bytes;
    int64_t duration_ns;
} heap_stats_t;

/* Installs the hooks and starts sampling. The caller has checked cfg (every
 * count >= 1) and that no heap profile runs. Returns 0, or -1 with an
 * exception set (out of memory). */
int heap_start(const heap_config_t *cfg);
int heap_running(void);

/* How heap_encode writes the profile. */
typedef struct {
    /* 0: the allocations since start. 1: those since the last delta
     * encode (from start for the first), as a continuous profiler sends
     * them; samples with no new allocation and nothing in use are left
     * out, and the profile's time is the span since the last delta. */
    int delta;
    int thread_labels; /* samples carry thread_name and thread_id */
    /* If not NULL, receive the profile's time_nanos and duration_nanos. */
    int64_t *time_nanos, *duration_nanos;
} heap_encode_t;

/* Appends the profile so far to out as an uncompressed pprof message:
 * Go's "allocs" profile (default sample type alloc_space) or its "heap"
 * profile (in-use space shown by default). Only while a profile runs.
 * Returns 0, or -1 with an exception set. The profile keeps running. */
int heap_encode(int allocs, const heap_encode_t *how, pb_buf_t *out);

void heap_get_stats(heap_stats_t *st);

/* The calling thread, about to exit, is called name: its samples keep it
 * (a heap profile's samples outlive their threads). GIL. */
void heap_name_this_thread(PyObject *name);

/* Stops sampling and frees the profile. Each hook is removed where it is
 * still the domain's allocator; where someone replaced it (tracemalloc
 * started after us, say), removing it would unhook them too, so it stays
 * in their chain, passing every call through. Returns how many hooks
 * stayed. */
int heap_stop(void);

/* In a forked child: the parent's heap profile stays with the parent. The
 * child's copy is stopped as heap_stop does. */
void heap_after_fork_child(void);

/* For allocators hooked elsewhere (npdata.c), with the GIL held: a block
 * of size bytes was allocated at ptr (not NULL), and is counted as the
 * MEM and OBJ hooks count theirs; ptr is about to be freed (or was moved
 * by a realloc), so if it was sampled it leaves the in-use values. Both
 * do nothing while no heap profile runs. */
void heap_count_block(void *ptr, size_t size);
void heap_forget_block(void *ptr);

#endif
