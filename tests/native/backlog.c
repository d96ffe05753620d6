/* The ring's backlog (ring.h), in an embedded interpreter:
 *
 * 1. Lifetime: samples of code objects wait in the backlog, as they do
 *    while a C call holds the GIL, and the code objects die. Each death
 *    must read the backlog first, so every sample keeps its own function's
 *    name even when a new code object takes a dead one's address.
 * 2. Bound: distinct deep samples past RING_BACKLOG_MAX_BYTES are dropped
 *    and counted, with their weight; what was kept reads back whole and the
 *    memory is given back.
 * 3. Races: two producer threads publish, a spill thread moves samples into
 *    the backlog as the collector's round thread does, and the main thread
 *    reads as the drain does, all at once. Every sample is read or counted
 *    as dropped, each exactly once, with its weight.
 *
 * Links samprof's collect.c and what it needs, and libpython. Prints what
 * failed and exits 1, or exits 0. Built and run by
 * tests/core/test_backlog.py, under ASan+UBSan in the sanitizer run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "collect.h"
#include "ring.h"

#define N_CODES 200
#define PERIOD_NS 1000

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* A new code object of a function named name; NULL with an error. */
static PyObject *
make_code(const char *name)
{
    char source[128];
    snprintf(source, sizeof(source), "def %s():\n    return 1\n", name);
    PyObject *globals = PyDict_New();
    if (globals == NULL
        || PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins())
               < 0) {
        Py_XDECREF(globals);
        return NULL;
    }
    PyObject *result = PyRun_String(source, Py_file_input, globals, globals);
    Py_XDECREF(result);
    PyObject *fn = result ? PyDict_GetItemString(globals, name) : NULL;
    PyObject *code = fn ? PyObject_GetAttrString(fn, "__code__") : NULL;
    /* The function and its globals refer to each other: clear the dict so
     * that the code object's only reference is ours. */
    PyDict_Clear(globals);
    Py_DECREF(globals);
    return code;
}

static int
make_codes(const char *prefix, PyObject **codes)
{
    char name[64];
    for (int i = 0; i < N_CODES; i++) {
        snprintf(name, sizeof(name), "%s_%d", prefix, i);
        codes[i] = make_code(name);
        if (codes[i] == NULL) {
            PyErr_Print();
            return -1;
        }
    }
    return 0;
}

/* Publishes one sample as the signal handler does. Returns 0, or -1 when
 * the ring is full. */
static int
publish(ring_t *r, int32_t tid, uint32_t weight, const ring_frame_t *frames,
        uint16_t depth)
{
    ring_slot_t *slot = ring_claim(r);
    if (slot == NULL) {
        return -1;
    }
    slot->tid = tid;
    slot->weight = weight;
    slot->depth = depth;
    slot->flags = 0;
    slot->labels = 0;
    slot->source = 0;
    memcpy(slot->frames, frames, (size_t)depth * sizeof(ring_frame_t));
    ring_publish(r, slot);
    return 0;
}

/* The samples and time of s whose leaf function is named name. */
static void
totals_named(const collect_session_t *s, const char *name, int64_t *count,
             int64_t *ns)
{
    const profile_t *p = &s->profile;
    *count = *ns = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        const profile_sample_t *sample = &p->samples[i];
        uint32_t loc = p->stack_ids[sample->stack];
        uint32_t fn = p->locations[loc - 1].function;
        const profile_string_t *str = &p->strings[p->functions[fn - 1].name];
        if (str->len == strlen(name)
            && memcmp(str->bytes, name, str->len) == 0) {
            *count += sample->values[0];
            *ns += sample->values[1];
        }
    }
}

/* Code i's samples, as sample_codes published them, are all in s. */
static void
check_names(const collect_session_t *s, const char *prefix)
{
    char name[64];
    for (int i = 0; i < N_CODES; i++) {
        snprintf(name, sizeof(name), "%s_%d", prefix, i);
        int64_t count, ns;
        totals_named(s, name, &count, &ns);
        int64_t want = i % 3 + 1;
        if (count != want || ns != want * (i + 1) * PERIOD_NS) {
            fprintf(stderr, "%s: %lld samples, %lld ns; want %lld, %lld\n",
                    name, (long long)count, (long long)ns, (long long)want,
                    (long long)(want * (i + 1) * PERIOD_NS));
            failures++;
            return;
        }
    }
}

