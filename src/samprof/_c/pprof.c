/* pprof: the Profile message of google/pprof's profile.proto.
 *
 * Field numbers are named below, grouped by message, with their proto types.
 * The caller names the sample types (any number), the period type and the
 * default sample type (pprof_meta_t); every sample carries thread_name and
 * thread_id labels (unless the caller leaves them out), its label set and
 * its one extra label. Only the strings, locations and functions that the
 * written samples use are written, numbered anew. As Go's
 * runtime/pprof does, one mapping says it has functions, file names and line
 * numbers, so pprof never tries to symbolize. */
#include "pprof.h"

#include <stdlib.h>
#include <string.h>

/* message Profile */
#define PPROF_PROFILE_SAMPLE_TYPE 1          /* repeated ValueType */
#define PPROF_PROFILE_SAMPLE 2               /* repeated Sample */
#define PPROF_PROFILE_MAPPING 3              /* repeated Mapping */
#define PPROF_PROFILE_LOCATION 4             /* repeated Location */
#define PPROF_PROFILE_FUNCTION 5             /* repeated Function */
#define PPROF_PROFILE_STRING_TABLE 6         /* repeated string */
#define PPROF_PROFILE_TIME_NANOS 9           /* int64 */
#define PPROF_PROFILE_DURATION 10            /* int64 */
#define PPROF_PROFILE_PERIOD_TYPE 11         /* ValueType */
#define PPROF_PROFILE_PERIOD 12              /* int64 */
#define PPROF_PROFILE_COMMENT 13             /* repeated int64 (string ids) */
#define PPROF_PROFILE_DEFAULT_SAMPLE_TYPE 14 /* int64 (string id) */

/* message ValueType */
#define PPROF_VALUETYPE_TYPE 1 /* int64 (string id) */
#define PPROF_VALUETYPE_UNIT 2 /* int64 (string id) */

/* message Sample */
#define PPROF_SAMPLE_LOCATION_ID 1 /* repeated uint64, leaf first */
#define PPROF_SAMPLE_VALUE 2       /* repeated int64 */
#define PPROF_SAMPLE_LABEL 3       /* repeated Label */

/* message Label */
#define PPROF_LABEL_KEY 1 /* int64 (string id) */
#define PPROF_LABEL_STR 2 /* int64 (string id) */
#define PPROF_LABEL_NUM 3 /* int64 */

/* message Mapping */
#define PPROF_MAPPING_ID 1               /* uint64 */
#define PPROF_MAPPING_FILENAME 5         /* int64 (string id) */
#define PPROF_MAPPING_HAS_FUNCTIONS 7    /* bool */
#define PPROF_MAPPING_HAS_FILENAMES 8    /* bool */
#define PPROF_MAPPING_HAS_LINE_NUMBERS 9 /* bool */

/* message Location */
#define PPROF_LOCATION_ID 1         /* uint64 */
#define PPROF_LOCATION_MAPPING_ID 2 /* uint64 */
#define PPROF_LOCATION_LINE 4       /* repeated Line */

/* message Line */
#define PPROF_LINE_FUNCTION_ID 1 /* uint64 */
#define PPROF_LINE_LINE 2        /* int64 */

/* message Function */
#define PPROF_FUNCTION_ID 1         /* uint64 */
#define PPROF_FUNCTION_NAME 2       /* int64 (string id) */
#define PPROF_FUNCTION_FILENAME 4   /* int64 (string id) */
#define PPROF_FUNCTION_START_LINE 5 /* int64 */

static uint32_t
pprof_str(profile_t *p, const char *s)
{
    return profile_string(p, s, strlen(s));
}

static void
pprof_value_type(pb_buf_t *b, uint32_t field, uint32_t type, uint32_t unit)
{
    size_t m = pb_begin(b, field);
    pb_int64_opt(b, PPROF_VALUETYPE_TYPE, type);
    pb_int64_opt(b, PPROF_VALUETYPE_UNIT, unit);
    pb_end(b, m);
}

