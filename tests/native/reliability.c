/* Test helper for the reliability tests: signal handlers and alternate
 * signal stacks that "another library" installed, written in C so that they
 * behave like real native code (no Python callback in signal context). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Signals received by the handlers below. Written in signal context. */
static _Atomic long handler_hits;

/* A plain (sa_handler) handler that counts. Exported so that tests can
 * install it themselves through ctypes and libc's sigaction. */
void
rel_counting_handler(int signum)
{
    (void)signum;
    atomic_fetch_add(&handler_hits, 1);
}

/* An SA_SIGINFO handler that counts. */
static void
rel_counting_action(int signum, siginfo_t *info, void *ucontext)
{
    (void)signum;
    (void)info;
    (void)ucontext;
    atomic_fetch_add(&handler_hits, 1);
}

long
rel_handler_hits(void)
{
    return atomic_load(&handler_hits);
}

/* Installs rel_counting_action for signum with SA_SIGINFO | SA_RESTART, as
 * a native library would. Returns 0, or -1 with errno set. */
int
rel_install_siginfo_handler(int signum)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = rel_counting_action;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(signum, &sa, NULL);
}

/* 1 when signum's current handler is one of ours, 0 when not, -1 on
 * error. */
int
rel_handler_is_ours(int signum)
{
    struct sigaction old;
    if (sigaction(signum, NULL, &old) < 0) {
        return -1;
    }
    if (old.sa_flags & SA_SIGINFO) {
        return old.sa_sigaction == rel_counting_action;
    }
    return old.sa_handler == rel_counting_handler;
}

/* Resets signum to SIG_DFL. */
int
rel_reset_handler(int signum)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    return sigaction(signum, &sa, NULL);
}

/* ------------------------------------------------------------------------
 * A small alternate signal stack, and a handler that runs on it for a
 * while, so that a profiler's signal can land while the thread executes on
 * that tiny stack (the kernel then builds the profiler's signal frame on
 * the alternate stack too, whatever the profiler's own SA_ONSTACK says).
 * ---------------------------------------------------------------------- */

static double
rel_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How long the on-stack handler burns CPU; set before raising. */
static double altstack_burn_seconds;
/* 1 when the handler found itself on the alternate stack. */
static volatile sig_atomic_t altstack_was_on_stack;

static void
rel_altstack_handler(int signum)
{
    (void)signum;
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_ONSTACK)) {
        altstack_was_on_stack = 1;
    }
    volatile unsigned long x = 0;
    double start = rel_thread_cpu();
    while (rel_thread_cpu() - start < altstack_burn_seconds) {
        for (int i = 0; i < 10000; i++) {
            x += (unsigned long)i * 2654435761u;
        }
    }
}

/* The control for samprof's signal: a trivial handler that a CPU-time
 * timer of the thread's own raises while the library handler runs, so that
 * it nests on the alternate stack exactly as samprof's would. What it uses
 * there is the kernel's frame for the nested signal plus a handler that
 * does nothing; what samprof uses beyond that is its handler's own. */
static _Atomic long nested_hits;

static void
rel_nested_probe(int signum, siginfo_t *info, void *ucontext)
{
    (void)signum;
    (void)info;
    (void)ucontext;
    atomic_fetch_add(&nested_hits, 1);
}

long
rel_nested_hits(void)
{
    return atomic_load(&nested_hits);
}

/* The painted pattern: bytes still equal to it were never written. */
#define REL_PAINT 0xA5

/* On the calling thread: maps an alternate signal stack of `size` bytes
 * (a multiple of the page size) with an inaccessible guard page below it,
 * so that overflowing it faults instead of corrupting memory; paints it;
 * installs an SA_ONSTACK handler for signum that burns `seconds` of CPU on
 * that stack; raises signum `times` times; then restores the previous
 * handler and alternate stack and unmaps. With nest_signum > 0, a timer
 * raises nest_signum on this thread every nest_period_ns while it runs,
 * handled by rel_nested_probe on whatever stack the thread is on. The timer
 * is on CLOCK_MONOTONIC, a high-resolution timer, not on the thread's CPU
 * clock, whose timers fire at kernel ticks: 125 nested signals in 0.5 s at
 * any rate, too few to land surely at the handler's deepest point (under
 * ASan, 2 in 5 runs missed it by 2,240 bytes).
 * Stores in *used the bytes of the alternate stack that were ever written,
 * counted from its top (the deepest point any frame reached). Returns the
 * number of times the handler ran on the alternate stack, or -1 with errno
 * set. signum and nest_signum must not be blocked and must be ones nobody
 * else uses. */
