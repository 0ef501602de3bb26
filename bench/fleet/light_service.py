# A light, long-running target for the fleet benchmark: a request every 50 ms, each a short
# burst of hashing (the planted line) and a sleep, about 1% of a core. Fifty of them fit on
# a shared 2-core machine beside their agents.
import hashlib
import sys
import time


def handle(i):
    payload = str(i).encode() * 2000
    digest = b""
    for _ in range(100):
        digest = hashlib.sha256(payload + digest).digest()  # CULPRIT
    return len(digest)


def main():
    print("ready", flush=True)
    i = 0
    while True:
        handle(i)
        i += 1
        time.sleep(0.05)


if __name__ == "__main__":
    main()
