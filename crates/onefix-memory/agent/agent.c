// onefix's allocation agent: preloaded into the target (LD_PRELOAD) by `onefix record --memory`.
//
// It interposes the C allocator (malloc, calloc, realloc, free, posix_memalign, aligned_alloc,
// memalign, valloc, pvalloc) and anonymous mmap/munmap, and samples allocations the way
// jemalloc's and Go's heap profilers do: each thread counts down bytes allocated, with
// exponentially distributed intervals of mean RATE bytes, so an allocation of SIZE bytes is
// sampled with probability 1 - exp(-SIZE/RATE) and stands for SIZE / (1 - exp(-SIZE/RATE)) bytes:
// the estimates are unbiased whatever the sizes.
//
// A sampled allocation is sent to onefix as one datagram on a Unix socket (inherited fd, named by
// ONEFIX_MEMORY_FD) with the allocating thread's stack: native return addresses (onefix
// symbolizes them from /proc/PID/maps), or, when the thread holds CPython 3.11's GIL, the Python
// frames read from the thread state without calling anything that allocates or runs code.
// The addresses of sampled allocations still live are kept in a lock-free open-addressing table,
// so that their frees (and only theirs) are sent too: onefix knows what is retained.
//
// Rules of the hook path: nothing here allocates through the hooked functions (a thread-local
// reentrancy guard sends the agent's own calls straight to glibc), no lock is taken, thread-local
// state uses the initial-exec model (no __tls_get_addr, no allocation on first touch), and a
// datagram send is the only system call, once per sample. Without ONEFIX_MEMORY_FD the agent is
// a pass-through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

// ---- wire format (little endian, native alignment not assumed; see src/event.rs) ----
enum { EV_HELLO = 1, EV_ALLOC = 2, EV_FREE = 3, EV_MAPS = 4 };
#define MAGIC 0x4f4e4546u /* "FENO" */
#define MAX_NATIVE 48
#define MAX_PY 40
#define MAX_FILE 200
#define MAX_NAME 80

struct header {
    uint32_t magic;
    uint16_t type;
    uint16_t flags;
    uint32_t pid;
    uint32_t tid;
    uint64_t time_ns;
} __attribute__((packed));

// ---- state ----
static int out_fd = -1;
static uint64_t rate = 512 * 1024;
static atomic_int enabled;
static pid_t my_pid;

static TLS int in_hook;
static TLS int64_t countdown;
static TLS int countdown_ready;
static TLS uint64_t rng;
static TLS pid_t my_tid;

// Live sampled addresses: open addressing, linear probing; 0 empty, 1 tombstone. Every free
// looks here, so the table is kept small enough to stay in cache (128 KiB): 16,384 live samples
// are 8 GiB of live heap at the default rate; beyond that, samples are counted as untracked.
#define TABLE_BITS 14
#define TABLE_SIZE (1u << TABLE_BITS)
#define TOMBSTONE ((uintptr_t)1)
static _Atomic uintptr_t *table;
static atomic_ulong table_full;

// CPython 3.11, resolved at start-up when the program is that interpreter.
static void *(*py_unchecked_get)(void);
static void *(*py_this_thread_state)(void);
static int (*py_addr2line)(void *, int);

// Offsets in CPython 3.11 (x86_64), from its internal headers: PyThreadState.cframe,
// _PyCFrame.current_frame, _PyInterpreterFrame.{f_code, previous, prev_instr, owner},
// PyCodeObject.{co_filename, co_qualname, _co_firsttraceable, co_code_adaptive},
// PyASCIIObject.{length, state} and the sizes of the compact unicode headers.
#define TS_CFRAME 56
#define CF_CURRENT 8
#define IF_CODE 32
#define IF_PREVIOUS 48
#define IF_PREV_INSTR 56
#define IF_OWNER 69
#define OWNED_BY_GENERATOR 1
#define CO_FILENAME 112
#define CO_QUALNAME 128
#define CO_FIRSTTRACEABLE 168
#define CO_CODE 184
#define U_LENGTH 16
#define U_STATE 32
#define U_ASCII_SIZE 48
#define U_COMPACT_SIZE 72

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t tid(void) {
    if (!my_tid) my_tid = (pid_t)syscall(SYS_gettid);
    return my_tid;
}

