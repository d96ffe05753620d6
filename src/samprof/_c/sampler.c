/* sampler: CPU-time timers and the signal handler.
 *
 * Invariants:
 * - The handler samples only while S.active is set, and stop() waits until
 *   no handler is running before it releases anything a handler reads.
 * - A thread's bit in S.own_timer is set exactly while a perf event or a
 *   POSIX timer of ours is armed for it; ITIMER_PROF signals landing on such
 *   a thread are ignored, so no CPU time is counted twice (Go's rule).
 * - Timers are armed and disarmed only by the thread registry, under
 *   S.registry_lock, never in signal context. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "sampler.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "frames.h"
#include "grow.h"
#include "labels.h"
#include "tctx.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* ITIMER_PROF is checked on the scheduler tick, so it cannot fire faster
 * than CONFIG_HZ (100 to 1000 Hz). It fires at most every 10 ms here and
 * weighs its samples accordingly, so it is right on any kernel. */
#define SAMPLER_ITIMER_MIN_NS 10000000ULL

/* Periods at least this long are within reach of any kernel's tick
 * (CONFIG_HZ is 100 at the least). */
#define SAMPLER_TICK_SAFE_NS 10000000ULL

/* Thread-local state read by the handler. initial-exec, because the
 * general-dynamic model's first access can call malloc (docs/design.md
 * §2). */
#define SAMPLER_TLS __thread __attribute__((tls_model("initial-exec")))
/* (The thread's id, GC flag and samprof-thread flag are the thread
 * context every sampler shares: tctx.h; its labels come from its Python
 * context: labels.h.) */
static SAMPLER_TLS int tls_perf_fd = -1;      /* perf fd whose period is set */
static SAMPLER_TLS uint64_t tls_perf_profile; /* ... in this profile */
static SAMPLER_TLS int64_t
    tls_cpu_accounted; /* thread CPU ns sampled so far */
/* Set while the thread settles its perf carry outside signal context; a
 * perf signal arriving meanwhile leaves the carry alone. */
static SAMPLER_TLS volatile sig_atomic_t tls_settling;
/* The carry (thread CPU ns not yet accounted) when it was last known, and
 * the CLOCK_MONOTONIC instant it was known at. A thread's CPU time grows
 * no faster than the clock, so carry + elapsed bounds the carry now. */
static SAMPLER_TLS int64_t tls_carry_ns;
static SAMPLER_TLS int64_t tls_carry_known_at;

typedef struct {
    int32_t tid;
    sampler_source_t source; /* PERF or TIMER when armed, ITIMER if neither */
    int fd;                  /* perf event, or -1 */
    int timer_id;            /* kernel POSIX timer id, or -1 */
    uint64_t seen;           /* registry generation that last saw it */
} sampler_thread_t;

/* The sampler is process-global because a signal handler receives no
 * context pointer: it can only find its state through a global. */
typedef struct {
    sampler_config_t cfg;
    ring_t ring;                 /* allocated at start; handlers write */
    _Atomic int active;          /* handlers sample only while set */
    _Atomic int in_handler;      /* handlers running now */
    int installed;               /* our handler owns cfg.signum */
    struct sigaction old_action; /* restored by stop */
    _Atomic uint64_t
        *own_timer; /* bitmap by tid; registry writes, handler reads */
    size_t own_timer_bits;
    uint32_t itimer_weight;      /* periods per ITIMER_PROF sample */
    uint64_t itimer_interval_ns; /* its interval */
    int itimer_armed;            /* ITIMER_PROF runs (registry lock) */
    uint64_t profile_id;         /* counts starts; tells TLS of old profiles */
    int itimer_only; /* engine "itimer": every thread relies on it */
    _Atomic int64_t itimer_last_cpu; /* process CPU at the last ITIMER_PROF
                                        sample, for itimer_only weights */
    sampler_counters_t counters;

    /* The registry. Protected by registry_lock. */
    pthread_mutex_t registry_lock;
    sampler_thread_t *threads;
    size_t n_threads, cap_threads;
    htab_t threads_index; /* tid -> index into threads */
    uint64_t generation;
    uint64_t armed[SAMPLER_SRC_COUNT]; /* threads armed per source */
    uint64_t rng;                      /* xorshift state for first expiry */
} sampler_state_t;

