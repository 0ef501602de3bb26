# Planted mistake: line 47 `resp = requests.get(...)` — requests.get() builds a new Session
# (new connection pool, new TCP connection, new trust store) for every SKU.
# Expected kind: new-connection-per-request (fix: one requests.Session reused).
# Scenario: sync prices for a catalogue of SKUs from a local pricing service.
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class PriceHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        sku = self.path.rsplit("/", 1)[-1]
        body = json.dumps({"sku": sku, "price": (hash(sku) % 10000) / 100}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), PriceHandler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server


def load_catalogue(n):
    return [f"SKU-{i:05d}" for i in range(n)]


def sync_prices(base_url, skus, deadline):
    prices = {}
    for sku in skus:
        if time.monotonic() > deadline:
            break
        resp = requests.get(f"{base_url}/price/{sku}", timeout=5)  # CULPRIT
        resp.raise_for_status()
        prices[sku] = resp.json()["price"]
    return prices


def main():
    server = start_server()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        start = time.monotonic()
        prices = sync_prices(base, load_catalogue(3000), start + 8)
        elapsed = time.monotonic() - start
        print(f"synced {len(prices)} prices in {elapsed:.1f}s ({len(prices) / elapsed:.0f}/s)")
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
