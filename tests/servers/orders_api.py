"""An order-status service backed by SQLite: GET /order?id=N answers the order's status.

    python3 orders_api.py PORT

The planted mistake: every request opens a new database connection (and with it reads
the schema and sets the connection up) instead of reusing one per thread. Listens on
127.0.0.1 only.
"""

# load: /order?id={{int 1 4999}}
import json
import os
import sqlite3
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

DB = os.path.join(tempfile.gettempdir(), f"orders-{os.getpid()}.sqlite")


def create_db() -> None:
    con = sqlite3.connect(DB)
    con.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, status TEXT, total REAL)")
    for t in range(40):
        con.execute(f"CREATE TABLE IF NOT EXISTS audit_{t} (id INTEGER PRIMARY KEY, at TEXT, what TEXT, who TEXT)")
        con.execute(f"CREATE INDEX IF NOT EXISTS audit_{t}_at ON audit_{t} (at)")
    con.executemany("INSERT OR REPLACE INTO orders VALUES (?, ?, ?)", ((i, "shipped" if i % 3 else "open", i * 1.5) for i in range(5000)))
    con.commit()
    con.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 64 * 1024

    def do_GET(self) -> None:
        order_id = int(parse_qs(urlparse(self.path).query).get("id", ["1"])[0])
        con = sqlite3.connect(DB)  # CULPRIT
        try:
            con.execute("PRAGMA foreign_keys = ON")
            row = con.execute("SELECT status, total FROM orders WHERE id = ?", (order_id,)).fetchone()
        finally:
            con.close()
        body = json.dumps({"id": order_id, "status": row[0] if row else None}).encode()
        self.send_response(200 if row else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    create_db()
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        os.unlink(DB)
