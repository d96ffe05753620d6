/* profile: the aggregated profile being built: strings, functions,
 * locations, threads, label sets and samples keyed by stack.
 *
 * Pure C, no Python. Ids are 1-based (pprof reserves 0); string id 0 is "".
 * Protected by the GIL: only code holding it (collector drains, stop, code
 * death hooks) touches a profile. */
#ifndef SAMPROF_PROFILE_H
#define SAMPROF_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "htab.h"

typedef struct {
    uint32_t name;     /* string id */
    uint32_t filename; /* string id */
    int64_t start_line;
} profile_function_t;

typedef struct {
    uint32_t function; /* function id */
    int64_t line;
} profile_location_t;

/* The most values a sample carries: Go's heap profile has four
 * (alloc_objects, alloc_space, inuse_objects, inuse_space). */
#define PROFILE_MAX_VALUES 4

typedef struct {
    uint32_t key;   /* string id */
    uint32_t value; /* string id */
} profile_label_t;

/* A label of the sample's own, beside its label set: a string (a wall
 * sample's thread_state) or a number (a heap sample's bytes). Key 0: none. */
typedef struct {
    uint32_t key; /* string id */
    uint32_t str; /* string id, 0 = none */
    int64_t num;  /* 0 = none */
} profile_extra_t;

typedef struct {
    uint32_t stack;        /* offset of the first location id in stack_ids */
    uint32_t depth;        /* location ids, leaf first */
    int32_t tid;           /* native thread id */
    uint32_t labels;       /* label-set id, 0 = none */
    profile_extra_t extra; /* the sample's own label, key 0 = none */
    int64_t values[PROFILE_MAX_VALUES]; /* the profile's n_values used */
} profile_sample_t;

typedef struct {
    int32_t tid;
    uint32_t name; /* string id, 0 until resolved */
    int resolved;  /* 1 once a name lookup was attempted */
} profile_thread_t;

typedef struct {
    char *bytes; /* malloc'ed, not NUL-terminated; NULL for "" */
    uint32_t len;
} profile_string_t;

typedef struct {
    uint32_t start; /* first pair in label_pairs */
    uint32_t len;   /* pairs */
} profile_labelset_t;

typedef struct {
    /* values per sample, 1..PROFILE_MAX_VALUES; their meaning is the
     * caller's (pprof_meta_t says it to the encoder) */
    size_t n_values;

    /* strings: id -> bytes; strings_index: bytes -> id */
    profile_string_t *strings;
    size_t n_strings, cap_strings;
    htab_t strings_index;

    profile_function_t *functions; /* functions[id - 1] */
    size_t n_functions, cap_functions;
    htab_t functions_index; /* (name, filename, start_line) -> id */

    profile_location_t *locations; /* locations[id - 1] */
    size_t n_locations, cap_locations;
    htab_t locations_index; /* (function, line) -> id */

    profile_sample_t *samples;
    size_t n_samples, cap_samples;
    uint32_t *stack_ids; /* location ids of all samples, back to back */
    size_t n_stack_ids, cap_stack_ids;
    htab_t samples_index; /* (tid, labels, extra, stack...) -> index */
    size_t max_samples;   /* cap on distinct samples; the rest overflow */
    uint64_t overflowed;  /* first values of samples folded into the
                           * overflow stack (a count in every profile) */

    profile_thread_t *threads;
    size_t n_threads, cap_threads;
    htab_t threads_index; /* tid -> index */

    /* label sets: id -> run of (key, value) pairs in label_pairs */
    profile_labelset_t *labelsets;
    size_t n_labelsets, cap_labelsets;
    profile_label_t *label_pairs;
    size_t n_label_pairs, cap_label_pairs;

    uint32_t *keybuf; /* scratch for building sample keys */
    size_t cap_keybuf;
} profile_t;

/* Prepares an empty profile whose samples carry n_values values each
 * (1..PROFILE_MAX_VALUES). Returns 0, or -1 when out of memory or n_values
 * is out of range. */
int profile_init(profile_t *p, size_t n_values, size_t max_samples);
void profile_free(profile_t *p);

/* Interns a string. Returns its id, or 0 (the empty string) when out of
 * memory: a lost name, never a crash. */
uint32_t profile_string(profile_t *p, const char *s, size_t len);
/* Interns a function. Returns its id, or 0 when out of memory. */
uint32_t profile_function(profile_t *p, uint32_t name, uint32_t filename,
                          int64_t start_line);
/* Interns a location. Returns its id, or 0 when out of memory. */
uint32_t profile_location(profile_t *p, uint32_t function, int64_t line);
/* A pseudo-frame: a location of a function with this name and no file. */
uint32_t profile_pseudo(profile_t *p, const char *name);

/* Adds values (p->n_values of them) to the sample with this stack,
 * thread, label set and extra label (key 0: none), made on first use. When
 * the distinct-sample cap is reached a new sample goes to a one-frame stack
 * naming the overflow instead, and its first value is counted in
 * overflowed. If index is not NULL it receives the sample's index, for
 * profile_adjust. Returns 0, or -1 when out of memory (values lost, caller
 * counts it). */
int profile_add(profile_t *p, const uint32_t *stack, uint32_t depth,
                int32_t tid, uint32_t labels, profile_extra_t extra,
                const int64_t *values, size_t *index);

/* Adds deltas (p->n_values of them, negative to decrement) to the values
 * of the sample at index, as a freed heap block takes its size out of the
 * in-use values of the sample that recorded it. An index profile_add did
 * not return is ignored. This function can't fail. */
void profile_adjust(profile_t *p, size_t index, const int64_t *deltas);

/* Empties the samples and the thread records, keeping every interned
 * string, function, location and label set (their ids stay valid for
 * whoever cached them): the profile starts a new part. This function
 * can't fail. */
void profile_clear_samples(profile_t *p);

/* The thread record for tid, created on first use; NULL when out of
 * memory. */
profile_thread_t *profile_thread(profile_t *p, int32_t tid);

/* Creates a label set from n (key, value) string pairs. Returns its id
 * (1-based), or 0 when out of memory. */
uint32_t profile_labelset(profile_t *p, const profile_label_t *pairs,
                          size_t n);

/* Bytes of memory the tables hold (approximate, for stats and caps). */
size_t profile_bytes(const profile_t *p);

#endif
