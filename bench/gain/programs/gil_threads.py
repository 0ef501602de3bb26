#!/usr/bin/env python3
"""gil_threads: 4 Python threads do pure-Python compute; one line (a checksum recomputed on
every pass) dominates, and the GIL lets only one thread run it at a time.

slow:  the checksum is recomputed each pass (the culprit).
fixed: the culprit line is a no-op (the value is taken from a cache); the rest is the same.
"""
import sys
import threading
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: gil_threads.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

THREADS = 4
ITERS = 340
CHECKSUM_N = 20000
LIGHT_N = 4000
results = [0] * THREADS


def worker(idx):
    acc = 0
    for n in range(ITERS):
        if time.monotonic() > DEADLINE:
            break
        digest = sum((x * 2654435761) % 1000003 for x in range(n, n + CHECKSUM_N)) if SLOW else n  # CULPRIT
        acc += sum(x % 7 for x in range(LIGHT_N)) + (digest & 1)
    results[idx] = acc


threads = [threading.Thread(target=worker, args=(i,), name=f"compute-{i}") for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"gil_threads {sys.argv[1]}: {sum(results)}")
