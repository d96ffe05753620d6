/* wall: the wall-clock sampler thread.
 *
 * Invariants:
 * - Thread states and frames are read only while this thread holds the
 *   GIL. A thread must hold the GIL to push or pop a Python frame or to
 *   delete its thread state, so none of what we read can change or be
 *   freed under us, whatever the thread is doing in C or in the kernel.
 * - A thread's cached stack is location ids, not code pointers: it stays
 *   valid after the code objects die.
 * - The only state touched without the GIL is W.stop (under W.lock) and
 *   the atomics W.gc_active and W.skipped_ticks. */
#include "wall.h"

#include "labels.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "collect.h"
#include "frames.h"
#include "grow.h"
#include "htab.h"
#include "ring.h"
#include "sampler.h"
#include "tctx.h"

typedef struct {
    PyThreadState *ts;   /* identity, with ident */
    unsigned long ident; /* pthread_t of the thread */
    int32_t tid;         /* native thread id */
    int64_t last_cpu;    /* thread CPU at the previous tick, -1 unknown */
    int64_t walked_cpu;  /* thread CPU when `stack` was read, -1 never */
    int64_t gc_ns;       /* wall time already charged to <gc> */
    int named;           /* its threading.Thread name was recorded, or we
                            gave up looking (not a threading.Thread) */
    int identify_tries;  /* lookups so far */
    int64_t off_carry;   /* off-CPU ns owed (negative: CPU clock ran ahead) */
    int64_t count_carry; /* off-CPU ns not yet turned into a whole count */
    uint64_t seen;       /* tick generation that last saw it */
    uint32_t depth;      /* location ids in stack */
    uint32_t *stack;     /* cached stack, max_depth + 8 ids */
} wall_thread_t;

typedef struct {
    collect_session_t *session; /* where samples go (module.c's) */
    uint64_t period_ns;
    uint32_t max_depth;
    int on_cpu_sampler;    /* sampler.c delivers on-CPU samples */
    unsigned long ignored; /* pthread id of samprof's collector, 0 */
    pthread_t thread;
    int running;            /* GIL */
    PyThreadState *self_ts; /* the sampler's own thread state */

    pthread_mutex_t lock; /* protects stop */
    pthread_cond_t cond;  /* signalled by wall_stop */
    int stop;

    /* Sampled threads. GIL. */
    wall_thread_t *threads;
    size_t n_threads, cap_threads;
    htab_t index; /* (ts, ident) -> index */
    uint64_t generation;
    ring_frame_t *frames; /* scratch for frames_walk, max_depth */

    /* GC in progress. gc_active is read by the sampler without the GIL to
     * skip a tick instead of waiting the whole collection for the GIL. */
    _Atomic int gc_active;
    _Atomic uint64_t skipped_ticks;
    PyThreadState *gc_ts;  /* GIL */
    int64_t gc_charged_ns; /* GC time charged up to this instant. GIL */
    int64_t gc_start_wall; /* with the CPU sampler: when the GC began */
    int64_t gc_start_cpu;  /* ... and the thread's CPU time then. GIL */
    uint32_t gc_depth;     /* GIL */
    uint32_t *gc_stack;    /* stack at GC start with <gc> on top. GIL */

    wall_stats_t stats; /* GIL */
} wall_state_t;

/* Global: the GC callbacks reach it without context. */
static wall_state_t W = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* CPU time of the thread with this pthread id, or -1. The thread is alive:
 * its thread state is in the interpreter's list and we hold the GIL. */
static int64_t
wall_thread_cpu(unsigned long ident)
{
    clockid_t clock;
    if (pthread_getcpuclockid((pthread_t)ident, &clock) != 0) {
        return -1;
    }
    return clock_ns(clock);
}

/* Finds the threading.Thread of the thread with pthread id ident and
 * records its name in the profile, so threads that end before the profile
 * does are still named. Returns its native id (tid if already known; 3.9
 * and 3.10 keep none in the thread state). Runs Python code, which may
 * let other threads run and end: no thread state may be held across it.
 * GIL. */
