/* Calls a Python function from C over and over, each time after leaving an
 * aligned, plausible but unmapped address all over the stack below: the C
 * stack memory that CPython 3.11 and 3.12 take for a new evaluation frame
 * then holds it in the few instructions between making that frame current
 * and writing its frame pointer. A signal handler that reads the top frame
 * there without care faults (tests/scripts/stale_stack.py). Needs the
 * Python headers; load it with ctypes.PyDLL (it calls Python). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#define STALE_ADDRESS ((uintptr_t)0x100000000000ULL)

/* Written through a volatile pointer: the stores must happen, though
 * nothing reads them back. */
__attribute__((noinline)) static void
stale_fill(void)
{
    uintptr_t buf[2048];
    volatile uintptr_t *p = buf;
    for (int i = 0; i < 2048; i++) {
        p[i] = STALE_ADDRESS;
    }
}

/* Calls func() n times; n, or -1 with the exception set. */
long
stale_calls(PyObject *func, long n)
{
    for (long i = 0; i < n; i++) {
        stale_fill();
        PyObject *r = PyObject_CallObject(func, NULL);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    return n;
}
