"""onefix benchmarks, side by side with py-spy, in one run. Driven by bench/run (see there).

Sections (env SECTIONS, comma-separated; default all):
  overhead  target slowdown + profiler CPU time and peak RSS: cpu_loop.py and io_threads.py,
            each unprofiled / onefix 100 Hz / onefix 1000 Hz / py-spy 100 Hz / py-spy 1000 Hz,
            REPS times, interleaved (the order rotates every repetition); medians and spread.
  long      many_threads.py (LONG_THREADS threads) recorded by onefix at 100 Hz for LONG_SECONDS;
            onefix RSS and recording size every LONG_EVERY seconds. py-spy (record --pid, 100 Hz)
            is attached to the same target for the same stretch, for its RSS side by side.
  report    `onefix report` of the long recording (about LONG_THREADS+1 x 100 x LONG_SECONDS
            samples): wall time, CPU time and peak RSS, REPORT_REPS times.
  lab       lab/token-updater/bench and lab/synapse-headers/bench, quoted.

How the profiler's own figures are taken (the profiler is the target's parent, so plain
wait4/`time -v` would mix in the target's CPU and RSS):
  CPU time  waitid(WEXITED|WNOWAIT) lets the profiler exit but not be reaped; its zombie's
            /proc/PID/stat utime+stime are then its own threads' time only (children's time
            is in other fields). 10 ms resolution (clock ticks).
  peak RSS  VmHWM of the profiler read from /proc/PID/status every POLL seconds (0.05) while it
            runs: the high-water mark of its own memory only (wait4's ru_maxrss would mix in the
            target's and, through fork+exec, this harness's). A peak reached in the last <50 ms
            before exit could be missed. `onefix report` runs are timed by /usr/bin/time instead.
Every run is started in its own session; any process of that session still alive after the
profiler has exited is reported as leaked (and killed). A run over its time limit is reported
as a hang (and its session killed).
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = os.path.join(HERE, "targets")
PY = os.environ.get("PYTHON", "python3")
ONEFIX = os.environ.get("ONEFIX", os.path.join(ROOT, "target", "release", "onefix"))
PYSPY = os.environ.get("PYSPY", shutil.which("py-spy") or "py-spy")
REPS = int(os.environ.get("REPS", "5"))
WORK_SECONDS = float(os.environ.get("WORK_SECONDS", "8"))
LONG_SECONDS = float(os.environ.get("LONG_SECONDS", "600"))
LONG_THREADS = int(os.environ.get("LONG_THREADS", "20"))
LONG_EVERY = float(os.environ.get("LONG_EVERY", "30"))
REPORT_REPS = int(os.environ.get("REPORT_REPS", "3"))
POLL = float(os.environ.get("POLL", "0.05"))
SECTIONS = [s for s in os.environ.get("SECTIONS", "overhead,long,report,lab").split(",") if s]
TMP = os.environ["BENCH_TMP"]
CLK = os.sysconf("SC_CLK_TCK")
PROBLEMS = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def problem(msg):
    PROBLEMS.append(msg)
    log("PROBLEM: " + msg)


# ---------------------------------------------------------------- /proc helpers

def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def proc_times(pid):
    """Own utime+stime (s) and children's cutime+cstime (s) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2:].split()
    # fields[0] is field 3 (state); utime is field 14 -> index 11
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / CLK, (cutime + cstime) / CLK


def session_members(sid):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append((int(name), stat[stat.find("(") + 1:stat.rfind(")")]))
    return found