static sampler_state_t S = {.registry_lock = PTHREAD_MUTEX_INITIALIZER};

PyObject *sampler_error;

/* ------------------------------------------------------------------------
 * Signal context. Everything between here and the end-of-fence comment runs
 * inside the signal handler: only async-signal-safe calls, no allocation,
 * no locks, no Python API beyond reading memory.
 * ---------------------------------------------------------------------- */

static inline int
sampler_has_own_timer(int32_t tid)
{
    size_t t = (size_t)tid;
    if (t >= S.own_timer_bits) {
        return 0;
    }
    uint64_t w =
        atomic_load_explicit(&S.own_timer[t >> 6], memory_order_relaxed);
    return (int)((w >> (t & 63)) & 1);
}

static inline void
sampler_count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void
sampler_record(sampler_source_t src, uint32_t weight, int32_t tid)
{
    ring_slot_t *slot = ring_claim(&S.ring);
    if (slot == NULL) {
        sampler_count(&S.counters.dropped[SAMPLER_DROP_RING_FULL], 1);
        sampler_count(&S.counters.dropped_periods[SAMPLER_DROP_RING_FULL],
                      weight);
        return;
    }
    uint16_t flags = 0;
    int depth = 0;
    if (tctx_in_gc()) {
        flags |= RING_IN_GC;
    }
    if (tctx_is_samprof_thread()) {
        flags |= RING_COLLECTOR;
    }
    /* A TSS read (pthread_getspecific): the thread's state whether or not
     * it holds the GIL, NULL for threads Python never saw. */
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (ts == NULL) {
        flags |= RING_NO_PYTHON;
    }
    else {
        depth = frames_walk_interrupted(ts, slot->frames,
                                        (int)S.ring.max_depth, &flags);
    }
    slot->tid = tid;
    slot->weight = weight;
    slot->depth = (uint16_t)depth;
    slot->flags = flags;
    slot->labels = labels_of(ts);
    slot->source = (uint8_t)src;
    if (flags & RING_TORN) {
        sampler_count(&S.counters.dropped[SAMPLER_DROP_TORN], 1);
        sampler_count(&S.counters.dropped_periods[SAMPLER_DROP_TORN], weight);
    }
    else {
        sampler_count(&S.counters.signals[src], 1);
        sampler_count(&S.counters.periods[src], weight);
    }
    ring_publish(&S.ring, slot);
}

/* ITIMER_PROF raises a plain SIGPROF: while one is pending, the next
 * expiry is merged into it and lost (seen on a loaded machine: 13% of
 * them). When every thread relies on it, weigh each sample by the process
 * CPU time since the previous one instead, so lost signals cost resolution,
 * not CPU totals. clock_gettime is async-signal-safe. */
static uint32_t
sampler_itimer_sample_weight(void)
{
    if (!S.itimer_only) {
        return S.itimer_weight;
    }
    int64_t now = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    int64_t period = (int64_t)S.cfg.period_ns;
    /* Whole periods since the CPU time already accounted; the remainder
     * carries to the next sample, so the weights add up exactly. */
    int64_t last = atomic_load(&S.itimer_last_cpu);
    int64_t periods;
    do {
        periods = (now - last) / period;
        if (periods <= 0) {
            return 0;
        }
    } while (!atomic_compare_exchange_weak(&S.itimer_last_cpu, &last,
                                           last + periods * period));
    return (uint32_t)periods;
}

/* Sets the CPU already accounted to `accounted` ns, `now` being the
 * thread's CPU time, and remembers the carry left. */
static void
sampler_set_accounted(int64_t accounted, int64_t now)
{
    tls_cpu_accounted = accounted;
    tls_carry_ns = now - accounted;
    tls_carry_known_at = clock_ns(CLOCK_MONOTONIC);
}

