/* clock: one reading of a POSIX clock, in nanoseconds. clock_gettime is
 * async-signal-safe (and a vDSO call, without a system call, for
 * CLOCK_MONOTONIC and CLOCK_REALTIME), so this may run in signal context. */
#ifndef SAMPROF_CLOCK_H
#define SAMPROF_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t
clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#endif
