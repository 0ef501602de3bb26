"""A target for the dump benchmark: N worker threads (half computing in short bursts, half waiting on a lock
one of them holds) and a ticker thread that measures the longest gap between its 1 ms ticks.
Each time it gets SIGUSR1 it prints that gap since the last signal, in ms, and starts anew."""
import signal
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
gate = threading.Lock()
gate.acquire()
longest = 0.0


def compute():
    x = 0
    while True:
        for i in range(200):
            x += i * i
        time.sleep(0.005)


def wait():
    with gate:
        pass


def tick():
    global longest
    last = time.perf_counter()
    while True:
        time.sleep(0.001)
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now


def report(signum, frame):
    global longest
    print(f"{longest * 1000:.1f}", flush=True)
    longest = 0.0


signal.signal(signal.SIGUSR1, report)
for i in range(N):
    threading.Thread(target=compute if i % 2 else wait, daemon=True).start()
threading.Thread(target=tick, daemon=True).start()
print("ready", flush=True)
while True:
    time.sleep(1)