/* The perf event counts user-mode time only, so periods that end inside a
 * system call are skipped. Weighing each sample by the thread's whole CPU
 * time (user and system) since the CPU already accounted keeps the totals
 * right: the system time goes to the next user-mode stack, usually the
 * code that made the call. Whole periods, remainder carried. */
static uint32_t
sampler_perf_weight(void)
{
    int64_t now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int64_t period = (int64_t)S.cfg.period_ns;
    int64_t periods = (now - tls_cpu_accounted) / period;
    if (periods < 0) {
        periods = 0;
    }
    sampler_set_accounted(tls_cpu_accounted + periods * period, now);
    return (uint32_t)periods;
}

static void
sampler_on_signal(int signum, siginfo_t *info, void *ucontext)
{
    /* We can only use async-signal-safe functions here. */
    (void)signum;
    (void)ucontext;
    int saved_errno = errno;
    atomic_fetch_add(&S.in_handler, 1);
    if (!atomic_load(&S.active)) {
        goto out;
    }
    int32_t tid = tctx_tid();
    switch (info->si_code) {
    case SI_TIMER:
        if (info->si_value.sival_ptr != (void *)&S) {
            sampler_count(&S.counters.foreign, 1);
            break;
        }
        /* Expirations folded into this signal: the tick-bound timer fired
         * late; weighting by them keeps CPU totals right. */
        sampler_record(
            SAMPLER_SRC_TIMER,
            1 + (uint32_t)(info->si_overrun > 0 ? info->si_overrun : 0), tid);
        break;
    case POLL_HUP:
    case POLL_IN:
        if (tls_perf_fd != info->si_fd || tls_perf_profile != S.profile_id) {
            /* The first period was drawn at random (sampler_arm_perf);
             * from now on use the real one. Once per thread. */
            uint64_t period = S.cfg.period_ns;
            ioctl(info->si_fd, PERF_EVENT_IOC_PERIOD, &period);
            tls_perf_fd = info->si_fd;
            tls_perf_profile = S.profile_id;
            int64_t now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            sampler_set_accounted(now, now);
            sampler_record(SAMPLER_SRC_PERF, 1, tid);
        }
        else if (!tls_settling) {
            sampler_record(SAMPLER_SRC_PERF, sampler_perf_weight(), tid);
        }
        /* The event disabled itself after one overflow; re-arm it. */
        ioctl(info->si_fd, PERF_EVENT_IOC_REFRESH, 1);
        break;
    case SI_KERNEL:
        if (sampler_has_own_timer(tid)) {
            sampler_count(&S.counters.itimer_ignored, 1);
            break;
        }
        sampler_record(SAMPLER_SRC_ITIMER, sampler_itimer_sample_weight(),
                       tid);
        break;
    default:
        sampler_count(&S.counters.foreign, 1);
        break;
    }
out:
    atomic_fetch_sub(&S.in_handler, 1);
    errno = saved_errno;
}

void
sampler_before_fork(void)
{
    pthread_mutex_lock(&S.registry_lock);
}

void
sampler_after_fork_parent(void)
{
    pthread_mutex_unlock(&S.registry_lock);
}

