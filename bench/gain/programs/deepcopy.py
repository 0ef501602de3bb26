#!/usr/bin/env python3
"""deepcopy: a simulation loop takes a copy.deepcopy of its whole state on every step
("for undo") and never uses it.

slow:  copy.deepcopy(state) per step (the culprit).
fixed: the culprit line is a no-op (no copy); the step's own work is the same.
"""
import copy
import sys
import time

if len(sys.argv) != 2 or sys.argv[1] not in ("slow", "fixed"):
    sys.exit("usage: deepcopy.py slow|fixed")
SLOW = sys.argv[1] == "slow"
DEADLINE = time.monotonic() + 30

STEPS = 1500
state = {f"entity{i}": {"id": i, "pos": [i * 1.0, i * 2.0], "tags": [f"t{j}" for j in range(5)], "hp": 100} for i in range(300)}
history = []

for step in range(STEPS):
    if time.monotonic() > DEADLINE:
        break
    snapshot = copy.deepcopy(state) if SLOW else None  # CULPRIT
    history.append(snapshot is not None)
    for name, entity in state.items():
        entity["pos"][0] += 0.5
        entity["hp"] -= (entity["id"] + step) % 3 == 0
        entity["tags"][step % 5] = f"t{(entity['id'] + step) % 7}"
print(f"deepcopy {sys.argv[1]}: {sum(e['hp'] for e in state.values())} hp, {sum(history)} snapshots")
