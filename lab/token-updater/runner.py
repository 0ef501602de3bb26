"""The "get-method runner" microservice of the token-updater story.

In the story, a small internal HTTP service takes a token contract's code+data,
runs a get-method in its own copy of the TON virtual machine and returns the
binary result. Here the VM is stood in for by a deterministic hashing loop
(about 0.5 ms of real CPU per request), and the result is a small binary
"stack" (struct-packed, base64 in JSON), so the worker has something to decode.

Plain HTTP/1.1 with keep-alive, stdlib only, on 127.0.0.1. The port is chosen by
the kernel (bind to port 0) and written to --port-file once the socket listens.

The server stops by itself when its parent (the run script) goes away, or after
--max-seconds, so it can never be left behind.
"""

import argparse
import base64
import hashlib
import json
import os
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Layout of the get_nft_data()-like result: init flag, index, collection
# address, owner address, then the content cell (length-prefixed bytes).
STACK_HEAD = struct.Struct(">?Q32s32sH")

BASE_GAS = 800  # ~1000 hash steps on average: about 0.5 ms of CPU here


def run_get_method(code: bytes, data: bytes, method: str) -> tuple[bytes, int]:
    """Stand-in for the TVM: burn CPU proportional to the "gas", return a stack."""
    gas = BASE_GAS + len(code) % 400
    h = hashlib.sha256(method.encode() + code + data).digest()
    chunk = data[:64]
    for _ in range(gas):
        h = hashlib.sha256(h + chunk).digest()
    index = int.from_bytes(h[:8], "big")
    collection = hashlib.sha256(code).digest()
    owner = hashlib.sha256(h).digest()
    content = b"https://example.invalid/nft/" + h[:12].hex().encode()
    stack = STACK_HEAD.pack(True, index, collection, owner, len(content)) + content
    return stack, gas


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a reused client pools connections
    disable_nagle_algorithm = True
    server_version = "tvm-runner/1.0"

    def log_message(self, fmt, *args):  # no per-request access log
        pass

    def _reply(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"ok": False, "error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if self.path != "/runGetMethod":
            self._reply(404, {"ok": False, "error": "not found"})
            return
        try:
            req = json.loads(raw)
            code = base64.b64decode(req["code"])
            data = base64.b64decode(req["data"])
            method = req.get("method", "get_nft_data")
        except (ValueError, KeyError, TypeError) as e:
            self._reply(400, {"ok": False, "error": f"bad request: {e}"})
            return
        stack, gas = run_get_method(code, data, method)
        self._reply(
            200,
            {"ok": True, "exit_code": 0, "gas_used": gas, "stack": base64.b64encode(stack).decode()},
        )


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
    ap.add_argument("--port-file", required=True, help="where to write the chosen port")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="stop by itself after this long")
    args = ap.parse_args()

    server = Server(("127.0.0.1", 0), Handler)  # bound and listening from here on
    port = server.server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, args.port_file)
    print(f"runner: listening on http://127.0.0.1:{port}", file=sys.stderr, flush=True)

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
