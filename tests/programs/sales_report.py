"""sales_report: monthly report over an order database (one sqlite connection, reused).
Planted: N+1 queries - for each order, a separate query fetches its lines (the line marked,
inside the loop over the orders). Expected kind: n-plus-one-query (fix: one JOIN / IN query)."""
import os
import sqlite3
import tempfile
import time

DB = os.path.join(tempfile.gettempdir(), "onefix-trial-sales.db")


def build(conn):
    # Generated inside SQLite (a counting CTE), so that set-up stays short next to the report
    # even on a loaded machine; the numbers are a fixed scramble of the row number.
    conn.executescript("""
        DROP TABLE IF EXISTS orders; DROP TABLE IF EXISTS order_lines;
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT, month INTEGER);
        CREATE TABLE order_lines(id INTEGER PRIMARY KEY, order_id INTEGER, sku TEXT, qty INTEGER, price REAL);
        CREATE INDEX ol_order ON order_lines(order_id);
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 59999)
        INSERT INTO orders SELECT i, 'c' || (i * 7919 % 900), 1 + i * 31 % 12 FROM n;
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 239999)
        INSERT INTO order_lines(order_id, sku, qty, price)
            SELECT i * 104729 % 60000, 'S' || (i * 13 % 500), 1 + i % 5, (100 + i * 37 % 9900) / 100.0 FROM n;
    """)
    conn.commit()


def month_report(conn, month, deadline):
    per_customer = {}
    orders = conn.execute("SELECT id, customer FROM orders WHERE month = ?", (month,)).fetchall()
    for order_id, customer in orders:
        lines = conn.execute("SELECT qty, price FROM order_lines WHERE order_id = ?", (order_id,)).fetchall()  # CULPRIT
        per_customer[customer] = per_customer.get(customer, 0.0) + sum(q * p for q, p in lines)
        if time.monotonic() > deadline:
            break
    return per_customer


def main():
    conn = sqlite3.connect(DB)
    build(conn)
    deadline = time.monotonic() + 7
    top = []
    for request in range(80):
        if time.monotonic() > deadline:
            break
        totals = month_report(conn, request % 12 + 1, deadline)
        top.append(max(totals.items(), key=lambda kv: kv[1]))
    conn.close()
    os.unlink(DB)
    print("top customers per month:", top[:3], "...")


if __name__ == "__main__":
    main()
