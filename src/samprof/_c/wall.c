/* wall: the wall-clock sampler thread.
 *
 * Invariants:
 * - Thread states and frames are read only while this thread holds the
 *   GIL. A thread must hold the GIL to push or pop a Python frame or to
 *   delete its thread state, so none of what we read can change or be
 *   freed under us, whatever the thread is doing in C or in the kernel.
 * - A thread's cached stack is location ids, not code pointers: it stays
 *   valid after the code objects die.
 * - A thread is known by its thread state's address and id together:
 *   thread-per-request servers start thread after thread whose state and
 *   pthread id are the dead one's, reused.
 * - The only state touched without the GIL is W.stop and W.probe_at
 *   (under W.lock) and the atomics W.gc_active and W.skipped_ticks.
 *
 * Young threads. A sample at a tick stands for the period before it, and
 * ticks fall at random instants of a thread's life, so the sum is right on
 * average however short the thread. A thread-per-request server's threads
 * live a period or less, though, and a 5 ms request at 100 Hz is then seen
 * by one tick or none: right only in the mean of thousands. So a thread
 * that threading starts tells us (wall_thread_started), and for its first
 * period it is probed PROBES_PER_PERIOD times as often, at instants drawn
 * at a random phase from its start, each probe standing for the probe
 * interval; ticks count for it from the end of that period on. Every
 * instant of its life is then covered at the same density, and its first
 * period, the whole of a short request, is sampled finely.
 *
 * Idle threads. Most threads of a server wait, and a waiting thread's
 * sample is the same at every tick. Reading its CPU clock (a system call)
 * and walking its frames cost 1.2 us a thread a tick with 2,000 threads
 * here. So at most ticks only its position is read (frames_position: the
 * top frame, its code and instruction, the top of the frame stack) and
 * compared with the one at its last full look. If that look found it idle
 * (its CPU clock had not moved) and its position, labels and GC time are
 * the same, its time is added up in `pending` and the profile is not
 * touched. The full look (CPU clock, and frames if the clock moved) comes
 * when any of that changes, and at least every WALL_CHECK_NS at random
 * instants; the pending time then goes on its stack as one sample, with
 * the CPU the clock says it used. A thread that runs Python code between
 * two ticks and is back at the same position (a wait in a loop) is found
 * out at the next full look, and from there looked at fully at every tick
 * again until a look finds it idle. The pending time is also added when
 * the thread ends and when a part of the profile ends (wall_flush). */
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

/* A thread's identity: its thread state and that state's unique id. */
typedef struct {
    void *ts;
    uint64_t id;
} wall_key_t;