static int32_t
wall_identify(unsigned long ident, int32_t tid, int *named)
{
    PyObject *name = NULL;
    PyObject *active = collect_threading_active();
    if (active != NULL) {
        PyObject *key = PyLong_FromUnsignedLong(ident);
        PyObject *t = key ? PyDict_GetItem(active, key) : NULL;
        if (t != NULL) {
            Py_INCREF(t);
            PyObject *nid = PyObject_GetAttrString(t, "native_id");
            if (tid == 0 && nid != NULL && PyLong_Check(nid)) {
                tid = (int32_t)PyLong_AsLong(nid);
            }
            Py_XDECREF(nid);
            name = PyObject_GetAttrString(t, "name");
            Py_DECREF(t);
        }
        Py_XDECREF(key);
        Py_DECREF(active);
    }
    PyErr_Clear();
    Py_ssize_t len;
    const char *utf8 = name && PyUnicode_Check(name)
                           ? PyUnicode_AsUTF8AndSize(name, &len)
                           : NULL;
    if (utf8 != NULL && tid != 0) {
        profile_t *p = &W.session->profile;
        profile_thread_t *pt = profile_thread(p, tid);
        if (pt != NULL) {
            pt->name = profile_string(p, utf8, (size_t)len);
            pt->resolved = 1;
            *named = 1;
        }
    }
    PyErr_Clear();
    Py_XDECREF(name);
    return tid;
}

static int32_t
wall_native_id(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030B0000
    return (int32_t)ts->native_thread_id;
#else
    (void)ts;
    return 0; /* learned by wall_identify_new_threads */
#endif
}

/* The index of ts's table entry, created on first sight; -1 when out of
 * memory. Runs no Python code. GIL. */
static Py_ssize_t
wall_thread_index(PyThreadState *ts)
{
    struct {
        void *ts;
        unsigned long ident;
    } key = {ts, ts->thread_id};
    uint64_t idx;
    if (htab_get(&W.index, &key, sizeof(key), &idx)) {
        return (Py_ssize_t)idx;
    }
    if (GROW(W.threads, W.cap_threads, W.n_threads + 1) < 0) {
        return -1;
    }
    uint32_t *stack = malloc(((size_t)W.max_depth + 8) * sizeof(uint32_t));
    if (stack == NULL
        || htab_put(&W.index, &key, sizeof(key), W.n_threads) < 0) {
        free(stack);
        return -1;
    }
    wall_thread_t *th = &W.threads[W.n_threads];
    memset(th, 0, sizeof(*th));
    th->ts = ts;
    th->ident = ts->thread_id;
    th->tid = wall_native_id(ts);
    th->last_cpu = -1;
    th->walked_cpu = -1;
    th->stack = stack;
    W.stats.threads_seen++;
    return (Py_ssize_t)W.n_threads++;
}

/* Names the threads not named yet (and, on 3.9/3.10, learns their native
 * ids). Runs after a tick's walk over thread states, because the Python
 * code it runs may let threads end. GIL. */
static void
wall_identify_new_threads(void)
{
    for (size_t i = 0; i < W.n_threads; i++) {
        if (W.threads[i].named) {
            continue;
        }
        struct {
            void *ts;
            unsigned long ident;
        } key = {W.threads[i].ts, W.threads[i].ident};
        int named = 0;
        int32_t tid = wall_identify(key.ident, W.threads[i].tid, &named);
        /* Python ran: the table may have changed; find the entry again. */
        uint64_t idx;
        if (!htab_get(&W.index, &key, sizeof(key), &idx)) {
            continue;
        }
        /* A Thread appears in threading._active once it runs; a thread
         * that never does is not a threading.Thread: stop looking. */
        W.threads[idx].named = named || ++W.threads[idx].identify_tries >= 50;
        if (tid != 0) {
            W.threads[idx].tid = tid;
        }
    }
}

static void
wall_forget_unseen(void)
{
    for (size_t i = 0; i < W.n_threads;) {
        wall_thread_t *th = &W.threads[i];
        if (th->seen == W.generation) {
            i++;
            continue;
        }
        struct {
            void *ts;
            unsigned long ident;
        } key = {th->ts, th->ident};
        htab_del(&W.index, &key, sizeof(key));
        free(th->stack);
        W.n_threads--;
        if (i != W.n_threads) {
            W.threads[i] = W.threads[W.n_threads];
            struct {
                void *ts;
                unsigned long ident;
            } moved = {W.threads[i].ts, W.threads[i].ident};
            htab_put(&W.index, &moved, sizeof(moved), i);
        }
    }
}


