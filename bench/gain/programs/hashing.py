#!/usr/bin/env python3
"""hashing: a request handler derives its signing key with PBKDF2 on every request, then signs
a small message.

slow:  hashlib.pbkdf2_hmac per request (the culprit).
fixed: the culprit line is a no-op (the key derived once at start is reused).
"""
import hashlib
import hmac
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: hashing.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

REQUESTS = 1400
ROUNDS = 6000
PASSWORD, SALT = b"correct horse battery staple", b"gain-bench-salt"
KEY = hashlib.pbkdf2_hmac("sha256", PASSWORD, SALT, ROUNDS)

signatures = set()
for n in range(REQUESTS):
    if time.monotonic() > DEADLINE:
        break
    key = hashlib.pbkdf2_hmac("sha256", PASSWORD, SALT, ROUNDS) if SLOW else KEY  # CULPRIT
    message = f"request={n}&user=u{n % 50}&ts={1700000000 + n}".encode()
    signatures.add(hmac.new(key, message, "sha256").hexdigest()[:8])
    signatures.add(sum(message[i % len(message)] * i for i in range(1500)) % 1000)  # the request's own work
print(f"hashing {sys.argv[1]}: {len(signatures)} distinct")
