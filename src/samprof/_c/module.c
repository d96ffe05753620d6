/* module: samprof._samprof, the Python face of the C core: start and stop
 * a CPU or wall profile, labels, the GC callback, fork.
 *
 * One profile (CPU or wall) runs at a time per process: the signal handler
 * and the code-object death hook can only find their state through globals,
 * so the state here is global too and the module is single-phase (no
 * subinterpreter support). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collect.h"
#include "clock.h"
#include "collector.h"
#include "heap.h"
#include "labels.h"
#include "npdata.h"
#include "pb.h"
#include "pprof.h"
#include "profile.h"
#include "ring.h"
#include "sampler.h"
#include "stats.h"
#include "tctx.h"
#include "wall.h"

/* Limits of start()'s arguments, exported to Python (MAX_HZ, MAX_DEPTH)
 * so that samprof's classes check the same ones. */
#define MODULE_MAX_HZ 100000
#define MODULE_MAX_DEPTH 4096

typedef enum { MODULE_CPU, MODULE_WALL } module_mode_t;

typedef struct {
    int running;          /* between start and stop. GIL */
    module_mode_t mode;   /* GIL */
    int hz;               /* GIL */
    int sampling;         /* the signal sampler runs (CPU mode, and wall
                             mode's on-CPU part where perf exists), and
                             with it the collector thread */
    sampler_config_t cfg; /* GIL */
    /* Where the current part of the profile began: at start, then at each
     * cut. Its wall-clock start is the previous part's start plus its
     * monotonic duration, so the parts' times follow each other exactly. */
    int64_t start_realtime_ns;
    int64_t start_monotonic_ns;
    int64_t start_cpu_ns; /* process CPU time at start */
    /* The counters as they stood at the last cut (zero before any): the
     * sampler's and the wall sampler's count from start, a part's stats
     * and dropped samples are what they counted since. */
    stats_t base;
    uint64_t base_dropped_periods[SAMPLER_DROP_COUNT];

    /* The running CPU or wall profile's session. The one slot for time
     * profiles: CPU and wall exclusive with each other (the signal and the
     * per-thread timers are shared). GIL. */
    collect_session_t session;
} module_state_t;

static module_state_t M;


/* What the two values of a CPU or wall profile mean, as Go's CPU profile
 * says it: samples/count and cpu|wall/nanoseconds, a period of that kind in
 * nanoseconds, and the time as the default sample type. */
static const pprof_value_type_t module_cpu_types[] = {
    {"samples", "count"},
    {"cpu", "nanoseconds"},
};
static const pprof_value_type_t module_wall_types[] = {
    {"samples", "count"},
    {"wall", "nanoseconds"},
};

static pprof_meta_t
module_time_meta(int cpu, int64_t period_ns)
{
    const pprof_value_type_t *types =
        cpu ? module_cpu_types : module_wall_types;
    pprof_meta_t meta = {
        .sample_types = types,
        .n_sample_types = 2,
        .period_type = types[1],
        .period = period_ns,
        .default_sample_type = types[1].type,
    };
    return meta;
}

/* ------------------------------------------------------------------------
 * Python API
 * ---------------------------------------------------------------------- */

