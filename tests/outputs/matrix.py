#!/usr/bin/env python3
"""Every file onefix writes, against the release binary, as root: nothing of the user's is ever
removed, truncated or followed into, and every bad output is refused before the target starts.

    tests/outputs/matrix.py [path/to/onefix]     # default: target/release/onefix

Prints one line per failed check and `N passed, M failed` (exit 1 on any failure). Each check
runs a real recording of a short Python program; `cargo test` runs this matrix too
(crates/onefix/tests/outputs.rs), against the debug binary.
"""

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/onefix")
SCRATCH = tempfile.mkdtemp(prefix="onefix-outputs-")
JOB = os.path.join(SCRATCH, "job.py")
with open(JOB, "w") as f:
    f.write(
        "import time\n"
        "def work():\n"
        "    return sum(i * i for i in range(20000))\n"
        "end = time.time() + 0.7\n"
        "while time.time() < end:\n"
        "    work()\n"
    )
MARKER = os.path.join(SCRATCH, "target-ran")
# A target that leaves a marker: a refused run must not have started it.
MARKING = ["python3", "-c", f"open({MARKER!r}, 'w').write('ran')"]
PREVIOUS = b"the user's own bytes\n"

# Each output flag, whether `-` may stand for stdout, and how to recognise its content.
FLAGS = {
    "-o": (False, lambda b: b.startswith(b"ONEFIX\0R")),
    "--json": (True, lambda b: json.loads(b)["tool"] == "onefix"),
    "--flamegraph": (True, lambda b: b"<svg" in b[:400]),
    "--speedscope": (True, lambda b: "speedscope" in json.loads(b)["$schema"]),
    "--folded": (True, lambda b: b.endswith(b"\n") and all(l.rsplit(b" ", 1)[1].isdigit() for l in b.splitlines())),
    "--pprof": (False, lambda b: len(gzip.decompress(b)) > 0),
    "--html": (True, lambda b: b"<html" in b[:400].lower()),
    "--firefox": (True, lambda b: json.loads(b)["meta"]["preprocessedProfileVersion"] > 0),
    "--sarif": (True, lambda b: json.loads(b)["version"] == "2.1.0"),
}

passed, failed = 0, []


def check(name, ok, detail=""):
    global passed
    if ok:
        passed += 1
    else:
        failed.append(f"{name}: {detail}"[:600])
        print(f"FAIL {name}: {detail}"[:600], flush=True)


def onefix(*args, timeout=60, **kw):
    return subprocess.run([BIN, *args], capture_output=True, timeout=timeout, **kw)


def record(flag, path, target=None, extra=()):
    """`onefix record` with one output flag at `path` (and the recording elsewhere)."""
    args = ["record", "--quiet", *extra]
    if flag != "-o":
        args += ["--no-save"]
    args += [flag, path, "--"] + (target or ["python3", JOB])
    return onefix(*args)


def fresh(name):
    d = os.path.join(SCRATCH, name)
    os.makedirs(d)
    return d


def user_file(d, name):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(PREVIOUS)
    return p


def read(p):
    with open(p, "rb") as f:
        return f.read()


def is_whole(flag, body):
    try:
        return bool(FLAGS[flag][1](body))
    except Exception:
        return False


def no_strays(d, keep):
    """Only the files named in `keep` are in `d`: no temporary or partial file was left."""
    left = sorted(set(os.listdir(d)) - set(keep))
    return not left, left