/* Publishes each code's samples (i % 3 + 1 of weight i + 1 for code i)
 * and, with spill, moves them into the backlog whenever the ring is half
 * full, as the round thread does. */
static void
sample_codes(ring_t *r, PyObject **codes, int spill)
{
    for (int i = 0; i < N_CODES; i++) {
        ring_frame_t frame = {.code = codes[i], .offset = 0};
        for (int k = 0; k <= i % 3; k++) {
            CHECK(publish(r, 7, (uint32_t)i + 1, &frame, 1) == 0);
        }
        if (spill) {
            ring_spill(r, ring_capacity(r) / 2);
        }
    }
    if (spill) {
        ring_spill(r, 0);
    }
}

static void
kill_all(PyObject **codes)
{
    for (int i = 0; i < N_CODES; i++) {
        Py_CLEAR(codes[i]);
    }
    PyGC_Collect();
}

static void
test_lifetime(void)
{
    static collect_session_t s;
    static ring_t r;
    static PyObject *codes[N_CODES];
    /* Room for one round of samples_codes in the ring alone. */
    CHECK(ring_init(&r, 512, 8) == 0);
    CHECK(collect_init(&s, 2, 8, PERIOD_NS, NULL, NULL, 10000) == 0);
    collect_set_ring(&s, &r);

    CHECK(make_codes("old", codes) == 0);
    sample_codes(&r, codes, 1);
    uint64_t published = 0;
    for (int i = 0; i < N_CODES; i++) {
        published += (uint64_t)(i % 3 + 1);
    }
    ring_backlog_stats_t b = ring_backlog_stats(&r);
    CHECK(b.spilled == published);
    CHECK(b.dropped == 0);
    CHECK(ring_pending(&r) > 0);
    /* Nothing was symbolized yet: the deaths must do it. */
    CHECK(s.profile.n_samples == 0);
    kill_all(codes);
    CHECK(ring_pending(&r) == 0);

    /* New code objects, often at the dead ones' addresses; these wait in
     * the ring itself, then in both at once. */
    CHECK(make_codes("new", codes) == 0);
    sample_codes(&r, codes, 0);
    collect_drain(&s, &r, 0);
    kill_all(codes);
    CHECK(make_codes("newest", codes) == 0);
    sample_codes(&r, codes, 1);
    ring_frame_t frame = {.code = codes[0], .offset = 0};
    CHECK(publish(&r, 7, 1, &frame, 1) == 0); /* one left in the ring */
    kill_all(codes);
    CHECK(ring_pending(&r) == 0);

    int64_t count, ns;
    totals_named(&s, "newest_0", &count, &ns);
    CHECK(count == 2 && ns == 2 * PERIOD_NS);
    totals_named(&s, "newest_1", &count, &ns);
    CHECK(count == 2 && ns == 4 * PERIOD_NS);
    check_names(&s, "old");
    check_names(&s, "new");
    collect_free(&s);
    ring_free(&r);
}

static void
test_bound(void)
{
    enum { DEPTH = 64, N = 20000 };
    static ring_t r;
    static ring_frame_t frames[DEPTH];
    CHECK(ring_init(&r, 256, DEPTH) == 0);
    uint64_t weights = 0;
    for (int i = 0; i < N; i++) {
        for (int d = 0; d < DEPTH; d++) {
            frames[d].code = (void *)(uintptr_t)(0x1000 + d * 16);
            frames[d].offset = i; /* every sample distinct: none merge */
        }
        uint32_t w = (uint32_t)(i % 5 + 1);
        CHECK(publish(&r, 1, w, frames, DEPTH) == 0);
        weights += w;
        ring_spill(&r, 128);
    }
    ring_spill(&r, 0);
    ring_backlog_stats_t b = ring_backlog_stats(&r);
    CHECK(b.spilled + b.dropped == N);
    CHECK(b.dropped > 0);
    CHECK(b.peak_bytes <= RING_BACKLOG_MAX_BYTES);
    CHECK(b.peak_bytes > RING_BACKLOG_MAX_BYTES / 2);

    /* What was kept reads back in order, whole. */
    uint64_t read = 0, read_weight = 0;
    int in_order = 1;
    ring_sample_t sample;
    ring_lock(&r);
    while (ring_next(&r, &sample)) {
        in_order &= sample.frames[DEPTH - 1].offset == (int32_t)read;
        read += sample.count;
        read_weight += sample.weight;
    }
    ring_unlock(&r);
    CHECK(in_order);
    CHECK(read == b.spilled);
    CHECK(read_weight + b.dropped_periods == weights);
    CHECK(ring_pending(&r) == 0);
    CHECK(r.bytes == 0); /* read: given back */

    /* Room again once read. */
    CHECK(publish(&r, 1, 1, frames, DEPTH) == 0);
    CHECK(ring_spill(&r, 0) == 1);
    CHECK(ring_backlog_stats(&r).spilled == b.spilled + 1);
    ring_free(&r);
}