static void
pprof_label(pb_buf_t *b, uint32_t key, uint32_t str, int64_t num)
{
    size_t m = pb_begin(b, PPROF_SAMPLE_LABEL);
    pb_int64_opt(b, PPROF_LABEL_KEY, key);
    pb_int64_opt(b, PPROF_LABEL_STR, str);
    pb_int64_opt(b, PPROF_LABEL_NUM, num);
    pb_end(b, m);
}

/* Old id -> new id of every string, location and function the encoded
 * profile refers to (0: left out). Only what the samples use is written,
 * renumbered densely in the old order: a profile that is cut and goes on
 * (CPUProfiler.cut) keeps every name it ever interned, and each part
 * carries only its own. */
typedef struct {
    uint32_t *str; /* n_strings */
    uint32_t *loc; /* n_locations + 1, by 1-based id */
    uint32_t *fn;  /* n_functions + 1, by 1-based id */
} pprof_ids_t;

static void
pprof_ids_free(pprof_ids_t *ids)
{
    free(ids->str);
    free(ids->loc);
    free(ids->fn);
}

/* The thread name string of tid in p, 0 if none. */
static uint32_t
pprof_thread_name(const profile_t *p, int32_t tid)
{
    uint64_t tidx;
    if (htab_get(&p->threads_index, &tid, sizeof(tid), &tidx)) {
        return p->threads[tidx].name;
    }
    return 0;
}

/* Marks what the samples use (the caller marked its own strings), then
 * numbers each map's marked entries 1, 2, ... in the old order. */
static int
pprof_keep(const pprof_meta_t *meta, const profile_sample_t *s)
{
    return meta->keep == NULL || meta->keep(s, meta->keep_arg);
}

static void
pprof_ids_number(const profile_t *p, const pprof_meta_t *meta,
                 pprof_ids_t *ids)
{
    for (size_t i = 0; i < p->n_samples; i++) {
        const profile_sample_t *s = &p->samples[i];
        if (!pprof_keep(meta, s)) {
            continue;
        }
        for (uint32_t j = 0; j < s->depth; j++) {
            ids->loc[p->stack_ids[s->stack + j]] = 1;
        }
        if (!meta->no_thread_labels) {
            ids->str[pprof_thread_name(p, s->tid)] = 1;
        }
        if (s->extra.key != 0) {
            ids->str[s->extra.key] = 1;
            ids->str[s->extra.str] = 1;
        }
        if (s->labels != 0 && s->labels <= p->n_labelsets) {
            const profile_labelset_t *ls = &p->labelsets[s->labels - 1];
            for (uint32_t j = 0; j < ls->len; j++) {
                ids->str[p->label_pairs[ls->start + j].key] = 1;
                ids->str[p->label_pairs[ls->start + j].value] = 1;
            }
        }
    }
    uint32_t next = 1;
    for (size_t i = 1; i <= p->n_locations; i++) {
        if (ids->loc[i]) {
            ids->loc[i] = next++;
            ids->fn[p->locations[i - 1].function] = 1;
        }
    }
    next = 1;
    for (size_t i = 1; i <= p->n_functions; i++) {
        if (ids->fn[i]) {
            ids->fn[i] = next++;
            ids->str[p->functions[i - 1].name] = 1;
            ids->str[p->functions[i - 1].filename] = 1;
        }
    }
    ids->str[0] = 0; /* "" is always string 0 */
    next = 1;
    for (size_t i = 1; i < p->n_strings; i++) {
        if (ids->str[i]) {
            ids->str[i] = next++;
        }
    }
}

