#!/usr/bin/env python3
"""cache_lock (a probe, fourteenth session): a cache whose one lock is taken in two places,
`put` (which re-hashes the whole cache under it) and `get` (where the readers wait for it).

    python3 cache_lock.py slow|fixed

slow: put recomputes a fingerprint of the whole cache while holding the lock (line 24 runs
under the lock taken at line 28); fixed: it does not. onefix should charge the readers' waits
at line 33 to line 24 and name line 28 as the lock to move the work out of.
"""
import sys, threading, hashlib, time
SLOW = sys.argv[1] == "slow"

class Cache:
    def __init__(self):
        self._lock = threading.RLock()
        self._data = {}
        self.hits = 0

    def _fingerprint(self):
        # the whole cache re-hashed to produce a version tag
        h = hashlib.sha256()
        for k in sorted(self._data):
            h.update(f"{k}={self._data[k]}".encode())
        return h.hexdigest()

    def put(self, key, value):
        with self._lock:
            self._data[key] = value
            self.version = self._fingerprint() if SLOW else None

    def get(self, key):
        with self._lock:
            self.hits += 1
            return self._data.get(key)

cache = Cache()
for i in range(300):
    cache.put(f"k{i}", i)

def writer(n):
    for i in range(n):
        cache.put(f"k{i % 300}", i)
        s = sum(j * j for j in range(300))

def reader(n):
    t = 0
    for i in range(n):
        v = cache.get(f"k{i % 300}")
        t += (v or 0) + sum(j for j in range(200))
    return t

ts = [threading.Thread(target=writer, args=(1500,)) for _ in range(3)] + [threading.Thread(target=reader, args=(6000,)) for _ in range(3)]
for t in ts: t.start()
for t in ts: t.join()
print(cache.hits)
