/* profile: interning tables and the sample aggregate.
 *
 * Every table is an append-only array plus an htab index from the record's
 * bytes to its id, so ids stay stable for the pprof encoder. */
#include "profile.h"

#include "grow.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int
profile_init(profile_t *p, size_t n_values, size_t max_samples)
{
    memset(p, 0, sizeof(*p));
    if (n_values == 0 || n_values > PROFILE_MAX_VALUES) {
        return -1;
    }
    p->n_values = n_values;
    p->max_samples = max_samples;
    if (htab_init(&p->strings_index, 1024) < 0
        || htab_init(&p->functions_index, 256) < 0
        || htab_init(&p->locations_index, 1024) < 0
        || htab_init(&p->samples_index, 1024) < 0
        || htab_init(&p->threads_index, 16) < 0) {
        profile_free(p);
        return -1;
    }
    /* String 0 is "" (pprof requires it); label set 0 is "no labels". */
    if (GROW(p->strings, p->cap_strings, 1) < 0) {
        profile_free(p);
        return -1;
    }
    p->strings[0].bytes = NULL;
    p->strings[0].len = 0;
    p->n_strings = 1;
    return 0;
}

void
profile_free(profile_t *p)
{
    for (size_t i = 1; i < p->n_strings; i++) {
        free(p->strings[i].bytes);
    }
    free(p->strings);
    free(p->functions);
    free(p->locations);
    free(p->samples);
    free(p->stack_ids);
    free(p->threads);
    free(p->labelsets);
    free(p->label_pairs);
    free(p->keybuf);
    htab_free(&p->strings_index);
    htab_free(&p->functions_index);
    htab_free(&p->locations_index);
    htab_free(&p->samples_index);
    htab_free(&p->threads_index);
    memset(p, 0, sizeof(*p));
}

uint32_t
profile_string(profile_t *p, const char *s, size_t len)
{
    uint64_t id;
    if (len == 0) {
        return 0;
    }
    if (htab_get(&p->strings_index, s, len, &id)) {
        return (uint32_t)id;
    }
    if (GROW(p->strings, p->cap_strings, p->n_strings + 1) < 0) {
        return 0;
    }
    char *copy = malloc(len);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, s, len);
    id = p->n_strings;
    if (htab_put(&p->strings_index, s, len, id) < 0) {
        free(copy);
        return 0;
    }
    p->strings[id].bytes = copy;
    p->strings[id].len = (uint32_t)len;
    p->n_strings++;
    return (uint32_t)id;
}

uint32_t
profile_function(profile_t *p, uint32_t name, uint32_t filename,
                 int64_t start_line)
{
    profile_function_t key = {name, filename, start_line};
    uint64_t id;
    if (htab_get(&p->functions_index, &key, sizeof(key), &id)) {
        return (uint32_t)id;
    }
    if (GROW(p->functions, p->cap_functions, p->n_functions + 1) < 0) {
        return 0;
    }
    id = p->n_functions + 1;
    if (htab_put(&p->functions_index, &key, sizeof(key), id) < 0) {
        return 0;
    }
    p->functions[p->n_functions++] = key;
    return (uint32_t)id;
}

uint32_t
profile_location(profile_t *p, uint32_t function, int64_t line)
{
    profile_location_t key;
    memset(&key, 0, sizeof(key)); /* padding is part of the hashed bytes */
    key.function = function;
    key.line = line;
    uint64_t id;
    if (htab_get(&p->locations_index, &key, sizeof(key), &id)) {
        return (uint32_t)id;
    }
    if (GROW(p->locations, p->cap_locations, p->n_locations + 1) < 0) {
        return 0;
    }
    id = p->n_locations + 1;
    if (htab_put(&p->locations_index, &key, sizeof(key), id) < 0) {
        return 0;
    }
    p->locations[p->n_locations++] = key;
    return (uint32_t)id;
}

uint32_t
profile_pseudo(profile_t *p, const char *name)
{
    uint32_t fn =
        profile_function(p, profile_string(p, name, strlen(name)), 0, 0);
    return fn ? profile_location(p, fn, 0) : 0;
}

/* The sample index key: header then the stack. */
typedef struct {
    int32_t tid;
    uint32_t labels;
    profile_extra_t extra;
} profile_sample_key_t;

#define PROFILE_KEY_HEADER_IDS \
    (sizeof(profile_sample_key_t) / sizeof(uint32_t))
#define PROFILE_MAX_KEY_DEPTH 8192

