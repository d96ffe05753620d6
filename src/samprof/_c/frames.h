/* frames: reads the calling thread's Python frame chain into a sample.
 *
 * The one piece of samprof that knows each CPython version's frame layout.
 * frames_walk runs in signal context on the sampled thread itself, so the
 * chain cannot change under it; frames_line runs later, under the GIL. */
#ifndef SAMPROF_FRAMES_H
#define SAMPROF_FRAMES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ring.h"

/* Walks tstate's frames, leaf first, into out[0..max). Sets RING_TRUNCATED
 * in *flags when frames were left out at the root, RING_TORN when a frame
 * looked implausible (the sample must then be dropped). Returns the number
 * of frames written.
 * Runs in signal context: reads memory only, calls nothing. */
int frames_walk(PyThreadState *tstate, ring_frame_t *out, int max,
                uint16_t *flags);

/* frames_walk for a thread interrupted by a signal, which may be anywhere,
 * even in the few instructions where CPython 3.11 and 3.12 have made a new
 * C frame current before writing its frame pointer: there the top frame
 * is read with a system call that fails instead of faulting, and a top
 * frame that cannot be read makes the sample torn. The other callers
 * (threads that stopped at a safe point: holding the GIL, or allocating)
 * use frames_walk. Runs in signal context. */
int frames_walk_interrupted(PyThreadState *tstate, ring_frame_t *out, int max,
                            uint16_t *flags);

/* Where tstate's thread stands: its top frame, that frame's code and
 * instruction, and the top of its frame stack, read without walking the
 * chain. A thread at the same position is in the same function at the
 * same instruction at the same depth; only one that returned below its top
 * frame and came back to it through other callers, the frames all the
 * same size, has the same position and another stack. Caller holds the
 * GIL. */
typedef struct {
    const void *frame;
    const void *top;
    const void *code;
    const void *instr;
} frames_pos_t;

static inline int
frames_pos_equal(const frames_pos_t *a, const frames_pos_t *b)
{
    return a->frame == b->frame && a->top == b->top && a->code == b->code
           && a->instr == b->instr;
}

void frames_position(PyThreadState *tstate, frames_pos_t *out);

/* The line executing at byte offset `offset` of `code`.
 * Caller holds the GIL and guarantees code is alive. */
int frames_line(PyObject *code, int32_t offset);

/* The name to show for a code object: co_qualname where the version has it
 * (3.11+), co_name before. Borrowed reference. Caller holds the GIL. */
PyObject *frames_code_name(PyObject *code);

#endif
