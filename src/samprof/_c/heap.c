/* heap: allocator hooks, per-thread Poisson sampling over allocated bytes,
 * the table of live sampled blocks, and Go's heap profile (heap.h has the
 * contract; docs/design.md §8 the scheme).
 *
 * Costs, in the order a program pays them: every allocation pays a
 * thread-local compare and subtraction before a tail call to the allocator
 * below; every free looks at one slot of the live table while something
 * is tracked; only a sampled allocation (one per rate bytes on average)
 * reads the stack and touches the profile. */
#include "heap.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "collect.h"
#include "frames.h"
#include "grow.h"
#include "pprof.h"
#include "ring.h"
#include "labels.h"
#include "tctx.h"

/* One installation of our allocator on one domain. Never freed: a hook
 * someone else wrapped may still be called through their chain after the
 * profile stops (it then passes every call through), and a hook that was
 * removed is reused by the next profile. */
typedef struct heap_hook {
    PyMemAllocatorDomain domain;
    PyMemAllocatorEx orig; /* the allocator found at install; ours calls it */
    int in_chain;          /* installed and not known to be removed */
    struct heap_hook *next;
} heap_hook_t;

#define HEAP_DOMAINS 2
static const PyMemAllocatorDomain heap_domains[HEAP_DOMAINS] = {
    PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};

/* A tracked block: its address, and the profile sample that recorded it
 * (whose "bytes" label is the block's size). ptr 0: an empty slot. */
typedef struct {
    uintptr_t ptr;
    uint32_t sample;
} heap_live_t;

static struct {
    int enabled;   /* sampling and tracking: between start and stop */
    uint64_t rate; /* this profile's, or the last one's after its stop */
    collect_session_t session;
    ring_frame_t *frames; /* scratch for frames_walk, max_depth of them */
    uint32_t max_depth;
    uint32_t k_bytes; /* string id of the label key "bytes" */

    /* Open addressing with linear probing, no tombstones (deletion shifts
     * the run back), at most half full; grown on the sampling path only,
     * so a free never allocates. */
    heap_live_t *live;
    size_t live_mask; /* slots - 1 */
    size_t n_live;
    size_t max_live;

    heap_stats_t stats;
    int probing;    /* heap_hooks_reached is checking that our hooks are
                       called */
    int probe_seen; /* a hook was called while probing */
    int64_t start_realtime_ns;
    int64_t start_monotonic_ns;

    /* Delta encodes (heap_encode's delta): each sample's raw alloc count
     * and size at the last one, by sample index (2 values each; samples
     * are only ever appended), and where the next one's span begins. */
    int64_t *delta_base;
    size_t n_delta_base, cap_delta_base; /* in samples */
    int64_t delta_realtime_ns;
    int64_t delta_monotonic_ns;

    heap_hook_t *installed[HEAP_DOMAINS]; /* this profile's hooks */
    heap_hook_t *hooks;                   /* every hook ever made */
} H;

/* ------------------------------------------------------------------------
 * Sampling
 * ---------------------------------------------------------------------- */

