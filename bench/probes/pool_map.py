#!/usr/bin/env python3
"""pool_map (a probe, fourteenth session): a pool of 8 maps a fetch (a 20 ms sleep standing in
for a remote call) over 400 items while the main thread parses each result.

    python3 pool_map.py slow|fixed

slow: the parse also sorts the words (line 22); fixed: it does not. The fetches overlap the
parse, so the fix gains about nothing (1.03x measured): the workers sleeping in their tasks are
what the main thread waits for, not background timers, and the parse's bound must say so.
"""
import sys, time, re
from concurrent.futures import ThreadPoolExecutor
SLOW = sys.argv[1] == "slow"
LOG = "\n".join(f"2024-01-{i%28+1:02d} host{i%7} GET /api/v{i%3}/items/{i} 200 {i%997}ms" for i in range(400))

def fetch(i):
    time.sleep(0.02)            # the remote call
    return LOG

def parse(text):
    pat = re.compile(r"(\S+) (\S+) (\w+) (\S+) (\d+) (\d+)ms")
    words = sorted(set(w.lower() for w in text.split() for _ in range(6))) if SLOW else ()
    return sum(int(m.group(6)) for m in pat.finditer(text))

total = 0
with ThreadPoolExecutor(8) as pool:
    for text in pool.map(fetch, range(400)):
        total += parse(text)
print(total)
