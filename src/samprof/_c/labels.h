/* labels: Go's pprof.Do for Python threads: a context manager and
 * decorator type that sets the calling thread's label set.
 *
 * A label set is a registered tuple of (key, value) str pairs with an id.
 * Entering a block looks up (outer id, the block's pairs) in a cache of
 * merged sets, so the common path allocates one key tuple and costs well
 * under a microsecond. The id goes to thread-local storage (read by the
 * signal handler) and to the thread-state dict (read by the wall sampler,
 * which cannot read other threads' TLS). */
#ifndef SAMPROF_LABELS_H
#define SAMPROF_LABELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Creates the labels type and the registry. Returns the type (new
 * reference), or NULL with an exception set. */
PyObject *labels_init_type(void);

/* The registered label sets: a list whose item i is set id i + 1
 * (borrowed; lives as long as the process). */
PyObject *labels_registry(void);

/* The thread-state dict key holding a thread's label-set id (borrowed). */
PyObject *labels_dict_key(void);

/* Registers pairs (a tuple of (str, str) tuples); returns the new id, or
 * 0 with an exception set. Caller holds the GIL. */
uint32_t labels_register(PyObject *pairs);

/* Makes id the calling thread's label set. Returns 0, or -1 with an
 * exception set. Caller holds the GIL. */
int labels_set_current(uint32_t id);

#endif
