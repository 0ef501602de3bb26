#!/usr/bin/env python3
"""Runs HTTPS and HTTP/2 load generators side by side on one nginx and prints tables.

Called by bench/load_tls.sh, which starts nginx with a self-signed certificate and passes the
URLs of its HTTPS (HTTP/1.1), HTTP/2 and plain servers. Generators take turns round after
round; the median of ROUNDS is reported. "Requests per CPU-second" is completed requests over
the generator's own user + system time (the rusage of the finished child).
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_run  # noqa: E402
from load_run import ONEFIX, OHA, compare, run_wrk  # noqa: E402

H2_CONNS = int(os.environ.get("H2_CONNS", "4"))
H2_STREAMS = int(os.environ.get("H2_STREAMS", "32"))


def run_child(cmd, env=None):
    """Runs cmd; returns (stdout, cpu seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    return p.stdout, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_onefix(url, threads, rate=None, extra=(), conns=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [ONEFIX, "load", url, "-c", str(conns or load_run.CONNS), "--threads", str(threads),
               "-d", f"{load_run.DURATION}s", "--json", f.name, "-q", *extra]
        if rate:
            cmd += ["--rate", str(rate)]
        _, cpu = run_child(cmd)
        r = json.load(open(f.name))
    return dict(total=r["completed"], rps=r["achieved_rps"], cpu=cpu, p50=r["latency_ms"]["p50"],
                p99=r["latency_ms"]["p99"], p999=r["latency_ms"]["p999"], errors=r["errors"]["total"] or "")


def run_oha(url, rate=None, extra=(), conns=None):
    cmd = [OHA, "--no-tui", "--output-format", "json", "--insecure", "-z", f"{load_run.DURATION}s",
           "-c", str(conns or load_run.CONNS), *extra]
    if rate:
        cmd += ["-q", str(rate), "--latency-correction"]
    out, cpu = run_child(cmd + [url], env={"TOKIO_WORKER_THREADS": "1"})
    r = json.loads(out)
    s = r["summary"]
    pct = r.get("latencyPercentiles", {})
    return dict(total=sum(r.get("statusCodeDistribution", {}).values()), rps=s["requestsPerSec"], cpu=cpu,
                p50=pct.get("p50", 0) * 1000, p99=pct.get("p99", 0) * 1000, p999=pct.get("p99.9", 0) * 1000,
                errors=sum(r.get("errorDistribution", {}).values()) or "")


def h2load_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v


def run_h2load(url):
    cmd = ["h2load", "-t1", "-c", str(H2_CONNS), "-m", str(H2_STREAMS), "-D", str(load_run.DURATION), url]
    out, cpu = run_child(cmd)
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out).group(2))
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1))
    # h2load gives no percentiles: its mean request time is shown in the p50 column, marked.
    mean = h2load_ms(re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out).group(1))
    failed = int(re.search(r"(\d+) failed", out).group(1))
    return dict(total=done, rps=rps, cpu=cpu, p50=mean, p99=float("nan"), errors=failed or "")


def max_rss_kb(cmd):
    """Runs cmd and returns its peak resident set size in kB: VmHWM of its own address space,
    read every 50 ms until it ends. (The rusage of a child forked from this Python process
    would count Python's own pages, copied at the fork, as the child's.)"""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.05)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {p.stderr.read().decode()[-300:]}")
    return peak


def main():
    https, h2, plain = sys.argv[1:4]
    print(f"onefix: {ONEFIX}; wrk: {shutil.which('wrk')}; h2load: {shutil.which('h2load')}; "
          f"oha: {OHA or 'not installed'}; {os.cpu_count()} CPUs")
    ins = ["--insecure"]

    gens = {
        "wrk -t1": lambda: run_wrk(https, 1),
        "onefix load --threads 1 --insecure": lambda: run_onefix(https, 1, extra=ins),
    }
    if OHA:
        gens["oha --insecure (1 tokio thread)"] = lambda: run_oha(https)
    compare("HTTPS (HTTP/1.1 over TLS), closed loop, nginx 1 worker", gens)

    gens = {
        f"h2load -t1 -c{H2_CONNS} -m{H2_STREAMS} (p50 column: mean)": lambda: run_h2load(h2),
        f"onefix load --threads 1 --http2 -c{H2_CONNS} --streams {H2_STREAMS}":
            lambda: run_onefix(h2, 1, extra=ins + ["--http2", "--streams", str(H2_STREAMS)], conns=H2_CONNS),
    }
    if OHA:
        gens[f"oha --http2 -c{H2_CONNS} -p{H2_STREAMS} (1 tokio thread)"] = \
            lambda: run_oha(h2, extra=["--http2", "-p", str(H2_STREAMS)], conns=H2_CONNS)
    conns, load_run.CONNS = load_run.CONNS, H2_CONNS
    compare(f"HTTP/2 over TLS, closed loop, {H2_STREAMS} streams per connection, nginx 1 worker", gens)
    load_run.CONNS = conns

    for rate in (20000, 1000):
        gens = {f"onefix load --rate {rate} --insecure": lambda rate=rate: run_onefix(https, 1, rate=rate, extra=ins)}
        if OHA:
            gens[f"oha -q {rate} --latency-correction"] = lambda rate=rate: run_oha(https, rate=rate)
        compare(f"HTTPS open loop at {rate:,} requests/s (latency from each due time)", gens)

    gens = {
        "wrk -t1": lambda: run_wrk(plain, 1),
        "onefix load --threads 1": lambda: run_onefix(plain, 1),
    }
    compare("Plain HTTP, closed loop, nginx 1 worker (the fast path, for regression)", gens)

    print("\n### Maximum RSS, 64 connections, closed loop\n")
    print("| load | max RSS |")
    print("|---|---:|")
    d = f"{load_run.DURATION}s"
    rows = [
        ("onefix load https -c 64 --insecure", [ONEFIX, "load", https, "-c", "64", "-d", d, "-q", "--insecure"]),
        ("onefix load https --http2 -c 64 --streams 8 --insecure",
         [ONEFIX, "load", h2, "-c", "64", "--streams", "8", "--http2", "-d", d, "-q", "--insecure"]),
        ("wrk -t1 -c64 https", ["wrk", "-t1", "-c64", f"-d{d}", https]),
        ("h2load -t1 -c64 -m8", ["h2load", "-t1", "-c64", "-m8", "-D", str(load_run.DURATION), h2]),
    ]
    if OHA:
        rows.append(("oha -c 64 --insecure https", [OHA, "--no-tui", "--insecure", "-z", d, "-c", "64", https]))
    for name, cmd in rows:
        print(f"| {name} | {max_rss_kb(cmd) / 1024:.1f} MB |")


if __name__ == "__main__":
    main()