static void fill_header(struct header *h, int type) {
    h->magic = MAGIC;
    h->type = (uint16_t)type;
    h->flags = 0;
    h->pid = (uint32_t)my_pid;
    h->tid = (uint32_t)tid();
    h->time_ns = now_ns();
}

static void send_event(const void *buf, size_t len) {
    // MSG_NOSIGNAL: a gone onefix must never kill the target with SIGPIPE.
    ssize_t r;
    do {
        r = send(out_fd, buf, len, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == ECONNREFUSED || errno == EPIPE || errno == EBADF || errno == ENOTCONN || errno == ENOTSOCK)) {
        atomic_store(&enabled, 0);  // onefix went away: stop sampling, keep serving.
    }
}

// ---- sampling interval ----
static uint64_t next_random(void) {
    if (!rng) rng = now_ns() ^ ((uint64_t)tid() << 32) ^ 0x9e3779b97f4a7c15ull;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t next_interval(void) {
    // Exponential with mean `rate`: -ln(U) * rate, U uniform in (0, 1].
    double u = ((double)(next_random() >> 11) + 1.0) / 9007199254740993.0;
    double v = -log(u) * (double)rate;
    return v < 1.0 ? 1 : (int64_t)v;
}

// ---- live table ----
static inline size_t slot_of(uintptr_t p) {
    uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> (64 - TABLE_BITS));
}

static int table_insert(uintptr_t p) {
    if (!table) return 0;
    size_t i = slot_of(p);
    for (unsigned n = 0; n < 64; n++, i = (i + 1) & (TABLE_SIZE - 1)) {
        uintptr_t cur = atomic_load_explicit(&table[i], memory_order_relaxed);
        if (cur == 0 || cur == TOMBSTONE) {
            if (atomic_compare_exchange_strong(&table[i], &cur, p)) return 1;
        }
    }
    atomic_fetch_add(&table_full, 1);
    return 0;
}

// Whether p was a sampled live address; removes it.
static int table_remove(uintptr_t p) {
    if (!table || p <= TOMBSTONE) return 0;
    size_t i = slot_of(p);
    for (unsigned n = 0; n < 64; n++, i = (i + 1) & (TABLE_SIZE - 1)) {
        uintptr_t cur = atomic_load_explicit(&table[i], memory_order_relaxed);
        if (cur == 0) return 0;
        if (cur == p) return atomic_compare_exchange_strong(&table[i], &cur, TOMBSTONE);
    }
    return 0;
}

// ---- Python frames ----
static inline uintptr_t rd(uintptr_t base, size_t off) { return *(uintptr_t *)(base + off); }

// Copies a str object as bytes (non-ASCII characters become '?'); returns the length written.
static size_t copy_str(uintptr_t s, char *out, size_t cap) {
    if (!s) return 0;
    uint32_t state = *(uint32_t *)(s + U_STATE);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact) return 0;
    size_t len = (size_t)*(int64_t *)(s + U_LENGTH);
    if (len > cap) len = cap;
    const unsigned char *data = (const unsigned char *)(s + (ascii ? U_ASCII_SIZE : U_COMPACT_SIZE));
    for (size_t i = 0; i < len; i++) {
        uint32_t c = kind == 1 ? data[i] : kind == 2 ? ((const uint16_t *)data)[i] : ((const uint32_t *)data)[i];
        out[i] = c < 128 ? (char)c : '?';
    }
    return len;
}

// Appends the GIL holder's Python frames (innermost first) to buf; returns the count.
static int python_frames(char *buf, size_t *pos, size_t cap) {
    if (!py_unchecked_get || !py_this_thread_state) return 0;
    uintptr_t ts = (uintptr_t)py_unchecked_get();
    if (!ts || ts != (uintptr_t)py_this_thread_state()) return 0;  // this thread does not hold the GIL
    uintptr_t cframe = rd(ts, TS_CFRAME);
    if (!cframe) return 0;
    uintptr_t f = rd(cframe, CF_CURRENT);
    int n = 0;
    for (int guard = 0; f && n < MAX_PY && guard < 1000; guard++, f = rd(f, IF_PREVIOUS)) {
        uintptr_t code = rd(f, IF_CODE);
        if (!code) continue;
        uintptr_t first = code + CO_CODE;
        uintptr_t prev = rd(f, IF_PREV_INSTR);
        int traceable = *(int *)(code + CO_FIRSTTRACEABLE);
        unsigned char owner = *(unsigned char *)(f + IF_OWNER);
        if (owner != OWNED_BY_GENERATOR && prev < first + 2 * (uintptr_t)traceable) continue;  // incomplete frame
        if (*pos + 8 + MAX_FILE + MAX_NAME > cap) break;
        int line = py_addr2line ? py_addr2line((void *)code, (int)(prev - first)) : 0;
        char *rec = buf + *pos;
        size_t flen = copy_str(rd(code, CO_FILENAME), rec + 8, MAX_FILE);
        size_t nlen = copy_str(rd(code, CO_QUALNAME), rec + 8 + flen, MAX_NAME);
        int32_t l = line;
        uint16_t fl = (uint16_t)flen, nl = (uint16_t)nlen;
        memcpy(rec, &l, 4);
        memcpy(rec + 4, &fl, 2);
        memcpy(rec + 6, &nl, 2);
        *pos += 8 + flen + nlen;
        n++;
    }
    return n;
}