/* xorshift64*, seeded per thread from its id and the clock. */
static uint64_t
heap_random(tctx_heap_t *t)
{
    uint64_t x = t->rng;
    if (x == 0) {
        x = ((uint64_t)tctx_tid() * 0x9E3779B97F4A7C15ULL)
            ^ (uint64_t)clock_ns(CLOCK_MONOTONIC);
        x |= 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Bytes to the next sample: exponential with mean rate, as Go's
 * nextSample draws it (-ln(U) * rate, U uniform in (0, 1]), plus one so a
 * countdown is never 0. With rate 1 every allocation is sampled. */
static int64_t
heap_next_countdown(tctx_heap_t *t)
{
    if (H.rate <= 1) {
        return 0;
    }
    double u = (double)((heap_random(t) >> 11) + 1) * 0x1.0p-53;
    return (int64_t)(-log(u) * (double)H.rate) + 1;
}

static PyThreadState *
heap_thread_state(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyThreadState_GetUnchecked();
#else
    return _PyThreadState_UncheckedGet();
#endif
}

/* samprof's own work on this thread: its allocations are not counted
 * while it lasts (calls nest). */
static void
heap_busy_enter(tctx_heap_t *t)
{
    if (t->busy++ == 0) {
        t->saved = t->countdown;
        t->countdown = INT64_MAX;
    }
}

static void
heap_busy_exit(tctx_heap_t *t)
{
    if (--t->busy == 0) {
        t->countdown = t->saved;
    }
}

/* ------------------------------------------------------------------------
 * The live table
 * ---------------------------------------------------------------------- */

static size_t
heap_slot(uintptr_t ptr)
{
    /* Blocks are 16-byte aligned: the low bits carry nothing. */
    return (size_t)(((uint64_t)(ptr >> 4) * 0x9E3779B97F4A7C15ULL) >> 20)
           & H.live_mask;
}

/* The slot holding ptr, or the empty slot that ends its run. */
static size_t
heap_find(uintptr_t ptr)
{
    size_t i = heap_slot(ptr);
    while (H.live[i].ptr != 0 && H.live[i].ptr != ptr) {
        i = (i + 1) & H.live_mask;
    }
    return i;
}

/* Doubles the table. 0, or -1 when out of memory (the table unchanged). */
static int
heap_grow_live(void)
{
    size_t slots = (H.live_mask + 1) * 2;
    heap_live_t *old = H.live;
    size_t old_slots = H.live_mask + 1;
    heap_live_t *fresh = calloc(slots, sizeof(*fresh));
    if (fresh == NULL) {
        return -1;
    }
    H.live = fresh;
    H.live_mask = slots - 1;
    for (size_t i = 0; i < old_slots; i++) {
        if (old[i].ptr != 0) {
            H.live[heap_find(old[i].ptr)] = old[i];
        }
    }
    free(old);
    return 0;
}

/* Takes a freed sampled block's size out of its sample's in-use values. */
static void
heap_release(uint32_t sample)
{
    profile_t *p = &H.session.profile;
    if (sample >= p->n_samples) {
        return;
    }
    int64_t size = p->samples[sample].extra.num;
    int64_t deltas[4] = {0, 0, -1, -size};
    profile_adjust(p, sample, deltas);
}

/* Remembers ptr as recorded by sample. 0, or -1 when the table is full. */
static int
heap_track(uintptr_t ptr, uint32_t sample)
{
    if (H.n_live >= H.max_live
        || (2 * (H.n_live + 1) > H.live_mask + 1 && heap_grow_live() < 0)) {
        return -1;
    }
    size_t i = heap_find(ptr);
    if (H.live[i].ptr == ptr) {
        /* Its free went past our hooks (someone unhooked them for a
         * while): it was released then. */
        heap_release(H.live[i].sample);
    }
    else {
        H.n_live++;
    }
    H.live[i].ptr = ptr;
    H.live[i].sample = sample;
    return 0;
}

/* ptr is being freed: if it is a tracked block, its sample's in-use
 * values drop and the slot is emptied, shifting back the rest of the run
 * (Knuth's algorithm R) so lookups need no tombstones. */
static void
heap_forget(uintptr_t ptr)
{
    size_t i = heap_find(ptr);
    if (H.live[i].ptr == 0) {
        return;
    }
    heap_release(H.live[i].sample);
    H.n_live--;
    size_t j = i;
    for (;;) {
        j = (j + 1) & H.live_mask;
        if (H.live[j].ptr == 0) {
            break;
        }
        size_t home = heap_slot(H.live[j].ptr);
        /* The entry at j may move to the hole at i unless its home slot
         * lies cyclically in (i, j]. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            H.live[i] = H.live[j];
            i = j;
        }
    }
    H.live[i].ptr = 0;
}

/* ------------------------------------------------------------------------
 * The sampled path
 * ---------------------------------------------------------------------- */

/* ptr, of size bytes, is a sampled allocation of the calling thread, which
 * holds the GIL: records its stack, and tracks it until its free. Never
 * counts the allocations it makes itself (busy is set), and never
 * makes a GC-tracked object, so it cannot start a collection. */
static void
heap_sample(tctx_heap_t *t, void *ptr, size_t size)
{
    t->countdown = heap_next_countdown(t);
    if (H.probing) {
        H.probe_seen = 1;
        return;
    }
    heap_busy_enter(t);
    uint16_t flags = 0;
    int depth = 0;
    PyThreadState *ts = heap_thread_state();
    if (ts == NULL) {
        flags |= RING_NO_PYTHON;
    }
    else {
        depth = frames_walk(ts, H.frames, (int)H.max_depth, &flags);
    }
    if (flags & RING_TORN) {
        /* Not seen with the GIL held; kept as a guard. The allocation
         * still counts, under "<no Python frames>". */
        H.stats.torn++;
        depth = 0;
        flags &= (uint16_t)~RING_TORN;
    }
    if (tctx_in_gc()) {
        flags |= RING_IN_GC;
    }
    collect_session_t *s = &H.session;
    uint32_t n = collect_stack(s, H.frames, (uint16_t)depth, flags, s->stack);
    profile_extra_t extra = {H.k_bytes, 0, (int64_t)size};
    int64_t values[4] = {1, (int64_t)size, 1, (int64_t)size};
    size_t index;
    H.stats.sampled++;
    if (collect_add_values(s, s->stack, n, tctx_tid(),
                           labels_of(heap_thread_state()), extra, values,
                           &index)
            == 0
        && heap_track((uintptr_t)ptr, (uint32_t)index) < 0) {
        /* Its free will not be seen: in-use leaves it out now. */
        H.stats.untracked++;
        heap_release((uint32_t)index);
    }
    heap_busy_exit(t);
}

/* Whether an allocation of size bytes stays under the thread's countdown
 * (which it then takes off): the common path, a subtraction and a test of
 * its sign. Anything else is for heap_count_slow once the block exists.
 * The countdown goes down before the allocation is made; one that fails
 * still moved the sampling point, which changes no expectation. */
static inline int
heap_fits(tctx_heap_t *t, size_t size)
{
    int64_t left = t->countdown - (int64_t)size;
    if (left >= 0) {
        t->countdown = left;
        return 1;
    }
    return 0;
}

/* The rest of an allocation of size bytes that did not fit under the
 * calling thread's countdown; ptr is the block (not NULL).
 *
 * A countdown drawn at this profile's rate is kept across profiles: the
 * exponential is memoryless, so what is left of it is as good as a fresh
 * draw. One drawn at another rate (or none, on a new thread) is drawn
 * again here, when it runs out: in other threads than the one that
 * started the profile, a new rate takes effect at the next sample point,
 * as a change of Go's MemProfileRate does. The common path tests nothing
 * but the countdown. */
static void
heap_count_slow(tctx_heap_t *t, void *ptr, size_t size)
{
    if (t->busy != 0) {
        return;
    }
    if (!H.enabled) {
        /* A hook left in someone's chain after its profile: nothing to
         * count; look again after a rate's worth of bytes. */
        t->countdown = (int64_t)(H.rate > 1 ? H.rate : HEAP_DEFAULT_RATE);
        t->drawn_at = 0;
        return;
    }
    if (t->drawn_at != H.rate) {
        t->drawn_at = H.rate;
        t->countdown = heap_next_countdown(t);
        if (heap_fits(t, size)) {
            return;
        }
    }
    heap_sample(t, ptr, size);
}

/* ------------------------------------------------------------------------
 * The hooks. In CPython the MEM and OBJ allocators never call each other
 * (pymalloc falls back to the RAW domain, which is not hooked), so each
 * allocation passes one hook once; samprof's own allocations are kept out
 * by the busy counter.
 * ---------------------------------------------------------------------- */

/* The hooks' own common paths are tail calls to the allocator below;
 * everything else is in these, out of line, so that the common path sets
 * up no stack frame. */
static __attribute__((noinline)) void *
heap_malloc_slow(heap_hook_t *h, tctx_heap_t *t, size_t size)
{
    void *p = h->orig.malloc(h->orig.ctx, size);
    if (p != NULL) {
        heap_count_slow(t, p, size);
    }
    return p;
}

static __attribute__((noinline)) void *
heap_calloc_slow(heap_hook_t *h, tctx_heap_t *t, size_t nelem, size_t elsize)
{
    void *p = h->orig.calloc(h->orig.ctx, nelem, elsize);
    if (p != NULL) {
        heap_count_slow(t, p, nelem * elsize);
    }
    return p;
}

static __attribute__((noinline)) void
heap_free_slow(heap_hook_t *h, void *ptr)
{
    heap_forget((uintptr_t)ptr);
    h->orig.free(h->orig.ctx, ptr);
}

static void *
heap_malloc(void *ctx, size_t size)
{
    heap_hook_t *h = ctx;
    tctx_heap_t *t = tctx_heap();
    if (heap_fits(t, size)) {
        return h->orig.malloc(h->orig.ctx, size);
    }
    return heap_malloc_slow(h, t, size);
}

static void *
heap_calloc(void *ctx, size_t nelem, size_t elsize)
{
    heap_hook_t *h = ctx;
    tctx_heap_t *t = tctx_heap();
    size_t size;
    if (__builtin_mul_overflow(nelem, elsize, &size)) {
        return h->orig.calloc(h->orig.ctx, nelem, elsize); /* fails */
    }
    if (heap_fits(t, size)) {
        return h->orig.calloc(h->orig.ctx, nelem, elsize);
    }
    return heap_calloc_slow(h, t, nelem, elsize);
}

/* A realloc is the free of the old block and the allocation of the new
 * one; when it fails the old block is untouched, and so is the profile. */
static void *
heap_realloc(void *ctx, void *ptr, size_t size)
{
    heap_hook_t *h = ctx;
    tctx_heap_t *t = tctx_heap();
    void *p = h->orig.realloc(h->orig.ctx, ptr, size);
    if (p == NULL) {
        return NULL;
    }
    if (ptr != NULL && H.n_live != 0) {
        heap_forget((uintptr_t)ptr);
    }
    if (!heap_fits(t, size)) {
        heap_count_slow(t, p, size);
    }
    return p;
}

/* Frees are tracked whoever makes them, samprof included: a sampled block
 * must leave the in-use values however it dies. n_live is 0 while no
 * profile runs; a block whose home slot is empty is not in the table.
 * (NULL is never in it: heap_forget finds nothing for it.) */
static void
heap_free(void *ctx, void *ptr)
{
    heap_hook_t *h = ctx;
    if (H.n_live != 0 && H.live[heap_slot((uintptr_t)ptr)].ptr != 0) {
        heap_free_slow(h, ptr);
        return;
    }
    h->orig.free(h->orig.ctx, ptr);
}

void
heap_count_block(void *ptr, size_t size)
{
    tctx_heap_t *t = tctx_heap();
    if (!heap_fits(t, size)) {
        heap_count_slow(t, ptr, size);
    }
}

void
heap_forget_block(void *ptr)
{
    if (H.n_live != 0 && ptr != NULL) {
        heap_forget((uintptr_t)ptr);
    }
}

static int
heap_is_ours(const PyMemAllocatorEx *a)
{
    return a->malloc == heap_malloc;
}

/* Installs our hook on domain d above whatever allocator is there, or
 * reuses our hook when it is still the domain's allocator (a profile that
 * could not remove it left it there). NULL when out of memory. */
static heap_hook_t *
heap_hook_domain(PyMemAllocatorDomain d)
{
    PyMemAllocatorEx cur;
    PyMem_GetAllocator(d, &cur);
    if (heap_is_ours(&cur)) {
        return cur.ctx;
    }
    heap_hook_t *h = NULL;
    for (heap_hook_t *k = H.hooks; k != NULL; k = k->next) {
        if (!k->in_chain && k->domain == d) {
            h = k;
            break;
        }
    }
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL) {
            return NULL;
        }
        h->domain = d;
        h->next = H.hooks;
        H.hooks = h;
    }
    h->orig = cur;
    h->in_chain = 1;
    PyMemAllocatorEx ours = {h, heap_malloc, heap_calloc, heap_realloc,
                             heap_free};
    PyMem_SetAllocator(d, &ours);
    return h;
}

/* Removes this profile's hooks where they are still the domains'
 * allocators. Returns how many stay in someone else's chain. */
static int
heap_unhook(void)
{
    int stayed = 0;
    for (int i = 0; i < HEAP_DOMAINS; i++) {
        heap_hook_t *h = H.installed[i];
        if (h == NULL) {
            continue;
        }
        PyMemAllocatorEx cur;
        PyMem_GetAllocator(h->domain, &cur);
        if (heap_is_ours(&cur) && cur.ctx == h) {
            PyMem_SetAllocator(h->domain, &h->orig);
            h->in_chain = 0;
        }
        else {
            stayed++;
        }
        H.installed[i] = NULL;
    }
    return stayed;
}

/* Whether every hooked domain still reaches our hook: an allocation made
 * with the countdown at zero must take the sampled path. Someone who
 * restores the allocators they found before we started (tracemalloc.stop()
 * after a tracemalloc.start() that preceded ours) drops us silently. */
static int
heap_hooks_reached(void)
{
    tctx_heap_t *t = tctx_heap();
    uint32_t busy = t->busy;
    int64_t countdown = t->countdown;
    uint64_t drawn_at = t->drawn_at;
    int reached = 1;
    H.probing = 1;
    t->busy = 0;
    for (int i = 0; i < HEAP_DOMAINS; i++) {
        H.probe_seen = 0;
        t->drawn_at = H.rate;
        t->countdown = 0;
        void *p = heap_domains[i] == PYMEM_DOMAIN_MEM ? PyMem_Malloc(1)
                                                      : PyObject_Malloc(1);
        if (heap_domains[i] == PYMEM_DOMAIN_MEM) {
            PyMem_Free(p);
        }
        else {
            PyObject_Free(p);
        }
        reached = reached && p != NULL && H.probe_seen;
    }
    H.probing = 0;
    t->busy = busy;
    t->countdown = countdown;
    t->drawn_at = drawn_at;
    return reached;
}

/* ------------------------------------------------------------------------
 * The profile
 * ---------------------------------------------------------------------- */

/* Go's scaleHeapSample: a (count, size) pair of sampled blocks of one size
 * stands for count / (1 - exp(-avg/rate)) blocks, avg = size / count. */
static void
heap_scale_pair(int64_t count, int64_t size, uint64_t rate, int64_t *out)
{
    if (count == 0 || size == 0) {
        out[0] = out[1] = 0;
        return;
    }
    if (rate <= 1) {
        out[0] = count;
        out[1] = size;
        return;
    }
    double avg = (double)size / (double)count;
    double scale = 1 / (1 - exp(-avg / (double)rate));
    out[0] = (int64_t)((double)count * scale);
    out[1] = (int64_t)((double)size * scale);
}

static void
heap_unsample(const profile_sample_t *s, int64_t *out, const void *arg)
{
    uint64_t rate = *(const uint64_t *)arg;
    heap_scale_pair(s->values[0], s->values[1], rate, out);
    heap_scale_pair(s->values[2], s->values[3], rate, out + 2);
}

/* A sample's raw alloc (count, size) at the last delta encode. */
static void
heap_delta_base(const profile_sample_t *s, int64_t *base)
{
    size_t i = (size_t)(s - H.session.profile.samples);
    base[0] = i < H.n_delta_base ? H.delta_base[2 * i] : 0;
    base[1] = i < H.n_delta_base ? H.delta_base[2 * i + 1] : 0;
}

/* As godeltaprof does: the allocations since the last delta encode,
 * unsampled as a pair of their own, and the in-use values now. */
static void
heap_unsample_delta(const profile_sample_t *s, int64_t *out, const void *arg)
{
    int64_t base[2];
    heap_delta_base(s, base);
    uint64_t rate = *(const uint64_t *)arg;
    heap_scale_pair(s->values[0] - base[0], s->values[1] - base[1], rate, out);
    heap_scale_pair(s->values[2], s->values[3], rate, out + 2);
}

/* A delta leaves out the samples with nothing allocated since the last
 * one and nothing in use. */
static int
heap_delta_keep(const profile_sample_t *s, const void *arg)
{
    (void)arg;
    int64_t base[2];
    heap_delta_base(s, base);
    return s->values[0] != base[0] || s->values[2] != 0;
}

/* Remembers every sample's alloc values for the next delta. 0, or -1 when
 * out of memory (the next delta then repeats this one's allocations). */
static int
heap_delta_remember(void)
{
    const profile_t *p = &H.session.profile;
    if (GROW(H.delta_base, H.cap_delta_base, 2 * p->n_samples) < 0) {
        return -1;
    }
    for (size_t i = 0; i < p->n_samples; i++) {
        H.delta_base[2 * i] = p->samples[i].values[0];
        H.delta_base[2 * i + 1] = p->samples[i].values[1];
    }
    H.n_delta_base = p->n_samples;
    return 0;
}

static const pprof_value_type_t heap_types[4] = {
    {"alloc_objects", "count"},
    {"alloc_space", "bytes"},
    {"inuse_objects", "count"},
    {"inuse_space", "bytes"},
};

void
heap_get_stats(heap_stats_t *st)
{
    *st = H.stats;
    st->rate = H.rate;
    st->live = H.n_live;
    if (H.session.active) {
        st->truncated = collect_truncated(&H.session);
        st->unknown_frames = collect_unknown_frames(&H.session);
        st->lost = collect_lost(&H.session);
        st->stack_table_full = H.session.profile.overflowed;
        st->profile_bytes = profile_bytes(&H.session.profile);
        st->duration_ns = clock_ns(CLOCK_MONOTONIC) - H.start_monotonic_ns;
    }
}

void
heap_name_this_thread(PyObject *name)
{
    if (H.enabled) {
        collect_name_thread(&H.session, tctx_tid(), name);
    }
}

int
heap_encode(int allocs, const heap_encode_t *how, pb_buf_t *out)
{
    assert(H.enabled);
    tctx_heap_t *t = tctx_heap();
    if (!heap_hooks_reached()) {
        H.stats.hooks_lost = 1;
    }
    heap_busy_enter(t); /* names are looked up in Python: not the program's */
    collect_resolve_thread_names(&H.session);
    heap_stats_t st;
    heap_get_stats(&st);
    char c[2][256];
    snprintf(c[0], sizeof(c[0]), "samprof mode=heap rate=%llu",
             (unsigned long long)st.rate);
    snprintf(c[1], sizeof(c[1]),
             "samprof heap: sampled=%llu live=%llu untracked=%llu "
             "torn=%llu stack_table_full=%llu out_of_memory=%llu "
             "truncated=%llu hooks_lost=%llu",
             (unsigned long long)st.sampled, (unsigned long long)st.live,
             (unsigned long long)st.untracked, (unsigned long long)st.torn,
             (unsigned long long)st.stack_table_full,
             (unsigned long long)st.lost, (unsigned long long)st.truncated,
             (unsigned long long)st.hooks_lost);
    const char *comments[2] = {c[0], c[1]};
    pprof_meta_t meta = {
        .sample_types = heap_types,
        .n_sample_types = 4,
        .period_type = {"space", "bytes"},
        .period = (int64_t)H.rate,
        .default_sample_type = allocs ? "alloc_space" : NULL,
        .time_nanos = H.start_realtime_ns,
        .duration_nanos = st.duration_ns,
        .comments = comments,
        .n_comments = 2,
        .values = heap_unsample,
        .values_arg = &H.rate,
        .no_thread_labels = !how->thread_labels,
    };
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    if (how->delta) {
        meta.time_nanos = H.delta_realtime_ns;
        meta.duration_nanos = now - H.delta_monotonic_ns;
        meta.values = heap_unsample_delta;
        meta.keep = heap_delta_keep;
    }
    int rc = collect_encode(&H.session, &meta, out);
    if (rc == 0 && how->delta) {
        (void)heap_delta_remember();
        H.delta_realtime_ns += meta.duration_nanos;
        H.delta_monotonic_ns = now;
    }
    heap_busy_exit(t);
    if (how->time_nanos != NULL) {
        *how->time_nanos = meta.time_nanos;
        *how->duration_nanos = meta.duration_nanos;
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * Start and stop
 * ---------------------------------------------------------------------- */

int
heap_running(void)
{
    return H.enabled;
}

static void
heap_free_state(void)
{
    H.n_live = 0;
    collect_free(&H.session);
    free(H.live);
    H.live = NULL;
    H.live_mask = 0;
    PyMem_RawFree(H.frames);
    H.frames = NULL;
    free(H.delta_base);
    H.delta_base = NULL;
    H.n_delta_base = H.cap_delta_base = 0;
}

int
heap_start(const heap_config_t *cfg)
{
    assert(!H.enabled);
    assert(cfg->rate >= 1 && cfg->max_depth >= 1 && cfg->max_live >= 1);
    /* alloc_objects, alloc_space, inuse_objects, inuse_space */
    if (collect_init(&H.session, 4, cfg->max_depth, 0, cfg->hidden_file,
                     cfg->labelsets, cfg->max_samples)
        < 0) {
        return -1;
    }
    H.frames = PyMem_RawMalloc(cfg->max_depth * sizeof(ring_frame_t));
    H.live = calloc(1024, sizeof(heap_live_t));
    if (H.frames == NULL || H.live == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    H.live_mask = 1023;
    H.n_live = 0;
    H.max_live = cfg->max_live;
    H.max_depth = cfg->max_depth;
    H.rate = cfg->rate;
    H.k_bytes = profile_string(&H.session.profile, "bytes", 5);
    memset(&H.stats, 0, sizeof(H.stats));
    H.start_realtime_ns = clock_ns(CLOCK_REALTIME);
    H.start_monotonic_ns = clock_ns(CLOCK_MONOTONIC);
    H.delta_realtime_ns = H.start_realtime_ns;
    H.delta_monotonic_ns = H.start_monotonic_ns;
    H.n_delta_base = 0;
    /* The calling thread draws its countdown at this rate with its next
     * allocation; the others keep theirs (heap_count_slow). */
    tctx_heap_t *t = tctx_heap();
    if (t->busy == 0) {
        t->countdown = 0;
        t->drawn_at = 0;
    }
    for (int i = 0; i < HEAP_DOMAINS; i++) {
        H.installed[i] = heap_hook_domain(heap_domains[i]);
        if (H.installed[i] == NULL) {
            (void)heap_unhook();
            PyErr_NoMemory();
            goto fail;
        }
    }
    H.enabled = 1;
    return 0;

fail:
    heap_free_state();
    return -1;
}

int
heap_stop(void)
{
    if (!H.enabled) {
        return 0;
    }
    /* From here frees no longer look at the table, which goes next (its
     * profile's teardown frees Python objects through the hooks). */
    H.enabled = 0;
    H.n_live = 0;
    int stayed = heap_unhook();
    heap_free_state();
    return stayed;
}

void
heap_after_fork_child(void)
{
    (void)heap_stop();
}
