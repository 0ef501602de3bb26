#!/usr/bin/env python3
"""What reading asyncio await chains costs the target, at 100 Hz.

    bench/asyncio/overhead.py [REPS] [TASKS] [ROUNDS] [SLEEP_MS]

Runs bench/asyncio/tasks_work.py, interleaved REPS times each, as:
  base      python3 alone
  sampling  onefix record --mode cpu (py-spy sampling only: onefix injects nothing in CPU mode)
  +chains   onefix record --mode wall (the same sampling, plus the asyncio bootstrap)
and prints the median of the target's own wall and CPU seconds per configuration.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ONEFIX = os.environ.get("ONEFIX", os.path.join(ROOT, "target", "release", "onefix"))
PY = os.environ.get("PYTHON", "python3")


def run(prefix, args):
    out = subprocess.run(prefix + [PY, os.path.join(HERE, "tasks_work.py")] + args, capture_output=True, text=True, check=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    args = [sys.argv[2] if len(sys.argv) > 2 else "200", sys.argv[3] if len(sys.argv) > 3 else "400", sys.argv[4] if len(sys.argv) > 4 else "0"]
    with tempfile.TemporaryDirectory() as tmp:
        rec = os.path.join(tmp, "r.onefix")
        configs = {
            "base": [],
            "sampling (cpu mode)": [ONEFIX, "record", "--quiet", "--rate", "100", "--mode", "cpu", "-o", rec, "--"],
            "sampling + await chains (wall mode)": [ONEFIX, "record", "--quiet", "--rate", "100", "--mode", "wall", "-o", rec, "--"],
        }
        results = {name: [] for name in configs}
        for _ in range(reps):
            for name, prefix in configs.items():
                results[name].append(run(prefix, args))
    base_wall = statistics.median(r["seconds"] for r in results["base"])
    base_cpu = statistics.median(r["cpu_seconds"] for r in results["base"])
    print(f"| config (tasks_work.py {' '.join(args)}, median of {reps}) | target wall s | vs base | target CPU s | vs base |")
    print("|---|---:|---:|---:|---:|")
    for name, rs in results.items():
        wall = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu_seconds"] for r in rs)
        print(f"| {name} | {wall:.3f} | {100 * (wall / base_wall - 1):+.2f}% | {cpu:.3f} | {100 * (cpu / base_cpu - 1):+.2f}% |")


if __name__ == "__main__":
    main()
