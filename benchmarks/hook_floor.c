/* The cheapest allocator hook there is: on the MEM and OBJ domains, a
 * hook that only passes each call to the allocator it found. The heap
 * section of the benchmarks runs it beside samprof's heap profiler, so the
 * cost of being a PyMem_SetAllocator hook at all, which no such profiler
 * can avoid, is told apart from what samprof's hooks add to it.
 *
 * Built by benchmarks/profilers.py into a shared library loaded with
 * ctypes.PyDLL (the GIL held), against the running Python's headers. */
#include <Python.h>

typedef struct {
    PyMemAllocatorDomain domain;
    PyMemAllocatorEx below;
} floor_hook_t;

static floor_hook_t hooks[2] = {{PYMEM_DOMAIN_MEM}, {PYMEM_DOMAIN_OBJ}};

static void *
floor_malloc(void *ctx, size_t size)
{
    floor_hook_t *h = ctx;
    return h->below.malloc(h->below.ctx, size);
}

static void *
floor_calloc(void *ctx, size_t nelem, size_t elsize)
{
    floor_hook_t *h = ctx;
    return h->below.calloc(h->below.ctx, nelem, elsize);
}

static void *
floor_realloc(void *ctx, void *ptr, size_t size)
{
    floor_hook_t *h = ctx;
    return h->below.realloc(h->below.ctx, ptr, size);
}

static void
floor_free(void *ctx, void *ptr)
{
    floor_hook_t *h = ctx;
    h->below.free(h->below.ctx, ptr);
}

void
hook_floor_start(void)
{
    for (int i = 0; i < 2; i++) {
        PyMem_GetAllocator(hooks[i].domain, &hooks[i].below);
        PyMemAllocatorEx ours = {&hooks[i], floor_malloc, floor_calloc,
                                 floor_realloc, floor_free};
        PyMem_SetAllocator(hooks[i].domain, &ours);
    }
}

/* Puts back what it found, where its hook is still the one installed. */
void
hook_floor_stop(void)
{
    for (int i = 0; i < 2; i++) {
        PyMemAllocatorEx cur;
        PyMem_GetAllocator(hooks[i].domain, &cur);
        if (cur.malloc == floor_malloc) {
            PyMem_SetAllocator(hooks[i].domain, &hooks[i].below);
        }
    }
}
