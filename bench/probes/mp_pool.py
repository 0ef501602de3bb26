#!/usr/bin/env python3
"""mp_pool (a probe, fourteenth session): a multiprocessing.Pool of 2 runs PBKDF2 per item.

    python3 mp_pool.py slow|fixed

Recorded without --subprocesses, the work is in processes onefix does not sample: the report
must say so (a note: record with --subprocesses) rather than name the wait. With
--subprocesses, line 16 is rank 1.
"""
import sys, hashlib
from multiprocessing import Pool
SLOW = sys.argv[1] == "slow"

def work(i):
    data = str(i).encode() * 50
    digest = hashlib.pbkdf2_hmac("sha256", data, b"salt", 2000 if SLOW else 1)
    return sum(data) + digest[0]

if __name__ == "__main__":
    with Pool(2) as pool:
        print(sum(pool.map(work, range(600), chunksize=10)))
