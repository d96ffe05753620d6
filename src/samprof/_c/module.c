/* module: samprof._samprof, the Python face of the C core, and the
 * collector thread that drains samples into the profile.
 *
 * One profile runs at a time per process: the signal handler can only find
 * its state through globals (sampler.c), so the state here is global too
 * and the module is single-phase (no subinterpreter support). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pb.h"
#include "pprof.h"
#include "profile.h"
#include "ring.h"
#include "sampler.h"
#include "symbols.h"

/* Distinct (stack, thread, labels) samples kept before new ones fold into
 * "<samprof: stack table full>". At ~200 bytes each (depth 20), about
 * 100 MiB at worst; documented in docs/safety.md. */
#define MODULE_MAX_SAMPLES 500000
/* How often the collector drains the ring and rescans threads. */
#define MODULE_COLLECT_INTERVAL_NS 10000000L
/* A drain that must empty the ring (code-object death) waits this long at
 * most for a handler that claimed a slot to publish it. */
#define MODULE_DRAIN_SPIN_LIMIT 1000000

typedef struct {
    int running;              /* between start and stop. GIL */
    const char *mode;         /* "cpu". GIL */
    int hz;
    sampler_config_t cfg;
    profile_t profile;        /* GIL */
    symbols_t symbols;        /* GIL */
    uint32_t *stack;          /* scratch for one sample's location ids. GIL */
    int draining;             /* re-entrancy guard for drain. GIL */
    uint64_t truncated;       /* samples cut at max_depth. GIL */
    uint64_t unknown_frames;  /* frames that could not be symbolized. GIL */
    int64_t start_realtime_ns;
    int64_t start_monotonic_ns;
    int64_t start_cpu_ns;     /* process CPU time at start */

    /* Collector thread. wake_lock protects collector_stop. */
    pthread_t collector;
    int collector_started;
    int collector_stop;
    pthread_mutex_t wake_lock;
    pthread_cond_t wake_cond;
} module_state_t;

