# Planted mistake: line 39 `with self._lock:` — the cache's lock is held while the missing rate
# is fetched over HTTP (~25 ms), so the 6 worker threads queue on the lock and the fetches run one
# at a time. Also acceptable: line 41 (the fetch inside the critical section).
# Expected kind: lock contention / blocking-wait (fix: fetch outside the lock, lock only the dict).
# Scenario: workers convert payments into EUR using a shared exchange-rate cache.
import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RatesHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        time.sleep(0.025)  # the rates provider takes its time
        pair = self.path.rsplit("/", 1)[-1]
        body = json.dumps({"pair": pair, "rate": 1 + (hash(pair) % 1000) / 1000}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class RateCache:
    def __init__(self, base):
        self._base = base
        self._rates = {}
        self._lock = threading.Lock()

    def rate(self, currency, day):
        key = f"{currency}-{day}"
        with self._lock:  # CULPRIT
            if key not in self._rates:
                with urllib.request.urlopen(f"{self._base}/rate/{key}", timeout=5) as resp:  # CULPRIT (held)
                    self._rates[key] = json.load(resp)["rate"]
            return self._rates[key]


def convert_batch(cache, worker, payments):
    return sum(amount * cache.rate(cur, day) for cur, day, amount in payments)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), RatesHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cache = RateCache(f"http://127.0.0.1:{server.server_address[1]}")
    currencies = ["USD", "GBP", "JPY", "CHF", "SEK", "NOK"]
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=6) as pool:
            batches = [[(currencies[w], f"2024-05-{d:02d}", 10.0 * d) for d in range(1, 31)] * 2 for w in range(6)]
            totals = list(pool.map(convert_batch, [cache] * 6, range(6), batches))
        print(f"converted {sum(len(b) for b in batches)} payments in {time.monotonic() - start:.1f}s: {round(sum(totals), 2)}")
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
