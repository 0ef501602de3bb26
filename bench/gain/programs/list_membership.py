#!/usr/bin/env python3
"""list_membership: a de-duplication pass tests `x in some_list` for every record, a linear
scan of a few thousand ids each time.

slow:  membership in a list (the culprit).
fixed: membership in a set holding the same ids (the real fix); the rest is the same.
"""
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: list_membership.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

SEEN_LIST = [i * 3 for i in range(5000)]
SEEN_SET = set(SEEN_LIST)
RECORDS = 60000

dupes = 0
fresh = []
for n in range(RECORDS):
    if n % 1000 == 0 and time.monotonic() > DEADLINE:
        break
    record_id = (n * 7919) % 30000
    duplicate = record_id in (SEEN_LIST if SLOW else SEEN_SET)  # CULPRIT
    if duplicate:
        dupes += 1
    else:
        fresh.append({"id": record_id, "key": f"rec-{record_id}", "bucket": record_id % 64})
    dupes += sum(1 for c in f"{record_id:08d}" * 5 if c == "7") * 0  # the record's own checks
print(f"list_membership {sys.argv[1]}: {dupes} duplicates, {len(fresh)} fresh")
