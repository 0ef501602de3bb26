# Planted mistake: line 26 `if re.search(...)` — a pattern is built per (line, user) from a list
# of 700 user names; more distinct patterns than re's cache holds (512), so every call compiles.
# Expected kind: repeated-setup (regex compile; fix: compile once, or one alternation pattern).
# Scenario: redact log lines that mention any user on a GDPR erasure list.
import random
import re
import time

random.seed(7)
USERS = [f"user{n:04d}" for n in range(700)]
ACTIONS = ["login", "logout", "upload", "download", "delete", "share"]


def make_log(n):
    lines = []
    for i in range(n):
        who = random.choice(USERS) if random.random() < 0.3 else f"guest{i}"
        lines.append(f"2024-05-01T10:{i % 60:02d}:00 INFO action={random.choice(ACTIONS)} user={who} ip=10.0.{i % 250}.{i % 200}")
    return lines


def mentions_erased_user(line, erased):
    if "user=" not in line:
        return None
    for name in erased:
        if re.search(rf"\buser={re.escape(name)}\b", line):  # CULPRIT
            return name
    return None


def redact(lines, erased, deadline):
    out = []
    hits = 0
    for line in lines:
        if time.monotonic() > deadline:
            break
        name = mentions_erased_user(line, erased)
        if name:
            hits += 1
            line = line.replace(name, "<erased>")
        out.append(line)
    return out, hits


def main():
    lines = make_log(600)
    start = time.monotonic()
    out, hits = redact(lines, USERS, start + 8)
    print(f"redacted {hits} of {len(out)} lines in {time.monotonic() - start:.1f}s")
    print(out[0])


if __name__ == "__main__":
    main()
