/* npdata: a numpy data-memory handler that counts into the heap profile
 * (npdata.h has the contract). numpy's headers are not needed to build:
 * the few things used from its C API are mirrored here, as numpy >= 1.22
 * defines them (numpy/ndarraytypes.h, numpy/__multiarray_api.h). */
#include "npdata.h"

#include <stdlib.h>
#include <string.h>

#include "heap.h"

/* PyDataMemAllocator and PyDataMem_Handler, version 1. */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} np_allocator_t;

typedef struct {
    char name[127];
    uint8_t version;
    np_allocator_t allocator;
} np_handler_t;

/* Slots of numpy's C-API table (the _ARRAY_API capsule's pointer). */
#define NP_FEATURE_VERSION 211 /* PyArray_GetNDArrayCFeatureVersion */
#define NP_SET_HANDLER 304     /* PyDataMem_SetHandler */
#define NP_GET_HANDLER 305     /* PyDataMem_GetHandler */
#define NP_HANDLER_API 0xf     /* NPY_1_22_API_VERSION: handlers exist */
#define NP_CAPSULE "mem_handler"

/* Our handler above one handler found in some context. Never freed:
 * arrays made under it free through it for as long as they live, which
 * may be after the profile; it then passes every call through. */
typedef struct np_wrap {
    np_handler_t handler; /* what numpy calls; allocator.ctx: this */
    const np_handler_t *orig;
    PyObject *orig_capsule; /* kept, so orig outlives us */
    PyObject *capsule;      /* ours, named "mem_handler"; kept */
    struct np_wrap *next;
} np_wrap_t;

typedef PyObject *(*np_handler_fn)(PyObject *);
typedef PyObject *(*np_get_fn)(void);

static struct {
    int enabled;
    np_handler_fn set_handler;
    np_get_fn get_handler;
    np_wrap_t *wraps;
    PyObject *started_with;   /* our capsule, set where counting started */
    PyObject *found_at_start; /* the handler it replaced (strong) */
    uint64_t no_gil;
} N;

/* ------------------------------------------------------------------------
 * The handler
 * ---------------------------------------------------------------------- */

/* Whether the calling thread may touch the heap profile. numpy with a GIL
 * allocates array data with it held; anything else is dropped, counted. */
static int
np_has_gil(void)
{
    if (PyGILState_Check()) {
        return 1;
    }
    __atomic_fetch_add(&N.no_gil, 1, __ATOMIC_RELAXED);
    return 0;
}

static void
np_count(void *p, size_t size)
{
    if (p != NULL && N.enabled && np_has_gil()) {
        heap_count_block(p, size);
    }
}

static void *
np_malloc(void *ctx, size_t size)
{
    const np_allocator_t *a = &((np_wrap_t *)ctx)->orig->allocator;
    void *p = a->malloc(a->ctx, size);
    np_count(p, size);
    return p;
}

static void *
np_calloc(void *ctx, size_t nelem, size_t elsize)
{
    const np_allocator_t *a = &((np_wrap_t *)ctx)->orig->allocator;
    void *p = a->calloc(a->ctx, nelem, elsize);
    size_t size;
    if (!__builtin_mul_overflow(nelem, elsize, &size)) {
        np_count(p, size);
    }
    return p;
}

/* The free of the old block and the allocation of the new one; when it
 * fails the old block is untouched, and so is the profile. */
static void *
np_realloc(void *ctx, void *ptr, size_t size)
{
    const np_allocator_t *a = &((np_wrap_t *)ctx)->orig->allocator;
    void *p = a->realloc(a->ctx, ptr, size);
    if (p != NULL && ptr != NULL && N.enabled && np_has_gil()) {
        heap_forget_block(ptr);
    }
    np_count(p, size);
    return p;
}

/* While counting is on, every free is looked up: a sampled block leaves
 * the in-use values however it dies. */
static void
np_free(void *ctx, void *ptr, size_t size)
{
    const np_allocator_t *a = &((np_wrap_t *)ctx)->orig->allocator;
    if (ptr != NULL && N.enabled && np_has_gil()) {
        heap_forget_block(ptr);
    }
    a->free(a->ctx, ptr, size);
}

/* ------------------------------------------------------------------------
 * Wrapping handlers
 * ---------------------------------------------------------------------- */

