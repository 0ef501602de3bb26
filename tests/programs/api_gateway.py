# Planted mistake: line 26 `digest = hashlib.pbkdf2_hmac(...)` — the gateway re-derives the API
# key's PBKDF2 hash (100k iterations) on every request instead of caching verified keys.
# Expected kind: hashing (fix: derive once, cache verified keys / use a fast token check).
# Scenario: a small JSON API behind an API-key check, exercised by a client in the same process.
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import http.client

SALT = os.urandom(16)
API_KEY = "k-3f9a7c2e"
STORED_HASH = hashlib.pbkdf2_hmac("sha256", API_KEY.encode(), SALT, 100_000)
ITEMS = {str(i): {"id": i, "name": f"item {i}", "stock": i * 3 % 17} for i in range(500)}


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def authorized(self):
        key = self.headers.get("X-Api-Key", "")
        digest = hashlib.pbkdf2_hmac("sha256", key.encode(), SALT, 100_000)  # CULPRIT
        return hmac.compare_digest(digest, STORED_HASH)

    def do_GET(self):
        if not self.authorized():
            self.send_error(401)
            return
        item = ITEMS.get(self.path.rsplit("/", 1)[-1])
        body = json.dumps(item).encode()
        self.send_response(200 if item else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ApiHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        start = time.monotonic()
        done = 0
        while done < 200 and time.monotonic() - start < 8:
            conn.request("GET", f"/items/{done % 500}", headers={"X-Api-Key": API_KEY})
            resp = conn.getresponse()
            json.loads(resp.read())
            done += 1
        print(f"{done} requests in {time.monotonic() - start:.1f}s")
    finally:
        conn.close()
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
