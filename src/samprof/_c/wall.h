/* wall: wall-clock sampling of every Python thread, without signalling it.
 *
 * A sampler thread wakes at the rate, takes the GIL (so every other thread
 * is detached and its frame chain cannot change or be freed), and reads
 * each thread's frames directly. A thread whose CPU clock has not moved
 * since its last read cannot have changed its stack, so its cached stack is
 * reused; one found idle that still stands where it stood has its time
 * added up and written once (wall.c, "Idle threads"). No thread is ever
 * signalled by it: blocking calls are never disturbed. (With the CPU sampler's
 * user-mode-only perf events, threads that are on CPU get their on-CPU samples
 * from those signals.) */
#ifndef SAMPROF_WALL_H
#define SAMPROF_WALL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "collect.h"

typedef struct {
    uint64_t ticks;        /* sampling periods covered */
    uint64_t samples;      /* thread samples recorded */
    uint64_t walks;        /* stacks read (the rest reused) */
    uint64_t deferred;     /* samples of idle threads added up (wall.c) */
    uint64_t late_ticks;   /* periods that passed while waiting for the GIL */
    uint64_t gc_samples;   /* samples credited to <gc> */
    uint64_t threads_seen; /* distinct Python threads sampled */
} wall_stats_t;

/* Starts the sampler thread, which adds its samples to session (a live
 * collect session that must outlive the sampler), each with the labels of
 * its thread's current context (labels_of). With on_cpu_sampler, the CPU
 * sampler (sampler.c, user_only) is running: threads it has armed get their
 * on-CPU time from its signals, and this thread records only their off-CPU
 * time. ignored_thread (a pthread id, or 0) is samprof's collector, left out.
 * Returns 0, or -1 with an exception set. Caller holds the GIL. */
int wall_start(collect_session_t *session, uint64_t period_ns,
               uint32_t max_depth, int on_cpu_sampler,
               unsigned long ignored_thread);

/* Adds the time deferred for idle threads to the session now: a part of
 * the profile ends. Caller holds the GIL. */
void wall_flush(void);

/* Stops and joins the sampler thread, after a wall_flush. Caller holds the GIL
 * (released while joining). */
void wall_stop(void);

/* The cyclic GC started/finished in the calling thread (gc.callbacks).
 * Time spent inside it is charged to "<gc>" on top of the stack that
 * triggered it. Caller holds the GIL. */
void wall_gc_begin(void);
void wall_gc_end(void);

/* The calling thread was just started by threading (its bootstrap): it is
 * probed finely through its first period. Caller holds the GIL. */
void wall_thread_started(void);

/* The calling thread's run() has returned: no more probes. GIL. */
void wall_thread_exiting(void);

void wall_get_stats(wall_stats_t *out);

/* The session was emptied for a new part (collect_clear) and lost its
 * thread names: every thread is looked up again at its next tick, so one
 * that ends before the part does keeps its name. GIL. */
void wall_new_part(void);

/* After fork() in the child: the sampler thread does not exist there. */
void wall_after_fork_child(void);

#endif
