/* collect: profile sessions. A session is one profile being built from
 * captured frames, with everything that turns frames into its stacks:
 * symbolization, pseudo-frames, labels, thread names, and draining a sample
 * ring. Several sessions may be alive at once (an on-demand CPU profile
 * beside a heap profile); each is passed by pointer, and every live session
 * hears of each code object's death through one code watcher.
 *
 * All of it is protected by the GIL: every function here must be called
 * with it held (the CPU collector thread and the wall sampler take it
 * first), so none carries the _unlocked suffix, which in sampler.c means
 * that the caller holds that file's registry lock. */
#ifndef SAMPROF_COLLECT_H
#define SAMPROF_COLLECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "pb.h"
#include "pprof.h"
#include "profile.h"
#include "ring.h"
#include "symbols.h"

/* Default number of distinct (stack, thread, labels) samples kept before
 * new ones fold into "<samprof: stack table full>" (docs/safety.md). */
#define COLLECT_MAX_SAMPLES 100000

typedef struct collect_session collect_session_t;

struct collect_session {
    int active;        /* between collect_init and collect_free */
    profile_t profile; /* the profile being built */
    symbols_t symbols; /* code objects -> the profile's locations */
    uint32_t max_depth;
    uint64_t period_ns;      /* nanoseconds per sampling period */
    uint32_t *stack;         /* scratch: one sample's location ids */
    ring_t *ring;            /* drained on code death, or NULL */
    int draining;            /* re-entrancy guard of collect_drain */
    uint64_t truncated;      /* samples cut at max_depth */
    uint64_t unknown_frames; /* frames that could not be symbolized */
    uint64_t lost; /* samples the profile could not store (out of memory) */
    PyObject *labelsets; /* registered label sets (borrowed) */
    int wall_mode;       /* ring samples are a wall profile's on-CPU part */
    uint32_t k_thread_state; /* string id of the label key "thread_state" */
    /* 1 (collect_init's default): samples are kept per thread, and carry
     * its name and id. 0: the threads' samples of one stack are added up
     * (a fleet backend, which must not get a series per thread). */
    int by_thread;
    /* Counts the deaths of code objects the symbol cache held: a raw
     * stack read before a change of it may hold a dead code object's
     * address, reused by a new one (wall.c compares raw stacks). */
    uint64_t code_deaths;
    collect_session_t *next; /* the next live session */
};

/* Prepares s as an empty session and makes it live: a profile whose
 * samples carry n_values values (2 for CPU and wall: samples/count and the
 * time; 4 for heap). hidden_file is a tuple of samprof's own file names
 * (their frames are left out); labelsets is the list of registered label
 * sets (borrowed, must outlive the session); max_samples caps distinct
 * samples. Returns 0, or -1 with an exception set. Caller holds the GIL. */
int collect_init(collect_session_t *s, size_t n_values, uint32_t max_depth,
                 uint64_t period_ns, PyObject *hidden_file,
                 PyObject *labelsets, size_t max_samples);
/* Frees the session's profile and caches; the last live session stops
 * watching code objects. Nothing for a session that is not live. GIL. */
void collect_free(collect_session_t *s);

/* Empties the session's profile of samples, thread names and the counts
 * of truncated, unknown and lost samples, for the next part of a profile
 * that goes on (cut). Symbol caches and interned names stay. GIL. */
void collect_clear(collect_session_t *s);

/* Turns captured frames (leaf first) and RING_* flags into location ids in
 * out, which has room for max_depth + 8 ids. Returns how many. GIL. */
uint32_t collect_stack(collect_session_t *s, const ring_frame_t *frames,
                       uint16_t depth, uint16_t flags, uint32_t *out);
/* Adds the values (the session's n_values of them) of a sample with the
 * sample's own extra label; labels ids that are not registered are
 * dropped. index as profile_add's. Returns 0, or -1 when the profile could
 * not store it (values[0] then counted in lost). GIL. */
int collect_add_values(collect_session_t *s, const uint32_t *stack, uint32_t n,
                       int32_t tid, uint32_t labels, profile_extra_t extra,
                       const int64_t *values, size_t *index);
/* A time sample: count samples worth value nanoseconds; state, if not 0,
 * is the string id of the sample's thread_state label
 * (collect_state_string). GIL. */
void collect_add(collect_session_t *s, const uint32_t *stack, uint32_t n,
                 int32_t tid, uint32_t labels, uint32_t state, int64_t count,
                 int64_t value);
/* Moves the ring's backlog and published samples into the session. With
 * wait_for_writers, also waits (bounded) for slots still being filled:
 * needed before a code object dies. GIL; takes the ring's consumer lock. */
void collect_drain(collect_session_t *s, ring_t *ring, int wait_for_writers);
/* Sets which ring a code object's death must drain (NULL: none). A ring
 * belongs to one session: a death during one session's drain must not
 * drain the same ring for another (its consumer lock is held). GIL. */
void collect_set_ring(collect_session_t *s, ring_t *ring);
/* In wall mode, ring samples are the on-CPU part of a wall profile: they
 * get thread_state=on-cpu, and samples of threads without Python state or
 * of samprof's own threads are left out. GIL. */
void collect_set_wall_mode(collect_session_t *s, int wall);

/* Names threads seen in samples that have no name yet. May run Python
 * code. GIL. */
void collect_resolve_thread_names(collect_session_t *s);
/* Names thread tid, if it has samples and no name yet: a thread that is
 * about to exit tells its own (collect_resolve_thread_names only finds
 * live threads). GIL. */
void collect_name_thread(collect_session_t *s, int32_t tid, PyObject *name);
/* The string id of the thread_state label value. GIL. */
uint32_t collect_state_string(collect_session_t *s, int on_cpu);
/* Adds the pseudo-frame sample for dropped samples. GIL. */
void collect_add_dropped(collect_session_t *s, const char *what,
                         uint64_t count, uint64_t periods);
/* Encodes the profile. Returns 0, or -1 with an exception set. GIL. */
int collect_encode(collect_session_t *s, const pprof_meta_t *meta,
                   pb_buf_t *out);

uint64_t collect_truncated(const collect_session_t *s);
uint64_t collect_unknown_frames(const collect_session_t *s);
uint64_t collect_lost(const collect_session_t *s);

/* threading._active (ident -> Thread) if threading is imported: a new
 * reference, or NULL (no exception set). GIL; may run Python code. */
PyObject *collect_threading_active(void);

#endif
