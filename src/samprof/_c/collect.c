/* collect: captured frames to profile samples.
 *
 * The GIL protects everything here: the profile, the symbol caches and the
 * scratch stack. That also makes code-object death safe to handle: the
 * death hook runs under the GIL in the thread destroying the object, drains
 * the ring first, then drops the object's cache entries. */
#include "collect.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "symbols.h"

/* A drain that must empty the ring (code-object death) waits at most this
 * many yields for a handler that claimed a slot to publish it. */
#define COLLECT_DRAIN_SPIN_LIMIT 1000000

typedef struct {
    int active; /* between init and free */
    profile_t profile;
    symbols_t symbols;
    uint32_t max_depth;
    uint64_t period_ns;
    uint32_t *stack;         /* scratch: one sample's location ids */
    ring_t *ring;            /* drained on code death, or NULL */
    int draining;            /* re-entrancy guard */
    uint64_t truncated;      /* samples cut at max_depth */
    uint64_t unknown_frames; /* frames that could not be symbolized */
    PyObject *labelsets;     /* registered label sets (borrowed) */
    int wall_mode; /* ring samples are a wall profile's on-CPU part */
    uint32_t k_thread_state; /* string id of the label key "thread_state" */
} collect_state_t;

/* Global for the same reason as the sampler's: the code-object death hook
 * gets no context pointer. Protected by the GIL. */
static collect_state_t C;

static void collect_on_code_death(PyObject *code);

