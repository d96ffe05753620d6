/* stats: a finished profile's numbers, as a dict and as comments
 * (stats.h). */
#include "stats.h"

#include <stdio.h>

PyObject *
stats_to_dict(const stats_t *st)
{
    /* Built by Py_BuildValue alone: its keys are plain strings, where
     * PyDict_SetItemString would intern them for the life of the process
     * (which memcheck counts as lost). */
    PyObject *dropped =
        Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "buffer_full",
                      (unsigned long long)st->buffer_full, "torn",
                      (unsigned long long)st->torn, "stack_table_full",
                      (unsigned long long)st->stack_table_full,
                      "unknown_frames", (unsigned long long)st->unknown_frames,
                      "out_of_memory", (unsigned long long)st->out_of_memory);
    if (dropped == NULL) {
        return NULL;
    }
    if (st->cpu) {
        return Py_BuildValue(
            "{s:s,s:s,s:i,s:d,s:K,s:K,s:{s:K,s:K,s:K},s:N,s:K,s:L,s:L,s:L,"
            "s:K,s:K,s:{s:K,s:K}}",
            "mode", "cpu", "engine", st->engine, "requested_hz",
            st->requested_hz, "effective_hz", st->effective_hz, "samples",
            (unsigned long long)st->samples, "signals",
            (unsigned long long)st->signals, "threads_by_engine", "perf",
            (unsigned long long)st->threads[STATS_PERF], "timer",
            (unsigned long long)st->threads[STATS_TIMER], "itimer",
            (unsigned long long)st->threads[STATS_ITIMER], "dropped", dropped,
            "truncated", (unsigned long long)st->truncated, "time_ns",
            (long long)st->time_ns, "duration_ns", (long long)st->duration_ns,
            "cpu_ns", (long long)st->cpu_ns, "foreign_signals",
            (unsigned long long)st->foreign_signals, "profile_bytes",
            (unsigned long long)st->profile_bytes, "backlog", "samples",
            (unsigned long long)st->backlog_samples, "peak_bytes",
            (unsigned long long)st->backlog_peak_bytes);
    }
    return Py_BuildValue(
        "{s:s,s:s,s:i,s:d,s:K,s:K,s:{s:K},s:N,s:K,s:L,s:L,s:L,s:K,s:K,s:K,"
        "s:K,s:K,s:K,s:{s:K,s:K}}",
        "mode", "wall", "engine", st->engine, "requested_hz", st->requested_hz,
        "effective_hz", st->effective_hz, "samples",
        (unsigned long long)st->samples, "signals",
        (unsigned long long)st->signals, "threads_by_engine", "wall",
        (unsigned long long)st->threads[0], "dropped", dropped, "truncated",
        (unsigned long long)st->truncated, "time_ns", (long long)st->time_ns,
        "duration_ns", (long long)st->duration_ns, "cpu_ns",
        (long long)st->cpu_ns, "walks", (unsigned long long)st->walks,
        "deferred", (unsigned long long)st->deferred, "late_ticks",
        (unsigned long long)st->late_ticks, "gc_samples",
        (unsigned long long)st->gc_samples, "ticks",
        (unsigned long long)st->ticks, "profile_bytes",
        (unsigned long long)st->profile_bytes, "backlog", "samples",
        (unsigned long long)st->backlog_samples, "peak_bytes",
        (unsigned long long)st->backlog_peak_bytes);
}

void
stats_comments(const stats_t *st, char c[3][STATS_COMMENT_SIZE])
{
    snprintf(c[0], STATS_COMMENT_SIZE,
             "samprof mode=%s engine=%s requested_hz=%d effective_hz=%.1f",
             st->cpu ? "cpu" : "wall", st->engine, st->requested_hz,
             st->effective_hz);
    snprintf(c[1], STATS_COMMENT_SIZE,
             "samprof dropped: {'buffer_full': %llu, 'torn': %llu, "
             "'stack_table_full': %llu, 'unknown_frames': %llu, "
             "'out_of_memory': %llu} truncated=%llu",
             (unsigned long long)st->buffer_full, (unsigned long long)st->torn,
             (unsigned long long)st->stack_table_full,
             (unsigned long long)st->unknown_frames,
             (unsigned long long)st->out_of_memory,
             (unsigned long long)st->truncated);
    if (st->cpu) {
        snprintf(c[2], STATS_COMMENT_SIZE,
                 "samprof threads: {'perf': %llu, 'timer': %llu, "
                 "'itimer': %llu}",
                 (unsigned long long)st->threads[STATS_PERF],
                 (unsigned long long)st->threads[STATS_TIMER],
                 (unsigned long long)st->threads[STATS_ITIMER]);
    }
    else {
        snprintf(c[2], STATS_COMMENT_SIZE, "samprof threads: {'wall': %llu}",
                 (unsigned long long)st->threads[0]);
    }
}
