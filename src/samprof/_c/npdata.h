/* npdata: numpy's array data buffers in the heap profile.
 *
 * numpy takes array data from its own allocation handler (by default
 * PyMem_RawMalloc, a domain the heap hooks leave alone), so the MEM and
 * OBJ hooks never see it. numpy >= 1.22 lets a program put a handler of
 * its own in place (PyDataMem_SetHandler); ours wraps the handler it
 * finds and counts each allocation and free into the running heap
 * profile, with the same sampling and stacks.
 *
 * numpy keeps the handler in a context variable: setting it covers the
 * calling thread's current context and the contexts copied from it later
 * (asyncio tasks made afterwards); a thread starts with numpy's default.
 * So a handler is set where the profile starts and in each thread that
 * threading starts while it runs (docs/design.md §8). Everything here runs
 * with the GIL held, except the handler's own calls, which check. */
#ifndef SAMPROF_NPDATA_H
#define SAMPROF_NPDATA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* Starts counting numpy's data buffers into the heap profile, which is
 * running. api is numpy's _ARRAY_API capsule. Puts our handler above the
 * calling context's handler. Returns 0, or -1 with an exception set
 * (numpy older than 1.22; out of memory). */
int npdata_start(PyObject *api);

/* Puts our handler above the calling context's handler, if counting is
 * on and it is not there already: for a thread that just started.
 * Returns 0, or -1 with an exception set. */
int npdata_this_thread(void);

int npdata_running(void);

/* Stops counting. In the context where counting started, the handler
 * found then comes back if ours is still there; elsewhere ours stays,
 * passing every call through (arrays made under it free through it). */
void npdata_stop(void);

/* In a forked child: counting stops; handlers stay, passing through. */
void npdata_after_fork_child(void);

/* Allocations and frees the handler made without the GIL (none in numpy
 * with a GIL; kept as a guard): not counted. */
uint64_t npdata_no_gil(void);

#endif
