#!/usr/bin/env python3
"""csv_sniff: the main thread parses a CSV export line by line and re-runs
csv.Sniffer().sniff on the header sample for every line; 8 upload worker threads take batches
from a queue and "upload" them (time.sleep) in between.

slow:  csv.Sniffer().sniff(SAMPLE) per line (the culprit).
fixed: the dialect sniffed once, before the loop, is reused; uploads are the same.
"""
import csv
import queue
import sys
import threading
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: csv_sniff.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

LINES = 6000
BATCH = 50
UPLOADERS = 8
UPLOAD_S = 0.03
rows_text = [f'{i};customer-{i % 977};{i * 3.25:.2f};"Street {i % 91}; Apt {i % 7}";2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}' for i in range(LINES)]
SAMPLE = "\n".join(rows_text[:120])
DIALECT = csv.Sniffer().sniff(SAMPLE)
work = queue.Queue(maxsize=64)
uploaded = [0]
count_lock = threading.Lock()


def uploader():
    while True:
        batch = work.get()
        if batch is None:
            return
        time.sleep(UPLOAD_S)  # the upload
        with count_lock:
            uploaded[0] += len(batch)


workers = [threading.Thread(target=uploader, name=f"upload-{i}") for i in range(UPLOADERS)]
for w in workers:
    w.start()
batch = []
for line in rows_text:
    if time.monotonic() > DEADLINE:
        break
    dialect = csv.Sniffer().sniff(SAMPLE) if SLOW else DIALECT  # CULPRIT
    batch.append(next(csv.reader([line], dialect)))
    if len(batch) == BATCH:
        work.put(batch)
        batch = []
if batch:
    work.put(batch)
for _ in workers:
    work.put(None)
for w in workers:
    w.join()
print(f"csv_sniff {sys.argv[1]}: uploaded {uploaded[0]} rows")
