"""A target that beats every 5 ms and reports, on SIGUSR1 or at exit, its longest gaps: what a
profiler's pauses cost it. Started by bench/stall/run."""
import os, signal, sys, threading, time

gaps = []
def beat():
    last = time.perf_counter()
    while True:
        time.sleep(0.005)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now

def report(*_):
    g = sorted(gaps)
    n = len(g)
    print(f"beats={n} p50={g[n//2]*1e3:.1f}ms p99={g[int(n*0.99)]*1e3:.1f}ms max={g[-1]*1e3:.1f}ms", flush=True)
    gaps.clear()

signal.signal(signal.SIGUSR1, report)
# Some threads, as a service has, so that stopping them all takes a while.
for _ in range(8):
    threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
threading.Thread(target=beat, daemon=True).start()
while True:
    time.sleep(1)
