/* Two profile sessions alive at once in an embedded interpreter, as a heap
 * profile beside an on-demand CPU profile will be: code objects die while
 * both sessions hold them, and each session must still name every frame
 * right (a session not told of a death would give a new code object at
 * the dead one's address the dead one's name). Then one session closes and
 * the other must still hear of deaths: one code watcher, many subscribers.
 *
 * Links samprof's collect.c and what it needs, and libpython. Prints what
 * failed and exits 1, or exits 0. Built and run by
 * tests/core/test_sessions.py, under ASan+UBSan in the sanitizer run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "collect.h"

#define N_CODES 200

static int failures;

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,        \
                    __LINE__, #cond);                                     \
            failures++;                                                   \
        }                                                                 \
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

/* One one-frame sample of each code object, as the sampler captures it:
 * a borrowed pointer, symbolized while the object is alive. */
static void
add_all(collect_session_t *s, PyObject **codes)
{
    for (int i = 0; i < N_CODES; i++) {
        ring_frame_t frame = {.code = codes[i], .offset = 0};
        uint32_t n = collect_stack(s, &frame, 1, 0, s->stack);
        collect_add(s, s->stack, n, 1, 0, 0, 1, 1000);
    }
}

/* Drops the code objects; their deaths reach every live session. */
static void
kill_all(PyObject **codes, uintptr_t *addresses)
{
    for (int i = 0; i < N_CODES; i++) {
        addresses[i] = (uintptr_t)codes[i];
        Py_CLEAR(codes[i]);
    }
    PyGC_Collect();
}

static int
reused(PyObject **codes, const uintptr_t *dead)
{
    int n = 0;
    for (int i = 0; i < N_CODES; i++) {
        for (int j = 0; j < N_CODES; j++) {
            if ((uintptr_t)codes[i] == dead[j]) {
                n++;
                break;
            }
        }
    }
    return n;
}

/* How many samples of s have a leaf function named name. */
static int64_t
samples_named(const collect_session_t *s, const char *name)
{
    const profile_t *p = &s->profile;
    int64_t n = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        const profile_sample_t *sample = &p->samples[i];
        uint32_t loc = p->stack_ids[sample->stack];
        uint32_t fn = p->locations[loc - 1].function;
        const profile_string_t *str = &p->strings[p->functions[fn - 1].name];
        if (str->len == strlen(name)
            && memcmp(str->bytes, name, str->len) == 0) {
            n += sample->values[0];
        }
    }
    return n;
}

static void
check_names(const collect_session_t *s, const char *prefix, int64_t want)
{
    char name[64];
    for (int i = 0; i < N_CODES; i++) {
        snprintf(name, sizeof(name), "%s_%d", prefix, i);
        int64_t got = samples_named(s, name);
        if (got != want) {
            fprintf(stderr, "%s: %lld samples, want %lld\n", name,
                    (long long)got, (long long)want);
            failures++;
            return;
        }
    }
}

int
main(int argc, char **argv)
{
    int need_reuse = argc > 1 && strcmp(argv[1], "--need-reuse") == 0;
    Py_Initialize();
    static collect_session_t a, b;
    static PyObject *codes[N_CODES];
    static uintptr_t dead[N_CODES];

    CHECK(collect_init(&a, 2, 8, 1000, NULL, NULL, 10000) == 0);
    CHECK(collect_init(&b, 2, 8, 1000, NULL, NULL, 10000) == 0);
    if (failures) {
        PyErr_Print();
        return 1;
    }

    /* Both sessions hold old_*; they die; new_* often take their
     * addresses. */
    CHECK(make_codes("old", codes) == 0);
    add_all(&a, codes);
    add_all(&b, codes);
    kill_all(codes, dead);
    CHECK(make_codes("new", codes) == 0);
    int reused_both = reused(codes, dead);
    add_all(&a, codes);
    add_all(&b, codes);
    check_names(&a, "old", 1);
    check_names(&a, "new", 1);
    check_names(&b, "old", 1);
    check_names(&b, "new", 1);

    /* a closes; b alone must still hear of deaths. */
    collect_free(&a);
    kill_all(codes, dead);
    CHECK(make_codes("newest", codes) == 0);
    int reused_alone = reused(codes, dead);
    add_all(&b, codes);
    check_names(&b, "new", 1);
    check_names(&b, "newest", 1);
    CHECK(samples_named(&b, "old_0") == 1);

    /* What b encodes is a valid profile (the Python test reads it). */
    if (argc > 2) {
        static const pprof_value_type_t types[2] = {{"samples", "count"},
                                                    {"cpu", "nanoseconds"}};
        pprof_meta_t meta = {.sample_types = types,
                             .n_sample_types = 2,
                             .period_type = {"cpu", "nanoseconds"},
                             .period = 1000,
                             .default_sample_type = "cpu"};
        pb_buf_t buf;
        pb_init(&buf);
        CHECK(collect_encode(&b, &meta, &buf) == 0);
        FILE *f = fopen(argv[2], "wb");
        CHECK(f != NULL && fwrite(buf.data, 1, buf.len, f) == buf.len);
        if (f != NULL) {
            fclose(f);
        }
        pb_free(&buf);
    }
    kill_all(codes, dead);
    collect_free(&b);

    printf("reused %d %d\n", reused_both, reused_alone);
    if (need_reuse) {
        /* Without address reuse the test proves little; pymalloc reuses
         * freely (ASan's allocator quarantines, and checks instead). */
        CHECK(reused_both > N_CODES / 4 && reused_alone > N_CODES / 4);
    }
    if (Py_FinalizeEx() < 0) {
        failures++;
    }
    return failures ? 1 : 0;
}
