/* frames: version-specific frame walking (CPython 3.9 to 3.13; 3.14 written
 * from its headers, untested).
 *
 * Everything frames_walk touches is validated before it is followed:
 * pointers must be non-null, aligned and above the first page, and every
 * code object must have PyCode_Type as its type. The walk is bounded. A frame
 * that fails a check makes the whole sample "torn": dropped and counted,
 * never followed. */
#define Py_BUILD_CORE 1
#include "frames.h"

#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#include <frameobject.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* A frame chain longer than this many entries (including skipped shim and
 * incomplete frames) is treated as a cycle: CPython's own recursion limit
 * keeps real chains shorter unless raised on purpose, and then we only need
 * the leaf part anyway. */
#define FRAMES_MAX_SKIPPED 64

static inline int
frames_plausible(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a >= 4096 && (a & (sizeof(void *) - 1)) == 0
           && a < ((uintptr_t)1 << 47);
}

static inline int
frames_is_code(const void *p)
{
    return frames_plausible(p) && Py_TYPE((PyObject *)p) == &PyCode_Type;
}

#if PY_VERSION_HEX < 0x030B0000

/* 3.9 and 3.10: a linked list of PyFrameObject through f_back. */
int
frames_walk(PyThreadState *tstate, ring_frame_t *out, int max, uint16_t *flags)
{
    PyFrameObject *f = tstate->frame;
    int n = 0;
    while (f != NULL) {
        if (n == max) {
            *flags |= RING_TRUNCATED;
            break;
        }
        if (!frames_plausible(f) || !frames_is_code(f->f_code)) {
            *flags |= RING_TORN;
            return n;
        }
        out[n].code = f->f_code;
#if PY_VERSION_HEX >= 0x030A0000
        /* 3.10 counts f_lasti in code units. */
        out[n].offset =
            f->f_lasti < 0 ? -1 : f->f_lasti * (int)sizeof(_Py_CODEUNIT);
#else
        out[n].offset = f->f_lasti;
#endif
        n++;
        f = f->f_back;
    }
    return n;
}

#else

/* 3.11+: _PyInterpreterFrame linked through `previous`. */
#if PY_VERSION_HEX >= 0x030E0000
/* 3.14: f_executable is a tagged _PyStackRef; clear the tag bits. */
#define FRAMES_CODE(f) ((PyObject *)((f)->f_executable.bits & ~(uintptr_t)3))
#define FRAMES_INSTR(f) ((f)->instr_ptr)
#define FRAMES_INSTR_IS_NEXT 1
#elif PY_VERSION_HEX >= 0x030D0000
#define FRAMES_CODE(f) ((f)->f_executable)
#define FRAMES_INSTR(f) ((f)->instr_ptr)
#define FRAMES_INSTR_IS_NEXT 1
#else
#define FRAMES_CODE(f) ((PyObject *)(f)->f_code)
#define FRAMES_INSTR(f) ((f)->prev_instr)
#define FRAMES_INSTR_IS_NEXT 0
#endif

#if PY_VERSION_HEX < 0x030D0000
/* Copies n bytes from src, which may be unmapped: 0, or -1 if they cannot
 * be read. process_vm_readv on our own process is a plain system call
 * (async-signal-safe) that fails with EFAULT instead of faulting. Where it
 * is not allowed (seccomp: ENOSYS, EPERM) the bytes are read directly, as
 * before. */
static int
frames_read(void *dst, const void *src, size_t n)
{
    struct iovec local = {dst, n};
    struct iovec remote = {(void *)src, n};
    int saved_errno = errno; /* callers include allocator hooks */
    int rc = 0;
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)n) {
        if (errno == EFAULT) {
            rc = -1;
        }
        else {
            memcpy(dst, src, n);
        }
    }
    errno = saved_errno;
    return rc;
}

/* 3.11 and 3.12 point tstate->cframe at the new C-stack _PyCFrame of
 * _PyEval_EvalFrameDefault before they write its current_frame (CPython
 * 3.12.1: 30 instructions apart), so a signal in between finds
 * uninitialized stack memory there: a pointer that can pass every check
 * above and still be unmapped. The top frame and its code object's type
 * are therefore read with frames_read; everything below the top frame was
 * linked before it became reachable. 1 if the top frame can be followed. */
static int
frames_top_readable(_PyInterpreterFrame *f)
{
    _PyInterpreterFrame copy;
    PyTypeObject *type;
    if (!frames_plausible(f)
        || frames_read(&copy, f, offsetof(_PyInterpreterFrame, localsplus)) < 0
        || !frames_plausible(copy.f_code)
        || frames_read(&type, &((PyObject *)copy.f_code)->ob_type,
                       sizeof(type))
               < 0) {
        return 0;
    }
    return type == &PyCode_Type;
}
#endif