// ---- events ----
__attribute__((noinline)) static void send_alloc(void *p, size_t size, int is_mmap) {
    char buf[sizeof(struct header) + 32 + MAX_NATIVE * 8 + MAX_PY * (8 + MAX_FILE + MAX_NAME)];
    struct header *h = (struct header *)buf;
    fill_header(h, EV_ALLOC);
    double s = (double)size, r = (double)rate;
    double weight = size >= rate * 64 ? s : s / (1.0 - exp(-s / r));
    uint64_t addr = (uint64_t)(uintptr_t)p, sz = size, w = (uint64_t)(weight + 0.5);
    size_t pos = sizeof(struct header);
    memcpy(buf + pos, &addr, 8);
    memcpy(buf + pos + 8, &sz, 8);
    memcpy(buf + pos + 16, &w, 8);
    size_t counts = pos + 24;  // u16 native count, u16 python count, u32 flags
    pos += 32;
    uint16_t npy = (uint16_t)python_frames(buf, &pos, sizeof buf);
    uint16_t nnat = 0;
    if (npy == 0) {
        void *frames[MAX_NATIVE + 2];
        int got = backtrace(frames, MAX_NATIVE + 2);
        // Skip this function and the hook itself.
        for (int i = 2; i < got && nnat < MAX_NATIVE; i++) {
            uint64_t a = (uint64_t)(uintptr_t)frames[i];
            memcpy(buf + pos, &a, 8);
            pos += 8;
            nnat++;
        }
    }
    uint32_t flags = (is_mmap ? 1u : 0u) | (table_insert((uintptr_t)p) ? 2u : 0u);
    memcpy(buf + counts, &nnat, 2);
    memcpy(buf + counts + 2, &npy, 2);
    memcpy(buf + counts + 4, &flags, 4);
    send_event(buf, pos);
}

static void send_free(void *p) {
    char buf[sizeof(struct header) + 8];
    fill_header((struct header *)buf, EV_FREE);
    uint64_t addr = (uint64_t)(uintptr_t)p;
    memcpy(buf + sizeof(struct header), &addr, 8);
    send_event(buf, sizeof buf);
}

// forked: 1 in a child just forked (its address space is its parent's), 0 at start-up or exec.
static void send_hello(int forked) {
    char buf[sizeof(struct header) + 16];
    fill_header((struct header *)buf, EV_HELLO);
    ((struct header *)buf)->flags = (uint16_t)forked;
    uint32_t ppid = (uint32_t)getppid(), python = py_unchecked_get ? 1 : 0;
    memcpy(buf + sizeof(struct header), &rate, 8);
    memcpy(buf + sizeof(struct header) + 8, &ppid, 4);
    memcpy(buf + sizeof(struct header) + 12, &python, 4);
    send_event(buf, sizeof buf);
}