/* The wrap whose handler is capsule's, or NULL. */
static np_wrap_t *
np_ours(PyObject *capsule)
{
    void *h = PyCapsule_GetPointer(capsule, NP_CAPSULE);
    if (h == NULL) {
        PyErr_Clear();
        return NULL;
    }
    for (np_wrap_t *w = N.wraps; w != NULL; w = w->next) {
        if (h == &w->handler) {
            return w;
        }
    }
    return NULL;
}

/* Our wrap above the handler in capsule: made once per handler found. */
static np_wrap_t *
np_wrap(PyObject *capsule)
{
    for (np_wrap_t *w = N.wraps; w != NULL; w = w->next) {
        if (w->orig_capsule == capsule) {
            return w;
        }
    }
    const np_handler_t *orig = PyCapsule_GetPointer(capsule, NP_CAPSULE);
    if (orig == NULL) {
        return NULL;
    }
    np_wrap_t *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    snprintf(w->handler.name, sizeof(w->handler.name), "samprof");
    w->handler.version = 1;
    w->handler.allocator =
        (np_allocator_t){w, np_malloc, np_calloc, np_realloc, np_free};
    w->capsule = PyCapsule_New(&w->handler, NP_CAPSULE, NULL);
    if (w->capsule == NULL) {
        free(w);
        return NULL;
    }
    w->orig = orig;
    Py_INCREF(capsule);
    w->orig_capsule = capsule;
    w->next = N.wraps;
    N.wraps = w;
    return w;
}

/* Puts our handler above the calling context's. Returns the capsule now
 * set (borrowed) and, in *found, the handler it replaced (a strong
 * reference, or NULL when ours was there already); NULL with an exception
 * set on failure. */
static PyObject *
np_wrap_context(PyObject **found)
{
    *found = NULL;
    PyObject *cur = N.get_handler();
    if (cur == NULL) {
        return NULL;
    }
    np_wrap_t *w = np_ours(cur);
    if (w != NULL) {
        Py_DECREF(cur);
        return w->capsule;
    }
    w = np_wrap(cur);
    if (w == NULL) {
        Py_DECREF(cur);
        return NULL;
    }
    PyObject *old = N.set_handler(w->capsule);
    if (old == NULL) {
        Py_DECREF(cur);
        return NULL;
    }
    Py_DECREF(old); /* cur again: the GIL is held */
    *found = cur;
    return w->capsule;
}

/* ------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------- */

int
npdata_start(PyObject *api)
{
    void **table = PyCapsule_GetPointer(api, NULL);
    if (table == NULL) {
        return -1;
    }
    unsigned int feature =
        ((unsigned int (*)(void))table[NP_FEATURE_VERSION])();
    if (feature < NP_HANDLER_API) {
        PyErr_Format(PyExc_RuntimeError,
                     "numpy's C API is version %#x; data-memory handlers need "
                     "%#x (numpy 1.22 or newer)",
                     feature, NP_HANDLER_API);
        return -1;
    }
    N.set_handler = (np_handler_fn)table[NP_SET_HANDLER];
    N.get_handler = (np_get_fn)table[NP_GET_HANDLER];
    PyObject *found;
    PyObject *set = np_wrap_context(&found);
    if (set == NULL) {
        return -1;
    }
    N.started_with = set;
    Py_XSETREF(N.found_at_start, found);
    N.enabled = 1;
    return 0;
}

int
npdata_this_thread(void)
{
    if (!N.enabled) {
        return 0;
    }
    PyObject *found;
    if (np_wrap_context(&found) == NULL) {
        return -1;
    }
    Py_XDECREF(found);
    return 0;
}

int
npdata_running(void)
{
    return N.enabled;
}

void
npdata_stop(void)
{
    if (!N.enabled) {
        return;
    }
    N.enabled = 0;
    PyObject *cur = N.get_handler();
    if (cur == NULL) {
        PyErr_Clear();
    }
    else if (cur == N.started_with && N.found_at_start != NULL) {
        PyObject *old = N.set_handler(N.found_at_start);
        if (old == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(old);
    }
    Py_XDECREF(cur);
    Py_CLEAR(N.found_at_start);
    N.started_with = NULL;
}

void
npdata_after_fork_child(void)
{
    N.enabled = 0;
    Py_CLEAR(N.found_at_start);
    N.started_with = NULL;
}

uint64_t
npdata_no_gil(void)
{
    return __atomic_load_n(&N.no_gil, __ATOMIC_RELAXED);
}