void
sampler_after_fork_child(void)
{
    /* Only async-signal-safe calls: other threads' locks may be held. The
     * child has no POSIX timers and no interval timer; perf descriptors
     * were inherited and are closed. Memory is abandoned, not freed: the
     * child never wrote it, so it costs nothing but address space. */
    tctx_forget_tid();
    /* Held across fork() by sampler_before_fork: fresh in the child. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&S.registry_lock, &fresh, sizeof(fresh));
    if (!S.installed) {
        return;
    }
    atomic_store(&S.active, 0);
    for (size_t i = 0; i < S.n_threads; i++) {
        if (S.threads[i].fd >= 0) {
            close(S.threads[i].fd);
        }
    }
    sigaction(S.cfg.signum, &S.old_action, NULL);
    S.installed = 0;
    S.threads = NULL;
    S.n_threads = S.cap_threads = 0;
    memset(&S.threads_index, 0, sizeof(S.threads_index));
    S.own_timer = NULL;
    S.own_timer_bits = 0;
    memset(&S.ring, 0, sizeof(S.ring));
}

/* ---------------------------- end of signal context ------------------- */

static void
sampler_set_own_timer(int32_t tid, int on)
{
    size_t t = (size_t)tid;
    if (t >= S.own_timer_bits) {
        return;
    }
    uint64_t bit = (uint64_t)1 << (t & 63);
    if (on) {
        atomic_fetch_or(&S.own_timer[t >> 6], bit);
    }
    else {
        atomic_fetch_and(&S.own_timer[t >> 6], ~bit);
    }
}

static uint64_t
sampler_random(void)
{
    uint64_t x = S.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    S.rng = x;
    return x;
}

static int
sampler_open_perf(int32_t tid, int exclude_kernel, uint64_t first_period)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = first_period;
    attr.disabled = 1;
    attr.exclude_kernel = (unsigned)exclude_kernel;
    attr.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &attr, (pid_t)tid, -1, -1,
                        PERF_FLAG_FD_CLOEXEC);
}

/* Arms a perf-event task clock for tid whose overflow signals that thread.
 * Returns 0, or -1 with errno set. */
static int
sampler_arm_perf(sampler_thread_t *th)
{
    /* As for POSIX timers, the first period is drawn in (0, period] so
     * threads that live shorter than a period are sampled in proportion;
     * the handler sets the real period at the first overflow. The kernel
     * runs the task clock's timer at 10 us at the fastest. */
    uint64_t first = 1 + sampler_random() % S.cfg.period_ns;
    if (first < 10000) {
        first = S.cfg.period_ns < 10000 ? S.cfg.period_ns : 10000;
    }
    /* User-mode time only (exclude_kernel): the task clock's timer then
     * raises the signal only when it interrupts user code, so the signal is
     * delivered there and never interrupts a system call. Counting kernel
     * time too made poll(), select() and epoll_wait() fail with EINTR (seen
     * in the reliability tests). The price: CPU spent inside system calls
     * is not sampled by this engine. It is also what perf_event_paranoid 2
     * allows without privileges. */
    int fd = sampler_open_perf(th->tid, 1, first);
    if (fd < 0) {
        return -1;
    }
    struct f_owner_ex owner = {F_OWNER_TID, th->tid};
    if (fcntl(fd, F_SETOWN_EX, &owner) < 0
        || fcntl(fd, F_SETSIG, S.cfg.signum) < 0
        || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC | O_NONBLOCK) < 0
        || ioctl(fd, PERF_EVENT_IOC_RESET, 0) < 0
        || ioctl(fd, PERF_EVENT_IOC_REFRESH, 1) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    th->fd = fd;
    th->source = SAMPLER_SRC_PERF;
    return 0;
}

/* Arms a POSIX timer on tid's CPU clock that signals tid. Raw syscalls:
 * glibc's timer_create has no SIGEV_THREAD_ID for another thread's clock.
 * Returns 0, or -1 with errno set. */
static int
sampler_arm_timer(sampler_thread_t *th)
{
    /* The kernel's encoding of a thread CPU clock: MAKE_THREAD_CPUCLOCK(tid,
     * CPUCLOCK_SCHED). */
    clockid_t clock = (clockid_t)((~(unsigned)th->tid) << 3) | 6;
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = S.cfg.signum;
    sev.sigev_value.sival_ptr = (void *)&S;
    sev.sigev_notify_thread_id = th->tid;
    int timer_id = -1;
    if (syscall(SYS_timer_create, clock, &sev, &timer_id) < 0) {
        return -1;
    }
    /* The first expiry is drawn in (0, period], as Go does, so threads that
     * live shorter than a period are sampled in proportion. */
    uint64_t first = 1 + sampler_random() % S.cfg.period_ns;
    struct itimerspec its;
    its.it_interval = clock_timespec((int64_t)S.cfg.period_ns);
    its.it_value = clock_timespec((int64_t)first);
    if (syscall(SYS_timer_settime, timer_id, 0, &its, NULL) < 0) {
        int saved = errno;
        syscall(SYS_timer_delete, timer_id);
        errno = saved;
        return -1;
    }
    th->timer_id = timer_id;
    th->source = SAMPLER_SRC_TIMER;
    return 0;
}