int
collect_init(uint32_t max_depth, uint64_t period_ns, PyObject *hidden_file,
             PyObject *labelsets, size_t max_samples)
{
    memset(&C, 0, sizeof(C));
    C.max_depth = max_depth;
    C.period_ns = period_ns;
    C.labelsets = labelsets;
    C.stack = PyMem_RawMalloc(((size_t)max_depth + 8) * sizeof(uint32_t));
    if (C.stack == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Every profile made here is CPU or wall time: samples/count and
     * cpu|wall/nanoseconds. */
    if (profile_init(&C.profile, 2, max_samples) < 0) {
        PyMem_RawFree(C.stack);
        PyErr_NoMemory();
        return -1;
    }
    if (symbols_init(&C.symbols, &C.profile, hidden_file) < 0) {
        profile_free(&C.profile);
        PyMem_RawFree(C.stack);
        PyErr_NoMemory();
        return -1;
    }
    if (symbols_watch(collect_on_code_death) < 0) {
        symbols_free(&C.symbols);
        profile_free(&C.profile);
        PyMem_RawFree(C.stack);
        return -1;
    }
    /* Interned once: the wall sampler labels every sample with it. Lost
     * only when out of memory, and then the label is left out. */
    C.k_thread_state = profile_string(&C.profile, "thread_state", 12);
    C.active = 1;
    return 0;
}

void
collect_free(void)
{
    symbols_unwatch();
    if (!C.active) {
        return;
    }
    symbols_free(&C.symbols);
    profile_free(&C.profile);
    PyMem_RawFree(C.stack);
    memset(&C, 0, sizeof(C));
}

int
collect_active(void)
{
    return C.active;
}

profile_t *
collect_profile(void)
{
    return &C.profile;
}

uint64_t
collect_truncated(void)
{
    return C.truncated;
}

uint64_t
collect_unknown_frames(void)
{
    return C.unknown_frames;
}

uint32_t
collect_stack_unlocked(const ring_frame_t *frames, uint16_t depth,
                       uint16_t flags, uint32_t *out)
{
    profile_t *p = &C.profile;
    uint32_t n = 0;
    if (flags & RING_IN_GC) {
        out[n++] = profile_pseudo(p, "<gc>");
    }
    for (uint16_t i = 0; i < depth && i < C.max_depth; i++) {
        uint32_t loc =
            symbols_location(&C.symbols, frames[i].code, frames[i].offset);
        if (loc == SYMBOLS_HIDDEN) {
            continue;
        }
        if (loc == 0) {
            C.unknown_frames++;
            loc = profile_pseudo(p, "<unknown>");
        }
        out[n++] = loc;
    }
    if (flags & RING_TRUNCATED) {
        C.truncated++;
        out[n++] = profile_pseudo(p, "<truncated>");
    }
    if (flags & RING_COLLECTOR) {
        out[n++] = profile_pseudo(p, "<samprof collector>");
    }
    else if (flags & RING_NO_PYTHON) {
        out[n++] = profile_pseudo(p, "<native thread>");
    }
    else if (n == 0 || (n == 1 && (flags & RING_IN_GC))) {
        out[n++] = profile_pseudo(p, "<no Python frames>");
    }
    /* A location id of 0 means a pseudo-frame could not be interned (out
     * of memory): leave it out rather than emit an invalid id. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (out[i] != 0) {
            out[k++] = out[i];
        }
    }
    return k;
}

void
collect_add_unlocked(const uint32_t *stack, uint32_t n, int32_t tid,
                     uint32_t labels, uint32_t state, int64_t count,
                     int64_t value)
{
    if (C.labelsets == NULL
        || labels > (uint32_t)PyList_GET_SIZE(C.labelsets)) {
        labels = 0;
    }
    (void)profile_thread(&C.profile, tid);
    profile_label_t extra = {state != 0 ? C.k_thread_state : 0, state};
    int64_t values[2] = {count, value};
    (void)profile_add(&C.profile, stack, n, tid, labels, extra, values, NULL);
}

void
collect_set_wall_mode(int wall)
{
    C.wall_mode = wall;
}

void
collect_set_ring(ring_t *ring)
{
    C.ring = ring;
}

void
collect_drain_unlocked(ring_t *r, int wait_for_writers)
{
    if (!C.active || C.draining || r == NULL || r->slots == NULL) {
        return;
    }
    C.draining = 1;
    long spins = 0;
    for (;;) {
        ring_slot_t *slot = ring_peek(r);
        if (slot == NULL) {
            if (!wait_for_writers || ring_pending(r) == 0
                || ++spins > COLLECT_DRAIN_SPIN_LIMIT) {
                break;
            }
            sched_yield();
            continue;
        }
        int skip = (slot->flags & RING_TORN)
                   || (C.wall_mode
                       && (slot->flags & (RING_NO_PYTHON | RING_COLLECTOR)));
        if (!skip) {
            uint32_t n = collect_stack_unlocked(slot->frames, slot->depth,
                                                slot->flags, C.stack);
            collect_add_unlocked(C.stack, n, slot->tid, slot->labels,
                                 C.wall_mode ? collect_state_string(1) : 0, 1,
                                 (int64_t)slot->weight * (int64_t)C.period_ns);
        }
        ring_release(r, slot);
    }
    C.draining = 0;
}

/* Called just before any code object is destroyed (symbols.c). Samples
 * holding it are symbolized now, and its cache entries dropped so a new
 * code object at the same address is not misnamed. */
static void
collect_on_code_death(PyObject *code)
{
    if (!C.active) {
        return;
    }
    if (C.ring != NULL && ring_pending(C.ring) != 0) {
        collect_drain_unlocked(C.ring, 1);
    }
    symbols_forget(&C.symbols, code);
}

uint32_t
collect_state_string(int on_cpu)
{
    return on_cpu ? profile_string(&C.profile, "on-cpu", 6)
                  : profile_string(&C.profile, "off-cpu", 7);
}

/* Reads /proc/self/task/<tid>/comm into buf; returns its length or 0. */
static size_t
collect_thread_comm(int32_t tid, char *buf, size_t size)
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

/* {native_id: name} of threading's live Thread objects, or NULL. */
static PyObject *
collect_threading_names(void)
{
    PyObject *names = PyDict_New();
    if (names == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *modname = PyUnicode_FromString("threading");
    PyObject *threading = modname ? PyImport_GetModule(modname) : NULL;
    Py_XDECREF(modname);
    if (threading != NULL) {
        PyObject *active = PyObject_GetAttrString(threading, "_active");
        PyObject *values =
            active && PyDict_Check(active) ? PyDict_Values(active) : NULL;
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
    return names;
}

void
collect_resolve_thread_names_unlocked(void)
{
    profile_t *p = &C.profile;
    size_t i;
    for (i = 0; i < p->n_threads; i++) {
        if (!p->threads[i].resolved) {
            break;
        }
    }
    if (i == p->n_threads) {
        return;
    }
    /* Gather names first (this runs Python code, which may drain the ring
     * through a code-object death); only then walk the thread table. */
    PyObject *names = collect_threading_names();
    for (i = 0; i < p->n_threads; i++) {
        if (p->threads[i].resolved) {
            continue;
        }
        int32_t tid = p->threads[i].tid;
        uint32_t sid = 0;
        PyObject *key = PyLong_FromLong(tid);
        PyObject *name = key && names ? PyDict_GetItem(names, key) : NULL;
        Py_XDECREF(key);
        Py_ssize_t len;
        const char *utf8 = name ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
        if (utf8 != NULL) {
            sid = profile_string(p, utf8, (size_t)len);
        }
        else {
            char buf[64];
            size_t n = collect_thread_comm(tid, buf, sizeof(buf));
            if (n == 0) {
                n = (size_t)snprintf(buf, sizeof(buf), "thread-%d", (int)tid);
            }
            sid = profile_string(p, buf, n);
        }
        PyErr_Clear();
        p->threads[i].name = sid;
        p->threads[i].resolved = 1;
    }
    Py_XDECREF(names);
}

void
collect_add_dropped_unlocked(const char *what, uint64_t count,
                             uint64_t periods)
{
    if (count == 0) {
        return;
    }
    uint32_t loc = profile_pseudo(&C.profile, what);
    profile_thread_t *t = profile_thread(&C.profile, 0);
    if (t != NULL && !t->resolved) {
        t->name = profile_string(&C.profile, "samprof", 7);
        t->resolved = 1;
    }
    profile_label_t none = {0, 0};
    int64_t values[2] = {(int64_t)count, (int64_t)(periods * C.period_ns)};
    (void)profile_add(&C.profile, &loc, loc ? 1 : 0, 0, 0, none, values, NULL);
}

/* Copies the registered label sets into the profile, in order, so that
 * label-set ids in samples are valid profile ids. */
static int
collect_copy_labelsets_unlocked(void)
{
    if (C.labelsets == NULL) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(C.labelsets); i++) {
        PyObject *pairs = PyList_GET_ITEM(C.labelsets, i);
        Py_ssize_t n = PyTuple_GET_SIZE(pairs);
        profile_label_t buf[64];
        if (n > 64) {
            n = 64; /* register_labelset refuses more */
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *kv = PyTuple_GET_ITEM(pairs, j);
            Py_ssize_t kl, vl;
            const char *k =
                PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kv, 0), &kl);
            const char *v =
                PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kv, 1), &vl);
            if (k == NULL || v == NULL) {
                return -1;
            }
            buf[j].key = profile_string(&C.profile, k, (size_t)kl);
            buf[j].value = profile_string(&C.profile, v, (size_t)vl);
        }
        if (profile_labelset(&C.profile, buf, (size_t)n) == 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

int
collect_encode_unlocked(const pprof_meta_t *meta, pb_buf_t *out)
{
    if (collect_copy_labelsets_unlocked() < 0) {
        return -1;
    }
    if (pprof_encode(&C.profile, meta, out) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}
