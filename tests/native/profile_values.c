/* A heap-shaped profile built with samprof's pure-C profile table and pprof
 * encoder (src/samprof/_c/profile.c, pprof.c): four values per sample,
 * labels, values decremented in place as freed blocks leave the in-use
 * values, and the distinct-sample cap. Checks the table as it goes, then
 * writes the encoded Profile message (not gzipped) to argv[1].
 *
 * Exits 0, or prints the failed check and exits 1. Built and run by
 * tests/core/test_profile_values.py, under ASan+UBSan in the sanitizer
 * run. */
#include <stdio.h>
#include <string.h>

#include "pprof.h"
#include "profile.h"

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,        \
                    __LINE__, #cond);                                     \
            return 1;                                                     \
        }                                                                 \
    } while (0)

#define CHECK_VALUES(s, a, b, c, d)                                       \
    CHECK((s)->values[0] == (a) && (s)->values[1] == (b)                  \
          && (s)->values[2] == (c) && (s)->values[3] == (d))

static uint32_t
str(profile_t *p, const char *s)
{
    return profile_string(p, s, strlen(s));
}

static int
build(profile_t *p)
{
    uint32_t file = str(p, "app/models.py");
    uint32_t f_alloc = profile_function(p, str(p, "alloc_list"), file, 10);
    uint32_t f_dict = profile_function(p, str(p, "build_dict"), file, 20);
    uint32_t f_main = profile_function(p, str(p, "main"), file, 1);
    uint32_t a[2] = {profile_location(p, f_alloc, 12),
                     profile_location(p, f_main, 30)};
    uint32_t b[2] = {profile_location(p, f_dict, 22),
                     profile_location(p, f_main, 31)};
    uint32_t c[1] = {profile_location(p, f_main, 32)};
    CHECK(a[0] && a[1] && b[0] && b[1] && c[0]);
    profile_label_t pairs[1] = {{str(p, "route"), str(p, "/users")}};
    uint32_t labels = profile_labelset(p, pairs, 1);
    CHECK(labels == 1);
    profile_thread_t *t = profile_thread(p, 7);
    CHECK(t != NULL);
    t->name = str(p, "worker-7");
    t->resolved = 1;
    profile_extra_t none = {0, 0, 0};
    profile_extra_t kind = {str(p, "kind"), str(p, "list"), 0};

    /* Three 1 KiB blocks at a (one sample), one 4 KiB block at b. */
    int64_t block_a[4] = {1, 1024, 1, 1024};
    size_t ia = 99, again = 98;
    CHECK(profile_add(p, a, 2, 7, labels, kind, block_a, &ia) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(profile_add(p, a, 2, 7, labels, kind, block_a, &again) == 0);
        CHECK(again == ia);
    }
    int64_t block_b[4] = {1, 4096, 1, 4096};
    size_t ib = 99;
    CHECK(profile_add(p, b, 2, 7, 0, none, block_b, &ib) == 0);
    CHECK(ib != ia && p->n_samples == 2);
    /* The same stack with another extra label is another sample. */
    profile_extra_t dict = {str(p, "kind"), str(p, "dict"), 0};
    size_t ib2 = 99;
    CHECK(profile_add(p, b, 2, 7, 0, dict, block_b, &ib2) == 0);
    CHECK(ib2 != ib && p->n_samples == 3);

    /* Two of a's blocks and one of b's are freed: the in-use values drop,
     * what was allocated stays. */
    int64_t free_a[4] = {0, 0, -1, -1024};
    profile_adjust(p, ia, free_a);
    profile_adjust(p, ia, free_a);
    int64_t free_b[4] = {0, 0, -1, -4096};
    profile_adjust(p, ib, free_b);
    profile_adjust(p, 1000, free_b); /* not a sample: ignored */
    CHECK_VALUES(&p->samples[ia], 3, 3072, 1, 1024);
    CHECK_VALUES(&p->samples[ib], 1, 4096, 0, 0);
    CHECK_VALUES(&p->samples[ib2], 1, 4096, 1, 4096);

    /* Past the cap of 4 distinct samples: the first new stack makes the
     * overflow sample, the next one adds to it. */
    int64_t block_c[4] = {2, 64, 2, 64};
    CHECK(profile_add(p, c, 1, 7, 0, none, block_c, NULL) == 0);
    CHECK(p->n_samples == 4 && p->overflowed == 0);
    size_t io = 99;
    CHECK(profile_add(p, a, 1, 7, 0, none, block_c, &io) == 0);
    CHECK(profile_add(p, b, 1, 7, 0, none, block_c, NULL) == 0);
    CHECK(p->n_samples == 5 && io == 4 && p->overflowed == 4);
    CHECK_VALUES(&p->samples[io], 4, 128, 4, 128);
    return 0;
}

int
main(int argc, char **argv)
{
    CHECK(argc == 2);
    profile_t p;
    CHECK(profile_init(&p, 0, 4) < 0);
    CHECK(profile_init(&p, PROFILE_MAX_VALUES + 1, 4) < 0);
    CHECK(profile_init(&p, 4, 4) == 0);
    if (build(&p) != 0) {
        profile_free(&p);
        return 1;
    }

    static const pprof_value_type_t types[4] = {
        {"alloc_objects", "count"},
        {"alloc_space", "bytes"},
        {"inuse_objects", "count"},
        {"inuse_space", "bytes"},
    };
    const char *comments[] = {"made by profile_values.c"};
    pprof_meta_t meta = {
        .sample_types = types,
        .n_sample_types = 4,
        .period_type = {"space", "bytes"},
        .period = 524288,
        .default_sample_type = "alloc_space",
        .time_nanos = 1700000000000000000LL,
        .duration_nanos = 5000000000LL,
        .comments = comments,
        .n_comments = 1,
    };
    pb_buf_t buf;
    pb_init(&buf);
    /* A description that does not match the values is refused. */
    pprof_meta_t wrong = meta;
    wrong.n_sample_types = 2;
    int refused = pprof_encode(&p, &wrong, &buf) < 0 && buf.len == 0;
    int encoded = pprof_encode(&p, &meta, &buf) == 0;
    FILE *f = encoded ? fopen(argv[1], "wb") : NULL;
    int written = f != NULL && fwrite(buf.data, 1, buf.len, f) == buf.len;
    if (f != NULL) {
        written = (fclose(f) == 0) && written;
    }
    pb_free(&buf);
    profile_free(&p);
    CHECK(refused);
    CHECK(encoded);
    CHECK(written);
    return 0;
}