def survives(flag):
    """An existing file of the user's survives failed runs byte for byte."""
    d = fresh("survive" + flag.replace("-", "_"))
    p = user_file(d, "out.data")
    runs = {
        "command not found": ["no-such-command-onefix"],
        "target killed at start": ["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
    }
    for why, target in runs.items():
        user_file(d, "out.data")
        r = record(flag, p, target)
        check(f"{flag} {why}: exit non-zero", r.returncode != 0, r.stderr.decode())
        if r.returncode == 2:
            # Nothing was recorded: the file is as it was.
            check(f"{flag} {why}: the user's file survives", read(p) == PREVIOUS, read(p)[:80])
        else:
            # A sample was taken before the target died: a recording was made and reported
            # (exit 1), so the output is there, whole.
            check(f"{flag} {why}: a whole output or the user's file", is_whole(flag, read(p)) or read(p) == PREVIOUS, read(p)[:80])
    # Another output refused: nothing runs, nothing is touched.
    user_file(d, "out.data")
    r = record(flag, p, extra=["--flamegraph" if flag != "--flamegraph" else "--html", os.path.join(d, "missing/x.svg")])
    check(f"{flag} other output refused: exit 2", r.returncode == 2, r.stderr.decode())
    check(f"{flag} other output refused: the user's file survives", read(p) == PREVIOUS)
    # Interrupted at start: either nothing was recorded and the file is as it was, or the run
    # completed and the file is a whole output; never removed, never half written.
    args = [BIN, "record", "--quiet"] + ([] if flag == "-o" else ["--no-save"]) + [flag, p, "--", "python3", JOB]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    body = read(p) if os.path.exists(p) else None
    whole = body is not None and body != PREVIOUS and is_whole(flag, body)
    check(f"{flag} interrupted at start: the file is the user's or a whole output", body == PREVIOUS or whole, repr(body)[:80])
    ok, left = no_strays(d, ["out.data"])
    check(f"{flag}: no temporary or partial file left", ok, left)


def devices_fifos_links_stdout(flag):
    stdout_ok, looks_right = FLAGS[flag]
    # /dev/null stays a character device.
    r = record(flag, "/dev/null")
    check(f"{flag} /dev/null: exit 0", r.returncode == 0, r.stderr.decode())
    st = os.stat("/dev/null")
    check(f"{flag} /dev/null: still a character device", stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1)
    # A FIFO receives the whole stream.
    d = fresh("fifo" + flag.replace("-", "_"))
    fifo = os.path.join(d, "pipe")
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["bytes"] = f.read()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    r = record(flag, fifo)
    t.join(timeout=20)
    check(f"{flag} FIFO: exit 0", r.returncode == 0, r.stderr.decode())
    body = got.get("bytes", b"")
    try:
        right = looks_right(body)
    except Exception as e:
        right, body = False, repr(e).encode()
    check(f"{flag} FIFO: the reader gets the whole output", right, body[:80])
    check(f"{flag} FIFO: still a FIFO", stat.S_ISFIFO(os.stat(fifo).st_mode))
    # A symbolic link is kept and its target gets the content.
    target = user_file(d, "real.data")
    link = os.path.join(d, "link.data")
    os.symlink(target, link)
    r = record(flag, link)
    check(f"{flag} link: exit 0", r.returncode == 0, r.stderr.decode())
    check(f"{flag} link: the link is kept", os.path.islink(link) and os.readlink(link) == target)
    try:
        right = looks_right(read(target))
    except Exception:
        right = False
    check(f"{flag} link: its target holds the output", right, read(target)[:80])
    # A link to nothing is refused, and left alone.
    dangling = os.path.join(d, "dangling")
    os.symlink(os.path.join(d, "nowhere"), dangling)
    r = record(flag, dangling, MARKING)
    check(f"{flag} dangling link: refused with exit 2", r.returncode == 2, r.stderr.decode())
    check(f"{flag} dangling link: kept", os.path.islink(dangling) and not os.path.exists(os.path.join(d, "nowhere")))
    # /dev/stdout (a link to a pipe here) is written through, and the summary steps aside.
    if stdout_ok:
        r = record(flag, "/dev/stdout")
        check(f"{flag} /dev/stdout: the output is on stdout, whole", r.returncode == 0 and is_whole(flag, r.stdout), r.stdout[:80] + r.stderr[-200:])
    # `-` is standard output where it makes sense, else refused before anything runs.
    r = record(flag, "-", MARKING if not stdout_ok else None)
    if stdout_ok:
        try:
            right = r.returncode == 0 and looks_right(r.stdout)
        except Exception:
            right = False
        check(f"{flag} -: the output is on stdout", right, r.stdout[:80] + r.stderr[-200:])
        check(f"{flag} -: no file named -", not os.path.exists("-"))
    else:
        check(f"{flag} -: refused with exit 2", r.returncode == 2 and b"standard output" in r.stderr, r.stderr.decode())
        check(f"{flag} -: the target did not start", not os.path.exists(MARKER))


def refused_before_the_target_starts():
    d = fresh("refused")
    existing_dir = fresh("refused/adir")
    rec = user_file(d, "rec.onefix")
    ro = fresh("refused/readonly")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", ro], capture_output=True).returncode == 0
    cases = [
        ("missing directory", ["--flamegraph", os.path.join(d, "no/such/dir/x.svg")]),
        ("a directory", ["--json", existing_dir]),
        ("same path twice", ["--json", os.path.join(d, "same"), "--html", os.path.join(d, "same")]),
        ("an output on the recording", ["-o", os.path.join(d, "r2.onefix"), "--folded", os.path.join(d, "r2.onefix")]),
        ("-o .json is ambiguous", ["-o", os.path.join(d, "p.json")]),
        ("--no-save with a recording path", ["--no-save", "-o", os.path.join(d, "r3.onefix")]),
        ("a block device", ["--json", "/dev/loop0"] if os.path.exists("/dev/loop0") else None),
        ("an unwritable directory", ["--pprof", os.path.join(ro, "p.pb.gz")] if mounted else None),
    ]
    for name, outs in cases:
        if outs is None:
            continue
        r = onefix("record", "--quiet", *outs, "--", *MARKING)
        err = r.stderr.decode().strip()
        check(f"refused ({name}): exit 2", r.returncode == 2, err)
        check(f"refused ({name}): one sentence", err.count("\n") == 0 and err.startswith("onefix: "), err)
        check(f"refused ({name}): the target did not start", not os.path.exists(MARKER))
    if mounted:
        subprocess.run(["umount", ro])
    # `report` refuses an output over the recording it reads.
    r = onefix("report", "--quiet", rec, "--json", rec)
    check("report: an output over its input is refused", r.returncode == 2 and read(rec) == PREVIOUS, r.stderr.decode())
    ok, left = no_strays(d, ["rec.onefix", "adir", "readonly"])
    check("refused: nothing left behind", ok, left)


def extension_and_default_names():
    d = fresh("names")
    r = onefix("record", "--quiet", "-o", "profile.svg", "--", "python3", JOB, cwd=d)
    check("-o profile.svg: exit 0", r.returncode == 0, r.stderr.decode())
    check("-o profile.svg: a flame graph", os.path.exists(os.path.join(d, "profile.svg")) and b"<svg" in read(os.path.join(d, "profile.svg"))[:400])
    names = [n for n in os.listdir(d) if n.endswith(".onefix")]
    check("-o profile.svg: the recording keeps a readable default name", len(names) == 1 and names[0].startswith("onefix-job-20"), names)
    r = onefix("record", "--quiet", "--no-save", "--", "python3", JOB, cwd=d)
    # stdout is a pipe, and the target's: the summary is on stderr, and stdout is the job's alone.
    check("--no-save: exit 0 and the report on stderr", r.returncode == 0 and b"job.py" in r.stderr and b"#1" not in r.stdout, r.stderr.decode())
    check("--no-save: no new file", sorted(os.listdir(d)) == sorted(names + ["profile.svg"]), os.listdir(d))


def disk_full():
    d = fresh("diskfull")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", d], capture_output=True).returncode != 0:
        print("SKIP disk full: cannot mount a tmpfs here", flush=True)
        return
    try:
        prev = user_file(d, "report.html")
        rec = os.path.join(SCRATCH, "diskfull.onefix")
        r = onefix("record", "--quiet", "-o", rec, "--html", prev, "--", "python3", JOB)
        err = r.stderr.decode()
        check("disk full: exit non-zero", r.returncode != 0, err)
        check("disk full: the previous file is intact", read(prev) == PREVIOUS, read(prev)[:80])
        check("disk full: a sentence naming the file, the cause and the kept recording",
              prev in err and "No space" in err and rec in err and "onefix report" in err, err)
        check("disk full: the recording was kept", os.path.exists(rec) and read(rec).startswith(b"ONEFIX\0R"))
        ok, left = no_strays(d, ["report.html"])
        check("disk full: no temporary file left", ok, left)
    finally:
        subprocess.run(["umount", d])


def load_json():
    """`onefix load --json`: checked before any request; /dev/null, a link and `-` work."""
    import http.server
    import socketserver

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    d = fresh("load")
    try:
        r = onefix("load", "-q", "-n", "20", "-c", "2", "--json", os.path.join(d, "no/dir/r.json"), url)
        check("load --json missing dir: exit 2", r.returncode == 2 and b"does not exist" in r.stderr, r.stderr.decode())
        r = onefix("load", "-q", "-n", "20", "-c", "2", "--json", "/dev/null", url)
        check("load --json /dev/null: exit 0, still a device", r.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), r.stderr.decode())
        r = onefix("load", "-q", "-n", "20", "-c", "2", "--json", "-", url)
        try:
            ok = json.loads(r.stdout)["completed"] == 20
        except Exception:
            ok = False
        check("load --json -: the result on stdout", ok, r.stdout[:80])
        target = user_file(d, "real.json")
        link = os.path.join(d, "link.json")
        os.symlink(target, link)
        r = onefix("load", "-q", "-n", "20", "-c", "2", "--json", link, url)
        check("load --json link: kept, its target written", os.path.islink(link) and b"completed" in read(target), r.stderr.decode())
    finally:
        server.shutdown()


def main():
    if os.geteuid() != 0:
        print("these checks run as root, as onefix does in production", flush=True)
    if not os.access(BIN, os.X_OK):
        print(f"no onefix binary at {BIN}: build it first (cargo build --release)")
        return 2
    try:
        for flag in FLAGS:
            survives(flag)
            devices_fifos_links_stdout(flag)
        refused_before_the_target_starts()
        extension_and_default_names()
        disk_full()
        load_json()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    print(f"{passed} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
