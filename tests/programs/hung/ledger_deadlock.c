/* Two threads take the same two pthread mutexes in opposite orders and deadlock (onefix dump
 * finds the cycle from the mutexes' owner fields). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t ledger = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t journal = PTHREAD_MUTEX_INITIALIZER;

static void *post(void *arg) {
    pthread_mutex_lock(&ledger);
    usleep(200000);
    pthread_mutex_lock(&journal); /* WAITS-FOR-JOURNAL */
    pthread_mutex_unlock(&journal);
    pthread_mutex_unlock(&ledger);
    return arg;
}

static void *reconcile(void *arg) {
    pthread_mutex_lock(&journal);
    usleep(200000);
    pthread_mutex_lock(&ledger); /* WAITS-FOR-LEDGER */
    pthread_mutex_unlock(&ledger);
    pthread_mutex_unlock(&journal);
    return arg;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, post, NULL);
    pthread_create(&b, NULL, reconcile, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    puts("done");
    return 0;
}
