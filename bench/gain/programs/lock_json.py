#!/usr/bin/env python3
"""lock_json: 8 threads update a shared dict under a threading.Lock and serialize the whole
map with json.dumps while still holding the lock.

slow:  json.dumps(shared) inside the lock on every update (the culprit).
fixed: the snapshot is not taken (the culprit line is a no-op); everything else is the same.
"""
import json
import sys
import threading
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: lock_json.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

THREADS = 8
ITERS = 500          # updates per thread
KEYS = 500
shared = {f"user{i}": {"id": i, "score": 0, "tags": ["alpha", "beta", "gamma"], "name": f"name-{i}"} for i in range(KEYS)}
lock = threading.Lock()
snapshots = [0]


def worker(idx):
    for n in range(ITERS):
        if time.monotonic() > DEADLINE:
            break
        delta = sum((idx * 7 + n + k) % 13 for k in range(2000))  # the thread's own work
        with lock:
            shared[f"user{(idx * ITERS + n) % KEYS}"]["score"] += delta
            snapshot = json.dumps(shared) if SLOW else None  # CULPRIT
            snapshots[0] += 1 if snapshot is None else len(snapshot) > 0


threads = [threading.Thread(target=worker, args=(i,), name=f"updater-{i}") for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"lock_json {sys.argv[1]}: {snapshots[0]} updates, total score {sum(v['score'] for v in shared.values())}")
