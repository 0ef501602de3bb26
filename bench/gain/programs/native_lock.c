/* native_lock: four C worker threads each parse their requests on their own, then update a
 * shared table under one pthread mutex, rebuilding the whole table while they hold it.
 *
 *   native_lock slow|fixed
 *
 * slow:  the table is rebuilt under the lock on every update (the culprit: the rebuild's loop).
 * fixed: the rebuild is switched off (the culprit line a no-op); the parsing, the locking and
 *        the one-entry update are the same.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define THREADS 4
#define UPDATES 2500 /* per thread */
#define SIZE 4096

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static double table[SIZE];
static int slow;
static double deadline;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Each request's own work, outside the lock. */
static double parse_request(int seed) {
    double x = seed;
    for (int i = 0; i < 40000; i++) x = x * 1.0000001 + (i & 7);
    return x;
}

/* Rebuilds the whole table: the work the lock serializes. */
static void rebuild(double v) {
    for (int k = 0; k < 60 && slow; k++)
        for (int i = 0; i < SIZE; i++) table[i] = table[i] * 0.5 + v / (i + 1); /* # CULPRIT */
}

static void *worker(void *arg) {
    int id = (int)(long)arg;
    for (int n = 0; n < UPDATES && now() < deadline; n++) {
        double v = parse_request(id * 100000 + n);
        pthread_mutex_lock(&table_lock);
        rebuild(v);
        table[n % SIZE] += v;
        pthread_mutex_unlock(&table_lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "slow") != 0 && strcmp(argv[1], "fixed") != 0)) {
        fprintf(stderr, "usage: native_lock slow|fixed\n");
        return 2;
    }
    slow = strcmp(argv[1], "slow") == 0;
    deadline = now() + 30;
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("native_lock %s: %.3f\n", argv[1], table[7]);
    return 0;
}
