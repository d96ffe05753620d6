/* sampler: timers, the signal handler, and the registry of armed threads.
 *
 * CPU mode arms one timer per native thread of the process: a perf-event
 * task clock (not bound to the kernel tick) or a POSIX CPU-time timer, and
 * keeps a process-wide ITIMER_PROF for threads that have neither. Every
 * timer delivers the same signal; the handler walks the interrupted thread's
 * own Python frames into the ring. */
#ifndef SAMPROF_SAMPLER_H
#define SAMPROF_SAMPLER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "htab.h"
#include "ring.h"

/* The exception raised for profiler misuse (samprof.ProfilerError); set by
 * the module at import. */
extern PyObject *sampler_error;

typedef enum {
    SAMPLER_SRC_PERF = 0, /* per-thread perf-event task clock */
    SAMPLER_SRC_TIMER,    /* per-thread POSIX CPU-time timer */
    SAMPLER_SRC_ITIMER,   /* process-wide setitimer(ITIMER_PROF) */
    SAMPLER_SRC_COUNT
} sampler_source_t;

typedef enum {
    SAMPLER_ENGINE_AUTO = 0,
    SAMPLER_ENGINE_PERF,
    SAMPLER_ENGINE_TIMER,
    SAMPLER_ENGINE_ITIMER,
} sampler_engine_t;

/* Why samples were lost; each is counted and reported. */
typedef enum {
    SAMPLER_DROP_RING_FULL = 0, /* collector fell behind */
    SAMPLER_DROP_TORN,          /* frame chain looked inconsistent */
    SAMPLER_DROP_COUNT
} sampler_drop_t;

typedef struct {
    sampler_engine_t engine; /* requested engine */
    int signum;              /* signal every timer delivers */
    uint64_t period_ns;      /* 1e9 / hz */
    uint32_t max_depth;      /* frames per sample */
    size_t ring_slots;       /* sample buffer capacity */
    int user_only;           /* wall mode's on-CPU sampler: perf events that
                                count user-mode time only, so a signal is
                                only ever raised while the thread runs user
                                code and can never interrupt a system call;
                                no ITIMER_PROF, no POSIX timers */
} sampler_config_t;

/* Counters, written by signal handlers with relaxed atomics. */
typedef struct {
    _Atomic uint64_t signals[SAMPLER_SRC_COUNT]; /* accepted, by source */
    _Atomic uint64_t periods[SAMPLER_SRC_COUNT]; /* weight, by source */
    _Atomic uint64_t dropped[SAMPLER_DROP_COUNT];
    _Atomic uint64_t dropped_periods[SAMPLER_DROP_COUNT];
    _Atomic uint64_t itimer_ignored; /* ITIMER_PROF on a thread with its own */
    _Atomic uint64_t foreign;        /* our signal, not from our timers */
} sampler_counters_t;

/* Installs the handler, arms the process timer and every current thread.
 * Returns 0, or -1 with a Python exception set (signal taken, bad config,
 * forced engine unavailable). Caller holds the GIL. */
int sampler_start(const sampler_config_t *cfg);

/* Disarms every timer, restores the signal's previous disposition and waits
 * for running handlers to finish. Idempotent. The ring stays readable. */
void sampler_stop(void);

/* Arms threads that appeared since the last scan and disarms those that
 * exited. Called by the collector thread (no GIL needed) and by start. */
void sampler_scan_threads(void);

/* Arms the calling thread now rather than at the next scan, so a thread
 * that lives shorter than the scan interval is still sampled. Called by
 * new Python threads as they start. Not signal context. */
void sampler_arm_this_thread(void);

/* The sample ring (valid between start and the caller's ring_free). */
ring_t *sampler_ring(void);

/* Counters of the current or last profile. */
const sampler_counters_t *sampler_counters(void);

/* Threads armed with each source since start (perf, timer; itimer counts
 * threads that could get neither). */
void sampler_threads_by_source(uint64_t out[SAMPLER_SRC_COUNT]);

/* 1 when tid has a perf event or POSIX timer of ours armed. Not signal
 * context; any thread. */
int sampler_thread_armed(int32_t tid);

/* The calling thread enters or leaves a collection of the cyclic GC: with
 * the perf engine, the CPU time it used since its last sample is recorded
 * now, against the stack it has here, so that time before the boundary is
 * not charged to the stack after it. Call before changing the thread's GC
 * flag (tctx_set_in_gc). GIL held, on the thread itself, not in signal
 * context. (The handler reads the thread's labels and flags from tctx.h.) */
void sampler_gc_boundary(void);

/* Around fork(): the registry lock is held across it, so the child never
 * sees the thread table half-updated by the collector. */
void sampler_before_fork(void);
void sampler_after_fork_parent(void);

/* Forgets everything after fork() in the child: no timers exist there, and
 * the parent's handler must stop sampling. Async-signal-safe. */
void sampler_after_fork_child(void);

/* Frees the ring. No handler may run (after sampler_stop). */
void sampler_release(void);

#endif
