#!/usr/bin/env python3
"""regex_compile: a log scanner compiles a regular expression built for each line's own key, a
distinct pattern per line, which defeats re's compile cache.

slow:  re.compile of the line's own pattern (the culprit).
fixed: one generic pattern, compiled once, matches the same field (the real fix); the search
       and the rest of the per-line work are the same.
"""
import re
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: regex_compile.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

LINES = 36000
GENERIC = re.compile(r"\b[a-z]+_\d+=(?P<value>\d+(?:\.\d+)?)\s*(?:;|$)")
lines = [(f"req_{i}", f"ts=2024-05-{i % 28 + 1:02d} level=INFO req_{i}={i * 1.5:.1f}; path=/api/v1/items/{i % 300}") for i in range(LINES)]

total = 0.0
for key, line in lines:
    if time.monotonic() > DEADLINE:
        break
    pattern = re.compile(rf"\b{key}=(?P<value>\d+(?:\.\d+)?)\s*(?:;|$)") if SLOW else GENERIC  # CULPRIT
    match = pattern.search(line)
    fields = dict(part.split("=", 1) for part in line.replace(";", "").split() if "=" in part)
    total += float(match.group("value")) + len(fields)
print(f"regex_compile {sys.argv[1]}: {total:.1f}")
