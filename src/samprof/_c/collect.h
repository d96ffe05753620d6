/* collect: the profile being built, and everything that turns captured
 * frames into its stacks: symbolization, pseudo-frames, labels, thread
 * names, and draining the sample ring.
 *
 * All of it is protected by the GIL. Both the CPU collector thread and the
 * wall sampler hold the GIL while they call in here. */
#ifndef SAMPROF_COLLECT_H
#define SAMPROF_COLLECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "pb.h"
#include "pprof.h"
#include "profile.h"
#include "ring.h"

/* Default number of distinct (stack, thread, labels) samples kept before
 * new ones fold into "<samprof: stack table full>" (docs/safety.md). */
#define COLLECT_MAX_SAMPLES 100000

/* Prepares an empty profile. hidden_file is a tuple of samprof's own file
 * names (their frames are left out); labelsets is the list of registered label
 * sets (borrowed, must outlive the profile); max_samples caps distinct
 * samples. Returns 0, or -1 with an exception set. Caller holds the GIL. */
int collect_init(uint32_t max_depth, uint64_t period_ns, PyObject *hidden_file,
                 PyObject *labelsets, size_t max_samples);
/* Frees the profile and stops watching code objects. GIL. */
void collect_free(void);
/* 1 between collect_init and collect_free. */
int collect_active(void);
profile_t *collect_profile(void);

/* Turns captured frames (leaf first) and RING_* flags into location ids in
 * out, which has room for max_depth + 8 ids. Returns how many. GIL. */
uint32_t collect_stack_unlocked(const ring_frame_t *frames, uint16_t depth,
                                uint16_t flags, uint32_t *out);
/* Adds count samples worth value nanoseconds; labels ids that are not
 * registered are dropped; state, if not 0, is the string id of the
 * sample's thread_state label (collect_state_string). GIL. */
void collect_add_unlocked(const uint32_t *stack, uint32_t n, int32_t tid,
                          uint32_t labels, uint32_t state, int64_t count,
                          int64_t value);
/* Moves published samples from ring into the profile. With
 * wait_for_writers, also waits (bounded) for slots still being filled:
 * needed before a code object dies. GIL. */
void collect_drain_unlocked(ring_t *ring, int wait_for_writers);
/* Sets which ring collect_on_code_death must drain (NULL: none). GIL. */
void collect_set_ring(ring_t *ring);
/* In wall mode, ring samples are the on-CPU part of a wall profile: they
 * get thread_state=on-cpu, and samples of threads without Python state or
 * of samprof's own threads are left out. GIL. */
void collect_set_wall_mode(int wall);

/* Names threads seen in samples that have no name yet. May run Python
 * code. GIL. */
void collect_resolve_thread_names_unlocked(void);
/* The string id of the thread_state label value. GIL. */
uint32_t collect_state_string(int on_cpu);
/* Adds the pseudo-frame sample for dropped samples. GIL. */
void collect_add_dropped_unlocked(const char *what, uint64_t count,
                                  uint64_t periods);
/* Encodes the profile. Returns 0, or -1 with an exception set. GIL. */
int collect_encode_unlocked(const pprof_meta_t *meta, pb_buf_t *out);

uint64_t collect_truncated(void);
uint64_t collect_unknown_frames(void);

#endif
