#!/usr/bin/env python3
"""serial_status: a dashboard asks 10 services for their status, one after another, a few
rounds. The services are a local HTTP server (a child process of this program, listening on
127.0.0.1 on a free port) that takes 100 ms per request.

slow:  the 10 calls are issued one at a time in a loop (the culprit: the loop line, which is
       what the fix replaces and where onefix reports serial waits).
fixed: a ThreadPoolExecutor of 10 issues them at once (the real fix); the calls are the same.
"""
import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SERVICES = [f"svc{i}" for i in range(10)]
ROUNDS = 3
DELAY_S = 0.1


def serve():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(DELAY_S)
            body = json.dumps({"service": self.path.rsplit("/", 1)[-1], "status": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.request_queue_size = 64  # the default backlog of 5 drops 10 concurrent connects (1 s SYN retry)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    import os
    import threading

    def stop_when_told():
        sys.stdin.read()  # the parent closes our stdin when it is done (or dies)
        os._exit(0)

    threading.Thread(target=stop_when_told, daemon=True).start()
    threading.Timer(60, lambda: os._exit(0)).start()  # the deadline
    server.serve_forever(poll_interval=0.05)


def get_status(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status/{name}", timeout=5) as reply:
        return json.load(reply)


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed", "_serve"):
        sys.exit("usage: serial_status.py slow|fixed")
    if sys.argv[1] == "_serve":
        return serve()
    slow = sys.argv[1] == "slow"
    server = subprocess.Popen([sys.executable, __file__, "_serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        deadline = time.monotonic() + 30
        ok = 0
        with ThreadPoolExecutor(len(SERVICES)) as pool:
            for _ in range(ROUNDS):
                if time.monotonic() > deadline:
                    break
                if slow:
                    statuses = []
                    for name in SERVICES:  # CULPRIT
                        statuses.append(get_status(port, name))
                else:
                    statuses = list(pool.map(lambda name: get_status(port, name), SERVICES))
                ok += sum(s["status"] == "ok" for s in statuses)
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    print(f"serial_status {sys.argv[1]}: {ok} ok")


if __name__ == "__main__":
    main()
