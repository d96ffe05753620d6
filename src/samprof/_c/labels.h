/* labels: Go's pprof.Do for Python: a context manager and decorator type
 * that sets the label set of the current execution context.
 *
 * A label set is a registered tuple of (key, value) str pairs with an id.
 * Entering a block looks up (outer id, the block's pairs) in a cache of
 * merged sets and sets a context variable to the merged id, so the label
 * set follows the context: the thread, and each asyncio task. The
 * samplers read it with labels_of, which calls nothing and allocates
 * nothing. */
#ifndef SAMPROF_LABELS_H
#define SAMPROF_LABELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Creates the labels type, the registry and the context variable. Returns
 * the type (new reference), or NULL with an exception set. */
PyObject *labels_init_type(void);

/* The registered label sets: a list whose item i is set id i + 1
 * (borrowed; lives as long as the process). */
PyObject *labels_registry(void);

/* Registers pairs (a tuple of (str, str) tuples); returns the new id, or
 * 0 with an exception set. Caller holds the GIL. */
uint32_t labels_register(PyObject *pairs);

/* The label set of ts's current context, 0 for none. Reads only: safe in
 * a signal handler on ts's own thread, and on any thread state while the
 * caller holds the GIL. Always 0 when labels_in_samples() is false. */
uint32_t labels_of(PyThreadState *ts);

/* Whether labels_of reads this Python's contexts (checked at start-up
 * against real ones); when not, samples carry no labels. */
int labels_in_samples(void);

/* The calling context's label set (0 for none). Caller holds the GIL. */
uint32_t labels_current(void);

#endif