def exited(pid):
    """True once pid (our child) has exited; it is left unreaped (a zombie) so /proc still has its times."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


# ---------------------------------------------------------------- one measured run

def measure(cmd, limit, profiler=True, on_poll=None, poll_every=None):
    """Runs cmd in a new session; returns wall, own CPU, peak RSS, exit status, output, leaks."""
    tag = f"run{len(os.listdir(TMP))}"
    out_path = os.path.join(TMP, tag + ".out")
    err_path = os.path.join(TMP, tag + ".err")
    load = loadavg()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    pid = p.pid
    hwm = 0
    rss_max = 0
    hung = False
    done = threading.Event()
    last_cb = [t0]

    def poller():
        nonlocal hwm, rss_max
        while not done.is_set():
            st = proc_status(pid)
            hwm = max(hwm, st.get("VmHWM", 0))
            rss_max = max(rss_max, st.get("VmRSS", 0))
            if on_poll and time.perf_counter() - last_cb[0] >= poll_every:
                last_cb[0] = time.perf_counter()
                on_poll(pid, time.perf_counter() - t0, st)
            done.wait(POLL)

    th = threading.Thread(target=poller, daemon=True)
    th.start()
    # Wait (without reaping) for the exit, bounded by `limit`.
    deadline = t0 + limit
    while True:
        try:
            res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            res = None
        if res is not None:
            break
        if time.perf_counter() > deadline:
            hung = True
            problem(f"hang: {' '.join(cmd)} still running after {limit:.0f} s; session killed")
            os.killpg(pid, signal.SIGKILL)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    own_cpu, _children_cpu = proc_times(pid)
    _, status, ru = os.wait4(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    leaks = session_members(pid)
    if leaks:
        problem(f"leaked processes after {' '.join(cmd[:4])}...: {leaks}; killed")
        for lpid, _ in leaks:
            try:
                os.kill(lpid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    with open(out_path) as f:
        stdout = f.read()
    with open(err_path) as f:
        stderr = f.read()
    target = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{") and "elapsed_s" in line:
            try:
                target = json.loads(line)
            except ValueError:
                pass
    peak = hwm
    return {
        "cmd": cmd, "wall_s": wall, "own_cpu_s": own_cpu, "peak_rss_kb": peak,
        "rss_max_polled_kb": rss_max, "wait4_maxrss_kb": ru.ru_maxrss,
        "total_cpu_s": ru.ru_utime + ru.ru_stime, "rc": rc, "hung": hung, "leaks": leaks,
        "target": target, "stdout": stdout, "stderr": stderr, "loadavg": load,
    }


# ---------------------------------------------------------------- section 1+2: overhead

def configs(target_name):
    only = [c.strip() for c in os.environ.get("CONFIGS", "").split(",") if c.strip()]
    return [c for c in all_configs(target_name) if not only or c[0] in only]


def all_configs(target_name):
    rec = lambda name: os.path.join(TMP, f"{target_name}-{name}.onefix")
    js = lambda name: os.path.join(TMP, f"{target_name}-{name}.json")
    return [
        ("unprofiled", lambda argv: argv, None),
        ("onefix 100 Hz", lambda argv: [ONEFIX, "record", "--rate", "100", "-o", rec("o100"), "--json", js("o100"), "--quiet", "--"] + argv, js("o100")),
        ("onefix 1000 Hz", lambda argv: [ONEFIX, "record", "--rate", "1000", "-o", rec("o1000"), "--json", js("o1000"), "--quiet", "--"] + argv, js("o1000")),
        ("py-spy 100 Hz", lambda argv: [PYSPY, "record", "--nonblocking", "--idle", "-r", "100", "-o", "/dev/null", "-f", "raw", "--"] + argv, None),
        ("py-spy 1000 Hz", lambda argv: [PYSPY, "record", "--nonblocking", "--idle", "-r", "1000", "-o", "/dev/null", "-f", "raw", "--"] + argv, None),
    ]


def sampling_of(name, run, json_path):
    """What the profiler itself counted: thread samples (one per thread per pass), read errors,
    and for onefix the sampling passes (ticks) and the ticks that started late."""
    if name.startswith("onefix") and json_path and os.path.exists(json_path):
        with open(json_path) as f:
            s = json.load(f)
        os.unlink(json_path)
        return {"samples": s["samples"], "errors": s["sampling"]["errors"], "ticks": s["sampling"]["ticks"],
                "late": s["sampling"]["late"]}
    m = re.search(r"Samples: (\d+) Errors: (\d+)", run["stdout"] + run["stderr"])
    if m:
        return {"samples": int(m.group(1)), "errors": int(m.group(2)), "ticks": None, "late": None}
    return {"samples": None, "errors": None, "ticks": None, "late": None}


def overhead():
    targets = [
        ("cpu", "CPU-bound: cpu_loop.py (pure-Python loop, 1 thread, ~22-frame stacks)", "iterations/s",
         [PY, os.path.join(TARGETS, "cpu_loop.py"), str(WORK_SECONDS)]),
        ("io", "I/O-bound: io_threads.py (8 threads of 64-byte TCP round trips to an echo server process on 127.0.0.1 that answers after 1 ms, + 8 threads of 2 ms sleeps; 17 threads, ~13-frame stacks)",
         "round trips/s", [PY, os.path.join(TARGETS, "io_threads.py"), str(WORK_SECONDS), "8", "8", "1"]),
        ("io-busy", "Loopback-saturating: io_threads.py with an echo server that answers at once (clients + server use ~1.5 cores of 2)",
         "round trips/s", [PY, os.path.join(TARGETS, "io_threads.py"), str(WORK_SECONDS), "8", "8", "0"]),
    ]
    only = os.environ.get("TARGETS")
    if only:
        targets = [t for t in targets if t[0] in only.split(",")]
    results = {}
    for tname, _, _, argv in targets:
        cfgs = configs(tname)
        results[tname] = {c[0]: [] for c in cfgs}
    total = REPS * len(targets) * len(configs("x"))
    n = 0
    for rep in range(REPS):
        for tname, _, _, argv in targets:
            cfgs = configs(tname)
            k = rep % len(cfgs)
            order = cfgs[k:] + cfgs[:k]
            for name, make, json_path in order:
                n += 1
                cmd = make(argv)
                log(f"[overhead {n}/{total}] {tname} / {name} (load {loadavg()})")
                r = measure(cmd, limit=WORK_SECONDS + 90, profiler=name != "unprofiled")
                if r["rc"] != 0:
                    problem(f"{name} on {tname}: exit status {r['rc']}; stderr tail: {r['stderr'][-500:]!r}")
                if r["target"] is None:
                    problem(f"{name} on {tname}: the target printed no result line")
                r["sampling"] = sampling_of(name, r, json_path)
                results[tname][name].append(r)
    return targets, results


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def overhead_table(targets, results):
    lines = []
    for tname, title, unit, argv in targets:
        res = results[tname]
        base = med([r["target"]["ops_per_s"] for r in res["unprofiled"] if r["target"]])
        ebase = med([r["target"]["ops_per_s"] * r["target"]["elapsed_s"] / r["target"]["cpu_s"]
                     for r in res["unprofiled"] if r["target"]])
        lines.append("")
        lines.append(f"{title}, {WORK_SECONDS:g} s per run, median of {REPS} (spread = min..max)")
        lines.append(f"  command: {' '.join(argv)}")
        hdr = (f"  {'configuration':<15} {unit:>13} {'spread (min..max)':>23} {'slowdown':>8} {'per-CPU':>7} {'prof CPU s':>10} "
               f"{'%core':>6} {'RSS MB':>6} {'samples/s':>9} {'ticks/s':>7} {'late':>5} {'errors':>6} {'tgt CPU s':>9} {'load':>5}")
        lines.append(hdr)
        for name, runs in res.items():
            ok = [r for r in runs if r["target"]]
            rates = [r["target"]["ops_per_s"] for r in ok]
            m = med(rates)
            spread = f"{min(rates):,.0f}..{max(rates):,.0f}" if rates else "-"
            slow = None if (m is None or base is None) else (base - m) / base * 100
            e = med([r["target"]["ops_per_s"] * r["target"]["elapsed_s"] / r["target"]["cpu_s"] for r in ok])
            eslow = None if (e is None or ebase is None) else (ebase - e) / ebase * 100
            cpu = core = rss = sps = tps = late = errs = None
            tcpu = med([r["target"]["cpu_s"] for r in ok])
            ld = med([float(r["loadavg"]) for r in runs])
            if name != "unprofiled":
                cpu = med([r["own_cpu_s"] for r in runs])
                core = med([r["own_cpu_s"] / r["wall_s"] * 100 for r in runs])
                rss = med([r["peak_rss_kb"] / 1024 for r in runs])
                sps = med([r["sampling"]["samples"] / r["wall_s"] for r in runs if r["sampling"]["samples"] is not None])
                tps = med([r["sampling"]["ticks"] / r["wall_s"] for r in runs if r["sampling"]["ticks"] is not None])
                lates = [r["sampling"]["late"] for r in runs if r["sampling"]["late"] is not None]
                late = sum(lates) if lates else None
                errs = sum(r["sampling"]["errors"] or 0 for r in runs)
            lines.append(
                f"  {name:<15} {fmt(m, ',.0f'):>13} {spread:>23} {fmt(slow, '+.1f') + ('%' if slow is not None else ''):>8} "
                f"{fmt(eslow, '+.1f') + ('%' if eslow is not None else ''):>7} "
                f"{fmt(cpu, '.2f'):>10} {fmt(core, '.1f'):>6} {fmt(rss, '.1f'):>6} {fmt(sps, ',.0f'):>9} {fmt(tps, '.0f'):>7} "
                f"{fmt(late, 'd'):>5} {fmt(errs, 'd'):>6} {fmt(tcpu, '.2f'):>9} {fmt(ld, '.1f'):>5}")
    lines.append("")
    lines.append("  slowdown = (unprofiled median - configuration median) / unprofiled median; negative = faster (noise).")
    lines.append("  per-CPU = the same on work per CPU-second of the target process (its own getrusage): the cost to the")
    lines.append("  target's own execution, without the CPU it lost to other processes (the profiler, or other load).")
    lines.append("  prof CPU s = the profiler process's own user+sys time for the whole run (its zombie's /proc stat);")
    lines.append("  %core = that / the run's wall time (python start-up and the profiler's final report included);")
    lines.append("  RSS MB = the profiler's own peak RSS (VmHWM polled every 50 ms); samples/s = thread stacks recorded")
    lines.append("  per second of wall time, as the profiler counts them (onefix: `samples` of --json; py-spy: 'Samples:');")
    lines.append("  ticks/s, late = onefix's sampling passes per second and passes that started over one interval late")
    lines.append("  (onefix then skips ahead; py-spy catches up); errors = failed reads, summed over the repetitions;")
    lines.append("  tgt CPU s = the target process's own user+sys time (resource.getrusage), median; load = the machine's")
    lines.append("  1-minute load average at the start of the runs, median (2 cores, shared with other work).")
    return lines


# ---------------------------------------------------------------- section 3: long recording

def long_run():
    rec = os.path.join(TMP, "long.onefix")
    js = os.path.join(TMP, "long.json")
    argv = [PY, os.path.join(TARGETS, "many_threads.py"), str(LONG_SECONDS), str(LONG_THREADS)]
    cmd = [ONEFIX, "record", "--rate", "100", "-o", rec, "--json", js, "--quiet", "--"] + argv
    series = []
    pyspy = {"proc": None, "hwm": 0, "series": []}

    def on_poll(pid, t, st):
        size = os.path.getsize(rec) if os.path.exists(rec) else 0
        row = {"t_s": round(t, 1), "onefix_rss_kb": st.get("VmRSS"), "onefix_hwm_kb": st.get("VmHWM"), "file_bytes": size}
        # start py-spy on the same target once onefix has started it
        if pyspy["proc"] is None:
            kids = [int(x) for x in open(f"/proc/{pid}/task/{pid}/children").read().split()] if os.path.exists(f"/proc/{pid}/task/{pid}/children") else []
            if kids:
                dur = max(1, int(LONG_SECONDS - t - 5))
                pyspy["proc"] = subprocess.Popen(
                    [PYSPY, "record", "--nonblocking", "--idle", "-r", "100", "-o", "/dev/null", "-f", "raw",
                     "--pid", str(kids[0]), "-d", str(dur)],
                    stdout=open(os.path.join(TMP, "long-pyspy.err"), "w"), stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True)
                pyspy["cmd"] = pyspy["proc"].args
                pyspy["wall_s"] = dur
        elif not exited(pyspy["proc"].pid):
            pst = proc_status(pyspy["proc"].pid)
            pyspy["hwm"] = max(pyspy["hwm"], pst.get("VmHWM", 0))
            row["pyspy_rss_kb"] = pst.get("VmRSS")
        series.append(row)
        log(f"[long] {row}")

    log(f"[long] {' '.join(cmd)}  ({LONG_SECONDS:.0f} s)")
    r = measure(cmd, limit=LONG_SECONDS + 300, on_poll=on_poll, poll_every=LONG_EVERY if LONG_EVERY > 0 else 30)
    # one last row: the final file
    if pyspy["proc"] is not None:
        deadline = time.time() + 30
        while not exited(pyspy["proc"].pid) and time.time() < deadline:
            time.sleep(0.05)
        if exited(pyspy["proc"].pid):
            pyspy["cpu_s"] = proc_times(pyspy["proc"].pid)[0]
        else:
            problem("py-spy attached to the long run did not stop; killed")
            pyspy["proc"].kill()
        pyspy["proc"].wait()
        pyspy["rc"] = pyspy["proc"].returncode
        if pyspy["rc"] != 0:
            problem(f"py-spy attached to the long run: exit status {pyspy['rc']}")
    if r["rc"] != 0:
        problem(f"long run: onefix exit status {r['rc']}; stderr tail: {r['stderr'][-500:]!r}")
    info = {}
    if os.path.exists(js):
        with open(js) as f:
            info = json.load(f)
    size = os.path.getsize(rec) if os.path.exists(rec) else 0
    with open(os.path.join(TMP, "long-pyspy.err")) as f:
        m = re.search(r"Samples: (\d+) Errors: (\d+)", f.read())
    return {"run": r, "series": series, "file_bytes": size, "json": info, "rec": rec, "cmd": cmd,
            "pyspy_hwm_kb": pyspy["hwm"], "pyspy_cmd": pyspy.get("cmd"), "pyspy_cpu_s": pyspy.get("cpu_s"),
            "pyspy_samples": int(m.group(1)) if m else None,
            "pyspy_wall_s": pyspy.get("wall_s")}


def long_table(L):
    r = L["run"]
    lines = [""]
    samples = L["json"].get("samples")
    minutes = r["wall_s"] / 60
    lines.append(f"Long recording: {LONG_THREADS} threads (+ main) at 100 Hz for {LONG_SECONDS:.0f} s")
    lines.append(f"  command: {' '.join(L['cmd'])}")
    if L.get("pyspy_cmd"):
        lines.append(f"  py-spy attached to the same target: {' '.join(L['pyspy_cmd'])}")
    lines.append(f"  {'t (s)':>7} {'onefix RSS MB':>14} {'file MB':>9} {'py-spy RSS MB':>14}")
    for row in L["series"]:
        ps = row.get("pyspy_rss_kb")
        lines.append(f"  {row['t_s']:>7.0f} {fmt((row['onefix_rss_kb'] or 0) / 1024, '.1f'):>14} "
                     f"{row['file_bytes'] / 1e6:>9.2f} {fmt(ps / 1024 if ps else None, '.1f'):>14}")
    lines.append(f"  onefix: exit {r['rc']}, wall {r['wall_s']:.1f} s, own CPU {r['own_cpu_s']:.1f} s "
                 f"({r['own_cpu_s'] / r['wall_s'] * 100:.1f}% of a core), peak RSS {r['peak_rss_kb'] / 1024:.1f} MB, "
                 f"samples {samples if samples is not None else '-'}, sampling {L['json'].get('sampling')}")
    pts = [(row["t_s"], row["onefix_rss_kb"] / 1024) for row in L["series"] if row.get("onefix_rss_kb") and row["t_s"] >= 25]
    if len(pts) >= 3 and samples:
        # least-squares slope of onefix's RSS over time, and what it would reach after an hour if it kept on
        n = len(pts)
        mt = sum(t for t, _ in pts) / n
        mr = sum(r for _, r in pts) / n
        slope = sum((t - mt) * (r - mr) for t, r in pts) / sum((t - mt) ** 2 for t, _ in pts)  # MB/s
        per_sample = slope * 1024 * 1024 / (samples / r["wall_s"])
        hour = mr + slope * (3600 - mt)
        lines.append(f"  onefix RSS growth (least squares over t >= 25 s): {slope * 60:.2f} MB per minute = {per_sample:.0f} bytes "
                     f"per sample taken; if linear, about {hour:.0f} MB after 60 min (extrapolated, not measured)")
    lines.append(f"  recording: {L['file_bytes'] / 1e6:.2f} MB = {L['file_bytes'] / 1e6 / minutes:.2f} MB per minute"
                 + (f" = {L['file_bytes'] / samples:.1f} bytes per sample" if samples else ""))
    pc = L.get("pyspy_cpu_s")
    pw = L.get("pyspy_wall_s")
    lines.append(f"  py-spy (same target, attached for {fmt(pw, 'd')} s of the stretch): peak RSS {L['pyspy_hwm_kb'] / 1024:.1f} MB, "
                 f"own CPU {fmt(pc, '.1f')} s ({fmt(pc / pw * 100 if pc is not None and pw else None, '.1f')}% of a core), "
                 f"samples {fmt(L.get('pyspy_samples'), 'd')}")
    return lines


# ---------------------------------------------------------------- section 4: report speed

def report_speed(rec):
    runs = []
    for i in range(REPORT_REPS):
        for variant, extra in (("terminal", []), ("terminal + --json", ["--json", os.path.join(TMP, "report.json")])):
            cmd = [ONEFIX, "report", rec] + extra
            log(f"[report {i + 1}/{REPORT_REPS}] {' '.join(cmd)}")
            # /usr/bin/time (a small C program) reports onefix's own CPU and max RSS: wait4 from this
            # Python harness would carry the harness's RSS over the fork+exec into ru_maxrss.
            r = measure(["/usr/bin/time", "-f", "BENCHTIME %e %U %S %M"] + cmd, limit=600, profiler=False)
            m = re.search(r"BENCHTIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)", r["stderr"])
            if m:
                r["wall_s"] = float(m.group(1))
                r["own_cpu_s"] = float(m.group(2)) + float(m.group(3))
                r["peak_rss_kb"] = int(m.group(4))
            else:
                problem(f"onefix report: no timing from /usr/bin/time: {r['stderr'][-300:]!r}")
            if r["rc"] != 0:
                problem(f"onefix report exit status {r['rc']}: {r['stderr'][-500:]!r}")
            r["variant"] = variant
            runs.append(r)
    samples = None
    p = os.path.join(TMP, "report.json")
    if os.path.exists(p):
        with open(p) as f:
            samples = json.load(f).get("samples")
    return {"runs": runs, "samples": samples, "file_bytes": os.path.getsize(rec)}


def report_table(R, rec):
    lines = ["", f"Analysis: onefix report of the long recording ({fmt(R['samples'], ',d')} samples, {R['file_bytes'] / 1e6:.1f} MB), "
             f"median of {REPORT_REPS}"]
    for variant in ("terminal", "terminal + --json"):
        runs = [r for r in R["runs"] if r["variant"] == variant]
        w = med([r["wall_s"] for r in runs])
        c = med([r["own_cpu_s"] for r in runs])
        m = med([r["peak_rss_kb"] / 1024 for r in runs])
        sps = R["samples"] / w if R["samples"] and w else None
        lines.append(f"  onefix report REC {'--json J' if 'json' in variant else '':<9} wall {w:.2f} s "
                     f"(spread {min(r['wall_s'] for r in runs):.2f}..{max(r['wall_s'] for r in runs):.2f}), CPU {c:.2f} s, "
                     f"peak RSS {m:.0f} MB, {fmt(sps, ',.0f')} samples/s")
    return lines


# ---------------------------------------------------------------- section 5: lab

def lab():
    out = []
    for case in ("token-updater", "synapse-headers"):
        cmd = [os.path.join(ROOT, "lab", case, "bench")]
        log(f"[lab] {cmd[0]}")
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                           timeout=600)
        if p.returncode != 0:
            problem(f"lab/{case}/bench exit status {p.returncode}: {p.stderr[-500:]!r}")
        out.append((f"lab/{case}/bench", p.stdout.strip(), time.perf_counter() - t0))
    return out


def main():
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    head = [f"onefix benchmarks, {stamp}, on {os.uname().nodename} ({os.cpu_count()} cores, load at start {loadavg()})"]
    head.append(f"  onefix built from commit {os.environ.get('BENCH_COMMIT', '?')}")
    head.append(f"  onefix: {ONEFIX}   py-spy: {subprocess.run([PYSPY, '--version'], capture_output=True, text=True).stdout.strip()}"
                f"   python: {subprocess.run([PY, '--version'], capture_output=True, text=True).stdout.strip()}")
    raw = {"date": stamp, "sections": SECTIONS}
    lines = list(head)
    if "overhead" in SECTIONS:
        targets, results = overhead()
        lines += overhead_table(targets, results)
        raw["overhead"] = {t: {c: [{k: v for k, v in r.items() if k not in ("stdout", "stderr")} for r in runs]
                               for c, runs in res.items()} for t, res in results.items()}
    L = None
    if "long" in SECTIONS:
        L = long_run()
        lines += long_table(L)
        raw["long"] = {k: v for k, v in L.items() if k != "run"}
        raw["long"]["run"] = {k: v for k, v in L["run"].items() if k not in ("stdout",)}
    if "report" in SECTIONS:
        rec = L["rec"] if L else os.environ.get("REPORT_REC")
        if rec and os.path.exists(rec):
            R = report_speed(rec)
            lines += report_table(R, rec)
            raw["report"] = {"samples": R["samples"], "file_bytes": R["file_bytes"],
                             "runs": [{k: v for k, v in r.items() if k not in ("stdout", "stderr")} for r in R["runs"]]}
        else:
            problem("report section skipped: no recording (run with the long section or set REPORT_REC)")
    if "lab" in SECTIONS:
        labs = lab()
        lines += ["", "Lab benches (no profiler)"]
        for name, text, secs in labs:
            lines.append(f"  $ {name}    ({secs:.0f} s)")
            lines += ["    " + t for t in text.splitlines()]
        raw["lab"] = labs
    lines += ["", f"load at end {loadavg()}; problems: {len(PROBLEMS)}"]
    lines += ["  - " + p for p in PROBLEMS]
    raw["problems"] = PROBLEMS
    with open(os.path.join(TMP, "results.json"), "w") as f:
        json.dump(raw, f, indent=1, default=str)
    with open(os.path.join(TMP, "results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\n(raw figures: {os.path.join(TMP, 'results.json')})")
    return 1 if PROBLEMS else 0


if __name__ == "__main__":
    sys.exit(main())
