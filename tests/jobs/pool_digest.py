#!/usr/bin/env python3
"""A batch job that fans out to a multiprocessing.Pool: each item's digest is derived with a
key-stretching hash whose cost is planted (PBKDF2 at 20,000 rounds, per item). The parent only
waits for the pool; the work, and the line to name, is in the worker processes.

    python3 pool_digest.py
"""
import hashlib
from multiprocessing import Pool


def digest(i):
    data = str(i).encode() * 50
    key = hashlib.pbkdf2_hmac("sha256", data, b"salt", 20000)  # PLANTED: per-item key stretching
    return key[0] + len(data)


if __name__ == "__main__":
    with Pool(2) as pool:
        print(sum(pool.map(digest, range(500), chunksize=10)))
