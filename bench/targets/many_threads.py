"""Many-thread target for long recordings: N threads, each a light mix of compute and sleep.

    python3 many_threads.py [SECONDS] [THREADS]      (default 600 20)

Each thread loops: a short pure-Python computation in one of several functions (so the
recording holds a few dozen distinct stacks, not one), then a 20 ms sleep. About 0.1-0.2
of a core in all for 20 threads, so a long run does not crowd the machine. Last line of
stdout: one JSON object {"rounds", "elapsed_s", "cpu_s", "maxrss_kb", "threads"}.
"""
import json
import resource
import sys
import threading
import time


def parse_a(n):
    return sum(i % 3 for i in range(n))


def parse_b(n):
    return sum(i * 2 for i in range(n))


def hash_c(n):
    h = 0
    for i in range(n):
        h = (h * 31 + i) & 0xFFFFFFFF
    return h


def encode_d(n):
    return len(",".join(str(i) for i in range(n // 10)))


KINDS = [parse_a, parse_b, hash_c, encode_d]


def handler(depth, fn, n):
    if depth == 0:
        return fn(n)
    return handler(depth - 1, fn, n)


def worker(idx, stop, rounds):
    k = 0
    while not stop.is_set():
        handler(3 + idx % 5, KINDS[k % len(KINDS)], 300)
        k += 1
        time.sleep(0.02)
    rounds[idx] = k


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    stop = threading.Event()
    rounds = [0] * n
    threads = [threading.Thread(target=worker, args=(i, stop, rounds), name=f"worker-{i}") for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "rounds": sum(rounds),
        "elapsed_s": time.perf_counter() - t0,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "maxrss_kb": ru.ru_maxrss,
        "tree_maxrss_kb": max(ru.ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
        "threads": n + 1,
    }), flush=True)


if __name__ == "__main__":
    main()
