# A long-running service for the fleet tests: it handles "requests" in a loop until killed.
# Planted line: each request hashes its payload HEAVY times (argv[1]); the line marked CULPRIT
# is where the service's time goes, more so in the heavier deploy.
import hashlib
import sys
import time

HEAVY = int(sys.argv[1]) if len(sys.argv) > 1 else 4


def handle(i):
    payload = str(i).encode() * 4000
    digest = b""
    for _ in range(HEAVY):
        digest = hashlib.sha256(payload + digest).digest()  # CULPRIT
    return sum(range(3000)) + len(digest)


def main():
    print("ready", flush=True)
    i = 0
    while True:
        handle(i)
        i += 1
        # A short pause now and then, as a server between requests: a small share of the time.
        if i % 2000 == 0:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
