"""I/O-bound target: threads doing small socket round trips and small sleeps.

    python3 io_threads.py [SECONDS] [CLIENTS] [SLEEPERS] [DELAY_MS]    (default 8 8 8 1)

An echo server runs in a separate process (a child of this one, on 127.0.0.1, not
sampled: profilers are pointed at this process only). CLIENTS threads each keep one
TCP connection and do 64-byte request/response round trips (the server answers after
DELAY_MS milliseconds, so with the default of 1 the clients mostly wait; with 0 they
saturate the loopback and the CPU); SLEEPERS threads loop on
time.sleep(0.002). Both run under a call chain ~10 frames deep. The work rate is
round trips per second over the fixed wall time. Last line of stdout: one JSON object
{"ops_per_s" (round trips/s), "sleeps_per_s", "elapsed_s", "cpu_s", "maxrss_kb", "threads"}.
The server child exits when this process's pipe to it closes, so it cannot be left behind.
"""
import json
import os
import resource
import socket
import socketserver
import subprocess
import sys
import threading
import time

PAYLOAD = b"x" * 64


DELAY = 0.0


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = sock.recv(4096)
            if not data:
                return
            if DELAY:
                time.sleep(DELAY)
            sock.sendall(data)


def serve(delay_ms):
    global DELAY
    DELAY = delay_ms / 1000.0
    socketserver.ThreadingTCPServer.daemon_threads = True
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(srv.server_address[1], flush=True)
    sys.stdin.read()          # parent gone or done: EOF
    os._exit(0)


def nest(depth, fn, *args):
    if depth == 0:
        return fn(*args)
    return nest(depth - 1, fn, *args)


def client_loop(port, stop, counts, idx):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = 0
    try:
        while not stop.is_set():
            sock.sendall(PAYLOAD)
            got = 0
            while got < len(PAYLOAD):
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError("server closed")
                got += len(chunk)
            n += 1
    finally:
        counts[idx] = n
        sock.close()


def sleeper_loop(stop, counts, idx):
    n = 0
    while not stop.is_set():
        time.sleep(0.002)
        n += 1
    counts[idx] = n


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--server":
        serve(float(sys.argv[2]))
        return
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    sleepers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    delay_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--server", str(delay_ms)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        stop = threading.Event()
        rtt = [0] * clients
        slp = [0] * sleepers
        threads = [threading.Thread(target=nest, args=(10, client_loop, port, stop, rtt, i), name=f"client-{i}")
                   for i in range(clients)]
        threads += [threading.Thread(target=nest, args=(10, sleeper_loop, stop, slp, i), name=f"sleeper-{i}")
                    for i in range(sleepers)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "ops_per_s": sum(rtt) / elapsed,
        "sleeps_per_s": sum(slp) / elapsed,
        "elapsed_s": elapsed,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "maxrss_kb": ru.ru_maxrss,
        "tree_maxrss_kb": max(ru.ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
        "threads": 1 + clients + sleepers,
    }), flush=True)


if __name__ == "__main__":
    main()