/* Starts the process-wide ITIMER_PROF, once, for threads that have no
 * timer of their own. Only when needed: its signal goes to whichever
 * thread does not block SIGPROF, and when the running thread does (a
 * library's worker, or any thread inside our handler) that can be a thread
 * blocked in poll() or nanosleep(), which then fails with EINTR. Seen with
 * engine="timer" when it was always armed. ITIMER_PROF only raises
 * SIGPROF, so with another signal there is no such fallback. */
static void
sampler_arm_itimer_unlocked(void)
{
    if (S.itimer_armed || S.cfg.signum != SIGPROF || S.cfg.user_only) {
        return;
    }
    struct itimerval it;
    struct timespec ts = clock_timespec((int64_t)S.itimer_interval_ns);
    it.it_interval.tv_sec = ts.tv_sec;
    it.it_interval.tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
    it.it_value = it.it_interval;
    if (setitimer(ITIMER_PROF, &it, NULL) == 0) {
        S.itimer_armed = 1;
    }
}

static void
sampler_arm_unlocked(sampler_thread_t *th)
{
    th->fd = -1;
    th->timer_id = -1;
    th->source = SAMPLER_SRC_ITIMER;
    sampler_engine_t e = S.cfg.engine;
    /* A perf event costs its thread something at every context switch
     * (measured: +5% CPU at 100 Hz for threads that block and wake
     * thousands of times a second), a POSIX CPU timer nothing until the
     * tick. Every kernel ticks at 100 Hz or more, so at or below that rate
     * "auto" prefers the timer; above it, perf, which the tick cannot
     * limit. */
    int timer_first =
        e == SAMPLER_ENGINE_AUTO && S.cfg.period_ns >= SAMPLER_TICK_SAFE_NS;
    if (timer_first && sampler_arm_timer(th) == 0) {
        goto armed;
    }
    if (e == SAMPLER_ENGINE_AUTO || e == SAMPLER_ENGINE_PERF) {
        if (sampler_arm_perf(th) == 0) {
            goto armed;
        }
    }
    if (!timer_first
        && (e == SAMPLER_ENGINE_AUTO || e == SAMPLER_ENGINE_TIMER)) {
        if (sampler_arm_timer(th) == 0) {
            goto armed;
        }
    }
    /* Neither: the process-wide ITIMER_PROF covers this thread. */
    S.armed[SAMPLER_SRC_ITIMER]++;
    sampler_arm_itimer_unlocked();
    return;
armed:
    S.armed[th->source]++;
    sampler_set_own_timer(th->tid, 1);
}

static void
sampler_disarm_unlocked(sampler_thread_t *th)
{
    if (th->source != SAMPLER_SRC_ITIMER) {
        sampler_set_own_timer(th->tid, 0);
    }
    if (th->fd >= 0) {
        close(th->fd);
        th->fd = -1;
    }
    if (th->timer_id >= 0) {
        syscall(SYS_timer_delete, th->timer_id);
        th->timer_id = -1;
    }
}

/* Marks tid as seen in generation gen, arming it if it is new.
 * Returns 0, or -1 when out of memory. Caller holds the registry lock. */
static int
sampler_register_unlocked(int32_t tid, uint64_t gen)
{
    uint64_t idx;
    if (htab_get(&S.threads_index, &tid, sizeof(tid), &idx)) {
        S.threads[idx].seen = gen;
        return 0;
    }
    if (GROW(S.threads, S.cap_threads, S.n_threads + 1) < 0) {
        return -1;
    }
    if (htab_put(&S.threads_index, &tid, sizeof(tid), S.n_threads) < 0) {
        return -1;
    }
    sampler_thread_t *th = &S.threads[S.n_threads++];
    th->tid = tid;
    th->seen = gen;
    sampler_arm_unlocked(th);
    return 0;
}

