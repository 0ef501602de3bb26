/* Native target for the dump benchmark: N threads (half computing, half blocked on a mutex the
 * main thread holds) and a ticker measuring the longest gap between its 1 ms ticks, printed
 * (in ms) and reset at each SIGUSR1. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static volatile double longest;
static volatile sig_atomic_t asked;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *compute(void *arg) {
    volatile unsigned long x = 0;
    for (;;) {
        for (unsigned long i = 0; i < 100000; i++) x += i * i;
        usleep(1000);
    }
    return arg;
}

static void *wait_gate(void *arg) {
    pthread_mutex_lock(&gate);
    pthread_mutex_unlock(&gate);
    return arg;
}

static void *tick(void *arg) {
    double last = now();
    for (;;) {
        usleep(1000);
        double t = now();
        if (t - last > longest) longest = t - last;
        last = t;
        if (asked) {
            printf("%.1f\n", longest * 1000);
            fflush(stdout);
            longest = 0;
            asked = 0;
        }
    }
    return arg;
}

static void on_usr1(int sig) { (void)sig; asked = 1; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50;
    pthread_mutex_lock(&gate);
    signal(SIGUSR1, on_usr1);
    pthread_t t;
    for (int i = 0; i < n; i++) pthread_create(&t, NULL, i % 2 ? compute : wait_gate, NULL);
    pthread_create(&t, NULL, tick, NULL);
    puts("ready");
    fflush(stdout);
    for (;;) pause();
}