/* Adds `spent` ns of ts's collection as a "<gc>" sample on top of the
 * stack that triggered it, and remembers it in th->gc_ns so the thread's
 * own samples leave that time out. GIL. */
static void
wall_gc_add(wall_thread_t *th, PyThreadState *ts, int64_t spent, int on_cpu)
{
    if (spent <= 0) {
        return;
    }
    th->gc_ns += spent;
    int64_t count = (spent + (int64_t)W.period_ns / 2) / (int64_t)W.period_ns;
    collect_add(W.session, W.gc_stack, W.gc_depth, th->tid, labels_of(ts),
                collect_state_string(W.session, on_cpu), count, spent);
    W.stats.gc_samples += (uint64_t)count;
}

/* Charges the collection running in ts since the last charge to "<gc>"
 * on top of the stack that triggered it, and remembers it in th->gc_ns so
 * the thread's own samples leave that time out. GIL. */
static void
wall_gc_charge(wall_thread_t *th, PyThreadState *ts)
{
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    int64_t spent = now - W.gc_charged_ns;
    W.gc_charged_ns = now;
    wall_gc_add(th, ts, spent, 1);
}

/* A thread whose on-CPU time arrives as signal samples taken where it
 * ran: its sample here is only the rest of the interval (value, less the
 * CPU it used and the time charged to <gc>), carried until it is positive
 * and counted in whole periods. GIL. */
static void
wall_add_off_cpu(wall_thread_t *th, PyThreadState *ts, int64_t value,
                 int64_t used)
{
    th->off_carry += value - used - th->gc_ns;
    th->gc_ns = 0;
    if (th->off_carry <= 0) {
        return; /* used CPU the whole time (clock jitter kept) */
    }
    value = th->off_carry;
    th->off_carry = 0;
    th->count_carry += value;
    int64_t count = th->count_carry / (int64_t)W.period_ns;
    th->count_carry -= count * (int64_t)W.period_ns;
    collect_add(W.session, th->stack, th->depth, th->tid, labels_of(ts),
                collect_state_string(W.session, 0), count, value);
    W.stats.samples++;
}

/* The sample of one thread for a tick that stands for ticks periods,
 * its stack read again if the thread ran since the last read. GIL. */
static void
wall_sample_thread(PyThreadState *ts, uint64_t ticks)
{
    Py_ssize_t idx = wall_thread_index(ts);
    if (idx < 0) {
        return;
    }
    wall_thread_t *th = &W.threads[idx];
    th->seen = W.generation;
    int64_t cpu = wall_thread_cpu(th->ident);
    int64_t used = cpu >= 0 && th->last_cpu >= 0 ? cpu - th->last_cpu : 0;
    int first = th->last_cpu < 0;
    th->last_cpu = cpu;
    if (cpu < 0 || cpu != th->walked_cpu || th->walked_cpu < 0) {
        /* The thread ran since we last read its stack (or we never
         * did): read it again. Detached threads cannot change it now. */
        uint16_t flags = 0;
        int depth = frames_walk(ts, W.frames, (int)W.max_depth, &flags);
        if (flags & RING_TORN) {
            return; /* never seen under the GIL; kept as a guard */
        }
        th->depth = collect_stack(W.session, W.frames, (uint16_t)depth, flags,
                                  th->stack);
        th->walked_cpu = cpu;
        W.stats.walks++;
    }
    if (first || th->tid == 0) {
        /* How the thread spent the time before we first saw it is
         * unknown: start accounting from here. (tid 0: its native id
         * is learned after this tick, on 3.9 and 3.10.) */
        return;
    }
    int64_t value = (int64_t)(ticks * W.period_ns);
    if (W.on_cpu_sampler && sampler_thread_armed(th->tid)) {
        wall_add_off_cpu(th, ts, value, used);
        return;
    }
    if (ts == W.gc_ts) {
        /* The sampler got the GIL in the middle of a collection (a gc
         * callback ran Python code): charge <gc> up to now. */
        wall_gc_charge(th, ts);
    }
    value -= th->gc_ns;
    if (value <= 0) {
        /* The whole interval was charged to <gc>; carry the rest. */
        th->gc_ns = -value;
        return;
    }
    th->gc_ns = 0;
    /* count is the periods the sample stands for: ticks delayed by a
     * GIL holder are accounted, not lost. */
    collect_add(W.session, th->stack, th->depth, th->tid, labels_of(ts),
                collect_state_string(W.session, used > 0),
                (int64_t)((uint64_t)value / W.period_ns), value);
    W.stats.samples++;
}

