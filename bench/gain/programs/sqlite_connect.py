#!/usr/bin/env python3
"""sqlite_connect: a helper opens a new sqlite3 connection for every query (a small on-disk
database in a temporary directory).

slow:  sqlite3.connect(path) per lookup (the culprit); each new connection also reads the
       schema again at its first statement.
fixed: one connection, opened once, is reused (the real fix); the queries are the same.
"""
import os
import sqlite3
import sys
import tempfile
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: sqlite_connect.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30
LOOKUPS = 28000

tmp = tempfile.TemporaryDirectory(prefix="gain-sqlite-")
DB_PATH = os.path.join(tmp.name, "shop.db")
with sqlite3.connect(DB_PATH) as setup:
    setup.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    setup.execute("CREATE INDEX items_name ON items (name)")
    setup.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, f"item-{i}", i * 0.75) for i in range(5000)])
setup.close()
SHARED = sqlite3.connect(DB_PATH)


def lookup(item_id):
    conn = sqlite3.connect(DB_PATH) if SLOW else SHARED  # CULPRIT
    try:
        return conn.execute("SELECT name, price FROM items WHERE id = ?", (item_id,)).fetchone()
    finally:
        if SLOW:
            conn.close()


total = 0.0
for n in range(LOOKUPS):
    if time.monotonic() > DEADLINE:
        break
    name, price = lookup(n * 7 % 5000)
    total += price
SHARED.close()
tmp.cleanup()
print(f"sqlite_connect {sys.argv[1]}: total {total:.2f}")
