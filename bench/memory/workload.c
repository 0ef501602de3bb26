// Allocation benchmark workload (native): a stream of small and medium allocations, one in ten
// kept (retention), the rest freed at once (churn). Prints {"work_s": CPU seconds of the loop}.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static char *make(size_t n, int i) {
    char *p = malloc(n);
    memset(p, i, n < 64 ? n : 64);
    return p;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    char **kept = malloc(sizeof(char *) * (n / 10 + 1));
    long nk = 0;
    unsigned x = 12345;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        size_t size = 16 + (x >> 16) % 240;
        char *p = make(size, (int)i);
        if (i % 10 == 0) kept[nk++] = p;
        else free(p);
    }
    printf("{\"work_s\": %.6f, \"kept\": %ld}\n", now() - t0, nk);
    return 0;
}
