/* signal_floor.c: what one perf-event signal costs with an empty handler.
 *
 * samprof's perf engine asks the kernel for a per-thread task-clock event
 * whose overflow raises a signal on the thread; the cost per sample that the
 * benchmarks report includes the kernel's part (the overflow, delivering the
 * signal, sigreturn) and samprof's part (the handler's stack walk and the
 * collector). This program measures the kernel's part alone: the same event,
 * armed and routed the way samprof's sampler.c does it (one overflow at a
 * time, re-armed from the handler with PERF_EVENT_IOC_REFRESH), to a handler
 * that only counts and re-arms.
 *
 * Usage: signal_floor PERIOD_NS ITERATIONS
 * PERIOD_NS 0 runs without the event. Prints one JSON object with the
 * thread's CPU time over the loop and the number of signals handled.
 * Exits 1 (with a message on stderr) if the event cannot be opened.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Written by the handler, read by main after the loop. */
static volatile sig_atomic_t signals;

/* Runs in signal context: ioctl is async-signal-safe. */
static void
on_signal(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)context;
    signals++;
    ioctl(info->si_fd, PERF_EVENT_IOC_REFRESH, 1);
}

static double
thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
open_task_clock(long period_ns)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(SIGPROF, &sa, NULL) != 0) {
        perror("sigaction");
        return -1;
    }
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof(attr);
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (unsigned long long)period_ns;
    attr.exclude_hv = 1;
    attr.disabled = 1;
    /* Kernel time counts too where perf_event_paranoid allows it, as in
     * samprof; otherwise user time only. */
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        attr.exclude_kernel = 1;
        fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    if (fd < 0) {
        perror("perf_event_open");
        return -1;
    }
    struct f_owner_ex owner = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
    if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, SIGPROF) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC | O_NONBLOCK) != 0 ||
        ioctl(fd, PERF_EVENT_IOC_REFRESH, 1) != 0) {
        perror("routing the perf event");
        return -1;
    }
    return fd;
}

int
main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PERIOD_NS ITERATIONS\n", argv[0]);
        return 2;
    }
    long period_ns = atol(argv[1]);
    long iterations = atol(argv[2]);
    if (period_ns > 0 && open_task_clock(period_ns) < 0) {
        return 1;
    }
    double t0 = thread_cpu_seconds();
    volatile long x = 0;
    for (long i = 0; i < iterations; i++) {
        x += i;
    }
    double t1 = thread_cpu_seconds();
    printf("{\"cpu_s\": %.6f, \"signals\": %ld}\n", t1 - t0, (long)signals);
    return 0;
}
