# Planted mistake: line 28 `snapshot = json.dumps(self._items)` — the store serializes its whole
# map while holding its lock, so the 8 writer threads queue on the lock behind the serialization.
# Expected: rank 1 is the serializing line (kind serialization or lock-contention), with the
# waits at `with self._lock:` as its evidence (fix: serialize outside the lock, or less often).
# Scenario: an in-memory inventory store that keeps a JSON snapshot for a replica after each write.
import json
import sys
import threading
import time

WRITERS = 8
WRITES = 80
DEADLINE = time.monotonic() + 20


class Store:
    def __init__(self):
        self._lock = threading.Lock()
        self._items = {f"sku-{i}": {"qty": i % 50, "bin": f"A{i % 97}", "tags": ["x", "y"]} for i in range(4000)}
        self.snapshots = 0
        self.last = ""

    def adjust(self, sku, delta):
        with self._lock:  # LOCK
            item = self._items[sku]
            item["qty"] += delta
            self.snapshots += 1
            snapshot = json.dumps(self._items)  # CULPRIT
            self.last = snapshot[:64]


def writer(store, w):
    for i in range(WRITES):
        if time.monotonic() > DEADLINE:
            return
        store.adjust(f"sku-{(w * 131 + i * 7) % 4000}", 1)
        time.sleep(0.002)


def main():
    store = Store()
    threads = [threading.Thread(target=writer, args=(store, w)) for w in range(WRITERS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{store.snapshots} writes in {time.monotonic() - start:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