static module_state_t M = {
    .wake_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Label sets registered from Python, id = index + 1. They outlive
 * profiles: a thread may stay inside a labels block across start/stop.
 * A list of tuples of (key, value) str pairs. GIL. */
static PyObject *module_labelsets;

static int64_t
module_clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * Draining samples into the profile. Caller holds the GIL.
 * ---------------------------------------------------------------------- */

static void
module_add_slot_unlocked(const ring_slot_t *slot)
{
    profile_t *p = &M.profile;
    uint32_t *stack = M.stack;
    uint32_t n = 0;
    if (slot->flags & RING_IN_GC) {
        stack[n++] = profile_pseudo(p, "<gc>");
    }
    for (uint16_t i = 0; i < slot->depth; i++) {
        uint32_t loc = symbols_location(&M.symbols, slot->frames[i].code,
                                        slot->frames[i].offset);
        if (loc == SYMBOLS_HIDDEN) {
            continue;
        }
        if (loc == 0) {
            M.unknown_frames++;
            loc = profile_pseudo(p, "<unknown>");
        }
        stack[n++] = loc;
    }
    if (slot->flags & RING_TRUNCATED) {
        M.truncated++;
        stack[n++] = profile_pseudo(p, "<truncated>");
    }
    if (slot->flags & RING_COLLECTOR) {
        stack[n++] = profile_pseudo(p, "<samprof collector>");
    }
    else if (slot->flags & RING_NO_PYTHON) {
        stack[n++] = profile_pseudo(p, "<native thread>");
    }
    else if (n == 0) {
        stack[n++] = profile_pseudo(p, "<no Python frames>");
    }
    /* A location id of 0 means the pseudo-frame itself could not be
     * interned (out of memory): drop such ids rather than emit them. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (stack[i] != 0) {
            stack[k++] = stack[i];
        }
    }
    uint32_t labels = slot->labels;
    if (module_labelsets == NULL
        || labels > (uint32_t)PyList_GET_SIZE(module_labelsets)) {
        labels = 0;
    }
    int64_t value = (int64_t)slot->weight * (int64_t)M.cfg.period_ns;
    (void)profile_thread(p, slot->tid);
    (void)profile_add(p, stack, k, slot->tid, labels, 0, 1, value);
}

/* Moves every published sample from the ring into the profile. With
 * wait_for_writers, also waits (bounded) for slots that handlers on other
 * threads are still filling: needed before a code object dies. */
static void
module_drain_unlocked(int wait_for_writers)
{
    ring_t *r = sampler_ring();
    if (!M.running || M.draining || r->slots == NULL) {
        return;
    }
    M.draining = 1;
    long spins = 0;
    for (;;) {
        ring_slot_t *slot = ring_peek(r);
        if (slot == NULL) {
            if (!wait_for_writers || ring_pending(r) == 0
                || ++spins > MODULE_DRAIN_SPIN_LIMIT) {
                break;
            }
            sched_yield();
            continue;
        }
        if (!(slot->flags & RING_TORN)) {
            module_add_slot_unlocked(slot);
        }
        ring_release(r, slot);
    }
    M.draining = 0;
}

/* Called just before any code object is destroyed (symbols.c). Samples
 * holding it must be symbolized now, and its cache entries dropped so a
 * new code object at the same address is not misnamed. */
static void
module_on_code_death(PyObject *code)
{
    if (!M.running) {
        return;
    }
    if (ring_pending(sampler_ring()) != 0) {
        module_drain_unlocked(1);
    }
    symbols_forget(&M.symbols, code);
}

/* Reads /proc/self/task/<tid>/comm into buf; returns its length or 0. */
static size_t
module_thread_comm(int32_t tid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0')) {
        n--;
    }
    buf[n] = '\0';
    return n;
}

/* Names threads seen in samples: the threading.Thread name when there is
 * one, else the kernel's comm, else "thread-<tid>". */
static void
module_resolve_thread_names_unlocked(void)
{
    profile_t *p = &M.profile;
    size_t i;
    for (i = 0; i < p->n_threads; i++) {
        if (!p->threads[i].resolved) {
            break;
        }
    }
    if (i == p->n_threads) {
        return;
    }
    /* First gather {native_id: name} from threading, running whatever
     * Python code that takes; only then touch the profile. */
    PyObject *names = PyDict_New();
    if (names == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *modname = PyUnicode_FromString("threading");
    PyObject *threading = modname ? PyImport_GetModule(modname) : NULL;
    Py_XDECREF(modname);
    if (threading != NULL) {
        PyObject *active = PyObject_GetAttrString(threading, "_active");
        PyObject *values = active ? PyDict_Values(active) : NULL;
        if (values != NULL) {
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(values); j++) {
                PyObject *t = PyList_GET_ITEM(values, j);
                PyObject *nid = PyObject_GetAttrString(t, "native_id");
                PyObject *name = PyObject_GetAttrString(t, "name");
                if (nid != NULL && name != NULL && PyLong_Check(nid)
                    && PyUnicode_Check(name)) {
                    PyDict_SetItem(names, nid, name);
                }
                Py_XDECREF(nid);
                Py_XDECREF(name);
                PyErr_Clear();
            }
        }
        Py_XDECREF(values);
        Py_XDECREF(active);
        Py_DECREF(threading);
    }
    PyErr_Clear();
    for (i = 0; i < p->n_threads; i++) {
        if (p->threads[i].resolved) {
            continue;
        }
        int32_t tid = p->threads[i].tid;
        uint32_t sid = 0;
        PyObject *key = PyLong_FromLong(tid);
        PyObject *name = key ? PyDict_GetItem(names, key) : NULL;
        Py_XDECREF(key);
        Py_ssize_t len;
        const char *utf8 = name ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
        if (utf8 != NULL) {
            sid = profile_string(p, utf8, (size_t)len);
        }
        else {
            char buf[64];
            size_t n = module_thread_comm(tid, buf, sizeof(buf));
            if (n == 0) {
                n = (size_t)snprintf(buf, sizeof(buf), "thread-%d", (int)tid);
            }
            sid = profile_string(p, buf, n);
        }
        PyErr_Clear();
        p->threads[i].name = sid;
        p->threads[i].resolved = 1;
    }
    Py_DECREF(names);
}

/* ------------------------------------------------------------------------
 * The collector thread.
 * ---------------------------------------------------------------------- */

static void *
module_collector_main(void *arg)
{
    (void)arg;
    /* Only our sampling signal may interrupt this thread; process-directed
     * signals (SIGINT, SIGTERM...) go to the application's threads. */
    sigset_t mask;
    sigfillset(&mask);
    sigdelset(&mask, M.cfg.signum);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    sampler_mark_collector_thread();

    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *ts = PyEval_SaveThread();
    pthread_mutex_lock(&M.wake_lock);
    while (!M.collector_stop) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += MODULE_COLLECT_INTERVAL_NS;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&M.wake_cond, &M.wake_lock, &deadline);
        if (M.collector_stop) {
            break;
        }
        pthread_mutex_unlock(&M.wake_lock);
        sampler_scan_threads();
        if (ring_pending(sampler_ring()) != 0) {
            PyEval_RestoreThread(ts);
            module_drain_unlocked(0);
            module_resolve_thread_names_unlocked();
            ts = PyEval_SaveThread();
        }
        pthread_mutex_lock(&M.wake_lock);
    }
    pthread_mutex_unlock(&M.wake_lock);
    PyEval_RestoreThread(ts);
    PyGILState_Release(gil);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Python API
 * ---------------------------------------------------------------------- */

