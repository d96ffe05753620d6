/* pprof: encodes a profile_t as an (uncompressed) pprof Profile message,
 * with the sample types, period and default the caller describes. */
#ifndef SAMPROF_PPROF_H
#define SAMPROF_PPROF_H

#include <stdint.h>

#include "pb.h"
#include "profile.h"

/* A sample or period type, e.g. {"cpu", "nanoseconds"}. */
typedef struct {
    const char *type;
    const char *unit;
} pprof_value_type_t;

/* What the caller says about the profile: what its values mean, and the
 * header fields. */
typedef struct {
    const pprof_value_type_t *sample_types; /* one per value of a sample */
    size_t n_sample_types;                  /* must equal p->n_values */
    pprof_value_type_t period_type;
    int64_t period;                  /* in period_type's unit */
    const char *default_sample_type; /* NULL: pprof's default (the last) */
    int64_t time_nanos;              /* start, Unix epoch */
    int64_t duration_nanos;
    const char **comments; /* n_comments NUL-terminated strings */
    size_t n_comments;
    /* Writes a sample's values as they go out (the profile's n_values of
     * them) into out: a heap profile's are unsampled on the way. NULL:
     * written as they are. */
    void (*values)(const profile_sample_t *s, int64_t *out, const void *arg);
    const void *values_arg;
    /* Whether a sample is written (keep_arg is passed through). NULL:
     * every sample is. */
    int (*keep)(const profile_sample_t *s, const void *arg);
    const void *keep_arg;
    /* Leave out the thread_name and thread_id labels every sample carries
     * otherwise (a fleet backend would make a series of each thread). */
    int no_thread_labels;
} pprof_meta_t;

/* Appends the Profile message for p to out. Interns the few strings it
 * needs into p. Returns 0, or -1 when out of memory or when meta's sample
 * types do not match p's number of values (the profile would be invalid).
 * The caller owns p (for samprof's profiles: holds the GIL). */
int pprof_encode(profile_t *p, const pprof_meta_t *meta, pb_buf_t *out);

#endif
