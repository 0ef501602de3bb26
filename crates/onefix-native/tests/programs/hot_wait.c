// A known hot line and a known blocking line, for the native sampler's live tests.
// Built by the tests with gcc -O2 -g (no frame pointers: Debian's default).
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile double sink;
static int peer_fd;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) double hot(long n) {
    double x = 0;
    for (long i = 0; i < n; i++) x += (double)i * 0.5 / (1.0 + (double)(i & 7)); // HOT
    return x;
}

// Burns `secs` of CPU time (not wall time: the machine may be busy).
__attribute__((noinline)) void compute(double secs) {
    double start = cpu_seconds();
    while (cpu_seconds() - start < secs)
        sink = hot(200000);
}

__attribute__((noinline)) void wait_for_reply(int fd) {
    char buf[1];
    recv(fd, buf, 1, 0); // WAIT
}

__attribute__((noinline)) void *slow_peer(void *arg) {
    (void)arg;
    struct timespec d = {0, 600 * 1000 * 1000};
    nanosleep(&d, NULL); // SLEEP
    send(peer_fd, "x", 1, 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        // The work happens in a child process (followed through inherit).
        pid_t child = fork();
        if (child == 0) {
            compute(0.4);
            _exit(0);
        }
        waitpid(child, NULL, 0);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "forever") == 0) {
        // Runs until killed: for attaching.
        for (;;)
            compute(1.0);
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 1;
    peer_fd = sv[1];
    pthread_t th;
    pthread_create(&th, NULL, slow_peer, NULL);
    wait_for_reply(sv[0]);
    compute(0.6);
    pthread_join(th, NULL);
    return 0;
}
