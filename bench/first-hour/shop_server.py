"""A small shop API on http.server: every request re-reads the price list from its CSV file."""
import csv
import json
import os
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PRICES = os.path.join(tempfile.gettempdir(), f"first-hour-prices-{os.getpid()}.csv")
with open(PRICES, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sku", "name", "price"])
    for i in range(5000):
        w.writerow([f"SKU{i:05d}", f"item {i}", f"{(i * 37) % 1000 / 10:.2f}"])

FIXED = "--fixed" in sys.argv
CACHED = None


def load_prices():
    with open(PRICES, newline="") as f:
        return {row["sku"]: row for row in csv.DictReader(f)}  # CULPRIT (where the read's time goes)


class Shop(BaseHTTPRequestHandler):
    def do_GET(self):
        global CACHED
        if FIXED:
            if CACHED is None:
                CACHED = load_prices()
            prices = CACHED
        else:
            prices = load_prices()  # CULPRIT
        sku = self.path.rsplit("/", 1)[-1]
        body = json.dumps(prices.get(sku, {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(next(a for a in sys.argv[1:] if a.isdigit()))
    try:
        ThreadingHTTPServer(("127.0.0.1", port), Shop).serve_forever()
    finally:
        os.unlink(PRICES)