/* ------------------------------- races -------------------------------- */

#define RACE_SAMPLES 200000

static ring_t race;
static atomic_int producers_done;
static atomic_int spill_stop;
static _Atomic uint64_t race_full, race_full_weight;

static void *
race_produce(void *arg)
{
    int32_t tid = (int32_t)(intptr_t)arg;
    ring_frame_t frames[4];
    for (int i = 0; i < RACE_SAMPLES; i++) {
        for (int d = 0; d < 4; d++) {
            frames[d].code = (void *)(uintptr_t)(0x1000 * (d + 1));
            frames[d].offset = (i / 50) % 7; /* runs that merge */
        }
        uint32_t w = (uint32_t)(i % 3 + 1);
        if (publish(&race, tid, w, frames, (uint16_t)(i % 4 + 1)) < 0) {
            atomic_fetch_add(&race_full, 1);
            atomic_fetch_add(&race_full_weight, w);
        }
    }
    atomic_fetch_add(&producers_done, 1);
    return NULL;
}

static void *
race_spill(void *arg)
{
    (void)arg;
    while (!atomic_load(&spill_stop)) {
        ring_spill(&race, 16);
    }
    return NULL;
}

static void
race_read(uint64_t *count, uint64_t *weight)
{
    ring_sample_t sample;
    ring_lock(&race);
    while (ring_next(&race, &sample)) {
        *count += sample.count;
        *weight += sample.weight;
    }
    ring_unlock(&race);
}

static void
test_races(void)
{
    CHECK(ring_init(&race, 256, 4) == 0);
    pthread_t p[2], sp;
    pthread_create(&sp, NULL, race_spill, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_create(&p[i], NULL, race_produce, (void *)(intptr_t)(i + 1));
    }
    /* The reader holds off until the spiller has moved something: a reader
     * that drains the ring as fast as it fills can starve the spiller of its
     * 16 pending slots for the whole run (seen under ASan on two cores), and
     * then the backlog's side of the race is never run. Nothing else drains
     * the ring meanwhile, so it fills and the spiller's turn comes. */
    uint64_t count = 0, weight = 0;
    int spilled = 0;
    while (atomic_load(&producers_done) < 2 || !spilled) {
        if (!spilled) {
            ring_lock(&race);
            spilled = race.spilled > 0;
            ring_unlock(&race);
        }
        if (spilled) {
            race_read(&count, &weight);
        }
        sched_yield();
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(p[i], NULL);
    }
    atomic_store(&spill_stop, 1);
    pthread_join(sp, NULL);
    race_read(&count, &weight);
    CHECK(ring_pending(&race) == 0);

    uint64_t want_weight = 0;
    for (int i = 0; i < RACE_SAMPLES; i++) {
        want_weight += 2 * (uint64_t)(i % 3 + 1);
    }
    ring_backlog_stats_t b = ring_backlog_stats(&race);
    uint64_t full = atomic_load(&race_full);
    CHECK(count + b.dropped + full == 2 * RACE_SAMPLES);
    CHECK(weight + b.dropped_periods + atomic_load(&race_full_weight)
          == want_weight);
    CHECK(b.spilled > 0);
    printf("races: read %llu (%llu via the backlog), ring full %llu\n",
           (unsigned long long)count, (unsigned long long)b.spilled,
           (unsigned long long)full);
    ring_free(&race);
}

int
main(void)
{
    Py_Initialize();
    test_lifetime();
    test_bound();
    test_races();
    if (Py_FinalizeEx() < 0) {
        failures++;
    }
    return failures ? 1 : 0;
}
