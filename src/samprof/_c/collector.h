/* collector: the CPU profiler's collector, two threads. Every round the
 * round thread rescans the process's threads (arming new ones), moves the
 * samples of a filling ring into its backlog, and when there are samples
 * wakes the drain thread, which takes the GIL and drains them into the
 * session. The round thread never takes the GIL: however long someone
 * holds it, the ring keeps being emptied.
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
 * 10..100 ms. A round with samples makes the drain thread take the GIL, so
 * at low rates it runs rarely (new threading.Threads arm themselves; the
 * rescan is for the others). */
long collector_interval_ns(size_t ring_slots, int hz);

/* Starts the threads, draining sampler_ring() into session every
 * interval_ns. Only signum may interrupt them; their samples are marked as
 * samprof's own. Returns 0, or -1 with errno set (nothing started). */
int collector_start(collect_session_t *session, int signum, long interval_ns);

/* Stops and joins the threads (releasing the GIL while they finish their
 * round). Nothing if they are not running. Caller holds the GIL. */
void collector_stop(void);

/* The drain thread's id while it runs: the one with a Python thread state,
 * which the wall sampler leaves out. */
pthread_t collector_thread(void);

/* In a forked child, where the threads do not exist: forgets them, and
 * gives the wake lock (possibly held across fork) a fresh state.
 * Async-signal-safe. */
void collector_after_fork_child(void);

#endif