static void
module_free_profile_unlocked(void)
{
    symbols_unwatch();
    sampler_release();
    symbols_free(&M.symbols);
    profile_free(&M.profile);
    PyMem_RawFree(M.stack);
    M.stack = NULL;
}

static PyObject *
module_start(PyObject *self, PyObject *args)
{
    (void)self;
    const char *mode, *engine;
    int hz, signum, max_depth;
    PyObject *hidden_file;
    if (!PyArg_ParseTuple(args, "sisiiU:start", &mode, &hz, &engine, &signum,
                          &max_depth, &hidden_file)) {
        return NULL;
    }
    if (M.running) {
        PyErr_SetString(sampler_error,
                        "a CPU profile is already running in this process; "
                        "stop it first");
        return NULL;
    }
    if (strcmp(mode, "cpu") != 0) {
        PyErr_Format(PyExc_ValueError, "unknown mode %s", mode);
        return NULL;
    }
    if (hz < 1 || hz > 100000) {
        PyErr_Format(PyExc_ValueError, "hz must be in 1..100000, got %d", hz);
        return NULL;
    }
    if (max_depth < 1 || max_depth > 4096) {
        PyErr_Format(PyExc_ValueError, "max_depth must be in 1..4096");
        return NULL;
    }
    sampler_engine_t eng;
    if (strcmp(engine, "auto") == 0) {
        eng = SAMPLER_ENGINE_AUTO;
    }
    else if (strcmp(engine, "perf") == 0) {
        eng = SAMPLER_ENGINE_PERF;
    }
    else if (strcmp(engine, "timer") == 0) {
        eng = SAMPLER_ENGINE_TIMER;
    }
    else if (strcmp(engine, "itimer") == 0) {
        eng = SAMPLER_ENGINE_ITIMER;
    }
    else {
        PyErr_Format(PyExc_ValueError, "unknown engine %s", engine);
        return NULL;
    }

    memset(&M.cfg, 0, sizeof(M.cfg));
    M.cfg.engine = eng;
    M.cfg.signum = signum;
    M.cfg.period_ns = 1000000000ULL / (uint64_t)hz;
    M.cfg.max_depth = (uint32_t)max_depth;
    /* Room for ~100 ms of samples from 2 busy CPUs, at least 256 slots,
     * so a collector delayed by a long GIL hold loses nothing. */
    size_t slots = (size_t)hz / 5;
    M.cfg.ring_slots = slots < 256 ? 256 : slots > 8192 ? 8192 : slots;
    M.mode = "cpu";
    M.hz = hz;
    M.truncated = M.unknown_frames = 0;

    M.stack = PyMem_RawMalloc(((size_t)max_depth + 8) * sizeof(uint32_t));
    if (M.stack == NULL || profile_init(&M.profile, MODULE_MAX_SAMPLES) < 0) {
        PyMem_RawFree(M.stack);
        M.stack = NULL;
        return PyErr_NoMemory();
    }
    if (symbols_init(&M.symbols, &M.profile, hidden_file) < 0) {
        profile_free(&M.profile);
        PyMem_RawFree(M.stack);
        M.stack = NULL;
        return PyErr_NoMemory();
    }
    if (symbols_watch(module_on_code_death) < 0) {
        symbols_free(&M.symbols);
        profile_free(&M.profile);
        PyMem_RawFree(M.stack);
        M.stack = NULL;
        return NULL;
    }
    M.start_realtime_ns = module_clock_ns(CLOCK_REALTIME);
    M.start_monotonic_ns = module_clock_ns(CLOCK_MONOTONIC);
    M.start_cpu_ns = module_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    M.running = 1;
    if (sampler_start(&M.cfg) < 0) {
        M.running = 0;
        symbols_unwatch();
        symbols_free(&M.symbols);
        profile_free(&M.profile);
        PyMem_RawFree(M.stack);
        M.stack = NULL;
        return NULL;
    }
    M.collector_stop = 0;
    pthread_cond_init(&M.wake_cond, NULL);
    int err = pthread_create(&M.collector, NULL, module_collector_main, NULL);
    if (err != 0) {
        sampler_stop();
        module_drain_unlocked(1);
        M.running = 0;
        module_free_profile_unlocked();
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    M.collector_started = 1;
    Py_RETURN_NONE;
}

static const char *
module_source_name(int src)
{
    static const char *names[] = {"perf", "timer", "itimer"};
    return names[src];
}

static PyObject *
module_stats_unlocked(int64_t duration_ns, int64_t cpu_ns)
{
    const sampler_counters_t *c = sampler_counters();
    uint64_t signals = 0, by_source[SAMPLER_SRC_COUNT], armed[SAMPLER_SRC_COUNT];
    int primary = SAMPLER_SRC_ITIMER;
    uint64_t best = 0;
    sampler_threads_by_source(armed);
    for (int i = 0; i < SAMPLER_SRC_COUNT; i++) {
        by_source[i] = atomic_load(&c->signals[i]);
        signals += by_source[i];
        if (by_source[i] > best) {
            best = by_source[i];
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
    double cpu_s = (double)cpu_ns / 1e9;
    double effective = cpu_s > 0 ? (double)signals / cpu_s : 0.0;
    return Py_BuildValue(
        "{s:s,s:s,s:i,s:d,s:K,s:K,s:{s:K,s:K,s:K},s:{s:K,s:K,s:K,s:K},"
        "s:K,s:L,s:L,s:K,s:K}",
        "mode", M.mode, "engine", module_source_name(primary),
        "requested_hz", M.hz, "effective_hz", effective,
        "samples", (unsigned long long)signals,
        "signals", (unsigned long long)signals,
        "threads_by_engine",
        "perf", (unsigned long long)armed[SAMPLER_SRC_PERF],
        "timer", (unsigned long long)armed[SAMPLER_SRC_TIMER],
        "itimer", (unsigned long long)armed[SAMPLER_SRC_ITIMER],
        "dropped",
        "buffer_full",
        (unsigned long long)atomic_load(&c->dropped[SAMPLER_DROP_RING_FULL]),
        "torn", (unsigned long long)atomic_load(&c->dropped[SAMPLER_DROP_TORN]),
        "stack_table_full", (unsigned long long)M.profile.overflowed,
        "unknown_frames", (unsigned long long)M.unknown_frames,
        "truncated", (unsigned long long)M.truncated,
        "duration_ns", (long long)duration_ns, "cpu_ns", (long long)cpu_ns,
        "foreign_signals", (unsigned long long)atomic_load(&c->foreign),
        "profile_bytes", (unsigned long long)profile_bytes(&M.profile));
}

/* Adds one pseudo-frame sample for samples the handler had to drop, so
 * the profile's totals include them and the loss is visible. */
static void
module_add_dropped_unlocked(const char *what, uint64_t count, uint64_t periods)
{
    if (count == 0) {
        return;
    }
    uint32_t loc = profile_pseudo(&M.profile, what);
    profile_thread_t *t = profile_thread(&M.profile, 0);
    if (t != NULL && !t->resolved) {
        t->name = profile_string(&M.profile, "samprof", 7);
        t->resolved = 1;
    }
    (void)profile_add(&M.profile, &loc, loc ? 1 : 0, 0, 0, 0, (int64_t)count,
                      (int64_t)(periods * M.cfg.period_ns));
}

/* Copies the registered label sets into the profile so that label-set ids
 * in samples are valid profile ids. */
static int
module_copy_labelsets_unlocked(void)
{
    if (module_labelsets == NULL) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(module_labelsets); i++) {
        PyObject *pairs = PyList_GET_ITEM(module_labelsets, i);
        Py_ssize_t n = PyTuple_GET_SIZE(pairs);
        profile_label_t buf[64];
        if (n > 64) {
            n = 64;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *kv = PyTuple_GET_ITEM(pairs, j);
            Py_ssize_t kl, vl;
            const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kv, 0), &kl);
            const char *v = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kv, 1), &vl);
            if (k == NULL || v == NULL) {
                return -1;
            }
            buf[j].key = profile_string(&M.profile, k, (size_t)kl);
            buf[j].value = profile_string(&M.profile, v, (size_t)vl);
        }
        if (profile_labelset(&M.profile, buf, (size_t)n) == 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
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
    /* The collector needs the GIL to finish its drain: release it. */
    pthread_mutex_lock(&M.wake_lock);
    M.collector_stop = 1;
    pthread_cond_signal(&M.wake_cond);
    pthread_mutex_unlock(&M.wake_lock);
    if (M.collector_started) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(M.collector, NULL);
        Py_END_ALLOW_THREADS
        M.collector_started = 0;
    }
    pthread_cond_destroy(&M.wake_cond);
    sampler_stop();
    int64_t duration = module_clock_ns(CLOCK_MONOTONIC) - M.start_monotonic_ns;
    int64_t cpu = module_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - M.start_cpu_ns;
    module_drain_unlocked(1);
    module_resolve_thread_names_unlocked();

    const sampler_counters_t *c = sampler_counters();
    module_add_dropped_unlocked(
        "<samprof: dropped, buffer full>",
        atomic_load(&c->dropped[SAMPLER_DROP_RING_FULL]),
        atomic_load(&c->dropped_periods[SAMPLER_DROP_RING_FULL]));
    module_add_dropped_unlocked(
        "<samprof: dropped, torn stack>",
        atomic_load(&c->dropped[SAMPLER_DROP_TORN]),
        atomic_load(&c->dropped_periods[SAMPLER_DROP_TORN]));

    PyObject *stats = module_stats_unlocked(duration, cpu);
    PyObject *result = NULL;
    pb_buf_t buf;
    pb_init(&buf);
    if (stats != NULL && module_copy_labelsets_unlocked() == 0) {
        char c1[256], c2[256], c3[160];
        PyObject *eng = PyDict_GetItemString(stats, "engine");
        PyObject *eff = PyDict_GetItemString(stats, "effective_hz");
        uint64_t armed[SAMPLER_SRC_COUNT];
        sampler_threads_by_source(armed);
        snprintf(c1, sizeof(c1),
                 "samprof mode=%s engine=%s requested_hz=%d "
                 "effective_hz=%.1f",
                 M.mode, eng ? PyUnicode_AsUTF8(eng) : "?", M.hz,
                 eff ? PyFloat_AsDouble(eff) : 0.0);
        snprintf(c2, sizeof(c2),
                 "samprof dropped: buffer_full=%llu torn=%llu "
                 "stack_table_full=%llu truncated=%llu",
                 (unsigned long long)atomic_load(
                     &c->dropped[SAMPLER_DROP_RING_FULL]),
                 (unsigned long long)atomic_load(&c->dropped[SAMPLER_DROP_TORN]),
                 (unsigned long long)M.profile.overflowed,
                 (unsigned long long)M.truncated);
        snprintf(c3, sizeof(c3), "samprof threads: perf=%llu timer=%llu itimer=%llu",
                 (unsigned long long)armed[SAMPLER_SRC_PERF],
                 (unsigned long long)armed[SAMPLER_SRC_TIMER],
                 (unsigned long long)armed[SAMPLER_SRC_ITIMER]);
        const char *comments[] = {c1, c2, c3};
        pprof_meta_t meta = {
            .value_type = "cpu",
            .period_ns = (int64_t)M.cfg.period_ns,
            .time_nanos = M.start_realtime_ns,
            .duration_nanos = duration,
            .comments = comments,
            .n_comments = 3,
        };
        if (pprof_encode(&M.profile, &meta, &buf) < 0) {
            PyErr_NoMemory();
        }
        else {
            PyObject *bytes = PyBytes_FromStringAndSize((const char *)buf.data,
                                                        (Py_ssize_t)buf.len);
            if (bytes != NULL) {
                result = Py_BuildValue("(NO)", bytes, stats);
            }
        }
    }
    pb_free(&buf);
    Py_XDECREF(stats);
    M.running = 0;
    module_free_profile_unlocked();
    return result;
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
    if (!PyTuple_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "label set must be a tuple of pairs");
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
    if (PyList_Append(module_labelsets, pairs) < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(PyList_GET_SIZE(module_labelsets));
}