static int
module_parse_engine(const char *engine, sampler_engine_t *out)
{
    static const struct {
        const char *name;
        sampler_engine_t engine;
    } engines[] = {{"auto", SAMPLER_ENGINE_AUTO},
                   {"perf", SAMPLER_ENGINE_PERF},
                   {"timer", SAMPLER_ENGINE_TIMER},
                   {"itimer", SAMPLER_ENGINE_ITIMER}};
    for (size_t i = 0; i < sizeof(engines) / sizeof(engines[0]); i++) {
        if (strcmp(engine, engines[i].name) == 0) {
            *out = engines[i].engine;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown engine %s", engine);
    return -1;
}

/* Checks start()'s arguments and fills M's configuration from them; the
 * arguments the session takes come back through the pointers. 0, or -1
 * with an exception set. */
static int
module_configure(PyObject *args, PyObject **hidden_file,
                 Py_ssize_t *max_samples, int *by_thread)
{
    const char *mode, *engine;
    int hz, signum, max_depth;
    *max_samples = COLLECT_MAX_SAMPLES;
    *by_thread = 1;
    if (!PyArg_ParseTuple(args, "sisiiO!|np:start", &mode, &hz, &engine,
                          &signum, &max_depth, &PyTuple_Type, hidden_file,
                          max_samples, by_thread)) {
        return -1;
    }
    if (*max_samples < 1) {
        PyErr_SetString(PyExc_ValueError, "max_stacks must be >= 1");
        return -1;
    }
    module_mode_t m;
    if (strcmp(mode, "cpu") == 0) {
        m = MODULE_CPU;
    }
    else if (strcmp(mode, "wall") == 0) {
        m = MODULE_WALL;
    }
    else {
        PyErr_Format(PyExc_ValueError, "unknown mode %s", mode);
        return -1;
    }
    if (hz < 1 || hz > MODULE_MAX_HZ) {
        PyErr_Format(PyExc_ValueError, "hz must be in 1..%d, got %d",
                     MODULE_MAX_HZ, hz);
        return -1;
    }
    if (max_depth < 1 || max_depth > MODULE_MAX_DEPTH) {
        PyErr_Format(PyExc_ValueError, "max_depth must be in 1..%d",
                     MODULE_MAX_DEPTH);
        return -1;
    }
    sampler_engine_t eng;
    if (module_parse_engine(engine, &eng) < 0) {
        return -1;
    }

    memset(&M.cfg, 0, sizeof(M.cfg));
    M.cfg.engine = eng;
    M.cfg.signum = signum;
    M.cfg.period_ns = (uint64_t)CLOCK_NS_PER_S / (uint64_t)hz;
    M.cfg.max_depth = (uint32_t)max_depth;
    /* Room for ~100 ms of samples from 2 busy CPUs, at least 256 slots,
     * so a collector delayed by a long GIL hold loses nothing. */
    size_t slots = (size_t)hz / 5;
    M.cfg.ring_slots = slots < 256 ? 256 : slots > 8192 ? 8192 : slots;
    if (m == MODULE_WALL) {
        /* On-CPU time comes from user-mode-only perf events where they are
         * available (exact, and they cannot interrupt a system call); the
         * wall thread records the rest. Without them it records all. */
        M.cfg.engine = SAMPLER_ENGINE_PERF;
        M.cfg.user_only = 1;
    }
    M.mode = m;
    M.hz = hz;
    return 0;
}

static PyObject *
module_start(PyObject *self, PyObject *args)
{
    (void)self;
    if (M.running) {
        PyErr_Format(sampler_error,
                     "a %s profile is already running in this process; "
                     "stop it first",
                     M.mode == MODULE_CPU ? "CPU" : "wall");
        return NULL;
    }
    PyObject *hidden_file; /* borrowed: the files samples leave out */
    Py_ssize_t max_samples;
    int by_thread;
    if (module_configure(args, &hidden_file, &max_samples, &by_thread) < 0) {
        return NULL;
    }
    int wall = M.mode == MODULE_WALL;
    /* samples/count and cpu|wall/nanoseconds */
    if (collect_init(&M.session, 2, M.cfg.max_depth, M.cfg.period_ns,
                     hidden_file, labels_registry(), (size_t)max_samples)
        < 0) {
        return NULL;
    }
    M.session.by_thread = by_thread;
    M.start_realtime_ns = clock_ns(CLOCK_REALTIME);
    M.start_monotonic_ns = clock_ns(CLOCK_MONOTONIC);
    M.start_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    memset(&M.base, 0, sizeof(M.base));
    memset(M.base_dropped_periods, 0, sizeof(M.base_dropped_periods));
    collect_set_wall_mode(&M.session, wall);

    M.sampling = 1;
    if (sampler_start(&M.cfg) < 0) {
        if (!wall) {
            goto fail_session;
        }
        PyErr_Clear(); /* wall mode records on-CPU time itself */
        M.sampling = 0;
    }
    if (M.sampling) {
        collect_set_ring(&M.session, sampler_ring());
        if (collector_start(&M.session, M.cfg.signum,
                            collector_interval_ns(M.cfg.ring_slots, M.hz))
            < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            goto fail_sampler;
        }
    }
    if (wall
        && wall_start(&M.session, M.cfg.period_ns, M.cfg.max_depth, M.sampling,
                      M.sampling ? (unsigned long)collector_thread() : 0)
               < 0) {
        goto fail_collector;
    }
    M.running = 1;
    Py_RETURN_NONE;

fail_collector:
    if (M.sampling) {
        collector_stop();
    }
fail_sampler:
    if (M.sampling) {
        sampler_stop();
        collect_set_ring(&M.session, NULL);
        sampler_release();
    }
fail_session:
    collect_set_wall_mode(&M.session, 0);
    collect_free(&M.session);
    return NULL;
}

static const char *
module_source_name(int src)
{
    static const char *names[] = {"perf", "timer", "itimer"};
    return names[src];
}

/* What both kinds share: the drops, the profile's size and the times. */
static void
module_common_stats(stats_t *st, int64_t duration_ns, int64_t cpu_ns)
{
    const sampler_counters_t *c = sampler_counters();
    profile_t *p = &M.session.profile;
    st->requested_hz = M.hz;
    if (M.sampling) {
        ring_t *ring = sampler_ring();
        ring_lock(ring);
        ring_backlog_stats_t b = ring_backlog_stats(ring);
        ring_unlock(ring);
        /* The backlog's drops are the ring's: both mean the collector
         * could not keep up. */
        st->buffer_full =
            atomic_load(&c->dropped[SAMPLER_DROP_RING_FULL]) + b.dropped;
        st->backlog_samples = b.spilled;
        st->backlog_peak_bytes = b.peak_bytes;
        st->torn = atomic_load(&c->dropped[SAMPLER_DROP_TORN]);
        for (int i = 0; i < SAMPLER_SRC_COUNT; i++) {
            st->signals += atomic_load(&c->signals[i]);
        }
    }
    st->duration_ns = duration_ns;
    st->cpu_ns = cpu_ns;
    st->profile_bytes = profile_bytes(p);
}

/* Stats of a CPU profile. GIL. */
static void
module_cpu_stats(stats_t *st, int64_t duration_ns, int64_t cpu_ns)
{
    const sampler_counters_t *c = sampler_counters();
    uint64_t armed[SAMPLER_SRC_COUNT];
    int primary = SAMPLER_SRC_ITIMER;
    uint64_t best = 0;
    sampler_threads_by_source(armed);
    for (int i = 0; i < SAMPLER_SRC_COUNT; i++) {
        uint64_t n = atomic_load(&c->signals[i]);
        if (n > best) {
            best = n;
            primary = i;
        }
    }
    if (best == 0) {
        /* No samples: name the engine the threads were armed with. */
        for (int i = 0; i < SAMPLER_SRC_COUNT; i++) {
            if (armed[i] > 0) {
                primary = i;
                break;
            }
        }
    }
    st->cpu = 1;
    module_common_stats(st, duration_ns, cpu_ns);
    st->engine = module_source_name(primary);
    double cpu_s = (double)cpu_ns / 1e9;
    st->effective_hz = cpu_s > 0 ? (double)st->signals / cpu_s : 0.0;
    st->samples = st->signals;
    st->threads[STATS_PERF] = armed[SAMPLER_SRC_PERF];
    st->threads[STATS_TIMER] = armed[SAMPLER_SRC_TIMER];
    st->threads[STATS_ITIMER] = armed[SAMPLER_SRC_ITIMER];
    st->foreign_signals = atomic_load(&c->foreign);
}

/* Stats of a wall profile. GIL. */
static void
module_wall_stats(stats_t *st, int64_t duration_ns, int64_t cpu_ns)
{
    wall_stats_t w;
    wall_get_stats(&w);
    st->cpu = 0;
    module_common_stats(st, duration_ns, cpu_ns);
    st->engine = M.sampling ? "wall+perf" : "wall";
    double secs = (double)duration_ns / 1e9;
    st->effective_hz = secs > 0 ? (double)w.ticks / secs : 0.0;
    st->samples = w.samples + st->signals;
    st->threads[0] = w.threads_seen;
    st->walks = w.walks;
    st->deferred = w.deferred;
    st->late_ticks = w.late_ticks;
    st->gc_samples = w.gc_samples;
    st->ticks = w.ticks;
}

/* The part's counters: what counted from start (total) less what had
 * counted at the last cut. */
static void
module_part_stats(stats_t *st, const stats_t *total)
{
    *st = *total;
    st->samples -= M.base.samples;
    st->signals -= M.base.signals;
    st->buffer_full -= M.base.buffer_full;
    st->backlog_samples -= M.base.backlog_samples;
    st->torn -= M.base.torn;
    st->foreign_signals -= M.base.foreign_signals;
    st->walks -= M.base.walks;
    st->deferred -= M.base.deferred;
    st->late_ticks -= M.base.late_ticks;
    st->gc_samples -= M.base.gc_samples;
    st->ticks -= M.base.ticks;
    double secs = (double)(st->cpu ? st->cpu_ns : st->duration_ns) / 1e9;
    double events = (double)(st->cpu ? st->signals : st->ticks);
    st->effective_hz = secs > 0 ? events / secs : 0.0;
}

/* Samples the signal handlers dropped in this part, as pseudo-frames. */
static void
module_add_dropped(const stats_t *part)
{
    static const char *what[SAMPLER_DROP_COUNT] = {
        [SAMPLER_DROP_RING_FULL] = "<samprof: dropped, buffer full>",
        [SAMPLER_DROP_TORN] = "<samprof: dropped, torn stack>",
    };
    const uint64_t count[SAMPLER_DROP_COUNT] = {
        [SAMPLER_DROP_RING_FULL] = part->buffer_full,
        [SAMPLER_DROP_TORN] = part->torn,
    };
    const sampler_counters_t *c = sampler_counters();
    for (int r = 0; r < SAMPLER_DROP_COUNT; r++) {
        uint64_t periods = atomic_load(&c->dropped_periods[r]);
        if (r == SAMPLER_DROP_RING_FULL) {
            ring_t *ring = sampler_ring();
            ring_lock(ring);
            periods += ring_backlog_stats(ring).dropped_periods;
            ring_unlock(ring);
        }
        collect_add_dropped(&M.session, what[r], count[r],
                            periods - M.base_dropped_periods[r]);
        M.base_dropped_periods[r] = periods;
    }
}

/* Ends the current part of the profile (all of it at stop, what came since
 * the last cut otherwise): moves the ring's samples in, adds what was
 * dropped, encodes it into buf, and with clear empties the session for the
 * next part. Nothing between the last drain and the clear runs Python code
 * or releases the GIL, so no sample falls between two parts. Fills the
 * part's stats. Returns 0, or -1 with an exception set. GIL. */
/* A wall profile's on-CPU samples: its thread_state label says so. */
typedef struct {
    uint32_t key, on_cpu; /* string ids */
} module_state_filter_t;

static int
module_keep_on_cpu(const profile_sample_t *s, const void *arg)
{
    const module_state_filter_t *f = arg;
    return s->extra.key == f->key && s->extra.str == f->on_cpu;
}

/* What a part is encoded as: with thread_labels, samples carry their
 * thread's name and id; with cpu_buf (wall mode), the on-CPU samples are
 * also encoded into it as a CPU profile. */
typedef struct {
    int final;         /* the profile stops: wait for handlers' samples */
    int clear;         /* empty the session afterwards: the profile goes on */
    int thread_labels; /* samples carry thread_name and thread_id */
    pb_buf_t *cpu_buf; /* NULL, or where the on-CPU part goes (wall) */
} module_part_t;

static int
module_end_part(stats_t *st, const module_part_t *how, pb_buf_t *buf)
{
    int final = how->final;
    if (M.sampling) {
        collect_drain(&M.session, sampler_ring(), final);
    }
    if (M.mode == MODULE_WALL) {
        wall_flush(); /* (stop's ran in wall_stop) */
    }
    /* May run Python code: the samplers may add samples meanwhile. */
    collect_resolve_thread_names(&M.session);
    int64_t now_monotonic = clock_ns(CLOCK_MONOTONIC);
    int64_t now_cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    int64_t duration = now_monotonic - M.start_monotonic_ns;
    int64_t cpu = now_cpu - M.start_cpu_ns;
    stats_t total = {0};
    if (M.mode == MODULE_WALL) {
        module_wall_stats(&total, duration, cpu);
    }
    else {
        module_cpu_stats(&total, duration, cpu);
    }
    module_part_stats(st, &total);
    st->time_ns = M.start_realtime_ns;
    if (M.sampling) {
        collect_drain(&M.session, sampler_ring(), final);
        module_add_dropped(st);
    }
    /* Counted now that the part's own samples are in. */
    st->stack_table_full = M.session.profile.overflowed;
    st->out_of_memory = collect_lost(&M.session);
    st->unknown_frames = collect_unknown_frames(&M.session);
    st->truncated = collect_truncated(&M.session);

    char comment_text[3][STATS_COMMENT_SIZE];
    stats_comments(st, comment_text);
    const char *comments[] = {comment_text[0], comment_text[1],
                              comment_text[2]};
    pprof_meta_t meta =
        module_time_meta(M.mode == MODULE_CPU, (int64_t)M.cfg.period_ns);
    meta.time_nanos = M.start_realtime_ns;
    meta.duration_nanos = duration;
    meta.comments = comments;
    meta.n_comments = 3;
    meta.no_thread_labels = !how->thread_labels || !M.session.by_thread;
    int rc = collect_encode(&M.session, &meta, buf);
    if (rc == 0 && how->cpu_buf != NULL) {
        module_state_filter_t on_cpu = {M.session.k_thread_state,
                                        collect_state_string(&M.session, 1)};
        pprof_meta_t cpu = module_time_meta(1, (int64_t)M.cfg.period_ns);
        cpu.time_nanos = meta.time_nanos;
        cpu.duration_nanos = duration;
        cpu.comments = comments;
        cpu.n_comments = 3;
        cpu.no_thread_labels = meta.no_thread_labels;
        cpu.keep = module_keep_on_cpu;
        cpu.keep_arg = &on_cpu;
        rc = collect_encode(&M.session, &cpu, how->cpu_buf);
    }
    if (how->clear) {
        collect_clear(&M.session);
        if (M.mode == MODULE_WALL) {
            wall_new_part();
        }
    }
    M.base = total;
    M.start_realtime_ns += duration;
    M.start_monotonic_ns = now_monotonic;
    M.start_cpu_ns = now_cpu;
    return rc;
}

static PyObject *
module_buf_bytes(const pb_buf_t *buf)
{
    return PyBytes_FromStringAndSize((const char *)buf->data,
                                     (Py_ssize_t)buf->len);
}

/* (bytes, stats dict), and the on-CPU part's bytes if there is cpu_buf, of
 * a part that module_end_part encoded, or NULL with an exception set.
 * Frees the buffers. GIL. */
static PyObject *
module_part_result(int rc, const stats_t *st, pb_buf_t *buf, pb_buf_t *cpu_buf)
{
    PyObject *result = NULL;
    if (rc == 0) {
        PyObject *dict = stats_to_dict(st);
        if (dict != NULL) {
            result = cpu_buf != NULL
                         ? Py_BuildValue("(NNN)", module_buf_bytes(buf), dict,
                                         module_buf_bytes(cpu_buf))
                         : Py_BuildValue("(NN)", module_buf_bytes(buf), dict);
        }
    }
    pb_free(buf);
    if (cpu_buf != NULL) {
        pb_free(cpu_buf);
    }
    return result;
}

static PyObject *
module_stop(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (!M.running) {
        PyErr_SetString(sampler_error, "no profile is running");
        return NULL;
    }
    if (M.mode == MODULE_WALL) {
        wall_stop();
    }
    if (M.sampling) {
        collector_stop();
        sampler_stop();
    }
    stats_t st;
    pb_buf_t buf;
    pb_init(&buf);
    module_part_t how = {.final = 1, .thread_labels = 1};
    int rc = module_end_part(&st, &how, &buf);
    if (M.sampling) {
        collect_set_ring(&M.session, NULL);
    }
    M.running = 0;
    if (M.sampling) {
        sampler_release();
    }
    collect_set_wall_mode(&M.session, 0);
    collect_free(&M.session);
    return module_part_result(rc, &st, &buf, NULL);
}

static PyObject *
module_cut(PyObject *self, PyObject *args)
{
    (void)self;
    int cpu_part = 0, thread_labels = 1;
    if (!PyArg_ParseTuple(args, "|pp:cut", &cpu_part, &thread_labels)) {
        return NULL;
    }
    if (!M.running) {
        PyErr_SetString(sampler_error, "no profile is running");
        return NULL;
    }
    if (cpu_part && M.mode != MODULE_WALL) {
        PyErr_SetString(PyExc_ValueError,
                        "cpu_part: only a wall profile has an on-CPU part");
        return NULL;
    }
    stats_t st;
    pb_buf_t buf, cpu_buf;
    pb_init(&buf);
    pb_init(&cpu_buf);
    module_part_t how = {.clear = 1,
                         .thread_labels = thread_labels,
                         .cpu_buf = cpu_part ? &cpu_buf : NULL};
    int rc = module_end_part(&st, &how, &buf);
    return module_part_result(rc, &st, &buf, how.cpu_buf);
}

static PyObject *
module_is_running(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(M.running);
}

static PyObject *
module_register_labelset(PyObject *self, PyObject *pairs)
{
    (void)self;
    if (!PyTuple_Check(pairs) || PyTuple_GET_SIZE(pairs) > 64) {
        PyErr_SetString(PyExc_TypeError,
                        "label set must be a tuple of at most 64 pairs");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *kv = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2
            || !PyUnicode_Check(PyTuple_GET_ITEM(kv, 0))
            || !PyUnicode_Check(PyTuple_GET_ITEM(kv, 1))) {
            PyErr_SetString(PyExc_TypeError,
                            "label set must hold (str, str) pairs");
            return NULL;
        }
    }
    uint32_t id = labels_register(pairs);
    return id ? PyLong_FromUnsignedLong(id) : NULL;
}

static PyObject *
module_labels_in_samples(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(labels_in_samples());
}

static PyObject *
module_thread_labels(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    uint32_t id = labels_current();
    if (id == 0) {
        return PyTuple_New(0);
    }
    PyObject *pairs = PyList_GET_ITEM(labels_registry(), id - 1);
    Py_INCREF(pairs);
    return pairs;
}

static PyObject *
module_gc_callback(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *phase, *info;
    if (!PyArg_ParseTuple(args, "UO:gc_callback", &phase, &info)) {
        return NULL;
    }
    int start = PyUnicode_CompareWithASCIIString(phase, "start") == 0;
    sampler_gc_boundary();
    tctx_set_in_gc(start);
    if (start) {
        wall_gc_begin();
    }
    else {
        wall_gc_end();
    }
    Py_RETURN_NONE;
}

static PyObject *
module_arm_this_thread(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (M.running && M.mode == MODULE_WALL) {
        wall_thread_started();
    }
    if (M.running && M.sampling) {
        Py_BEGIN_ALLOW_THREADS
        sampler_arm_this_thread();
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *
module_thread_exiting(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (M.running && M.mode == MODULE_WALL) {
        wall_thread_exiting();
    }
    Py_RETURN_NONE;
}

static PyObject *
module_after_fork_child(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    /* The C-level atfork handler already stopped sampling; this runs later
     * with the GIL and undoes what needs the interpreter. */
    collect_free(&M.session);
    npdata_after_fork_child();
    heap_after_fork_child();
    Py_RETURN_NONE;
}

static void
module_atfork_child(void)
{
    /* In the child only the forking thread exists; the collector and the
     * wall sampler do not. Profiling is off there, and the parent's
     * profile is abandoned without being freed (its memory is shared
     * copy-on-write). */
    sampler_after_fork_child();
    wall_after_fork_child();
    collector_after_fork_child();
    M.running = 0;
}

/* Test hook: encodes a fabricated profile of n distinct stacks of the given
 * depth, exercising the aggregate and the encoder without sampling. */
static PyObject *
module_encode_synthetic(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t n, depth;
    if (!PyArg_ParseTuple(args, "nn:_encode_synthetic", &n, &depth)) {
        return NULL;
    }
    if (n < 0 || depth < 1 || depth > 4096) {
        PyErr_SetString(PyExc_ValueError, "bad size");
        return NULL;
    }
    profile_t p;
    pb_buf_t buf;
    pb_init(&buf);
    uint32_t *stack = PyMem_RawMalloc((size_t)depth * sizeof(uint32_t));
    if (stack == NULL || profile_init(&p, 2, (size_t)n + 1) < 0) {
        PyMem_RawFree(stack);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    char name[64];
    uint32_t file = profile_string(&p, "/synthetic.py", 13);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Stack i: depth frames whose functions spell i in base 1000. */
        Py_ssize_t x = i;
        for (Py_ssize_t d = 0; d < depth; d++) {
            int len = snprintf(name, sizeof(name), "fn_%d", (int)(x % 1000));
            x /= 1000;
            uint32_t fn = profile_function(
                &p, profile_string(&p, name, (size_t)len), file, d + 1);
            stack[d] = profile_location(&p, fn, d + 10);
        }
        (void)profile_thread(&p, 1);
        profile_extra_t none = {0, 0, 0};
        int64_t values[2] = {1, 1000000};
        if (profile_add(&p, stack, (uint32_t)depth, 1, 0, none, values, NULL)
            < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    pprof_meta_t meta = module_time_meta(1, 1000000);
    int64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (pprof_encode(&p, &meta, &buf) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    double seconds = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e9;
    result = Py_BuildValue("(y#d)", (const char *)buf.data,
                           (Py_ssize_t)buf.len, seconds);
done:
    pb_free(&buf);
    profile_free(&p);
    PyMem_RawFree(stack);
    return result;
}

/* ------------------------------------------------------------------------
 * The heap profile
 * ---------------------------------------------------------------------- */

static PyObject *
module_heap_start(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long rate;
    int max_depth;
    Py_ssize_t max_live, max_samples;
    PyObject *hidden_file, *numpy_api;
    if (!PyArg_ParseTuple(args, "KinO!nO:heap_start", &rate, &max_depth,
                          &max_live, &PyTuple_Type, &hidden_file, &max_samples,
                          &numpy_api)) {
        return NULL;
    }
    if (max_depth < 1 || max_depth > MODULE_MAX_DEPTH) {
        PyErr_Format(PyExc_ValueError, "max_depth must be in 1..%d",
                     MODULE_MAX_DEPTH);
        return NULL;
    }
    if (rate < 1 || max_live < 1 || max_samples < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "rate, max_live and max_stacks must be >= 1");
        return NULL;
    }
    if (numpy_api != Py_None && !PyCapsule_CheckExact(numpy_api)) {
        PyErr_SetString(
            PyExc_TypeError,
            "numpy_api must be numpy's _ARRAY_API capsule or None");
        return NULL;
    }
    if (heap_running()) {
        PyErr_SetString(sampler_error, "a heap profile is already running in "
                                       "this process; stop it first");
        return NULL;
    }
    heap_config_t cfg = {
        .rate = rate,
        .max_depth = (uint32_t)max_depth,
        .max_live = (size_t)max_live,
        .max_samples = (size_t)max_samples,
        .hidden_file = hidden_file,
        .labelsets = labels_registry(),
    };
    if (heap_start(&cfg) < 0) {
        return NULL;
    }
    if (numpy_api != Py_None && npdata_start(numpy_api) < 0) {
        (void)heap_stop();
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
module_heap_stats_dict(const heap_stats_t *st)
{
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:L,s:i,s:K}", "rate",
        (unsigned long long)st->rate, "sampled",
        (unsigned long long)st->sampled, "live", (unsigned long long)st->live,
        "untracked", (unsigned long long)st->untracked, "torn",
        (unsigned long long)st->torn, "truncated",
        (unsigned long long)st->truncated, "unknown_frames",
        (unsigned long long)st->unknown_frames, "out_of_memory",
        (unsigned long long)st->lost, "stack_table_full",
        (unsigned long long)st->stack_table_full, "hooks_lost",
        (unsigned long long)st->hooks_lost, "profile_bytes",
        (unsigned long long)st->profile_bytes, "duration_ns",
        (long long)st->duration_ns, "numpy", npdata_running(), "numpy_no_gil",
        (unsigned long long)npdata_no_gil());
}

/* (raw pprof, stats dict) of the running heap profile: Go's "allocs"
 * profile when allocs is true, its "heap" profile otherwise, written as
 * how says. The stats dict also has the profile's time_ns. */
static PyObject *
module_heap_result(int allocs, heap_encode_t *how)
{
    if (!heap_running()) {
        PyErr_SetString(sampler_error, "no heap profile is running");
        return NULL;
    }
    int64_t time_ns = 0, duration_ns = 0;
    how->time_nanos = &time_ns;
    how->duration_nanos = &duration_ns;
    pb_buf_t buf;
    pb_init(&buf);
    PyObject *result = NULL;
    if (heap_encode(allocs, how, &buf) == 0) {
        heap_stats_t st;
        heap_get_stats(&st);
        st.duration_ns = duration_ns;
        PyObject *dict = module_heap_stats_dict(&st);
        PyObject *t = dict != NULL ? PyLong_FromLongLong(time_ns) : NULL;
        if (t != NULL && PyDict_SetItemString(dict, "time_ns", t) == 0) {
            result = Py_BuildValue("(y#O)", (const char *)buf.data,
                                   (Py_ssize_t)buf.len, dict);
        }
        Py_XDECREF(t);
        Py_XDECREF(dict);
    }
    pb_free(&buf);
    return result;
}

static PyObject *
module_heap_snapshot(PyObject *self, PyObject *args)
{
    (void)self;
    int allocs, delta = 0, thread_labels = 1;
    if (!PyArg_ParseTuple(args, "p|pp:heap_snapshot", &allocs, &delta,
                          &thread_labels)) {
        return NULL;
    }
    heap_encode_t how = {.delta = delta, .thread_labels = thread_labels};
    return module_heap_result(allocs, &how);
}

static PyObject *
module_heap_stop(PyObject *self, PyObject *args)
{
    (void)self;
    int allocs;
    if (!PyArg_ParseTuple(args, "p:heap_stop", &allocs)) {
        return NULL;
    }
    heap_encode_t how = {.thread_labels = 1};
    PyObject *result = module_heap_result(allocs, &how);
    npdata_stop();
    int stayed = heap_stop();
    if (result == NULL) {
        return NULL;
    }
    return Py_BuildValue("(Ni)", result, stayed);
}

static PyObject *
module_heap_thread_exiting(PyObject *self, PyObject *name)
{
    (void)self;
    heap_name_this_thread(name);
    Py_RETURN_NONE;
}

/* A thread threading just started, while numpy's data is counted: its
 * context starts with numpy's default handler. */
static PyObject *
module_heap_numpy_thread(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (npdata_this_thread() < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
module_heap_is_running(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(heap_running());
}

static PyMethodDef module_methods[] = {
    {"start", module_start, METH_VARARGS,
     "start(mode, hz, engine, signum, max_depth, hidden_files,\n"
     "      max_stacks=MAX_SAMPLES, by_thread=True)\n--\n\n"
     "Start sampling. Use samprof.CPUProfiler or WallProfiler instead."},
    {"stop", module_stop, METH_NOARGS,
     "stop()\n--\n\nStop sampling; return (pprof bytes, stats dict)."},
    {"cut", module_cut, METH_VARARGS,
     "cut(cpu_part=False, thread_labels=True)\n--\n\n"
     "Return (pprof bytes, stats dict) of the running profile since its\n"
     "start or the last cut, and go on sampling into an empty one. With\n"
     "cpu_part (wall mode), a third item: the on-CPU samples as a CPU\n"
     "profile. thread_labels=False leaves out thread_name and thread_id."},
    {"is_running", module_is_running, METH_NOARGS,
     "is_running()\n--\n\nTrue while a profile is running."},
    {"register_labelset", module_register_labelset, METH_O,
     "register_labelset(pairs)\n--\n\n"
     "Register a tuple of (key, value) pairs; return its id."},
    {"thread_labels", module_thread_labels, METH_NOARGS,
     "thread_labels()\n--\n\nThe labels of the calling context (thread, "
     "asyncio task) as (key, value) pairs."},
    {"labels_in_samples", module_labels_in_samples, METH_NOARGS,
     "labels_in_samples()\n--\n\nWhether samples carry labels (this "
     "Python's contexts are laid out as samprof reads them)."},
    {"gc_callback", module_gc_callback, METH_VARARGS,
     "gc_callback(phase, info)\n--\n\nFor gc.callbacks while profiling."},
    {"_arm_this_thread", module_arm_this_thread, METH_NOARGS,
     "_arm_this_thread()\n--\n\nArm the calling (new) thread's timer now "
     "(and\n"
     "in wall mode start its probes)."},
    {"_thread_exiting", module_thread_exiting, METH_NOARGS,
     "_thread_exiting()\n--\n\nThe calling thread's run() has returned."},
    {"heap_start", module_heap_start, METH_VARARGS,
     "heap_start(rate, max_depth, max_live, hidden_files, max_stacks,\n"
     "           numpy_api)\n--\n\n"
     "Start the heap profile; numpy_api (numpy's _ARRAY_API capsule, or\n"
     "None) counts numpy's array data too. Use samprof.HeapProfiler."},
    {"heap_snapshot", module_heap_snapshot, METH_VARARGS,
     "heap_snapshot(allocs, delta=False, thread_labels=True)\n--\n\n"
     "(pprof bytes, stats dict) of the running heap profile. With delta,\n"
     "the allocations since the last delta snapshot and what is in use\n"
     "now. thread_labels=False leaves out thread_name and thread_id."},
    {"heap_stop", module_heap_stop, METH_VARARGS,
     "heap_stop(allocs)\n--\n\n"
     "Stop the heap profile; return ((pprof bytes, stats dict), hooks that\n"
     "stayed in another allocator's chain)."},
    {"heap_is_running", module_heap_is_running, METH_NOARGS,
     "heap_is_running()\n--\n\nTrue while a heap profile is running."},
    {"_heap_thread_exiting", module_heap_thread_exiting, METH_O,
     "_heap_thread_exiting(name)\n--\n\n"
     "The calling thread, about to exit, is called name."},
    {"_heap_numpy_thread", module_heap_numpy_thread, METH_NOARGS,
     "_heap_numpy_thread()\n--\n\n"
     "Count numpy's array data in the calling, new thread too."},
    {"_after_fork_child", module_after_fork_child, METH_NOARGS,
     "_after_fork_child()\n--\n\nReset interpreter hooks in a forked child."},
    {"_encode_synthetic", module_encode_synthetic, METH_VARARGS,
     "_encode_synthetic(n, depth)\n--\n\n"
     "Test hook: (raw pprof of n fabricated distinct stacks, CPU seconds\n"
     "the encoder took)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "samprof._samprof",
    "samprof's C core: sampling, aggregation and pprof encoding.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__samprof(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) {
        return NULL;
    }
    if (sampler_error == NULL) {
        sampler_error = PyErr_NewExceptionWithDoc(
            "samprof.ProfilerError",
            "Raised when a profile cannot be started or stopped as asked.",
            PyExc_RuntimeError, NULL);
        if (sampler_error == NULL) {
            goto error;
        }
        if (pthread_atfork(sampler_before_fork, sampler_after_fork_parent,
                           module_atfork_child)
            != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
            goto error;
        }
    }
    Py_INCREF(sampler_error);
    if (PyModule_AddObject(m, "ProfilerError", sampler_error) < 0) {
        Py_DECREF(sampler_error);
        goto error;
    }
    if (PyModule_AddIntConstant(m, "MAX_SAMPLES", COLLECT_MAX_SAMPLES) < 0
        || PyModule_AddIntConstant(m, "MAX_HZ", MODULE_MAX_HZ) < 0
        || PyModule_AddIntConstant(m, "MAX_DEPTH", MODULE_MAX_DEPTH) < 0
        || PyModule_AddIntConstant(m, "HEAP_RATE", HEAP_DEFAULT_RATE) < 0
        || PyModule_AddIntConstant(m, "HEAP_MAX_LIVE", HEAP_DEFAULT_MAX_LIVE)
               < 0) {
        goto error;
    }
    PyObject *labels_type = labels_init_type();
    if (labels_type == NULL
        || PyModule_AddObject(m, "labels", labels_type) < 0) {
        Py_XDECREF(labels_type);
        goto error;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