void
sampler_arm_this_thread(void)
{
    pthread_mutex_lock(&S.registry_lock);
    if (S.installed) {
        /* Seen in the current generation: the next scan keeps it. */
        (void)sampler_register_unlocked(tctx_tid(), S.generation);
    }
    pthread_mutex_unlock(&S.registry_lock);
}

void
sampler_scan_threads(void)
{
    pthread_mutex_lock(&S.registry_lock);
    if (!S.installed) {
        goto done;
    }
    DIR *dir = opendir("/proc/self/task");
    if (dir == NULL) {
        goto done;
    }
    uint64_t gen = ++S.generation;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] < '0' || ent->d_name[0] > '9') {
            continue;
        }
        int32_t tid = (int32_t)strtol(ent->d_name, NULL, 10);
        if (sampler_register_unlocked(tid, gen) < 0) {
            break;
        }
    }
    closedir(dir);
    /* Threads gone from /proc exited: free their timers before the kernel
     * can hand their tid to a new thread. */
    for (size_t i = 0; i < S.n_threads;) {
        sampler_thread_t *th = &S.threads[i];
        if (th->seen == gen) {
            i++;
            continue;
        }
        sampler_disarm_unlocked(th);
        htab_del(&S.threads_index, &th->tid, sizeof(th->tid));
        S.n_threads--;
        if (i != S.n_threads) {
            S.threads[i] = S.threads[S.n_threads];
            htab_put(&S.threads_index, &S.threads[i].tid,
                     sizeof(S.threads[i].tid), i);
        }
    }
done:
    pthread_mutex_unlock(&S.registry_lock);
}

static int
sampler_signal_allowed(int signum)
{
    return signum == SIGPROF || signum == SIGVTALRM || signum == SIGUSR1
           || signum == SIGUSR2 || (signum >= SIGRTMIN && signum <= SIGRTMAX);
}

static size_t
sampler_pid_max(void)
{
    size_t pid_max = 4194304; /* the kernel's ceiling (PID_MAX_LIMIT) */
    FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
    if (f != NULL) {
        unsigned long v;
        if (fscanf(f, "%lu", &v) == 1 && v > 0 && v <= 4194304) {
            pid_max = v;
        }
        fclose(f);
    }
    return pid_max + 1;
}

/* Makes every call the handler makes into another library once, here,
 * outside signal context. Our own module is bound at load (-z now), but a
 * libpython built with --enable-shared binds its own calls lazily:
 * PyGILState_GetThisThreadState reaches PyThread_tss_is_created and
 * pthread_getspecific through libpython's PLT. The first such call would
 * run the dynamic linker inside the handler, and its trampoline
 * (_dl_runtime_resolve_xsavec) saves the whole vector register state on the
 * stack: kilobytes on AVX-512 machines, more than a small alternate signal
 * stack has left (a crash seen in
 * tests/reliability/test_reliability_deep.py). Binding is process-wide, so
 * once is enough. */
