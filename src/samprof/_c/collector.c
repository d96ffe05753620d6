/* collector: the CPU profiler's collector thread (collector.h). */
#include "collector.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ring.h"
#include "sampler.h"
#include "tctx.h"

#define COLLECTOR_MIN_NS 10000000L
#define COLLECTOR_MAX_NS 100000000L

typedef struct {
    pthread_t round;            /* rescans and spills: never takes the GIL */
    pthread_t drain;            /* takes the GIL and drains */
    int started;                /* between start and stop. GIL */
    collect_session_t *session; /* drained into. GIL */
    int signum;                 /* the one signal the threads accept */
    long interval_ns;           /* round period */
    pthread_mutex_t wake_lock;  /* protects stop and work */
    pthread_cond_t wake_cond;   /* wakes the round thread: stop */
    pthread_cond_t work_cond;   /* wakes the drain thread: work or stop */
    int stop;
    int work; /* the ring or its backlog holds samples */
} collector_state_t;

/* The thread scan gets at most one part in SCAN_SHARE of a CPU. */
#define SCAN_SHARE 200

/* Global: one collector per process, like the sampler it drains. */
static collector_state_t K = {.wake_lock = PTHREAD_MUTEX_INITIALIZER};

long
collector_interval_ns(size_t ring_slots, int hz)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double fill_s =
        (double)ring_slots / ((double)hz * (double)(cpus > 0 ? cpus : 1));
    long interval = (long)(fill_s / 8 * 1e9);
    return interval < COLLECTOR_MIN_NS   ? COLLECTOR_MIN_NS
           : interval > COLLECTOR_MAX_NS ? COLLECTOR_MAX_NS
                                         : interval;
}

/* What both threads do first: only our sampling signal may interrupt them
 * (process-directed signals, SIGINT, SIGTERM..., go to the application's
 * threads), and their samples and allocations are samprof's own. */
static void
collector_thread_init(void)
{
    sigset_t mask;
    sigfillset(&mask);
    sigdelset(&mask, K.signum);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    tctx_mark_samprof_thread();
}

/* Every round: arms new threads, moves samples out of a ring that is a
 * quarter full into its backlog (the drain thread may be waiting for a GIL
 * that a long C call holds), and wakes the drain thread. Runs no Python
 * code and never waits for the GIL, so a GIL held for seconds loses no
 * sample until the backlog is full. */
static void *
collector_round_main(void *arg)
{
    (void)arg;
    collector_thread_init();
    ring_t *ring = sampler_ring();
    int64_t scan_at = 0;
    pthread_mutex_lock(&K.wake_lock);
    while (!K.stop) {
        struct timespec deadline =
            clock_timespec(clock_ns(CLOCK_REALTIME) + K.interval_ns);
        pthread_cond_timedwait(&K.wake_cond, &K.wake_lock, &deadline);
        if (K.stop) {
            break;
        }
        pthread_mutex_unlock(&K.wake_lock);
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        if (now >= scan_at) {
            /* A scan lists /proc/self/task: about a microsecond a thread.
             * Threads that threading starts arm themselves at once; the
             * scan finds the others, which can wait: it is left for
             * SCAN_SHARE times as long as it took (2,000 threads: every
             * 0.6 s, not every round). */
            sampler_scan_threads();
            scan_at = now + (clock_ns(CLOCK_MONOTONIC) - now) * SCAN_SHARE;
        }
        (void)ring_spill(ring, ring_capacity(ring) / 4);
        int work = ring_pending(ring) != 0;
        pthread_mutex_lock(&K.wake_lock);
        if (work && !K.work) {
            K.work = 1;
            pthread_cond_signal(&K.work_cond);
        }
    }
    pthread_mutex_unlock(&K.wake_lock);
    return NULL;
}

/* Drains into the session whenever the round thread finds samples. */
static void *
collector_drain_main(void *arg)
{
    (void)arg;
    collector_thread_init();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *ts = PyEval_SaveThread();
    pthread_mutex_lock(&K.wake_lock);
    for (;;) {
        while (!K.work && !K.stop) {
            pthread_cond_wait(&K.work_cond, &K.wake_lock);
        }
        if (K.stop) {
            break;
        }
        K.work = 0;
        pthread_mutex_unlock(&K.wake_lock);
        PyEval_RestoreThread(ts);
        collect_drain(K.session, sampler_ring(), 0);
        collect_resolve_thread_names(K.session);
        ts = PyEval_SaveThread();
        pthread_mutex_lock(&K.wake_lock);
    }
    pthread_mutex_unlock(&K.wake_lock);
    PyEval_RestoreThread(ts);
    PyGILState_Release(gil);
    return NULL;
}

int
collector_start(collect_session_t *session, int signum, long interval_ns)
{
    K.session = session;
    K.signum = signum;
    K.interval_ns = interval_ns;
    K.stop = 0;
    K.work = 0;
    pthread_cond_init(&K.wake_cond, NULL);
    pthread_cond_init(&K.work_cond, NULL);
    int err = pthread_create(&K.drain, NULL, collector_drain_main, NULL);
    if (err == 0) {
        err = pthread_create(&K.round, NULL, collector_round_main, NULL);
        if (err != 0) {
            pthread_mutex_lock(&K.wake_lock);
            K.stop = 1;
            pthread_cond_signal(&K.work_cond);
            pthread_mutex_unlock(&K.wake_lock);
            Py_BEGIN_ALLOW_THREADS
            pthread_join(K.drain, NULL);
            Py_END_ALLOW_THREADS
        }
    }
    if (err != 0) {
        pthread_cond_destroy(&K.wake_cond);
        pthread_cond_destroy(&K.work_cond);
        errno = err;
        return -1;
    }
    K.started = 1;
    return 0;
}

void
collector_stop(void)
{
    if (!K.started) {
        return;
    }
    pthread_mutex_lock(&K.wake_lock);
    K.stop = 1;
    pthread_cond_signal(&K.wake_cond);
    pthread_cond_signal(&K.work_cond);
    pthread_mutex_unlock(&K.wake_lock);
    /* The drain thread needs the GIL to finish its drain. */
    Py_BEGIN_ALLOW_THREADS
    pthread_join(K.round, NULL);
    pthread_join(K.drain, NULL);
    Py_END_ALLOW_THREADS
    K.started = 0;
    pthread_cond_destroy(&K.wake_cond);
    pthread_cond_destroy(&K.work_cond);
    K.session = NULL;
}

pthread_t
collector_thread(void)
{
    return K.drain;
}

void
collector_after_fork_child(void)
{
    K.started = 0;
    K.session = NULL;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&K.wake_lock, &fresh, sizeof(fresh));
}
