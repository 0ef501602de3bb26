#!/usr/bin/env python3
"""producer_consumer: a producer thread does a slow per-item step and puts items on a queue; a
consumer thread does light work on each; the main thread joins both.

slow:  the producer tokenizes and sorts a text per item (the culprit).
fixed: the culprit line is a no-op (the item carries no words); the rest is the same.
"""
import queue
import sys
import threading
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: producer_consumer.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

ITEMS = 4000
TEXT = " ".join(f"Word{i % 613}x{i % 17}" for i in range(3000))
items = queue.Queue(maxsize=100)
consumed = [0]


def producer():
    for i in range(ITEMS):
        if time.monotonic() > DEADLINE:
            break
        item = {"id": i, "words": sorted(w.lower() for w in TEXT.split() if len(w) > 6)} if SLOW else {"id": i, "words": []}  # CULPRIT
        items.put(item)
    items.put(None)


def consumer():
    while True:
        item = items.get()
        if item is None:
            return
        consumed[0] += sum(x % 5 for x in range(item["id"] % 7, 1500)) + len(item["words"]) * 0


threads = [threading.Thread(target=producer, name="producer"), threading.Thread(target=consumer, name="consumer")]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"producer_consumer {sys.argv[1]}: {consumed[0]}")
