#!/usr/bin/env python3
"""Runs load generators side by side on the same loopback server and prints a table.

Called by bench/load.sh, which builds onefix, starts the servers and passes their URLs. Every
generator gets the same connections and duration; each measurement is repeated ROUNDS times,
the generators taking turns, and the median is reported. The CPU time of a generator is its
own user + system time (getrusage of the finished child), so "requests per CPU-second" is what
one core of load generation buys.
"""

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ONEFIX = os.environ.get("ONEFIX", "target/release/onefix")
OHA = os.environ.get("OHA") or shutil.which("oha")
DURATION = int(os.environ.get("DURATION", "10"))
CONNS = int(os.environ.get("CONNS", "32"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
LUA_RANDOM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_random.lua")

ANNOUNCE = ("/announce?info_hash={{pick 2000 bytes 20 urlencode}}&peer_id={{pick 1000 bytes 20 urlencode}}"
            "&port={{int 1024 65535}}&uploaded=0&downloaded=0&left={{int 0 1000000}}&compact=1")


def run_child(cmd):
    """Runs cmd; returns (stdout, cpu seconds, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, cpu, wall


def wrk_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v


def run_wrk(url, threads, random_path=False):
    cmd = ["wrk", f"-t{threads}", f"-c{CONNS}", f"-d{DURATION}s", "--latency"]
    if random_path:
        cmd += ["-s", LUA_RANDOM]
    out, cpu, wall = run_child(cmd + [url])
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = wrk_ms(re.search(r"50%\s+(\S+)", out).group(1))
    p99 = wrk_ms(re.search(r"99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return dict(total=total, rps=rps, cpu=cpu, p50=p50, p99=p99, errors=errors.group(0) if errors else "")


def run_onefix(url, threads, rate=None, template=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [ONEFIX, "load", url + (template or ""), "-c", str(CONNS), "--threads", str(threads),
               "-d", f"{DURATION}s", "--json", f.name, "-q"]
        if rate:
            cmd += ["--rate", str(rate)]
        _, cpu, wall = run_child(cmd)
        r = json.load(open(f.name))
    return dict(total=r["completed"], rps=r["achieved_rps"], cpu=cpu, p50=r["latency_ms"]["p50"],
                p99=r["latency_ms"]["p99"], p999=r["latency_ms"]["p999"], errors=r["errors"]["total"] or "")


def run_oha(url, threads, rate=None, random_path=False, correction=True):
    cmd = [OHA, "--no-tui", "--output-format", "json", "-z", f"{DURATION}s", "-c", str(CONNS)]
    if rate:
        cmd += ["-q", str(rate)]
        if correction:
            cmd += ["--latency-correction"]
    if random_path:
        cmd += ["--rand-regex-url", url.rstrip("/") + r"/announce\?info_hash=[a-f0-9]{40}&port=[1-9][0-9]{3}"]
    else:
        cmd += [url]
    env_threads = {"TOKIO_WORKER_THREADS": str(threads)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env_threads})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"oha failed: {p.stderr.strip()[-300:]}")
    r = json.loads(p.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = r["summary"]
    total = sum(r.get("statusCodeDistribution", {}).values())
    pct = r.get("latencyPercentiles", {})
    return dict(total=total, rps=s["requestsPerSec"], cpu=cpu, p50=pct.get("p50", 0) * 1000,
                p99=pct.get("p99", 0) * 1000, p999=pct.get("p99.9", 0) * 1000,
                errors=sum(r.get("errorDistribution", {}).values()) or "")


def median_row(rows):
    keys = rows[0].keys()
    out = {}
    for k in keys:
        vals = [r[k] for r in rows if isinstance(r[k], (int, float))]
        out[k] = statistics.median(vals) if vals else rows[0][k]
    out["per_cpu_s"] = statistics.median([r["total"] / r["cpu"] for r in rows if r["cpu"] > 0])
    return out


def table(title, runs):
    print(f"\n### {title}\n")
    print(f"{DURATION} s, {CONNS} connections, median of {ROUNDS} rounds\n")
    print("| generator | requests/s | requests per CPU-second | generator CPU | p50 | p99 | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in runs.items():
        m = median_row(rows)
        print(f"| {name} | {m['rps']:,.0f} | {m['per_cpu_s']:,.0f} | {m['cpu']:.2f} s | "
              f"{m['p50']:.3f} ms | {m['p99']:.3f} ms | {m['errors']} |")
    sys.stdout.flush()


def compare(title, gens):
    runs = {name: [] for name in gens}
    for _ in range(ROUNDS):
        for name, fn in gens.items():
            runs[name].append(fn())
    table(title, runs)


def main():
    nginx, hyper, stall = sys.argv[1:4]
    print(f"onefix: {ONEFIX}; wrk: {shutil.which('wrk')}; oha: {OHA or 'not installed'}; "
          f"{os.cpu_count()} CPUs")
    for server_name, url in [("nginx, 1 worker", nginx), ("hyper, 1 thread", hyper)]:
        gens = {
            "wrk -t1": lambda url=url: run_wrk(url, 1),
            "onefix load --threads 1": lambda url=url: run_onefix(url, 1),
        }
        if OHA:
            gens["oha (1 tokio thread)"] = lambda url=url: run_oha(url, 1)
        compare(f"Closed loop, fixed URL, {server_name}", gens)

    gens = {
        "wrk -t1, Lua random URL": lambda: run_wrk(nginx, 1, random_path=True),
        "onefix load --threads 1, announce template": lambda: run_onefix(nginx.rstrip("/"), 1, template=ANNOUNCE),
    }
    if OHA:
        gens["oha --rand-regex-url (1 tokio thread)"] = lambda: run_oha(nginx, 1, random_path=True)
    compare("Closed loop, randomized URLs, nginx", gens)

    for rate in (20000, 1000):
        gens = {f"onefix load --rate {rate}": lambda rate=rate: run_onefix(nginx, 1, rate=rate)}
        if OHA:
            gens[f"oha -q {rate} --latency-correction"] = lambda rate=rate: run_oha(nginx, 1, rate=rate)
        compare(f"Open loop at {rate:,} requests/s, nginx (CPU at a fixed rate)", gens)

    # Coordinated omission: the server stalls 100 ms every second; few connections, so that a
    # generator that only times what it sent sees only the handful of requests caught in a stall.
    global CONNS
    CONNS = 4
    print("\n### Server stalling 100 ms every second, 1,000 requests/s\n")
    print(f"{DURATION} s, {CONNS} connections, one round\n")
    print("| generator | p50 | p99 | p99.9 |")
    print("|---|---:|---:|---:|")
    rows = [("onefix load --rate 1000 (from the due time)", run_onefix(stall, 1, rate=1000)),
            ("wrk (closed loop: no schedule, no correction)", run_wrk(stall, 1))]
    if OHA:
        rows.append(("oha -q 1000 --latency-correction", run_oha(stall, 1, rate=1000)))
        rows.append(("oha -q 1000 (uncorrected)", run_oha(stall, 1, rate=1000, correction=False)))
    for name, r in rows:
        p999 = f"{r['p999']:.3f} ms" if "p999" in r else "n/a"
        print(f"| {name} | {r['p50']:.3f} ms | {r['p99']:.3f} ms | {p999} |")


if __name__ == "__main__":
    main()