static inline _PyInterpreterFrame *
frames_top(PyThreadState *tstate)
{
#if PY_VERSION_HEX >= 0x030D0000
    return tstate->current_frame;
#else
    /* tstate->cframe is set before cframe->current_frame (above), so
     * cframe must be checked first. */
    _PyCFrame *cf = tstate->cframe;
    if (!frames_plausible(cf)) {
        return NULL;
    }
    return cf->current_frame;
#endif
}

/* Frames that are not (yet) Python code the user would recognize: C-stack
 * shims (3.12+), interpreter-owned frames (3.14), and frames whose first
 * traceable instruction has not run. Same rule as CPython's own
 * _PyFrame_IsIncomplete, spelled out because it must not assert. */
static inline int
frames_skip(_PyInterpreterFrame *f, PyCodeObject *code)
{
#if PY_VERSION_HEX >= 0x030E0000
    if (f->owner >= FRAME_OWNED_BY_INTERPRETER) {
        return 1;
    }
#elif PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) {
        return 1;
    }
#endif
    if (f->owner == FRAME_OWNED_BY_GENERATOR) {
        return 0;
    }
    return FRAMES_INSTR(f) < _PyCode_CODE(code) + code->_co_firsttraceable;
}

int
frames_walk(PyThreadState *tstate, ring_frame_t *out, int max, uint16_t *flags)
{
    _PyInterpreterFrame *f = frames_top(tstate);
    int n = 0, skipped = 0;
    while (f != NULL) {
        if (!frames_plausible(f)) {
            *flags |= RING_TORN;
            return n;
        }
        PyObject *code = FRAMES_CODE(f);
        if (!frames_is_code(code)) {
#if PY_VERSION_HEX >= 0x030D0000
            /* 3.13+: entry and shim frames hold a non-code executable. */
            if (frames_plausible(code) && ++skipped < FRAMES_MAX_SKIPPED) {
                f = f->previous;
                continue;
            }
#endif
            *flags |= RING_TORN;
            return n;
        }
        PyCodeObject *co = (PyCodeObject *)code;
        if (frames_skip(f, co)) {
            if (++skipped >= FRAMES_MAX_SKIPPED) {
                *flags |= RING_TORN;
                return n;
            }
            f = f->previous;
            continue;
        }
        if (n == max) {
            *flags |= RING_TRUNCATED;
            break;
        }
        intptr_t units = FRAMES_INSTR(f) - _PyCode_CODE(co);
        if (units < 0 || units > Py_SIZE(co)) {
            /* Not yet started (prev_instr is one before the first unit). */
            units = -1;
        }
        out[n].code = code;
        out[n].offset =
            units < 0 ? -1 : (int32_t)(units * (intptr_t)sizeof(_Py_CODEUNIT));
        n++;
        f = f->previous;
    }
    (void)FRAMES_INSTR_IS_NEXT;
    return n;
}

#endif /* PY_VERSION_HEX < 0x030B0000 */

void
frames_position(PyThreadState *tstate, frames_pos_t *out)
{
    memset(out, 0, sizeof(*out));
#if PY_VERSION_HEX >= 0x030B0000
    _PyInterpreterFrame *f = frames_top(tstate);
    out->top = tstate->datastack_top;
    if (frames_plausible(f)) {
        out->frame = f;
        out->code = FRAMES_CODE(f);
        out->instr = FRAMES_INSTR(f);
    }
#else
    PyFrameObject *f = tstate->frame;
    out->top = (const void *)(intptr_t)tstate->recursion_depth;
    if (frames_plausible(f)) {
        out->frame = f;
        out->code = f->f_code;
        out->instr = (const void *)(intptr_t)f->f_lasti;
    }
#endif
}

int
frames_line(PyObject *code, int32_t offset)
{
    return PyCode_Addr2Line((PyCodeObject *)code, offset);
}

PyObject *
frames_code_name(PyObject *code)
{
#if PY_VERSION_HEX >= 0x030B0000
    return ((PyCodeObject *)code)->co_qualname;
#else
    return ((PyCodeObject *)code)->co_name;
#endif
}

int
frames_walk_interrupted(PyThreadState *tstate, ring_frame_t *out, int max,
                        uint16_t *flags)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
    _PyInterpreterFrame *f = frames_top(tstate);
    if (f != NULL && !frames_top_readable(f)) {
        *flags |= RING_TORN;
        return 0;
    }
#endif
    return frames_walk(tstate, out, max, flags);
}
