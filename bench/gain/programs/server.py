#!/usr/bin/env python3
"""server: a ThreadingHTTPServer whose handler parses its whole validation schema (a JSON
document) on every request, to validate one query field.

    server.py slow|fixed [PORT]

Listens on 127.0.0.1:PORT (0 or none: a free port, printed as `port N` on stdout). Serves
until SIGINT or SIGTERM, MAX_REQUESTS requests, or MAX_SECONDS, then exits 0.

slow:  json.loads(SCHEMA_TEXT) per request (the culprit).
fixed: the culprit line is a no-op (the schema parsed once at start is reused).
"""
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

if len(sys.argv) not in (2, 3) or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: server.py slow|fixed [PORT]")
SLOW = sys.argv[1] == "slow"
PORT = int(sys.argv[2]) if len(sys.argv) == 3 else 0
MAX_SECONDS = 120
MAX_REQUESTS = 200_000

FIELDS = 1000
SCHEMA_TEXT = json.dumps({"type": "object", "properties": {f"field{k}": {"type": "integer", "minimum": k, "maximum": 1000 + k, "enum": list(range(k, k + 12)), "description": f"Field {k} of the request."} for k in range(FIELDS)}})
SCHEMA = json.loads(SCHEMA_TEXT)
served = [0]
served_lock = threading.Lock()
stop = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

    def do_GET(self):
        query = parse_qs(urlsplit(self.path).query)
        field = f"field{int(query.get('f', ['0'])[0]) % FIELDS}"
        value = int(query.get("v", ["0"])[0])
        schema = json.loads(SCHEMA_TEXT) if SLOW else SCHEMA  # CULPRIT
        rule = schema["properties"][field]
        ok = rule["minimum"] <= value <= rule["maximum"]
        body = json.dumps({"field": field, "valid": ok}).encode()
        self.send_response(200 if ok else 422)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with served_lock:
            served[0] += 1
            if served[0] >= MAX_REQUESTS:
                stop.set()

    def log_message(self, *args):
        pass


ThreadingHTTPServer.request_queue_size = 128  # the default backlog of 5 drops a load generator's burst of connects
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
if PORT == 0:
    print(f"port {server.server_address[1]}", flush=True)
signal.signal(signal.SIGINT, lambda *_: stop.set())
signal.signal(signal.SIGTERM, lambda *_: stop.set())
loop = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="serve")
loop.start()
stop.wait(MAX_SECONDS)
server.shutdown()
loop.join()
server.server_close()
print(f"server {sys.argv[1]}: served {served[0]}", file=sys.stderr)
