// Fixed CPU work with a few call levels, for the overhead benchmark: prints its own CPU time.
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

volatile double sink;

__attribute__((noipa)) double leaf(long n) {
    double x = 0;
    for (long i = 0; i < n; i++) x += (double)i * 0.5 / (1.0 + (double)(i & 7));
    return x;
}

__attribute__((noipa)) double middle(long n) { return leaf(n) + 1; }

__attribute__((noipa)) void outer(long rounds) {
    for (long r = 0; r < rounds; r++) sink = middle(100000);
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    outer(rounds);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%.4f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    return 0;
}