typedef struct {
    wall_key_t key;
    unsigned long ident; /* pthread_t of the thread */
    int32_t tid;         /* native thread id */
    int64_t last_cpu;    /* thread CPU at the previous tick, -1 unknown */
    int64_t gc_ns;       /* wall time already charged to <gc> */
    int named;           /* its threading.Thread name was recorded, or we
                            gave up looking (not a threading.Thread) */
    int identify_tries;  /* lookups so far */
    int64_t off_carry;   /* off-CPU ns owed (negative: CPU clock ran ahead) */
    int64_t count_carry; /* off-CPU ns not yet turned into a whole count */
    uint64_t seen;       /* tick generation that last saw it */
    int64_t ticks_from;  /* ticks due before this instant are not its */
    int64_t probe_next;  /* its next probe; young while < ticks_from */
    uint32_t depth;      /* location ids in stack */
    uint32_t *stack;     /* cached stack, max_depth + 8 ids */
    uint32_t labels;     /* label set of the samples on `stack` */
    int64_t pending;     /* ns deferred on `stack` (see the top) */
    frames_pos_t pos;    /* its position at the last full look */
    int idle;            /* it had used no CPU at the last full look */
    int64_t check_at;    /* its next full look, at the latest */
    /* The frames `stack` was made from, raw_ok once read; raw_deaths is
     * the session's code_deaths then (a code address may be reused after
     * a death). */
    int raw_ok;
    uint16_t raw_depth, raw_flags, raw_cap;
    uint64_t raw_deaths;
    ring_frame_t *raw;
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
    htab_t index;    /* wall_key_t -> index */
    uint32_t *order; /* the index of the k-th thread state last tick */
    size_t n_order, cap_order;
    uint64_t generation;
    int64_t last_tick_at; /* when the last tick fell due */
    ring_frame_t *frames; /* scratch for frames_walk, max_depth */

    /* Young threads' probes (see the top). probe_ns 0: none, the rate is
     * high enough. */
    int64_t probe_ns;
    int64_t probe_at; /* the earliest probe due, INT64_MAX none. W.lock */
    size_t n_young;   /* young threads, at most (a hint). GIL */
    uint64_t rng;     /* probe phases. GIL */

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

/* Probes in a young thread's first period, and their closest spacing. */
#define PROBES_PER_PERIOD 10
#define PROBE_MIN_NS 1000000

/* The longest between two full looks at an idle thread (see the top). */
#define WALL_CHECK_NS 500000000

/* Global: the GC callbacks reach it without context. */
static wall_state_t W = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* CPU time of the thread with this pthread id, or -1. The thread is alive:
 * its thread state is in the interpreter's list and we hold the GIL. */
static int64_t
wall_thread_cpu(unsigned long ident)
{
    clockid_t clock;
    if (ident == 0 || pthread_getcpuclockid((pthread_t)ident, &clock) != 0) {
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

static wall_key_t
wall_key(PyThreadState *ts)
{
    wall_key_t key;
    memset(&key, 0, sizeof(key)); /* hashed as bytes: no stray padding */
    key.ts = ts;
    key.id = ts->id;
    return key;
}

/* The index of ts's table entry, or -1 when it has none. GIL. */
static Py_ssize_t
wall_thread_find(PyThreadState *ts)
{
    wall_key_t key = wall_key(ts);
    uint64_t idx;
    return htab_get(&W.index, &key, sizeof(key), &idx) ? (Py_ssize_t)idx : -1;
}

/* The index of ts's table entry, created on first sight (*created set);
 * -1 when out of memory. Runs no Python code. GIL. */
static Py_ssize_t
wall_thread_index(PyThreadState *ts, int *created)
{
    *created = 0;
    Py_ssize_t found = wall_thread_find(ts);
    if (found >= 0) {
        return found;
    }
    wall_key_t key = wall_key(ts);
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
    th->key = key;
    th->ident = ts->thread_id;
    th->tid = wall_native_id(ts);
    th->last_cpu = -1;
    th->seen = W.generation;
    th->stack = stack;
    W.stats.threads_seen++;
    *created = 1;
    return (Py_ssize_t)W.n_threads++;
}

/* wall_thread_index for the k-th thread state of this tick: the list's
 * order rarely changes between ticks, so the entry of the k-th one last
 * time is tried first, sparing a hash lookup. GIL. */
static Py_ssize_t
wall_thread_at(PyThreadState *ts, size_t k)
{
    if (k < W.n_order) {
        uint32_t guess = W.order[k];
        if (guess < W.n_threads && W.threads[guess].key.ts == (void *)ts
            && W.threads[guess].key.id == ts->id) {
            return (Py_ssize_t)guess;
        }
    }
    int created;
    Py_ssize_t idx = wall_thread_index(ts, &created);
    if (idx < 0 || GROW(W.order, W.cap_order, k + 1) < 0) {
        return idx;
    }
    W.order[k] = (uint32_t)idx;
    if (k >= W.n_order) {
        W.n_order = k + 1;
    }
    return idx;
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
        wall_key_t key = W.threads[i].key;
        int named = 0;
        int32_t tid =
            wall_identify(W.threads[i].ident, W.threads[i].tid, &named);
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

static void wall_flush_thread(wall_thread_t *th, int64_t used);

static void
wall_forget_unseen(void)
{
    for (size_t i = 0; i < W.n_threads;) {
        wall_thread_t *th = &W.threads[i];
        if (th->seen == W.generation) {
            i++;
            continue;
        }
        /* It ended since the last tick, without telling us (threading's
         * do: wall_thread_exiting): its CPU clock is gone with it. */
        wall_flush_thread(th, 0);
        htab_del(&W.index, &th->key, sizeof(th->key));
        free(th->stack);
        free(th->raw);
        W.n_threads--;
        if (i != W.n_threads) {
            W.threads[i] = W.threads[W.n_threads];
            htab_put(&W.index, &W.threads[i].key, sizeof(W.threads[i].key), i);
        }
    }
}

static int
wall_young(const wall_thread_t *th)
{
    return th->probe_next < th->ticks_from;
}

/* Counts the young threads and publishes the earliest probe due, for the
 * sampler's next wait. GIL. */
static void
wall_schedule_probes(void)
{
    int64_t at = INT64_MAX;
    size_t young = 0;
    for (size_t i = 0; i < W.n_threads; i++) {
        if (wall_young(&W.threads[i])) {
            young++;
            if (W.threads[i].probe_next < at) {
                at = W.threads[i].probe_next;
            }
        }
    }
    W.n_young = young;
    pthread_mutex_lock(&W.lock);
    W.probe_at = at;
    pthread_mutex_unlock(&W.lock);
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

/* Adds value ns on th's current stack, counted in whole periods (the
 * remainder carried to its next sample). GIL. */
static void
wall_add(wall_thread_t *th, int64_t value, int on_cpu)
{
    th->count_carry += value;
    int64_t count = th->count_carry / (int64_t)W.period_ns;
    th->count_carry -= count * (int64_t)W.period_ns;
    collect_add(W.session, th->stack, th->depth, th->tid, th->labels,
                collect_state_string(W.session, on_cpu), count, value);
}

/* A thread whose on-CPU time arrives as signal samples taken where it
 * ran: its sample here is only the rest of the interval (value, less the
 * CPU it used and the time charged to <gc>), carried until it is positive.
 * GIL. */
static void
wall_add_off_cpu(wall_thread_t *th, int64_t value, int64_t used)
{
    th->off_carry += value - used - th->gc_ns;
    th->gc_ns = 0;
    if (th->off_carry <= 0) {
        return; /* used CPU the whole time (clock jitter kept) */
    }
    value = th->off_carry;
    th->off_carry = 0;
    wall_add(th, value, 0);
}

/* Adds th's deferred time on its stack, `used` ns of it on CPU (the CPU
 * sampler's threads get theirs from its signals). GIL. */
static void
wall_flush_thread(wall_thread_t *th, int64_t used)
{
    int64_t value = th->pending;
    if (value <= 0) {
        return;
    }
    th->pending = 0;
    if (W.on_cpu_sampler && sampler_thread_armed(th->tid)) {
        wall_add_off_cpu(th, value, used);
        return;
    }
    used = used < 0 ? 0 : used > value ? value : used;
    if (used > 0) {
        wall_add(th, used, 1);
    }
    if (value > used) {
        wall_add(th, value - used, 0);
    }
}

/* Whether the frames frames_walk just read into W.frames are those th's
 * stack was made from. GIL. */
static int
wall_same_frames(const wall_thread_t *th, int depth, uint16_t flags)
{
    if (!th->raw_ok || th->raw_depth != depth || th->raw_flags != flags
        || th->raw_deaths != W.session->code_deaths) {
        return 0;
    }
    for (int i = 0; i < depth; i++) {
        if (th->raw[i].code != W.frames[i].code
            || th->raw[i].offset != W.frames[i].offset) {
            return 0;
        }
    }
    return 1;
}

/* Makes th's stack from the frames in W.frames, and keeps them. GIL. */
static void
wall_read_stack(wall_thread_t *th, int depth, uint16_t flags)
{
    th->depth =
        collect_stack(W.session, W.frames, (uint16_t)depth, flags, th->stack);
    W.stats.walks++;
    th->raw_ok = 0;
    if (depth > th->raw_cap) {
        ring_frame_t *raw = realloc(th->raw, (size_t)depth * sizeof(*raw));
        if (raw == NULL) {
            return; /* compared as changed at every tick */
        }
        th->raw = raw;
        th->raw_cap = (uint16_t)depth;
    }
    if (depth > 0) {
        memcpy(th->raw, W.frames, (size_t)depth * sizeof(*th->raw));
    }
    th->raw_depth = (uint16_t)depth;
    th->raw_flags = flags;
    th->raw_deaths = W.session->code_deaths;
    th->raw_ok = 1;
}

/* What the sampler is doing at this wake: a tick (ticks periods due, the
 * last at `at`), or only young threads' probes; `now` is when it got the
 * GIL. */
typedef struct {
    uint64_t ticks; /* 0: probes only */
    int64_t at;
    int64_t now;
} wall_wake_t;

/* The time th's sample at this wake stands for: its probes due by now
 * while it is young, and the periods due since it stopped being young. */
static int64_t
wall_due(wall_thread_t *th, const wall_wake_t *wake)
{
    int64_t value = 0;
    if (wall_young(th)) {
        while (th->probe_next <= wake->now
               && th->probe_next < th->ticks_from) {
            value += W.probe_ns;
            th->probe_next += W.probe_ns;
        }
        if (!wall_young(th) && W.n_young > 0) {
            W.n_young--;
        }
    }
    if (wake->ticks > 0) {
        /* Due at at, at - period, ...: those from ticks_from on. */
        int64_t period = (int64_t)W.period_ns;
        int64_t first = wake->at - (int64_t)(wake->ticks - 1) * period;
        uint64_t n = wake->ticks;
        if (th->ticks_from > first) {
            n = wake->at < th->ticks_from
                    ? 0
                    : (uint64_t)((wake->at - th->ticks_from) / period) + 1;
        }
        value += (int64_t)n * period;
    }
    return value;
}

static void wall_record(wall_thread_t *th, PyThreadState *ts, int64_t value,
                        int64_t used, int cpu_unknown);
static uint64_t wall_random(void);

/* Whether th's time at this wake may be deferred (see the top): it had
 * used no CPU at the last full look (a thread that runs Python code in a
 * loop keeps its position too), nothing else asks for a full look now, and
 * it stands where it stood then. GIL. */
static int
wall_may_defer(const wall_thread_t *th, PyThreadState *ts,
               const wall_wake_t *wake, const frames_pos_t *pos)
{
    return th->idle && th->raw_ok && th->tid != 0 && th->gc_ns == 0
           && ts != W.gc_ts && !wall_young(th) && wake->now < th->check_at
           && frames_pos_equal(pos, &th->pos) && labels_of(ts) == th->labels;
}

/* The sample of one thread at this wake: deferred if it is idle, else
 * added, with its stack read again if it ran since the last read and its
 * frames are not those of the cached stack. GIL. */
static void
wall_sample_thread(PyThreadState *ts, Py_ssize_t idx, const wall_wake_t *wake)
{
    wall_thread_t *th = &W.threads[idx];
    th->seen = W.generation;
    if (th->ident != ts->thread_id) {
        /* Seen before it ran: from 3.11 the thread that starts a thread
         * makes its state, with its own pthread id until the new thread
         * binds it. Its clock and stack so far were not this thread's. */
        wall_flush_thread(th, 0);
        th->ident = ts->thread_id;
        th->tid = wall_native_id(ts);
        th->last_cpu = -1;
        th->raw_ok = 0;
        th->named = 0;
        th->identify_tries = 0;
    }
    int64_t value = wall_due(th, wake);
    if (value <= 0) {
        return;
    }
    frames_pos_t pos;
    frames_position(ts, &pos);
    if (wall_may_defer(th, ts, wake, &pos)) {
        th->pending += value;
        W.stats.samples++;
        W.stats.deferred++;
        return;
    }
    int64_t cpu = wall_thread_cpu(th->ident);
    /* A thread found here, not told of at its start nor there when the
     * profile started (one not started by threading), has an unknown
     * past: its CPU use is counted from now on. Its time is not: ticks
     * fall at random instants of its life. */
    int64_t used = cpu >= 0 && th->last_cpu >= 0 ? cpu - th->last_cpu : 0;
    int cpu_unknown = th->last_cpu < 0;
    int ran = cpu < 0 || cpu_unknown || used != 0 || !th->raw_ok;
    th->last_cpu = cpu;
    th->idle = !ran;
    if (ran) {
        /* Detached threads cannot change their frames now. */
        uint16_t flags = 0;
        int depth = frames_walk(ts, W.frames, (int)W.max_depth, &flags);
        if (flags & RING_TORN) {
            return; /* never seen under the GIL; kept as a guard */
        }
        if (th->pending > 0) {
            /* Its CPU time since the last read is put in this period
             * first: at the deferred ticks it stood where it waited. */
            int64_t now = used < value ? used : value;
            wall_flush_thread(th, used - now);
            used = now;
        }
        if (!wall_same_frames(th, depth, flags)) {
            wall_read_stack(th, depth, flags);
        }
    }
    else {
        wall_flush_thread(th, 0);
    }
    W.stats.samples++;
    th->pos = pos;
    th->labels = labels_of(ts);
    /* The next full look at a random instant in the second half of the
     * interval: ticks are shared by all threads, and so would the looks
     * be. */
    th->check_at = wake->now + WALL_CHECK_NS / 2
                   + (int64_t)(wall_random() % (WALL_CHECK_NS / 2));
    wall_record(th, ts, value, used, cpu_unknown);
}

/* Adds value ns, of which the thread used `used` on CPU, on th's cached
 * stack. GIL. */
static void
wall_record(wall_thread_t *th, PyThreadState *ts, int64_t value, int64_t used,
            int cpu_unknown)
{
    if (th->tid == 0) {
        /* Its native id is learned after this tick (3.9 and 3.10). */
        return;
    }
    if (W.on_cpu_sampler && sampler_thread_armed(th->tid)) {
        if (!cpu_unknown) {
            wall_add_off_cpu(th, value, used);
        }
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
    wall_add(th, value, used > 0);
}

/* One wake: at a tick, a sample for every Python thread but ours; for
 * probes only, one for each young thread that has a probe due. GIL. */
static void
wall_wake(const wall_wake_t *wake)
{
    PyInterpreterState *interp = W.self_ts->interp;
    if (wake->ticks == 0) {
        /* New thread states are put at the head of the list: the young
         * are found near it. */
        size_t young = W.n_young;
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
             ts != NULL && young > 0; ts = PyThreadState_Next(ts)) {
            Py_ssize_t idx = wall_thread_find(ts);
            if (idx >= 0 && wall_young(&W.threads[idx])) {
                young--;
                if (W.threads[idx].probe_next <= wake->now) {
                    wall_sample_thread(ts, idx, wake);
                }
            }
        }
        wall_schedule_probes();
        return;
    }
    W.generation++;
    W.stats.ticks += wake->ticks;
    W.last_tick_at = wake->at;
    size_t k = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        if (ts == W.self_ts
            || (W.ignored != 0 && ts->thread_id == W.ignored)) {
            continue; /* samprof's own threads */
        }
        if (ts->thread_id == 0) {
            continue; /* made for a thread not running yet (3.12+) */
        }
        Py_ssize_t idx = wall_thread_at(ts, k++);
        if (idx >= 0) {
            wall_sample_thread(ts, idx, wake);
        }
    }
    wall_forget_unseen();
    wall_schedule_probes();
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

    int64_t period = (int64_t)W.period_ns;
    int64_t next = clock_ns(CLOCK_MONOTONIC) + period;
    for (;;) {
        /* Wait for the next tick, or a young thread's probe, whichever is
         * first; a collection holding the GIL postpones probes. */
        pthread_mutex_lock(&W.lock);
        while (!W.stop) {
            int64_t until = next;
            if (W.probe_at < until && !atomic_load(&W.gc_active)) {
                until = W.probe_at;
            }
            if (clock_ns(CLOCK_MONOTONIC) >= until) {
                break;
            }
            struct timespec deadline = clock_timespec(until);
            pthread_cond_timedwait(&W.cond, &W.lock, &deadline);
        }
        int stop = W.stop;
        pthread_mutex_unlock(&W.lock);
        if (stop) {
            break;
        }
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        uint64_t due = now >= next ? (uint64_t)((now - next) / period) + 1 : 0;
        if (due > 0 && atomic_load(&W.gc_active)) {
            /* A collection holds the GIL: account the tick later instead
             * of queueing behind it. */
            atomic_fetch_add(&W.skipped_ticks, due);
            next += (int64_t)due * period;
            continue;
        }
        PyEval_RestoreThread(ts);
        wall_wake_t wake = {0, 0, clock_ns(CLOCK_MONOTONIC)};
        if (wake.now >= next) {
            /* Waiting for the GIL may have taken whole periods: they are
             * part of this tick, not lost. */
            wake.ticks = (uint64_t)((wake.now - next) / period) + 1;
            W.stats.late_ticks += wake.ticks - due;
            next += (int64_t)wake.ticks * period;
            wake.at = next - period;
            wake.ticks += atomic_exchange(&W.skipped_ticks, 0);
        }
        if (!wall_should_stop()) {
            wall_wake(&wake);
        }
        ts = PyEval_SaveThread();
    }
    PyEval_RestoreThread(ts);
    W.self_ts = NULL;
    PyGILState_Release(gil);
    return NULL;
}

static void
wall_free_threads(void)
{
    for (size_t i = 0; i < W.n_threads; i++) {
        free(W.threads[i].stack);
        free(W.threads[i].raw);
    }
    free(W.threads);
    W.threads = NULL;
    W.n_threads = W.cap_threads = 0;
    free(W.order);
    W.order = NULL;
    W.n_order = W.cap_order = 0;
    htab_free(&W.index);
}

/* Puts the threads there are now in the table, their CPU use counted from
 * here, so their first tick counts whole. GIL. */
static void
wall_register_existing(PyThreadState *self)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(self->interp);
         ts != NULL; ts = PyThreadState_Next(ts)) {
        int created;
        Py_ssize_t idx = wall_thread_index(ts, &created);
        if (idx >= 0) {
            W.threads[idx].last_cpu = wall_thread_cpu(ts->thread_id);
        }
    }
    wall_identify_new_threads();
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
    /* Young threads are probed PROBES_PER_PERIOD times a period, 1 ms
     * apart at the closest: at 1 kHz and above, ticks are fine enough. */
    W.probe_ns = (int64_t)period_ns / PROBES_PER_PERIOD;
    if (W.probe_ns < PROBE_MIN_NS) {
        W.probe_ns = PROBE_MIN_NS;
    }
    if (W.probe_ns >= (int64_t)period_ns) {
        W.probe_ns = 0;
    }
    W.probe_at = INT64_MAX;
    W.n_young = 0;
    W.rng = (uint64_t)clock_ns(CLOCK_MONOTONIC) | 1;
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
    wall_register_existing(PyThreadState_Get());
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&W.cond, &attr);
    pthread_condattr_destroy(&attr);
    int err = pthread_create(&W.thread, NULL, wall_main, NULL);
    if (err != 0) {
        pthread_cond_destroy(&W.cond);
        wall_free_threads();
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
wall_flush(void)
{
    if (!W.running) {
        return;
    }
    /* Threads in the list are alive: their clocks can be read. */
    PyThreadState *self = PyThreadState_Get();
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(self->interp);
         ts != NULL; ts = PyThreadState_Next(ts)) {
        Py_ssize_t idx = wall_thread_find(ts);
        if (idx < 0 || W.threads[idx].pending <= 0) {
            continue;
        }
        wall_thread_t *th = &W.threads[idx];
        int64_t cpu = wall_thread_cpu(th->ident);
        int64_t used = cpu >= 0 && th->last_cpu >= 0 ? cpu - th->last_cpu : 0;
        th->last_cpu = cpu;
        wall_flush_thread(th, used);
    }
    /* Those that ended since the last tick. */
    for (size_t i = 0; i < W.n_threads; i++) {
        wall_flush_thread(&W.threads[i], 0);
    }
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
    wall_flush();
    pthread_cond_destroy(&W.cond);
    wall_free_threads();
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
    int created;
    Py_ssize_t idx = wall_thread_index(ts, &created);
    if (idx < 0) {
        return;
    }
    wall_thread_t *th = &W.threads[idx];
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

static uint64_t
wall_random(void)
{
    uint64_t x = W.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    W.rng = x;
    return x;
}

void
wall_thread_started(void)
{
    if (!W.running) {
        return;
    }
    PyThreadState *ts = PyThreadState_Get();
    int created;
    Py_ssize_t idx = wall_thread_index(ts, &created);
    if (idx < 0) {
        return;
    }
    wall_thread_t *th = &W.threads[idx];
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (th->ident != ts->thread_id) {
        th->ident = ts->thread_id;
        th->named = 0;
        th->identify_tries = 0;
    }
    wall_flush_thread(th, 0);
    th->raw_ok = 0;
    th->tid = tctx_tid();
    th->last_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    th->ticks_from = 0;
    th->probe_next = 0;
    if (W.probe_ns == 0) {
        /* Every tick that finds it alive counts: a tick falls due at a
         * random instant of its life and is taken ~0.1 ms later, so a
         * tick due just before it started counts as one due after. */
        return;
    }
    /* Probes at a random phase from its start, through its first period;
     * ticks count for it from there on. */
    th->ticks_from = now + (int64_t)W.period_ns;
    th->probe_next = now + (int64_t)(wall_random() % (uint64_t)W.probe_ns);
    W.n_young++;
    pthread_mutex_lock(&W.lock);
    if (th->probe_next < W.probe_at) {
        W.probe_at = th->probe_next;
        pthread_cond_signal(&W.cond);
    }
    pthread_mutex_unlock(&W.lock);
}

void
wall_thread_exiting(void)
{
    if (!W.running) {
        return;
    }
    PyThreadState *ts = PyThreadState_Get();
    Py_ssize_t idx = wall_thread_find(ts);
    if (idx < 0) {
        return;
    }
    wall_thread_t *th = &W.threads[idx];
    if (th->pending > 0) {
        /* Its deferred time ends here. The CPU it used since the last
         * tick, waking and ending, is not in it. */
        int64_t now = clock_ns(CLOCK_MONOTONIC);
        int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        int64_t used = th->last_cpu >= 0 ? cpu - th->last_cpu : 0;
        int64_t since = now - W.last_tick_at;
        th->last_cpu = cpu;
        wall_flush_thread(th, used > since ? used - since : 0);
    }
    if (!wall_young(th)) {
        return;
    }
    /* The sampler takes a probe some 50-100 us after it falls due, so a
     * young thread's probes begin that much after its start: the probes
     * that fell due before its end and are not taken yet make up for it.
     * They go on its last stack read (a request's route, not this
     * bootstrap); without them a thread-per-request server's 5 ms routes
     * came out 1.5% short. */
    wall_wake_t wake = {0, 0, clock_ns(CLOCK_MONOTONIC)};
    int64_t value = wall_due(th, &wake);
    if (value > 0 && th->depth > 0) {
        int64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        int64_t used = th->last_cpu >= 0 ? cpu - th->last_cpu : 0;
        th->last_cpu = cpu;
        wall_record(th, ts, value, used, 0);
    }
    /* No more probes: what is left of its life is the bootstrap's. */
    if (wall_young(th)) {
        th->probe_next = th->ticks_from;
        if (W.n_young > 0) {
            W.n_young--;
        }
    }
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
    W.order = NULL;
    W.n_order = W.cap_order = 0;
    memset(&W.index, 0, sizeof(W.index));
    W.frames = NULL;
    W.gc_stack = NULL;
    W.gc_ts = NULL;
    atomic_store(&W.gc_active, 0);
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&W.lock, &fresh, sizeof(fresh));
}