/* One tick: a sample for every Python thread but ours. GIL. */
static void
wall_tick(uint64_t ticks)
{
    W.generation++;
    W.stats.ticks += ticks;
    PyInterpreterState *interp = W.self_ts->interp;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        if (ts == W.self_ts
            || (W.ignored != 0 && ts->thread_id == W.ignored)) {
            continue; /* samprof's own threads */
        }
        wall_sample_thread(ts, ticks);
    }
    wall_forget_unseen();
    wall_identify_new_threads();
}

static int
wall_should_stop(void)
{
    pthread_mutex_lock(&W.lock);
    int stop = W.stop;
    pthread_mutex_unlock(&W.lock);
    return stop;
}

static void *
wall_main(void *arg)
{
    (void)arg;
    /* Signals are for the application's threads. */
    sigset_t mask;
    sigfillset(&mask);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);

    /* The CPU sampler's signals on this thread are samprof's own. */
    tctx_mark_samprof_thread();
    PyGILState_STATE gil = PyGILState_Ensure();
    W.self_ts = PyThreadState_Get();
    PyThreadState *ts = PyEval_SaveThread();

    int64_t next = clock_ns(CLOCK_MONOTONIC) + (int64_t)W.period_ns;
    for (;;) {
        pthread_mutex_lock(&W.lock);
        while (!W.stop) {
            struct timespec deadline = clock_timespec(next);
            int err = pthread_cond_timedwait(&W.cond, &W.lock, &deadline);
            if (err == ETIMEDOUT) {
                break;
            }
        }
        int stop = W.stop;
        pthread_mutex_unlock(&W.lock);
        if (stop) {
            break;
        }
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        uint64_t ticks = 1;
        if (now > next) {
            ticks += (uint64_t)((now - next) / (int64_t)W.period_ns);
        }
        next += (int64_t)(ticks * W.period_ns);
        if (atomic_load(&W.gc_active)) {
            /* A collection holds the GIL: account the tick later instead
             * of queueing behind it. */
            atomic_fetch_add(&W.skipped_ticks, ticks);
            continue;
        }
        PyEval_RestoreThread(ts);
        int64_t got = clock_ns(CLOCK_MONOTONIC);
        if (got > next) {
            /* Waiting for the GIL took whole periods: they are part of
             * this tick, not lost. */
            uint64_t late =
                (uint64_t)((got - next) / (int64_t)W.period_ns) + 1;
            ticks += late;
            next += (int64_t)(late * W.period_ns);
            W.stats.late_ticks += late;
        }
        ticks += atomic_exchange(&W.skipped_ticks, 0);
        if (!wall_should_stop()) {
            wall_tick(ticks);
        }
        ts = PyEval_SaveThread();
    }
    PyEval_RestoreThread(ts);
    W.self_ts = NULL;
    PyGILState_Release(gil);
    return NULL;
}

