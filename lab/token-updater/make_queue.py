"""Create the token-update queue: a SQLite database of token ids with code+data.

In the story, the indexer queues every token a transaction touched; the updater
drains that queue. Usage: make_queue.py DB_PATH [COUNT]  (COUNT default 3000).
Deterministic (fixed seed), so every run starts from the same queue.
"""

import random
import sqlite3
import sys

SCHEMA = """
CREATE TABLE token_queue (
    id       INTEGER PRIMARY KEY,
    address  TEXT NOT NULL,
    code     BLOB NOT NULL,
    data     BLOB NOT NULL
);
CREATE TABLE token_state (
    address     TEXT PRIMARY KEY,
    initialized INTEGER NOT NULL,
    item_index  INTEGER NOT NULL,
    collection  TEXT NOT NULL,
    owner       TEXT NOT NULL,
    content     TEXT NOT NULL,
    gas_used    INTEGER NOT NULL,
    updated_at  REAL NOT NULL
);
"""


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) == 3 else 3000
    rng = random.Random(20240000)
    # A handful of contract codes shared by many tokens (NFT items of a few
    # collections, a few jetton wallets), each token with its own data cell.
    codes = [rng.randbytes(rng.randint(300, 1200)) for _ in range(12)]
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    rows = []
    for i in range(count):
        address = "0:" + rng.randbytes(32).hex()
        rows.append((i + 1, address, rng.choice(codes), rng.randbytes(rng.randint(64, 320))))
    db.executemany("INSERT INTO token_queue VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    print(f"queue: {count} tokens in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
