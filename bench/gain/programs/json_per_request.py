#!/usr/bin/env python3
"""json_per_request: a single-threaded request handler builds its big API schema dict and
serializes it with json.dumps on every call, to send a small part of it.

slow:  the schema is built and dumped per call (the culprit).
fixed: the culprit line is a no-op (the text built once at start is reused); the rest is the same.
"""
import json
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: json_per_request.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

CALLS = 3300
FIELDS = 150
SCHEMA_TEXT = json.dumps({f"field{k}": {"type": "string", "maxLength": k + 8, "pattern": f"^[a-z]{{1,{k + 8}}}$", "enum": [f"v{k}_{j}" for j in range(8)], "doc": f"Field number {k}."} for k in range(FIELDS)})


def handle(request_id):
    schema_text = json.dumps({f"field{k}": {"type": "string", "maxLength": k + 8, "pattern": f"^[a-z]{{1,{k + 8}}}$", "enum": [f"v{k}_{j}" for j in range(8)], "doc": f"Field number {k}."} for k in range(FIELDS)}) if SLOW else SCHEMA_TEXT  # CULPRIT
    reply = {"id": request_id, "schema_bytes": len(schema_text), "fields": [f"field{(request_id + j) % FIELDS}" for j in range(250)]}
    return json.dumps(reply)


sent = 0
for n in range(CALLS):
    if time.monotonic() > DEADLINE:
        break
    sent += len(handle(n))
print(f"json_per_request {sys.argv[1]}: {sent} bytes")
