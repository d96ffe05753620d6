/* pprof: encodes a profile_t as an (uncompressed) pprof Profile message. */
#ifndef SAMPROF_PPROF_H
#define SAMPROF_PPROF_H

#include <stdint.h>

#include "pb.h"
#include "profile.h"

typedef struct {
    const char *value_type; /* "cpu" or "wall": second sample type */
    int64_t period_ns;      /* nanoseconds per sampling period */
    int64_t time_nanos;     /* start, Unix epoch */
    int64_t duration_nanos;
    const char **comments; /* n_comments NUL-terminated strings */
    size_t n_comments;
} pprof_meta_t;

/* Appends the Profile message for p to out. Interns the few strings it
 * needs into p. Returns 0, or -1 when out of memory. Caller holds the GIL
 * (it owns p). */
int pprof_encode(profile_t *p, const pprof_meta_t *meta, pb_buf_t *out);

#endif
