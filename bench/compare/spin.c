/* A native command of a fixed amount of work: argv[1] million multiply-adds. */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = (long)(atof(argc > 1 ? argv[1] : "1") * 1e6);
    volatile unsigned long acc = 0;
    for (long i = 0; i < n; i++) acc += (unsigned long)i * i;
    printf("%lu\n", acc);
    return 0;
}