static PyObject *
module_set_thread_labels(PyObject *self, PyObject *arg)
{
    (void)self;
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    uint32_t old = sampler_thread_labels();
    sampler_set_thread_labels((uint32_t)id);
    return PyLong_FromUnsignedLong(old);
}

static PyObject *
module_set_thread_in_gc(PyObject *self, PyObject *arg)
{
    (void)self;
    sampler_set_thread_in_gc(PyObject_IsTrue(arg) > 0);
    Py_RETURN_NONE;
}

static PyObject *
module_after_fork_child(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    /* The C-level atfork handler already stopped sampling; this runs later
     * with the GIL and undoes what needs the interpreter. */
    symbols_unwatch();
    Py_RETURN_NONE;
}

static void
module_atfork_child(void)
{
    /* In the child only the forking thread exists; the collector does
     * not. Profiling is off there, and the parent's profile is abandoned
     * without being freed (its memory is shared copy-on-write). */
    sampler_after_fork_child();
    if (M.running) {
        M.running = 0;
        M.collector_started = 0;
        M.draining = 0;
        memset(&M.profile, 0, sizeof(M.profile));
        memset(&M.symbols, 0, sizeof(M.symbols));
        M.stack = NULL;
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        memcpy(&M.wake_lock, &fresh, sizeof(fresh));
    }
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
    if (stack == NULL || profile_init(&p, (size_t)n + 1) < 0) {
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
        if (profile_add(&p, stack, (uint32_t)depth, 1, 0, 0, 1, 1000000) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    pprof_meta_t meta = {.value_type = "cpu", .period_ns = 1000000};
    if (pprof_encode(&p, &meta, &buf) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)buf.data,
                                              (Py_ssize_t)buf.len);
    if (raw != NULL) {
        PyObject *gzip = PyImport_ImportModule("gzip");
        if (gzip != NULL) {
            result = PyObject_CallMethod(gzip, "compress", "O", raw);
            Py_DECREF(gzip);
        }
        Py_DECREF(raw);
    }
done:
    pb_free(&buf);
    profile_free(&p);
    PyMem_RawFree(stack);
    return result;
}

static PyMethodDef module_methods[] = {
    {"_encode_synthetic", module_encode_synthetic, METH_VARARGS,
     "_encode_synthetic(n, depth)\n--\n\n"
     "Test hook: gzipped pprof of n fabricated distinct stacks."},
    {"start", module_start, METH_VARARGS,
     "start(mode, hz, engine, signum, max_depth, hidden_file)\n--\n\n"
     "Start sampling. Use samprof.CPUProfiler instead."},
    {"stop", module_stop, METH_NOARGS,
     "stop()\n--\n\nStop sampling; return (pprof bytes, stats dict)."},
    {"is_running", module_is_running, METH_NOARGS,
     "is_running()\n--\n\nTrue while a profile is running."},
    {"register_labelset", module_register_labelset, METH_O,
     "register_labelset(pairs)\n--\n\n"
     "Register a tuple of (key, value) pairs; return its id."},
    {"set_thread_labels", module_set_thread_labels, METH_O,
     "set_thread_labels(id)\n--\n\n"
     "Set the calling thread's label set; return the previous id."},
    {"set_thread_in_gc", module_set_thread_in_gc, METH_O,
     "set_thread_in_gc(flag)\n--\n\nMark the calling thread as inside GC."},
    {"_after_fork_child", module_after_fork_child, METH_NOARGS,
     "_after_fork_child()\n--\n\nReset interpreter hooks in a forked child."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "samprof._samprof",
    "samprof's C core: signal-driven sampling, aggregation and pprof.",
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
        module_labelsets = PyList_New(0);
        if (module_labelsets == NULL) {
            goto error;
        }
        if (pthread_atfork(NULL, NULL, module_atfork_child) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
            goto error;
        }
    }
    Py_INCREF(sampler_error);
    if (PyModule_AddObject(m, "ProfilerError", sampler_error) < 0) {
        Py_DECREF(sampler_error);
        goto error;
    }
    if (PyModule_AddIntConstant(m, "MAX_SAMPLES", MODULE_MAX_SAMPLES) < 0) {
        goto error;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
