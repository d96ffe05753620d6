/* Test helper: native threads that Python never sees. */
#include <pthread.h>
#include <time.h>

static double
thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *
burn_main(void *arg)
{
    double seconds = *(double *)arg;
    volatile unsigned long x = 0;
    double start = thread_cpu();
    while (thread_cpu() - start < seconds) {
        for (int i = 0; i < 100000; i++) {
            x += (unsigned long)i * 2654435761u;
        }
    }
    return NULL;
}

/* Burns `seconds` of CPU in a new pthread without a Python thread state
 * and waits for it. Returns 0 on success. */
int
burn_in_native_thread(double seconds)
{
    pthread_t t;
    if (pthread_create(&t, NULL, burn_main, &seconds) != 0) {
        return -1;
    }
    return pthread_join(t, NULL);
}
