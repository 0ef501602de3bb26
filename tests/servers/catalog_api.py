"""A small product-catalog HTTP API, for profiling a server under load.

    python3 catalog_api.py PORT [--fixed]

GET /price?sku=N answers the price of product N with the store's markup, read from
the store's settings file. The planted mistake (without --fixed): the settings file,
a few hundred kilobytes of JSON, is opened and parsed again on every request. With
--fixed it is parsed once at start-up. Listens on 127.0.0.1 only.
"""

# load: /price?sku={{int 0 3999}}
import json
import os
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SETTINGS_PATH = os.path.join(tempfile.gettempdir(), f"catalog-settings-{os.getpid()}.json")


def write_settings() -> None:
    settings = {
        "currency": "EUR",
        "markup": 1.2,
        "products": {str(i): {"name": f"product {i}", "base": 3.0 + (i % 97) * 0.25, "tags": ["a", "b", "c"]} for i in range(4000)},
    }
    with open(SETTINGS_PATH, "w") as f:
        json.dump(settings, f)


def load_settings() -> dict:
    with open(SETTINGS_PATH) as f:
        return json.load(f)  # CULPRIT


FIXED = "--fixed" in sys.argv
SETTINGS = load_settings() if FIXED and (write_settings() or True) else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffer the answer and send it in one write: headers and body in two small writes wait
    # for the client's delayed ACK (Nagle), about 40 ms a request.
    wbufsize = 64 * 1024

    def do_GET(self) -> None:
        url = urlparse(self.path)
        sku = parse_qs(url.query).get("sku", ["0"])[0]
        settings = SETTINGS if FIXED else load_settings()
        product = settings["products"].get(sku)
        if product is None:
            self.send_error(404, "no such product")
            return
        body = json.dumps({"sku": sku, "price": round(product["base"] * settings["markup"], 2)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1])
    if not FIXED:
        write_settings()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        os.unlink(SETTINGS_PATH)


if __name__ == "__main__":
    main()
