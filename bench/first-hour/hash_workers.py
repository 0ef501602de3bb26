"""Four threads hash records and add them to a shared digest table under one lock; the
hashing is done while the lock is held, so the threads wait for each other."""
import hashlib
import threading
import time

table = {}
table_lock = threading.Lock()
DEADLINE = time.monotonic() + 4


def work(worker):
    n = 0
    while time.monotonic() < DEADLINE and n < 3000:
        record = f"worker{worker}-record{n}".encode() * 50000
        with table_lock:
            digest = hashlib.sha256(record).hexdigest()  # CULPRIT
            table[digest] = worker
        n += 1


threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"{len(table)} records")
