// Known allocation sequences for the agent's tests. Each mode prints nothing and exits 0.
//   retain: keep_blocks keeps 8 MiB; churn_blocks allocates 80 MiB and frees each block at once.
//   threads: the same from 4 threads at a time.
//   fork: the parent keeps 8 MiB, a forked child keeps 16 MiB and exits; both are reported.
//   exec: keeps 8 MiB, then execs itself in `retain` mode.
//   forever: allocates and frees in a loop until killed (bounded at 60 s).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
static void *kept[1 << 16];
static int nkept;

__attribute__((noinline)) void keep_blocks(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(BLOCK);
        memset(p, 1, BLOCK);
        kept[__atomic_fetch_add(&nkept, 1, __ATOMIC_RELAXED)] = p;
    }
}

__attribute__((noinline)) void churn_blocks(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(BLOCK);
        memset(p, 2, BLOCK);
        free(p);
    }
}

__attribute__((noinline)) void keep_in_child(int n) {
    keep_blocks(n);
}

static void *worker(void *arg) {
    (void)arg;
    keep_blocks(500);
    churn_blocks(5000);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "retain";
    if (!strcmp(mode, "retain")) {
        keep_blocks(2000);
        churn_blocks(20000);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(mode, "fork")) {
        keep_blocks(2000);
        pid_t child = fork();
        if (child == 0) {
            keep_in_child(4000);
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
    } else if (!strcmp(mode, "exec")) {
        keep_blocks(2000);
        execl("/proc/self/exe", argv[0], "retain", (char *)NULL);
        return 1;
    } else if (!strcmp(mode, "forever")) {
        time_t end = time(NULL) + 60;
        while (time(NULL) < end) {
            keep_blocks(1);
            churn_blocks(10);
            if (nkept >= (1 << 16) - 1) nkept = 0;
        }
    }
    return 0;
}