// Sends the text of /proc/self/maps: onefix symbolizes with it even when this process has
// exited before onefix could read the file. The buffer is a private mapping, unmapped after.
static void send_maps(void) {
    const size_t cap = 1 << 20;
    char *buf = (char *)syscall(SYS_mmap, NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return;
    fill_header((struct header *)buf, EV_MAPS);
    size_t len = sizeof(struct header);
    int fd = (int)syscall(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        for (;;) {
            ssize_t n = read(fd, buf + len, cap - len);
            if (n <= 0) break;
            len += (size_t)n;
            if (len == cap) break;
        }
        close(fd);
        send_event(buf, len);
    }
    syscall(SYS_munmap, buf, cap);
}

// ---- the hook path ----
__attribute__((always_inline)) static inline void on_alloc(void *p, size_t size, int is_mmap) {
    if (!p || in_hook || !atomic_load_explicit(&enabled, memory_order_relaxed)) return;
    if (!countdown_ready) {
        in_hook = 1;
        countdown = next_interval();
        countdown_ready = 1;
        in_hook = 0;
    }
    countdown -= (int64_t)size;
    if (countdown > 0) return;
    in_hook = 1;
    countdown = next_interval();
    send_alloc(p, size, is_mmap);
    in_hook = 0;
}

static inline void on_free(void *p) {
    if (!p || in_hook || !table || !atomic_load_explicit(&enabled, memory_order_relaxed)) return;
    if (table_remove((uintptr_t)p)) {
        in_hook = 1;
        send_free(p);
        in_hook = 0;
    }
}

EXPORT void *malloc(size_t size) {
    void *p = __libc_malloc(size);
    on_alloc(p, size, 0);
    return p;
}

EXPORT void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    on_alloc(p, n * size, 0);
    return p;
}

EXPORT void *realloc(void *old, size_t size) {
    on_free(old);
    void *p = __libc_realloc(old, size);
    if (size == 0 && old) return p;
    on_alloc(p, size, 0);
    return p;
}

EXPORT void free(void *p) {
    on_free(p);
    __libc_free(p);
}

EXPORT void *memalign(size_t align, size_t size) {
    void *p = __libc_memalign(align, size);
    on_alloc(p, size, 0);
    return p;
}

EXPORT void *aligned_alloc(size_t align, size_t size) {
    void *p = __libc_memalign(align, size);
    on_alloc(p, size, 0);
    return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = __libc_memalign(align, size);
    if (!p) return ENOMEM;
    *out = p;
    on_alloc(p, size, 0);
    return 0;
}

EXPORT void *valloc(size_t size) {
    void *p = __libc_valloc(size);
    on_alloc(p, size, 0);
    return p;
}

EXPORT void *pvalloc(size_t size) {
    void *p = __libc_pvalloc(size);
    on_alloc(p, size, 0);
    return p;
}

// Anonymous private mappings are heap too (CPython's pymalloc arenas, large buffers). glibc's
// own malloc maps memory through its internal mmap, which this does not see.
EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && (flags & MAP_ANONYMOUS) && !(flags & MAP_FIXED) && (flags & MAP_PRIVATE)) on_alloc(p, len, 1);
    return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}

EXPORT int munmap(void *addr, size_t len) {
    on_free(addr);
    return (int)syscall(SYS_munmap, addr, len);
}

// ---- start-up and fork ----
static void after_fork_in_child(void) {
    // The child's heap starts as a copy of the parent's: onefix counts from here, so forget what
    // the parent sampled and say who we are.
    my_pid = getpid();
    my_tid = 0;
    if (table) memset((void *)table, 0, TABLE_SIZE * sizeof(uintptr_t));
    if (atomic_load(&enabled)) {
        in_hook = 1;
        send_hello(1);
        in_hook = 0;
    }
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 1;
}

__attribute__((constructor)) static void agent_start(void) {
    in_hook = 1;
    uint64_t fd = 0, r = 0;
    struct stat st;
    if (parse_u64(getenv("ONEFIX_MEMORY_FD"), &fd) && fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
        out_fd = (int)fd;
        if (parse_u64(getenv("ONEFIX_MEMORY_RATE"), &r) && r > 0) rate = r;
        my_pid = getpid();
        void *t = (void *)syscall(SYS_mmap, NULL, TABLE_SIZE * sizeof(uintptr_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t != MAP_FAILED) table = (_Atomic uintptr_t *)t;
        // Loads libgcc's unwinder now, while allocating is still harmless.
        void *warm[4];
        backtrace(warm, 4);
        const unsigned long *version = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version");
        if (version && (*version >> 16) == 0x030b) {
            py_unchecked_get = (void *(*)(void))dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
            py_this_thread_state = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
            py_addr2line = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
            if (!py_unchecked_get || !py_this_thread_state) py_unchecked_get = NULL;
        }
        pthread_atfork(NULL, NULL, after_fork_in_child);
        atomic_store(&enabled, 1);
        send_hello(0);
        send_maps();
    }
    in_hook = 0;
}
