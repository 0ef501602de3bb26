"""CPU-bound target: a pure-Python loop run for a fixed wall time; reports its own work rate.

    python3 cpu_loop.py [SECONDS]        (default 8)

The work runs under a call chain ~20 frames deep, so each sample is a realistic stack
walk rather than a 3-frame toy. Last line of stdout: one JSON object
{"ops_per_s", "ops", "elapsed_s", "cpu_s", "maxrss_kb", "threads"}.
"""
import json
import resource
import sys
import time

CHUNK = 20_000


def work(n):
    s = 0
    for i in range(n):
        s += (i * i) % 7
    return s


def nest(depth, n):
    if depth == 0:
        return work(n)
    return nest(depth - 1, n)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    t0 = time.perf_counter()
    end = t0 + seconds
    ops = 0
    while True:
        nest(20, CHUNK)
        ops += CHUNK
        now = time.perf_counter()
        if now >= end:
            break
    elapsed = now - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "ops_per_s": ops / elapsed,
        "ops": ops,
        "elapsed_s": elapsed,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "maxrss_kb": ru.ru_maxrss,
        "tree_maxrss_kb": max(ru.ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
        "threads": 1,
    }), flush=True)


if __name__ == "__main__":
    main()