int
rel_burn_on_altstack(int signum, size_t size, double seconds, int times,
                     int nest_signum, long nest_period_ns, size_t *used)
{
    long page = sysconf(_SC_PAGESIZE);
    if (size == 0 || size % (size_t)page != 0) {
        errno = EINVAL;
        return -1;
    }
    uint8_t *map = mmap(NULL, size + (size_t)page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        return -1;
    }
    if (mprotect(map, (size_t)page, PROT_NONE) < 0) {
        munmap(map, size + (size_t)page);
        return -1;
    }
    uint8_t *stack = map + page;
    memset(stack, REL_PAINT, size);
    /* Called once here so that nothing the handler calls is bound lazily
     * on the alternate stack (the dynamic linker's frame is large). The
     * library is linked with -z now as well. */
    (void)rel_thread_cpu();
    stack_t ss, old_ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = stack;
    ss.ss_size = size;
    ss.ss_flags = 0;
    struct sigaction sa, old_sa, nest_sa, old_nest_sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = rel_altstack_handler;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    int ran = 0;
    timer_t timer;
    int have_timer = 0;
    if (sigaltstack(&ss, &old_ss) < 0) {
        munmap(map, size + (size_t)page);
        return -1;
    }
    if (sigaction(signum, &sa, &old_sa) < 0) {
        int saved = errno;
        sigaltstack(&old_ss, NULL);
        munmap(map, size + (size_t)page);
        errno = saved;
        return -1;
    }
    if (nest_signum > 0) {
        memset(&nest_sa, 0, sizeof(nest_sa));
        nest_sa.sa_sigaction = rel_nested_probe;
        nest_sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&nest_sa.sa_mask);
        struct sigevent sev;
        memset(&sev, 0, sizeof(sev));
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = nest_signum;
        sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
        struct itimerspec its;
        memset(&its, 0, sizeof(its));
        its.it_interval.tv_sec = nest_period_ns / 1000000000L;
        its.it_interval.tv_nsec = nest_period_ns % 1000000000L;
        its.it_value = its.it_interval;
        if (sigaction(nest_signum, &nest_sa, &old_nest_sa) < 0
            || timer_create(CLOCK_MONOTONIC, &sev, &timer) < 0) {
            int saved = errno;
            sigaction(signum, &old_sa, NULL);
            sigaltstack(&old_ss, NULL);
            munmap(map, size + (size_t)page);
            errno = saved;
            return -1;
        }
        have_timer = 1;
        timer_settime(timer, 0, &its, NULL);
    }
    altstack_burn_seconds = seconds;
    for (int i = 0; i < times; i++) {
        altstack_was_on_stack = 0;
        /* Thread-directed: the handler runs on this thread, before
         * raise returns. */
        raise(signum);
        ran += altstack_was_on_stack ? 1 : 0;
    }
    if (have_timer) {
        timer_delete(timer);
        sigaction(nest_signum, &old_nest_sa, NULL);
    }
    sigaction(signum, &old_sa, NULL);
    /* A thread that had no alternate stack gets SS_DISABLE back. */
    if (old_ss.ss_flags & SS_DISABLE) {
        stack_t off;
        memset(&off, 0, sizeof(off));
        off.ss_flags = SS_DISABLE;
        sigaltstack(&off, NULL);
    }
    else {
        sigaltstack(&old_ss, NULL);
    }
    size_t untouched = 0;
    while (untouched < size && stack[untouched] == REL_PAINT) {
        untouched++;
    }
    *used = size - untouched;
    munmap(map, size + (size_t)page);
    return ran;
}

/* The kernel's minimum signal stack size for this CPU (AT_MINSIGSTKSZ),
 * or MINSIGSTKSZ where the kernel does not say. */
long
rel_min_sigstksz(void)
{
#ifdef _SC_MINSIGSTKSZ
    long v = sysconf(_SC_MINSIGSTKSZ);
    if (v > 0) {
        return v;
    }
#endif
    return MINSIGSTKSZ;
}

/* Burns `seconds` of the calling thread's CPU time in C (called through
 * ctypes, which releases the GIL); returns the CPU time it took. */
double
rel_burn_cpu(double seconds)
{
    volatile unsigned long x = 0;
    double start = rel_thread_cpu();
    double now = start;
    /* Reading the thread CPU clock is a system call: read it rarely, so
     * that nearly all the time burned is user time (perf events may be
     * limited to user time, see perf_event_paranoid). */
    while (now - start < seconds) {
        for (int i = 0; i < 100000; i++) {
            x += (unsigned long)i * 2654435761u;
        }
        now = rel_thread_cpu();
    }
    return now - start;
}
