/* clock: time in nanoseconds, the core's one unit of time: a reading of a
 * POSIX clock, and the timespec of a time or interval for the calls that
 * take one. clock_gettime is async-signal-safe (and a vDSO call, without a
 * system call, for CLOCK_MONOTONIC and CLOCK_REALTIME), so clock_ns may
 * run in signal context. */
#ifndef SAMPROF_CLOCK_H
#define SAMPROF_CLOCK_H

#include <stdint.h>
#include <time.h>

#define CLOCK_NS_PER_S 1000000000LL

static inline int64_t
clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}

/* ns (>= 0) as a timespec. */
static inline struct timespec
clock_timespec(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / CLOCK_NS_PER_S),
                          (long)(ns % CLOCK_NS_PER_S)};
    return ts;
}

#endif