static void
sampler_bind_handler_calls(void)
{
    struct timespec ts;
    (void)PyGILState_GetThisThreadState();
    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    (void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    (void)tctx_tid();
}

/* Whether signum may carry samples: one of the signals meant for it and
 * without a handler of someone else's. Its current action comes back in
 * old. 0, or -1 with an exception set. */
static int
sampler_check_signal(int signum, struct sigaction *old)
{
    if (!sampler_signal_allowed(signum)) {
        PyErr_Format(PyExc_ValueError,
                     "signal %d cannot be used for sampling; use SIGPROF, "
                     "SIGVTALRM, SIGUSR1, SIGUSR2 or a real-time signal "
                     "(SIGRTMIN..SIGRTMAX)",
                     signum);
        return -1;
    }
    if (sigaction(signum, NULL, old) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    int has_handler =
        (old->sa_flags & SA_SIGINFO)
            ? old->sa_sigaction != NULL
            : (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN);
    if (has_handler) {
        PyErr_Format(sampler_error,
                     "signal %d (%s) already has a handler installed by "
                     "someone else; choose another signal with "
                     "signal=signal.SIGRTMIN + N (or SIGUSR1/SIGUSR2), or "
                     "--signal on the command line",
                     signum, strsignal(signum));
        return -1;
    }
    return 0;
}

/* A forced perf-event engine must exist: probes it on this thread. */
static int
sampler_probe_perf(uint64_t period_ns)
{
    int fd = sampler_open_perf(tctx_tid(), 1, period_ns);
    if (fd < 0) {
        PyErr_Format(sampler_error,
                     "the perf-event engine is unavailable: "
                     "perf_event_open failed (%s); check "
                     "/proc/sys/kernel/perf_event_paranoid or use "
                     "engine='timer'",
                     strerror(errno));
        return -1;
    }
    close(fd);
    return 0;
}

/* The process-wide timer fires no faster than SAMPLER_ITIMER_MIN_NS: its
 * interval is a whole number of periods, and each of its samples weighs
 * that many. */
static void
sampler_setup_itimer(const sampler_config_t *cfg)
{
    uint64_t interval = cfg->period_ns;
    if (interval < SAMPLER_ITIMER_MIN_NS) {
        interval = SAMPLER_ITIMER_MIN_NS;
    }
    S.itimer_weight =
        (uint32_t)((interval + cfg->period_ns / 2) / cfg->period_ns);
    S.itimer_interval_ns = S.itimer_weight * cfg->period_ns;
    S.itimer_armed = 0;
    S.itimer_only = cfg->engine == SAMPLER_ENGINE_ITIMER;
    atomic_store(&S.itimer_last_cpu, clock_ns(CLOCK_PROCESS_CPUTIME_ID));
}

int
sampler_start(const sampler_config_t *cfg)
{
    if (S.installed) {
        PyErr_SetString(sampler_error, "a profile is already running");
        return -1;
    }
    struct sigaction old;
    if (sampler_check_signal(cfg->signum, &old) < 0) {
        return -1;
    }

    sampler_bind_handler_calls();
    S.cfg = *cfg;
    memset(&S.counters, 0, sizeof(S.counters));
    memset(S.armed, 0, sizeof(S.armed));
    S.rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL | 1;
    if (ring_init(&S.ring, cfg->ring_slots, cfg->max_depth) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    S.own_timer_bits = sampler_pid_max();
    S.own_timer = calloc((S.own_timer_bits + 63) / 64, sizeof(uint64_t));
    if (S.own_timer == NULL) {
        PyErr_NoMemory();
        goto fail_ring;
    }
    if (htab_init(&S.threads_index, 64) < 0) {
        PyErr_NoMemory();
        goto fail_own_timer;
    }
    if (cfg->engine == SAMPLER_ENGINE_PERF
        && sampler_probe_perf(cfg->period_ns) < 0) {
        goto fail_index;
    }
    sampler_setup_itimer(cfg);
    S.profile_id++;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = sampler_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    S.old_action = old;
    atomic_store(&S.active, 1);
    if (sigaction(cfg->signum, &sa, NULL) < 0) {
        atomic_store(&S.active, 0);
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail_index;
    }
    S.installed = 1;

    sampler_scan_threads();

    if (cfg->engine == SAMPLER_ENGINE_ITIMER) {
        pthread_mutex_lock(&S.registry_lock);
        sampler_arm_itimer_unlocked();
        pthread_mutex_unlock(&S.registry_lock);
    }
    return 0;

fail_index:
    htab_free(&S.threads_index);
fail_own_timer:
    free(S.own_timer);
    S.own_timer = NULL;
fail_ring:
    ring_free(&S.ring);
    return -1;
}

static void
sampler_wait_handlers(void)
{
    while (atomic_load(&S.in_handler) != 0) {
        sched_yield();
    }
}

void
sampler_stop(void)
{
    if (!S.installed) {
        return;
    }
    atomic_store(&S.active, 0);
    sampler_wait_handlers();
    if (S.itimer_armed) {
        struct itimerval zero;
        memset(&zero, 0, sizeof(zero));
        setitimer(ITIMER_PROF, &zero, NULL);
        S.itimer_armed = 0;
    }
    pthread_mutex_lock(&S.registry_lock);
    for (size_t i = 0; i < S.n_threads; i++) {
        sampler_disarm_unlocked(&S.threads[i]);
    }
    free(S.threads);
    S.threads = NULL;
    S.n_threads = S.cap_threads = 0;
    htab_free(&S.threads_index);
    S.installed = 0;
    pthread_mutex_unlock(&S.registry_lock);
    /* Signals already generated may still be pending in some thread.
     * Setting SIG_IGN discards them (POSIX), so restoring SIG_DFL cannot
     * kill the process with a late SIGPROF. */
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(S.cfg.signum, &ign, NULL);
    sigaction(S.cfg.signum, &S.old_action, NULL);
    sampler_wait_handlers();
    free(S.own_timer);
    S.own_timer = NULL;
    S.own_timer_bits = 0;
}

void
sampler_release(void)
{
    ring_free(&S.ring);
}

ring_t *
sampler_ring(void)
{
    return &S.ring;
}

const sampler_counters_t *
sampler_counters(void)
{
    return &S.counters;
}

void
sampler_threads_by_source(uint64_t out[SAMPLER_SRC_COUNT])
{
    memcpy(out, S.armed, sizeof(S.armed));
}

int
sampler_thread_armed(int32_t tid)
{
    return S.own_timer != NULL && sampler_has_own_timer(tid);
}

/* With the perf engine a sample carries the thread's CPU time since the
 * previous one, so the time between the last sample before a boundary and
 * the boundary goes to the first stack after it. Where kernel time runs
 * just before the boundary (the page faults of an allocation burst before
 * a collection) that carry is long, because the user-mode-only event
 * cannot fire in the kernel: <gc> showed 2-3 pp more than gc.callbacks
 * measured, where POSIX timers showed none. Settling the carry at the
 * boundary, as a sample of the stack the thread has there, keeps each side
 * its own time. Whole periods only, as in the handler; called under the
 * GIL on the thread itself. Cost: a CLOCK_MONOTONIC read per boundary
 * and per perf sample (vDSO, no system call; sampler_set_accounted), and
 * the thread's CPU clock (a system call) only when a period may have
 * ended (a gc.collect(0) loop: +0.035 us per boundary; without the gate
 * it was +0.8 us). */
static void
sampler_settle_perf_carry(void)
{
    if (tls_perf_profile != S.profile_id || tls_perf_fd < 0) {
        return;
    }
    /* Collections come far more often than periods end: when the carry
     * cannot have reached a period yet, there is nothing to settle, and
     * the monotonic clock (no system call) says so without reading the
     * thread's CPU clock (a system call). */
    if (tls_carry_ns + (clock_ns(CLOCK_MONOTONIC) - tls_carry_known_at)
        < (int64_t)S.cfg.period_ns) {
        return;
    }
    /* The handlers' protocol: stop() frees nothing while one runs. */
    atomic_fetch_add(&S.in_handler, 1);
    if (atomic_load(&S.active)) {
        tls_settling = 1;
        atomic_signal_fence(memory_order_seq_cst);
        uint32_t weight = sampler_perf_weight();
        if (weight > 0) {
            sampler_record(SAMPLER_SRC_PERF, weight, tctx_tid());
        }
        atomic_signal_fence(memory_order_seq_cst);
        tls_settling = 0;
    }
    atomic_fetch_sub(&S.in_handler, 1);
}

void
sampler_gc_boundary(void)
{
    sampler_settle_perf_carry();
}
