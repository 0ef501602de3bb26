# Planted mistake: line 60 `for city in cities:` — the forecasts are fetched one after another
# over one kept-alive session; each reply takes ~40 ms of server latency, so the waits add up.
# Expected kind: serial-io, reported at the loop (fix: fetch concurrently, e.g. a thread pool).
# Scenario: build a daily weather digest from a local forecast service (run as a child process,
# as a remote service would be: its latency is not in the profiled process).
import json
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Doha", "Rome", "Nice", "Bern", "Riga", "Baku"] * 15


class ForecastHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        time.sleep(0.04)  # the upstream weather model is slow to answer
        city = self.path.rsplit("/", 1)[-1]
        body = json.dumps({"city": city, "high": len(city) * 3, "low": len(city)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ForecastHandler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


def start_server():
    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    port = int(child.stdout.readline())
    return child, f"http://127.0.0.1:{port}"


def fetch_forecast(session, base, city):
    resp = session.get(f"{base}/forecast/{city}", timeout=5)
    resp.raise_for_status()
    return resp.json()


def format_line(f):
    return f"{f['city']:<6} high {f['high']:>3}  low {f['low']:>3}"


def build_digest(session, base, cities):
    lines = []
    for city in cities:  # CULPRIT
        forecast = fetch_forecast(session, base, city)
        lines.append(format_line(forecast))
    return "\n".join(lines)


def main():
    child, base = start_server()
    try:
        start = time.monotonic()
        with requests.Session() as session:
            digest = build_digest(session, base, CITIES)
        print(digest.splitlines()[0], "...")
        print(f"{len(CITIES)} forecasts in {time.monotonic() - start:.1f}s")
    finally:
        child.terminate()
        child.wait(timeout=5)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