static void
pprof_sample(pb_buf_t *b, const profile_t *p, const pprof_meta_t *meta,
             const pprof_ids_t *ids, const profile_sample_t *s,
             uint32_t k_thread_name, uint32_t k_thread_id)
{
    const uint32_t *S = ids->str;
    size_t m = pb_begin(b, PPROF_PROFILE_SAMPLE);
    size_t lm = pb_begin(b, PPROF_SAMPLE_LOCATION_ID);
    for (uint32_t i = 0; i < s->depth; i++) {
        pb_varint(b, ids->loc[p->stack_ids[s->stack + i]]);
    }
    pb_end(b, lm);
    if (meta->values != NULL) {
        int64_t values[PROFILE_MAX_VALUES];
        meta->values(s, values, meta->values_arg);
        pb_int64s(b, PPROF_SAMPLE_VALUE, values, p->n_values);
    }
    else {
        pb_int64s(b, PPROF_SAMPLE_VALUE, s->values, p->n_values);
    }

    if (!meta->no_thread_labels) {
        pprof_label(b, S[k_thread_name], S[pprof_thread_name(p, s->tid)], 0);
        pprof_label(b, S[k_thread_id], 0, s->tid);
    }
    if (s->extra.key != 0) {
        pprof_label(b, S[s->extra.key], S[s->extra.str], s->extra.num);
    }
    if (s->labels != 0 && s->labels <= p->n_labelsets) {
        uint32_t start = p->labelsets[s->labels - 1].start;
        uint32_t len = p->labelsets[s->labels - 1].len;
        for (uint32_t i = 0; i < len; i++) {
            const profile_label_t *l = &p->label_pairs[start + i];
            pprof_label(b, S[l->key], S[l->value], 0);
        }
    }
    pb_end(b, m);
}

/* The one mapping ("python", every location in it), the locations and
 * the functions. */
static void
pprof_tables(pb_buf_t *b, const profile_t *p, const pprof_ids_t *ids,
             uint32_t s_mapping)
{
    size_t m = pb_begin(b, PPROF_PROFILE_MAPPING);
    pb_uint64(b, PPROF_MAPPING_ID, 1);
    pb_int64_opt(b, PPROF_MAPPING_FILENAME, s_mapping);
    pb_bool(b, PPROF_MAPPING_HAS_FUNCTIONS, 1);
    pb_bool(b, PPROF_MAPPING_HAS_FILENAMES, 1);
    pb_bool(b, PPROF_MAPPING_HAS_LINE_NUMBERS, 1);
    pb_end(b, m);

    for (size_t i = 0; i < p->n_locations; i++) {
        const profile_location_t *l = &p->locations[i];
        if (ids->loc[i + 1] == 0) {
            continue;
        }
        m = pb_begin(b, PPROF_PROFILE_LOCATION);
        pb_uint64(b, PPROF_LOCATION_ID, ids->loc[i + 1]);
        pb_uint64(b, PPROF_LOCATION_MAPPING_ID, 1);
        size_t lm = pb_begin(b, PPROF_LOCATION_LINE);
        pb_uint64(b, PPROF_LINE_FUNCTION_ID, ids->fn[l->function]);
        pb_int64_opt(b, PPROF_LINE_LINE, l->line);
        pb_end(b, lm);
        pb_end(b, m);
    }

    for (size_t i = 0; i < p->n_functions; i++) {
        const profile_function_t *f = &p->functions[i];
        if (ids->fn[i + 1] == 0) {
            continue;
        }
        m = pb_begin(b, PPROF_PROFILE_FUNCTION);
        pb_uint64(b, PPROF_FUNCTION_ID, ids->fn[i + 1]);
        pb_int64_opt(b, PPROF_FUNCTION_NAME, ids->str[f->name]);
        /* No system_name: pprof would take a name equal to it for a
         * demangled C++ name and strip "<...>" from "<module>". */
        pb_int64_opt(b, PPROF_FUNCTION_FILENAME, ids->str[f->filename]);
        pb_int64_opt(b, PPROF_FUNCTION_START_LINE, f->start_line);
        pb_end(b, m);
    }
}

