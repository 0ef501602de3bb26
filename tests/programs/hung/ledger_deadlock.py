"""Two threads take the same two locks in opposite orders and deadlock (onefix dump finds the cycle)."""
import threading
import time

accounts = threading.Lock()
audit = threading.Lock()


def transfer():
    with accounts:
        time.sleep(0.2)
        with audit:  # WAITS-FOR-AUDIT
            pass


def report():
    with audit:
        time.sleep(0.2)
        with accounts:  # WAITS-FOR-ACCOUNTS
            pass


threads = [threading.Thread(target=transfer, name="transfer"), threading.Thread(target=report, name="report")]
for t in threads:
    t.start()
for t in threads:
    t.join()
