#!/usr/bin/env python3
"""thread_pool: a ThreadPoolExecutor with 8 workers, but the tasks are submitted one at a time
and each is waited on before the next, so 7 workers sit idle; the task has one costly line.

slow:  the task scores its input with a costly pure-Python pass (the culprit).
fixed: the culprit line is a no-op; submission, waiting and the task's light work are the same.
"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: thread_pool.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

TASKS = 1600
HEAVY = 12000
LIGHT = 2500


def task(i):
    base = sum(hash((i, k)) & 0xFF for k in range(HEAVY)) if SLOW else 0  # CULPRIT
    return base + sum(k % 3 for k in range(LIGHT))


total = 0
with ThreadPoolExecutor(8) as pool:
    for i in range(TASKS):
        if time.monotonic() > DEADLINE:
            break
        future = pool.submit(task, i)
        total += future.result()
print(f"thread_pool {sys.argv[1]}: {total}")
