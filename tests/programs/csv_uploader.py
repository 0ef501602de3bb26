# Planted mistake: line 25 `dialect = csv.Sniffer().sniff(line)` — the main thread sniffs the
# CSV dialect again for every line, while 8 upload workers mostly wait for batches and sleep for
# the upload. The main thread is the run's critical path: the workers overlap it.
# Expected: rank 1 is the sniff line, its gain read off the critical path (fix: sniff once).
# Scenario: a CSV importer that parses rows and hands batches to uploader threads.
import csv
import io
import queue
import sys
import threading
import time

WORKERS = 8
ROWS = 30000
BATCH = 100
DEADLINE = time.monotonic() + 20
LINES = [f"{i};item {i};{i * 3 % 17};{i % 5}.{i % 100:02d};warehouse-{i % 7}" for i in range(ROWS)]


def parse(lines, batches):
    batch = []
    for line in lines:
        if time.monotonic() > DEADLINE:
            break
        dialect = csv.Sniffer().sniff(line)  # CULPRIT
        batch.append(next(csv.reader(io.StringIO(line), dialect)))
        if len(batch) == BATCH:
            batches.put(batch)
            batch = []
    if batch:
        batches.put(batch)


def upload(batches, sent):
    while True:
        batch = batches.get()
        if batch is None:
            return
        time.sleep(0.03)  # the upload's round trip
        sent.append(len(batch))


def main():
    batches = queue.Queue()
    sent = []
    workers = [threading.Thread(target=upload, args=(batches, sent)) for _ in range(WORKERS)]
    start = time.monotonic()
    for w in workers:
        w.start()
    parse(LINES, batches)
    for _ in workers:
        batches.put(None)
    for w in workers:
        w.join()
    print(f"{sum(sent)} rows in {time.monotonic() - start:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
