"""Run a lab case slow then fixed (no profiler) and print the figures side by side.

    python3 lab/bench.py CASE [--json]

CASE is a directory under lab/ with a `run` script whose program prints a JSON
line as its last JSON output. The runs' own output goes to stderr; stdout gets
one line: `slow: ...  fixed: ...  speedup: N.Nx`, or with --json one object
{"slow": ..., "fixed": ..., "speedup": ..., ...}. speedup > 1 means fixed is faster.
Exit status is non-zero if either run failed.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# metric key in the program's JSON line, unit, whether higher is better
CASES = {
    "token-updater": ("tokens_per_s", "tokens/s", True),
    "synapse-headers": ("mean_s", "s/call", False),
    "exchange-aggregator": ("round_s", "s/round", False),
    "tracker": ("peak_rss_mb", "MB peak RSS", False),
}


def run(case: str, variant: str) -> dict:
    env = dict(os.environ)
    env.pop("PROFILER", None)
    proc = subprocess.run(
        [os.path.join(HERE, case, "run"), variant],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    sys.stderr.write(proc.stdout)
    sys.stderr.flush()
    if proc.returncode != 0:
        raise SystemExit(f"bench: {case}/run {variant} exited with status {proc.returncode}")
    result = None
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                pass
    if result is None:
        raise SystemExit(f"bench: {case}/run {variant} printed no JSON result line")
    return result


def main() -> int:
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    if len(args) != 1 or args[0] not in CASES:
        print(f"usage: bench.py {{{'|'.join(CASES)}}} [--json]", file=sys.stderr)
        return 2
    case = args[0]
    key, unit, higher_better = CASES[case]

    slow = run(case, "slow")
    fixed = run(case, "fixed")
    s, f = float(slow[key]), float(fixed[key])
    if higher_better:
        speedup = f / s if s > 0 else float("inf")
    else:
        speedup = s / f if f > 0 else float("inf")

    if as_json:
        print(json.dumps({
            "case": case, "metric": key, "unit": unit,
            "slow": s, "fixed": f, "speedup": round(speedup, 2),
            "slow_run": slow, "fixed_run": fixed,
        }))
    else:
        if unit in ("s/call", "s/round"):  # easier to read in milliseconds
            s, f, unit = s * 1000, f * 1000, "ms/" + unit.split("/")[1]
        fmt = "{:.1f}" if higher_better else "{:.2f}"
        print(f"slow: {fmt.format(s)} {unit}  fixed: {fmt.format(f)} {unit}  speedup: {speedup:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
