"""A small local "axon" (the miner's server) for the ping benchmark of story 002.

POST /<SynapseName>: the request headers are parsed back into the synapse
(Synapse.from_headers, which validates but does no schema work), the body is
validated as the full synapse, its body hash checked against the header, the
forward function runs (doubles dummy_input), and the synapse goes back as the
JSON body with the axon's status and process time.

HTTP/1.1 keep-alive, stdlib only, on 127.0.0.1, port chosen by the kernel and
written to --port-file. Stops by itself when its parent goes away or after
--max-seconds.
"""

import argparse
import importlib
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SYNAPSES: dict = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "axon/7.0"

    def log_message(self, fmt, *args):  # no per-request access log
        pass

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._reply(200 if self.path == "/health" else 404, b'{"ok": true}')

    def do_POST(self):
        start = time.perf_counter()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        cls = SYNAPSES.get(self.path.lstrip("/"))
        if cls is None:
            self._reply(404, b'{"error": "unknown synapse"}')
            return
        try:
            from_headers = cls.from_headers(dict(self.headers.items()))
            synapse = cls.model_validate_json(body)
        except ValueError as e:
            self._reply(400, f'{{"error": "bad synapse: {type(e).__name__}"}}'.encode())
            return
        if synapse.body_hash != from_headers.computed_body_hash:
            self._reply(400, b'{"error": "body hash mismatch"}')
            return
        # forward: the miner's work
        synapse.dummy_output = synapse.dummy_input * 2
        synapse.dendrite = from_headers.dendrite
        synapse.axon = from_headers.axon
        synapse.axon.status_code = 200
        synapse.axon.status_message = "Success"
        synapse.axon.process_time = time.perf_counter() - start
        self._reply(200, synapse.model_dump_json().encode())


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def watchdog(server: Server, parent: int, max_seconds: float) -> None:
    deadline = time.monotonic() + max_seconds
    while True:
        time.sleep(0.2)
        if os.getppid() != parent or time.monotonic() > deadline:
            server.shutdown()
            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=("slow", "fixed"), required=True, help="which synapse module to serve")
    ap.add_argument("--port-file", required=True, help="where to write the chosen port")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="stop by itself after this long")
    args = ap.parse_args()

    module = importlib.import_module(f"synapse_{args.variant}")
    SYNAPSES["Ping"] = module.Ping

    server = Server(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, args.port_file)
    print(f"axon: serving Ping on http://127.0.0.1:{port}", file=sys.stderr, flush=True)

    threading.Thread(target=watchdog, args=(server, os.getppid(), args.max_seconds), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