int
pprof_encode(profile_t *p, const pprof_meta_t *meta, pb_buf_t *b)
{
    if (meta->n_sample_types != p->n_values) {
        return -1;
    }
    /* Intern every string first: the string table is written last but its
     * ids are used throughout. */
    uint32_t type_ids[PROFILE_MAX_VALUES][2];
    for (size_t i = 0; i < p->n_values; i++) {
        type_ids[i][0] = pprof_str(p, meta->sample_types[i].type);
        type_ids[i][1] = pprof_str(p, meta->sample_types[i].unit);
    }
    uint32_t s_period_type = pprof_str(p, meta->period_type.type);
    uint32_t s_period_unit = pprof_str(p, meta->period_type.unit);
    uint32_t s_default = meta->default_sample_type != NULL
                             ? pprof_str(p, meta->default_sample_type)
                             : 0;
    uint32_t k_thread_name = pprof_str(p, "thread_name");
    uint32_t k_thread_id = pprof_str(p, "thread_id");
    uint32_t s_mapping = pprof_str(p, "python");
    uint32_t comment_ids[16];
    size_t n_comments = meta->n_comments < 16 ? meta->n_comments : 16;
    for (size_t i = 0; i < n_comments; i++) {
        comment_ids[i] = pprof_str(p, meta->comments[i]);
    }

    pprof_ids_t ids = {
        .str = calloc(p->n_strings, sizeof(uint32_t)),
        .loc = calloc(p->n_locations + 1, sizeof(uint32_t)),
        .fn = calloc(p->n_functions + 1, sizeof(uint32_t)),
    };
    if (ids.str == NULL || ids.loc == NULL || ids.fn == NULL) {
        pprof_ids_free(&ids);
        return -1;
    }
    uint32_t *S = ids.str;
    for (size_t i = 0; i < p->n_values; i++) {
        S[type_ids[i][0]] = S[type_ids[i][1]] = 1;
    }
    S[s_period_type] = S[s_period_unit] = S[s_default] = 1;
    S[s_mapping] = 1;
    if (!meta->no_thread_labels) {
        S[k_thread_name] = S[k_thread_id] = 1;
    }
    for (size_t i = 0; i < n_comments; i++) {
        S[comment_ids[i]] = 1;
    }
    pprof_ids_number(p, meta, &ids);

    for (size_t i = 0; i < p->n_values; i++) {
        pprof_value_type(b, PPROF_PROFILE_SAMPLE_TYPE, S[type_ids[i][0]],
                         S[type_ids[i][1]]);
    }

    for (size_t i = 0; i < p->n_samples; i++) {
        if (pprof_keep(meta, &p->samples[i])) {
            pprof_sample(b, p, meta, &ids, &p->samples[i], k_thread_name,
                         k_thread_id);
        }
    }
    pprof_tables(b, p, &ids, S[s_mapping]);

    for (size_t i = 0; i < p->n_strings; i++) {
        if (i == 0 || S[i] != 0) {
            pb_bytes(b, PPROF_PROFILE_STRING_TABLE, p->strings[i].bytes,
                     p->strings[i].len);
        }
    }

    pb_int64_opt(b, PPROF_PROFILE_TIME_NANOS, meta->time_nanos);
    pb_int64_opt(b, PPROF_PROFILE_DURATION, meta->duration_nanos);
    pprof_value_type(b, PPROF_PROFILE_PERIOD_TYPE, S[s_period_type],
                     S[s_period_unit]);
    pb_int64_opt(b, PPROF_PROFILE_PERIOD, meta->period);
    for (size_t i = 0; i < n_comments; i++) {
        pb_int64(b, PPROF_PROFILE_COMMENT, S[comment_ids[i]]);
    }
    pb_int64_opt(b, PPROF_PROFILE_DEFAULT_SAMPLE_TYPE, S[s_default]);
    pprof_ids_free(&ids);
    return pb_ok(b) ? 0 : -1;
}
