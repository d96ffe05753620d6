/* stats: what a finished CPU or wall profile says about itself. Filled once
 * by module.c when the profile stops; the same numbers become the profile's
 * comments and the dict samprof.ProfileStats is made from. */
#ifndef SAMPROF_STATS_H
#define SAMPROF_STATS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* threads_by_engine: three engines for a CPU profile, one for wall. */
enum { STATS_PERF, STATS_TIMER, STATS_ITIMER, STATS_ENGINES };

typedef struct {
    int cpu;            /* 1: CPU profile; 0: wall */
    const char *engine; /* perf, timer, itimer; wall or wall+perf */
    int requested_hz;
    double effective_hz; /* signals per CPU-second, or ticks per second */
    uint64_t samples;
    uint64_t signals;
    uint64_t threads[STATS_ENGINES]; /* CPU: by engine; wall: [0] seen */
    /* dropped */
    uint64_t buffer_full;
    uint64_t torn;
    uint64_t stack_table_full;
    uint64_t unknown_frames;
    uint64_t out_of_memory; /* samples the profile could not store */
    uint64_t truncated;
    int64_t time_ns; /* start, Unix epoch: the profile's time_nanos */
    int64_t duration_ns;
    int64_t cpu_ns;           /* process CPU time during the profile */
    uint64_t foreign_signals; /* CPU: signals that were not samprof's */
    uint64_t walks, deferred, late_ticks, gc_samples, ticks; /* wall */
    uint64_t profile_bytes;
    /* samples that waited in the ring's backlog (someone held the GIL),
     * and the most memory it took, since the profile started */
    uint64_t backlog_samples;
    uint64_t backlog_peak_bytes;
} stats_t;

/* The stats as the dict samprof.ProfileStats reads: a new reference, or
 * NULL with an exception set. GIL. */
PyObject *stats_to_dict(const stats_t *st);

/* The three comment lines a profile carries, written into c[0..2] (each
 * STATS_COMMENT_SIZE bytes, NUL-terminated, cut if longer). This function
 * can't fail. */
#define STATS_COMMENT_SIZE 256
void stats_comments(const stats_t *st, char c[3][STATS_COMMENT_SIZE]);

#endif
