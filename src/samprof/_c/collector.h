/* collector: the CPU profiler's collector thread. Every round it rescans
 * the process's threads (arming new ones) and, when the sample ring holds
 * samples, takes the GIL and drains them into the session.
 *
 * One collector at a time (the ring and the thread registry are the
 * sampler's, which is one per process). The functions below are called by
 * module.c under the GIL. */
#ifndef SAMPROF_COLLECTOR_H
#define SAMPROF_COLLECTOR_H

#include "collect.h" /* first: it includes Python.h */

#include <pthread.h>

/* The round period: an eighth of the time the ring of ring_slots takes to
 * fill at hz samples per CPU-second with every CPU busy, kept within
 * 10..100 ms. Each round takes the GIL, so at low rates it runs rarely
 * (new threading.Threads arm themselves; the rescan is for the others). */
long collector_interval_ns(size_t ring_slots, int hz);

/* Starts the thread, draining sampler_ring() into session every
 * interval_ns. Only signum may interrupt it; its samples are marked as
 * samprof's own. Returns 0, or -1 with errno set (nothing started). */
int collector_start(collect_session_t *session, int signum, long interval_ns);

/* Stops and joins the thread (releasing the GIL while it finishes its
 * round). Nothing if it is not running. Caller holds the GIL. */
void collector_stop(void);

/* The thread's id while it runs (the wall sampler leaves it out). */
pthread_t collector_thread(void);

/* In a forked child, where the thread does not exist: forgets it, and
 * gives the wake lock (possibly held across fork) a fresh state.
 * Async-signal-safe. */
void collector_after_fork_child(void);

#endif
