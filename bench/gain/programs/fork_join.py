#!/usr/bin/env python3
"""fork_join: 4 threads hash blocks of data (hashlib releases the GIL, so they run on both
CPUs); thread 0 gets much more work at one line, and the main thread joins them all, so the
run lasts as long as thread 0.

slow:  thread 0 hashes EXTRA more blocks (the culprit).
fixed: the culprit line is a no-op; every thread does the same BASE blocks.
"""
import hashlib
import sys
import threading
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: fork_join.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

THREADS = 4
BLOB = bytes(range(256)) * 4096  # 1 MiB
BASE = 400
EXTRA = 3200
digests = [""] * THREADS


def worker(idx):
    h = hashlib.sha256()
    for _ in range(BASE):
        h.update(BLOB)
    if idx == 0:
        for n in range(EXTRA):
            if n % 64 == 0 and time.monotonic() > DEADLINE:
                break
            h.update(BLOB) if SLOW else None  # CULPRIT
    digests[idx] = h.hexdigest()


threads = [threading.Thread(target=worker, args=(i,), name=f"part-{i}") for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"fork_join {sys.argv[1]}: {digests[0][:12]}")