int
wall_start(collect_session_t *session, uint64_t period_ns, uint32_t max_depth,
           int on_cpu_sampler, unsigned long ignored_thread)
{
    if (W.running) {
        PyErr_SetString(PyExc_RuntimeError, "wall sampler already running");
        return -1;
    }
    W.session = session;
    W.period_ns = period_ns;
    W.max_depth = max_depth;
    W.on_cpu_sampler = on_cpu_sampler;
    W.ignored = ignored_thread;
    W.stop = 0;
    W.generation = 0;
    W.n_threads = 0;
    memset(&W.stats, 0, sizeof(W.stats));
    atomic_store(&W.gc_active, 0);
    atomic_store(&W.skipped_ticks, 0);
    W.gc_ts = NULL;
    W.frames = malloc((size_t)max_depth * sizeof(ring_frame_t));
    W.gc_stack = malloc(((size_t)max_depth + 8) * sizeof(uint32_t));
    if (W.frames == NULL || W.gc_stack == NULL
        || htab_init(&W.index, 64) < 0) {
        free(W.frames);
        free(W.gc_stack);
        W.frames = NULL;
        W.gc_stack = NULL;
        PyErr_NoMemory();
        return -1;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&W.cond, &attr);
    pthread_condattr_destroy(&attr);
    int err = pthread_create(&W.thread, NULL, wall_main, NULL);
    if (err != 0) {
        pthread_cond_destroy(&W.cond);
        htab_free(&W.index);
        free(W.frames);
        free(W.gc_stack);
        W.frames = NULL;
        W.gc_stack = NULL;
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    W.running = 1;
    return 0;
}

void
wall_stop(void)
{
    if (!W.running) {
        return;
    }
    pthread_mutex_lock(&W.lock);
    W.stop = 1;
    pthread_cond_signal(&W.cond);
    pthread_mutex_unlock(&W.lock);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(W.thread, NULL);
    Py_END_ALLOW_THREADS
    pthread_cond_destroy(&W.cond);
    for (size_t i = 0; i < W.n_threads; i++) {
        free(W.threads[i].stack);
    }
    free(W.threads);
    W.threads = NULL;
    W.n_threads = W.cap_threads = 0;
    htab_free(&W.index);
    free(W.frames);
    free(W.gc_stack);
    W.frames = NULL;
    W.gc_stack = NULL;
    W.running = 0;
}

void
wall_gc_begin(void)
{
    PyThreadState *ts = PyThreadState_Get();
    if (!W.running || W.gc_ts != NULL || ts == W.self_ts) {
        return; /* (a collection in the sampler itself is its own cost) */
    }
    uint16_t flags = RING_IN_GC;
    int depth = frames_walk(ts, W.frames, (int)W.max_depth, &flags);
    if (flags & RING_TORN) {
        return;
    }
    W.gc_depth =
        collect_stack(W.session, W.frames, (uint16_t)depth, flags, W.gc_stack);
    W.gc_ts = ts;
    W.gc_charged_ns = clock_ns(CLOCK_MONOTONIC);
    W.gc_start_wall = W.gc_charged_ns;
    W.gc_start_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    /* With the CPU sampler the sampler thread must still wait for the
     * GIL: the thread's off-CPU share of the collection is charged at its
     * end, below. */
    atomic_store(&W.gc_active, !W.on_cpu_sampler);
}

void
wall_gc_end(void)
{
    if (!W.running || W.gc_ts != PyThreadState_Get()) {
        return;
    }
    atomic_store(&W.gc_active, 0);
    PyThreadState *ts = W.gc_ts;
    W.gc_ts = NULL;
    Py_ssize_t idx = wall_thread_index(ts);
    if (idx < 0) {
        return;
    }
    wall_thread_t *th = &W.threads[idx];
    th->seen = W.generation;
    /* Whether the CPU sampler takes this thread's on-CPU time, asked of
     * the sampler now: a thread it armed since the last tick had its
     * collection sampled by the signals already, and charging it here too
     * would count it twice (the first collection of a profile came out
     * 10 ms too long that way). The collection runs on this very thread,
     * so its id is ours. */
    int32_t tid = th->tid != 0 ? th->tid : tctx_tid();
    if (!W.on_cpu_sampler || !sampler_thread_armed(tid)) {
        /* The sampler accounts this interval to the thread at its next
         * tick; the GC's share is taken out of it there. */
        wall_gc_charge(th, ts);
        return;
    }
    /* The CPU sampler saw the on-CPU part of the collection (with <gc> on
     * top). The rest, preempted or waiting, is off-CPU time in <gc>. */
    int64_t wall = clock_ns(CLOCK_MONOTONIC) - W.gc_start_wall;
    int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - W.gc_start_cpu;
    wall_gc_add(th, ts, wall - cpu, 0);
}

void
wall_get_stats(wall_stats_t *out)
{
    *out = W.stats;
}

void
wall_new_part(void)
{
    for (size_t i = 0; i < W.n_threads; i++) {
        W.threads[i].named = 0;
        W.threads[i].identify_tries = 0;
    }
}

void
wall_after_fork_child(void)
{
    /* Abandon (do not free) the parent's state; the lock may be held. */
    W.running = 0;
    W.threads = NULL;
    W.n_threads = W.cap_threads = 0;
    memset(&W.index, 0, sizeof(W.index));
    W.frames = NULL;
    W.gc_stack = NULL;
    W.gc_ts = NULL;
    atomic_store(&W.gc_active, 0);
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&W.lock, &fresh, sizeof(fresh));
}
