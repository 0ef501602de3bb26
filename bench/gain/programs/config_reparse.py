#!/usr/bin/env python3
"""config_reparse: a job loop re-parses its TOML configuration (stdlib tomllib) on every job to
read two settings.

slow:  tomllib.loads(CONFIG_TEXT) per job (the culprit).
fixed: the culprit line is a no-op (the configuration parsed once at start is reused).
"""
import sys
import time
import tomllib

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: config_reparse.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

JOBS = 1900
CONFIG_TEXT = "\n".join(
    f'[service{i}]\nhost = "10.0.{i % 250}.{i % 7}"\nport = {8000 + i}\nretries = {i % 5}\ntimeout = {i * 0.5}\ntags = ["a{i}", "b{i}", "c"]\n'
    for i in range(40)
)
CONFIG = tomllib.loads(CONFIG_TEXT)

done = 0
for job in range(JOBS):
    if time.monotonic() > DEADLINE:
        break
    config = tomllib.loads(CONFIG_TEXT) if SLOW else CONFIG  # CULPRIT
    service = config[f"service{job % 40}"]
    done += sum(ord(c) for c in f"{service['host']}:{service['port']}/{job}") % 97 + service["retries"]
    done += sum(k * k % 11 for k in range(4000)) % 3  # the job's own work
print(f"config_reparse {sys.argv[1]}: {done}")
