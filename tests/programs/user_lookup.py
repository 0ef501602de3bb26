# Planted mistake: line 30 `conn = sqlite3.connect(DB_PATH)` — every lookup opens a new
# database connection (open the file, read and parse the schema again) instead of reusing one.
# Expected kind: new-connection-per-request (fix: open one connection and reuse it).
# Scenario: enrich a batch of events with user profiles stored in SQLite.
import os
import random
import sqlite3
import tempfile
import time

DB_PATH = os.path.join(tempfile.mkdtemp(prefix="users-"), "users.db")


def build_db(n):
    conn = sqlite3.connect(DB_PATH)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, email TEXT, plan TEXT, country TEXT)")
    # A real application schema: many tables and indexes, all parsed when a connection opens.
    for t in range(60):
        conn.execute(f"CREATE TABLE audit_{t} (id INTEGER PRIMARY KEY, user_id INTEGER, at TEXT, what TEXT, detail TEXT)")
        conn.execute(f"CREATE INDEX audit_{t}_user ON audit_{t}(user_id, at)")
    conn.executemany(
        "INSERT INTO users VALUES (?, ?, ?, ?, ?)",
        ((i, f"user {i}", f"u{i}@example.org", random.choice(["free", "pro", "team"]), random.choice(["de", "us", "jp"])) for i in range(n)),
    )
    conn.commit()
    conn.close()


def get_user(user_id):
    conn = sqlite3.connect(DB_PATH)  # CULPRIT
    try:
        row = conn.execute("SELECT name, plan, country FROM users WHERE id = ?", (user_id,)).fetchone()
    finally:
        conn.close()
    return {"name": row[0], "plan": row[1], "country": row[2]} if row else None


def enrich(events, deadline):
    out = []
    for ev in events:
        if time.monotonic() > deadline:
            break
        user = get_user(ev["user_id"])
        out.append({**ev, "plan": user["plan"], "country": user["country"]})
    return out


def main():
    random.seed(5)
    build_db(20000)
    events = [{"id": i, "user_id": random.randrange(20000), "kind": "click"} for i in range(15000)]
    start = time.monotonic()
    out = enrich(events, start + 8)
    by_plan = {}
    for e in out:
        by_plan[e["plan"]] = by_plan.get(e["plan"], 0) + 1
    print(f"enriched {len(out)} events in {time.monotonic() - start:.1f}s: {by_plan}")
    os.remove(DB_PATH)
    os.rmdir(os.path.dirname(DB_PATH))


if __name__ == "__main__":
    main()
