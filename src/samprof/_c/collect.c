/* collect: captured frames to profile samples, in profile sessions.
 *
 * The GIL protects everything here: each session's profile, symbol caches
 * and scratch stack, and the list of live sessions. That also makes
 * code-object death safe to handle: the death hook runs under the GIL in
 * the thread destroying the object, and for every live session drains its
 * ring and the ring's backlog first (ring.h: the collector's round thread
 * fills the backlog without the GIL, under the ring's consumer lock, which
 * the drain takes after the GIL), then drops the object's cache entries. */
#include "collect.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "symbols.h"

/* A drain that must empty the ring (code-object death) waits at most this
 * many yields for a handler that claimed a slot to publish it. */
#define COLLECT_DRAIN_SPIN_LIMIT 1000000

/* The live sessions, newest first: each one hears of every code object's
 * death. Global because the death hook gets no context pointer; one code
 * watcher serves them all. Protected by the GIL. */
static collect_session_t *collect_live;

static void collect_on_code_death(PyObject *code);

int
collect_init(collect_session_t *s, size_t n_values, uint32_t max_depth,
             uint64_t period_ns, PyObject *hidden_file, PyObject *labelsets,
             size_t max_samples)
{
    memset(s, 0, sizeof(*s));
    s->max_depth = max_depth;
    s->period_ns = period_ns;
    s->labelsets = labelsets;
    s->stack = PyMem_RawMalloc(((size_t)max_depth + 8) * sizeof(uint32_t));
    if (s->stack == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (profile_init(&s->profile, n_values, max_samples) < 0) {
        PyErr_NoMemory();
        goto free_stack;
    }
    if (symbols_init(&s->symbols, &s->profile, hidden_file) < 0) {
        PyErr_NoMemory();
        goto free_profile;
    }
    /* The first live session starts the code watcher. */
    if (collect_live == NULL && symbols_watch(collect_on_code_death) < 0) {
        goto free_symbols;
    }
    /* Interned once: the wall sampler labels every sample with it. Lost
     * only when out of memory, and then the label is left out. */
    s->k_thread_state = profile_string(&s->profile, "thread_state", 12);
    s->by_thread = 1;
    s->next = collect_live;
    collect_live = s;
    s->active = 1;
    return 0;

free_symbols:
    symbols_free(&s->symbols);
free_profile:
    profile_free(&s->profile);
free_stack:
    PyMem_RawFree(s->stack);
    s->stack = NULL;
    return -1;
}

void
collect_free(collect_session_t *s)
{
    if (!s->active) {
        return;
    }
    for (collect_session_t **link = &collect_live; *link != NULL;
         link = &(*link)->next) {
        if (*link == s) {
            *link = s->next;
            break;
        }
    }
    /* The last live session stops the code watcher. */
    if (collect_live == NULL) {
        symbols_unwatch();
    }
    symbols_free(&s->symbols);
    profile_free(&s->profile);
    PyMem_RawFree(s->stack);
    memset(s, 0, sizeof(*s));
}

void
collect_clear(collect_session_t *s)
{
    profile_clear_samples(&s->profile);
    s->truncated = 0;
    s->unknown_frames = 0;
    s->lost = 0;
}

uint64_t
collect_lost(const collect_session_t *s)
{
    return s->lost;
}

uint64_t
collect_truncated(const collect_session_t *s)
{
    return s->truncated;
}

uint64_t
collect_unknown_frames(const collect_session_t *s)
{
    return s->unknown_frames;
}

uint32_t
collect_stack(collect_session_t *s, const ring_frame_t *frames, uint16_t depth,
              uint16_t flags, uint32_t *out)
{
    profile_t *p = &s->profile;
    uint32_t n = 0;
    if (flags & RING_IN_GC) {
        out[n++] = profile_pseudo(p, "<gc>");
    }
    for (uint16_t i = 0; i < depth && i < s->max_depth; i++) {
        uint32_t loc =
            symbols_location(&s->symbols, frames[i].code, frames[i].offset);
        if (loc == SYMBOLS_HIDDEN) {
            continue;
        }
        if (loc == 0) {
            s->unknown_frames++;
            loc = profile_pseudo(p, "<unknown>");
        }
        out[n++] = loc;
    }
    if (flags & RING_TRUNCATED) {
        s->truncated++;
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

int
collect_add_values(collect_session_t *s, const uint32_t *stack, uint32_t n,
                   int32_t tid, uint32_t labels, profile_extra_t extra,
                   const int64_t *values, size_t *index)
{
    if (s->labelsets == NULL
        || labels > (uint32_t)PyList_GET_SIZE(s->labelsets)) {
        labels = 0;
    }
    if (!s->by_thread) {
        tid = 0;
    }
    (void)profile_thread(&s->profile, tid);
    if (profile_add(&s->profile, stack, n, tid, labels, extra, values, index)
        < 0) {
        s->lost += (uint64_t)values[0];
        return -1;
    }
    return 0;
}

void
collect_add(collect_session_t *s, const uint32_t *stack, uint32_t n,
            int32_t tid, uint32_t labels, uint32_t state, int64_t count,
            int64_t value)
{
    profile_extra_t extra = {state != 0 ? s->k_thread_state : 0, state, 0};
    int64_t values[2] = {count, value};
    (void)collect_add_values(s, stack, n, tid, labels, extra, values, NULL);
}

void
collect_set_wall_mode(collect_session_t *s, int wall)
{
    s->wall_mode = wall;
}

void
collect_set_ring(collect_session_t *s, ring_t *ring)
{
    s->ring = ring;
}

void
collect_drain(collect_session_t *s, ring_t *r, int wait_for_writers)
{
    /* The guard comes before the consumer lock: a drain that runs Python
     * code (a deallocation) may let a code object die in this thread. */
    if (!s->active || s->draining || r == NULL || r->slots == NULL) {
        return;
    }
    s->draining = 1;
    ring_lock(r);
    long spins = 0;
    ring_sample_t sample;
    for (;;) {
        if (!ring_next(r, &sample)) {
            if (!wait_for_writers || ring_pending(r) == 0
                || ++spins > COLLECT_DRAIN_SPIN_LIMIT) {
                break;
            }
            sched_yield();
            continue;
        }
        int skip = (sample.flags & RING_TORN)
                   || (s->wall_mode
                       && (sample.flags & (RING_NO_PYTHON | RING_COLLECTOR)));
        if (!skip) {
            uint32_t n = collect_stack(s, sample.frames, sample.depth,
                                       sample.flags, s->stack);
            collect_add(s, s->stack, n, sample.tid, sample.labels,
                        s->wall_mode ? collect_state_string(s, 1) : 0,
                        (int64_t)sample.count,
                        (int64_t)sample.weight * (int64_t)s->period_ns);
        }
    }
    ring_unlock(r);
    s->draining = 0;
}

/* Called just before any code object is destroyed (symbols.c). Samples
 * holding it are symbolized now, and its cache entries dropped so a new
 * code object at the same address is not misnamed. */
static void
collect_on_code_death(PyObject *code)
{
    for (collect_session_t *s = collect_live; s != NULL; s = s->next) {
        if (s->ring != NULL && ring_pending(s->ring) != 0) {
            collect_drain(s, s->ring, 1);
        }
        if (symbols_forget(&s->symbols, code)) {
            s->code_deaths++;
        }
    }
}

uint32_t
collect_state_string(collect_session_t *s, int on_cpu)
{
    return on_cpu ? profile_string(&s->profile, "on-cpu", 6)
                  : profile_string(&s->profile, "off-cpu", 7);
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

PyObject *
collect_threading_active(void)
{
    PyObject *modname = PyUnicode_FromString("threading");
    PyObject *threading = modname ? PyImport_GetModule(modname) : NULL;
    Py_XDECREF(modname);
    PyObject *active =
        threading ? PyObject_GetAttrString(threading, "_active") : NULL;
    Py_XDECREF(threading);
    if (active != NULL && !PyDict_Check(active)) {
        Py_CLEAR(active);
    }
    PyErr_Clear();
    return active;
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
    PyObject *active = collect_threading_active();
    if (active != NULL) {
        PyObject *values = PyDict_Values(active);
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
        Py_DECREF(active);
    }
    PyErr_Clear();
    return names;
}

void
collect_resolve_thread_names(collect_session_t *s)
{
    profile_t *p = &s->profile;
    size_t i;
    if (!s->by_thread) {
        return; /* its samples carry no thread */
    }
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
collect_name_thread(collect_session_t *s, int32_t tid, PyObject *name)
{
    profile_t *p = &s->profile;
    uint64_t idx;
    if (!PyUnicode_Check(name)
        || !htab_get(&p->threads_index, &tid, sizeof(tid), &idx)
        || p->threads[idx].resolved) {
        return;
    }
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &len);
    if (utf8 == NULL) {
        PyErr_Clear();
        return;
    }
    p->threads[idx].name = profile_string(p, utf8, (size_t)len);
    p->threads[idx].resolved = 1;
}

void
collect_add_dropped(collect_session_t *s, const char *what, uint64_t count,
                    uint64_t periods)
{
    if (count == 0) {
        return;
    }
    uint32_t loc = profile_pseudo(&s->profile, what);
    profile_thread_t *t = profile_thread(&s->profile, 0);
    if (t != NULL && !t->resolved) {
        t->name = profile_string(&s->profile, "samprof", 7);
        t->resolved = 1;
    }
    profile_extra_t none = {0, 0, 0};
    int64_t values[2] = {(int64_t)count, (int64_t)(periods * s->period_ns)};
    if (profile_add(&s->profile, &loc, loc ? 1 : 0, 0, 0, none, values, NULL)
        < 0) {
        s->lost += count;
    }
}

/* Copies the registered label sets into the profile, in order, so that
 * label-set ids in samples are valid profile ids. */
static int
collect_copy_labelsets(collect_session_t *s)
{
    if (s->labelsets == NULL) {
        return 0;
    }
    /* Those copied by an earlier encode (a heap profile's snapshots) are
     * there already. */
    for (Py_ssize_t i = (Py_ssize_t)s->profile.n_labelsets;
         i < PyList_GET_SIZE(s->labelsets); i++) {
        PyObject *pairs = PyList_GET_ITEM(s->labelsets, i);
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
            buf[j].key = profile_string(&s->profile, k, (size_t)kl);
            buf[j].value = profile_string(&s->profile, v, (size_t)vl);
        }
        if (profile_labelset(&s->profile, buf, (size_t)n) == 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

int
collect_encode(collect_session_t *s, const pprof_meta_t *meta, pb_buf_t *out)
{
    if (collect_copy_labelsets(s) < 0) {
        return -1;
    }
    if (pprof_encode(&s->profile, meta, out) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}