int
profile_add(profile_t *p, const uint32_t *stack, uint32_t depth, int32_t tid,
            uint32_t labels, profile_extra_t extra, const int64_t *values,
            size_t *index)
{
    uint32_t overflow_stack[1];
    assert(p->n_values >= 1 && p->n_values <= PROFILE_MAX_VALUES);
    if (depth > PROFILE_MAX_KEY_DEPTH) {
        depth = PROFILE_MAX_KEY_DEPTH;
    }
    /* The key is built in a heap scratch buffer: this may run on a thread
     * with a small stack (a code-object death hook). */
    if (GROW(p->keybuf, p->cap_keybuf, PROFILE_KEY_HEADER_IDS + (size_t)depth)
        < 0) {
        return -1;
    }
    uint32_t *keybuf = p->keybuf;
    for (;;) {
        profile_sample_key_t hdr;
        memset(&hdr, 0, sizeof(hdr)); /* no stray padding bytes in keys */
        hdr.tid = tid;
        hdr.labels = labels;
        hdr.extra = extra;
        memcpy(keybuf, &hdr, sizeof(hdr));
        memcpy(keybuf + PROFILE_KEY_HEADER_IDS, stack,
               depth * sizeof(uint32_t));
        size_t keylen = sizeof(hdr) + depth * sizeof(uint32_t);
        uint64_t idx;
        if (htab_get(&p->samples_index, keybuf, keylen, &idx)) {
            profile_adjust(p, (size_t)idx, values);
            if (index != NULL) {
                *index = (size_t)idx;
            }
            return 0;
        }
        if (p->n_samples >= p->max_samples && stack != overflow_stack) {
            /* Past the cap every new stack is folded into one pseudo-frame
             * per thread, so the totals stay right and the loss shows. */
            overflow_stack[0] =
                profile_pseudo(p, "<samprof: stack table full>");
            stack = overflow_stack;
            /* Out of memory for the pseudo-frame: an empty stack, never a
             * location id 0. */
            depth = overflow_stack[0] != 0 ? 1 : 0;
            p->overflowed += (uint64_t)values[0];
            continue;
        }
        if (GROW(p->samples, p->cap_samples, p->n_samples + 1) < 0
            || GROW(p->stack_ids, p->cap_stack_ids, p->n_stack_ids + depth)
                   < 0) {
            return -1;
        }
        idx = p->n_samples;
        if (htab_put(&p->samples_index, keybuf, keylen, idx) < 0) {
            return -1;
        }
        /* Location ids are 1-based and refer to existing locations. */
        for (uint32_t i = 0; i < depth; i++) {
            assert(stack[i] >= 1 && stack[i] <= p->n_locations);
        }
        profile_sample_t *s = &p->samples[p->n_samples++];
        memset(s, 0, sizeof(*s));
        s->stack = (uint32_t)p->n_stack_ids;
        s->depth = depth;
        s->tid = tid;
        s->labels = labels;
        s->extra = extra;
        memcpy(s->values, values, p->n_values * sizeof(int64_t));
        memcpy(p->stack_ids + p->n_stack_ids, stack, depth * sizeof(uint32_t));
        p->n_stack_ids += depth;
        if (index != NULL) {
            *index = (size_t)idx;
        }
        return 0;
    }
}

void
profile_adjust(profile_t *p, size_t index, const int64_t *deltas)
{
    if (index >= p->n_samples) {
        return;
    }
    int64_t *values = p->samples[index].values;
    for (size_t i = 0; i < p->n_values; i++) {
        values[i] += deltas[i];
    }
}

void
profile_clear_samples(profile_t *p)
{
    p->n_samples = 0;
    p->n_stack_ids = 0;
    p->overflowed = 0;
    htab_clear(&p->samples_index);
    p->n_threads = 0;
    htab_clear(&p->threads_index);
}

profile_thread_t *
profile_thread(profile_t *p, int32_t tid)
{
    uint64_t idx;
    if (htab_get(&p->threads_index, &tid, sizeof(tid), &idx)) {
        return &p->threads[idx];
    }
    if (GROW(p->threads, p->cap_threads, p->n_threads + 1) < 0) {
        return NULL;
    }
    idx = p->n_threads;
    if (htab_put(&p->threads_index, &tid, sizeof(tid), idx) < 0) {
        return NULL;
    }
    profile_thread_t *t = &p->threads[p->n_threads++];
    t->tid = tid;
    t->name = 0;
    t->resolved = 0;
    return t;
}

uint32_t
profile_labelset(profile_t *p, const profile_label_t *pairs, size_t n)
{
    if (GROW(p->labelsets, p->cap_labelsets, p->n_labelsets + 1) < 0) {
        return 0;
    }
    if (GROW(p->label_pairs, p->cap_label_pairs, p->n_label_pairs + n) < 0) {
        return 0;
    }
    memcpy(p->label_pairs + p->n_label_pairs, pairs, n * sizeof(*pairs));
    p->labelsets[p->n_labelsets].start = (uint32_t)p->n_label_pairs;
    p->labelsets[p->n_labelsets].len = (uint32_t)n;
    p->n_label_pairs += n;
    return (uint32_t)++p->n_labelsets;
}

size_t
profile_bytes(const profile_t *p)
{
    size_t n = 0;
    for (size_t i = 1; i < p->n_strings; i++) {
        n += p->strings[i].len;
    }
    n += p->cap_strings * sizeof(profile_string_t);
    n += p->cap_functions * sizeof(profile_function_t);
    n += p->cap_locations * sizeof(profile_location_t);
    n += p->cap_samples * sizeof(profile_sample_t);
    n += p->cap_stack_ids * sizeof(uint32_t);
    n += p->cap_threads * sizeof(profile_thread_t);
    const htab_t *tabs[] = {&p->strings_index, &p->functions_index,
                            &p->locations_index, &p->samples_index,
                            &p->threads_index};
    for (size_t i = 0; i < sizeof(tabs) / sizeof(tabs[0]); i++) {
        n += tabs[i]->capacity * sizeof(htab_entry_t) + tabs[i]->key_bytes
             + tabs[i]->used * 16; /* malloc overhead per key */
    }
    return n;
}
