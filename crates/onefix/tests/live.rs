//! Live tests: onefix records real Python programs and must name the right line. They assert
//! *which* line wins and what kind of cost it is, never how fast anything ran (except the lab
//! cases, whose gain bound is compared with the speedup measured in the same test run).

mod common;
use common::{compile_c, first_finding, go_build, have_go, line_of, onefix, record, record_command, repo, Scratch};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BUSY: &str = r#"
import time

def spin(n):
    total = 0
    for i in range(n):
        total += i * i % 7   # BUSY
    return total

def main():
    end = time.time() + 2.5
    while time.time() < end:
        spin(20000)

main()
"#;

#[test]
fn a_busy_loop_is_named_at_its_line_as_compute() {
    let s = Scratch::new("busy");
    let prog = s.path("busy.py");
    std::fs::write(&prog, BUSY).unwrap();
    let (report, _) = record(&s, &["--mode", "cpu", "--rate", "200"], &prog);
    let f = first_finding(&report);
    // The body line, or, when the `for` line holds 40% or more of the loop (its iterator's
    // steps: about 60/40 here, so either comes out), the loop's own iteration at its header.
    let body = f["line"] == line_of(&prog, "# BUSY");
    let whole_loop = f["rule"] == "loop-iteration" && f["line"] == line_of(&prog, "for i in range(n):");
    assert!(body || whole_loop, "{report:#}");
    assert_eq!(f["kind"], "hot-loop-compute");
    assert!(f["share"].as_f64().unwrap() > 0.5, "{report:#}");
    let body_part = format!("line {} ", line_of(&prog, "# BUSY"));
    assert!(!whole_loop || f["why"].as_str().unwrap().contains(&body_part), "{report:#}");
    assert_eq!(report["mode"], "cpu");
    assert!(report["samples"].as_u64().unwrap() > 100);
}

const SLEEPY: &str = r#"
import time

def poll():
    time.sleep(0.05)   # WAIT

def work():
    return sum(i for i in range(3000))

for _ in range(50):
    poll()
    work()
"#;

#[test]
fn a_sleep_is_charged_to_the_line_that_waits_in_wall_mode_only() {
    let s = Scratch::new("sleep");
    let prog = s.path("sleepy.py");
    std::fs::write(&prog, SLEEPY).unwrap();
    let (wall, _) = record(&s, &[], &prog);
    let f = first_finding(&wall);
    assert_eq!(f["line"], line_of(&prog, "# WAIT"), "{wall:#}");
    assert_eq!(f["kind"], "blocking-wait");
    assert!(f["share"].as_f64().unwrap() > 0.6, "{wall:#}");

    let (cpu, _) = record(&s, &["--mode", "cpu"], &prog);
    let waits: Vec<&Value> =
        cpu["findings"].as_array().unwrap().iter().filter(|f| f["line"] == line_of(&prog, "# WAIT")).collect();
    assert!(waits.is_empty(), "a sleep costs no CPU: {cpu:#}");
}

const POOL: &str = r#"
import time
from concurrent.futures import ThreadPoolExecutor

def crunch(n):
    x = 0
    for i in range(n):
        x += (i * 31) % 17   # CRUNCH
    return x

with ThreadPoolExecutor(max_workers=8) as pool:
    end = time.time() + 3
    while time.time() < end:
        pool.submit(crunch, 100000).result()
"#;

#[test]
fn idle_pool_workers_are_not_findings() {
    let s = Scratch::new("pool");
    let prog = s.path("pool.py");
    std::fs::write(&prog, POOL).unwrap();
    let (report, out) = record(&s, &[], &prog);
    let crunch = line_of(&prog, "# CRUNCH");
    let f = first_finding(&report);
    assert_eq!(f["line"], crunch, "{report:#}");
    for f in report["findings"].as_array().unwrap() {
        let code = f["code"].as_str().unwrap_or("");
        assert!(!code.contains(".result()"), "a thread waiting for a worker is not a cost: {report:#}");
    }
    // stdout is the program's (a pipe here): the summary is on stderr.
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("idle for want of work"), "{summary}");
}

#[test]
fn a_saved_recording_renders_again_with_the_same_findings() {
    let s = Scratch::new("report");
    let prog = s.path("busy.py");
    std::fs::write(&prog, BUSY).unwrap();
    let (live, _) = record(&s, &["--mode", "cpu"], &prog);
    let again = s.path("again.json");
    let svg = s.path("flame.svg");
    let speedscope = s.path("speedscope.json");
    let folded = s.path("folded.txt");
    let out = onefix()
        .arg("report")
        .arg(s.path("rec.onefix"))
        .arg("--json")
        .arg(&again)
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--speedscope")
        .arg(&speedscope)
        .arg("--folded")
        .arg(&folded)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again: Value = serde_json::from_slice(&std::fs::read(&again).unwrap()).unwrap();
    assert_eq!(again["findings"], live["findings"]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("spin"));
    let ss: Value = serde_json::from_slice(&std::fs::read(&speedscope).unwrap()).unwrap();
    assert!(ss["profiles"].as_array().is_some_and(|p| !p.is_empty()));
    assert!(std::fs::read_to_string(&folded).unwrap().lines().any(|l| l.contains("spin (busy.py:")));
}

// ---- Bad input: one sentence on stderr, non-zero exit, no panic ----

fn fails_with(args: &[&str], expect: &str) {
    let out = onefix().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(err.contains(expect), "{args:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    // clap's usage errors add a pointer to --help; the sentence itself is the first line.
    let lines: Vec<&str> =
        err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more information")).collect();
    assert_eq!(lines.len(), 1, "one sentence: {err}");
}

#[test]
fn bad_inputs_get_one_clear_sentence() {
    let s = Scratch::new("bad");
    let out = s.path("x.onefix");
    let out = out.to_str().unwrap();
    fails_with(&["record", "-o", out, "--pid", "999999999"], "no process with pid 999999999");
    fails_with(&["record", "-o", out, "--", "no-such-command-onefix"], "command not found");
    fails_with(
        &["record", "-o", "/nonexistent-dir/x.onefix", "--", "python3", "-c", "pass"],
        "cannot write the recording",
    );
    fails_with(&["record", "-o", out, "--", "true"], "no sample was taken");
    // A kernel thread has no executable to read: neither Python nor native.
    if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
        fails_with(
            &["record", "-o", out, "--pid", "2", "--duration", "1s"],
            "neither a Python program nor a native executable",
        );
    }
    fails_with(&["record", "-o", out, "--rate", "fast", "--", "python3"], "not a rate");
    fails_with(&["record", "-o", out, "--duration", "soon", "--", "python3"], "not a duration");
    let garbage = s.path("garbage.onefix");
    std::fs::write(&garbage, b"definitely not a recording").unwrap();
    fails_with(&["report", garbage.to_str().unwrap()], "not an onefix recording");
    let empty = s.path("empty.onefix");
    std::fs::write(&empty, b"").unwrap();
    fails_with(&["report", empty.to_str().unwrap()], "empty");
    fails_with(&["report", s.path("missing.onefix").to_str().unwrap()], "cannot open the recording");
}

#[test]
fn a_truncated_recording_still_reports_what_it_holds() {
    let s = Scratch::new("trunc");
    let prog = s.path("busy.py");
    std::fs::write(&prog, BUSY).unwrap();
    record(&s, &["--mode", "cpu"], &prog);
    let full = std::fs::read(s.path("rec.onefix")).unwrap();
    let cut = s.path("cut.onefix");
    std::fs::write(&cut, &full[..full.len() * 2 / 3]).unwrap();
    let out = onefix().arg("report").arg(&cut).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ends early"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("busy.py"));
}

#[test]
fn a_target_that_crashes_mid_recording_is_reported_with_its_status() {
    let s = Scratch::new("crash");
    let prog = s.path("crash.py");
    std::fs::write(&prog, "import os, signal, time\nend = time.time() + 1\nwhile time.time() < end:\n    pass\nos.kill(os.getpid(), signal.SIGKILL)\n").unwrap();
    // A crashed target ends onefix with status 1 (recorded, but not as asked): see bad_input.rs.
    let json = s.path("report.json");
    let out = onefix()
        .args(["record", "--quiet", "-o"])
        .arg(s.path("rec.onefix"))
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg("python3")
        .arg(&prog)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["exit"]["signal"], 9, "{report:#}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("signal 9"), "{}", String::from_utf8_lossy(&out.stderr));
}

const LOG_SCAN_C: &str = r#"// Count log lines that match a pattern: the pattern is compiled again for every line.
#include <regex.h>
#include <stdio.h>
#include <time.h>

static int matches(const char *line) {
    regex_t re;
    regcomp(&re, "^([0-9]{4})-([0-9]{2})-([0-9]{2})T[0-9:]+ (ERROR|WARN) \\[([a-z.]+)\\] .*timeout.*$", REG_EXTENDED); // COMPILE
    int ok = regexec(&re, line, 0, NULL, 0) == 0; // MATCH
    regfree(&re);
    return ok;
}

int main(void) {
    const char *lines[] = {"2024-01-02T03:04:05 ERROR [net.pool] connect timeout after 3s",
                           "2024-01-02T03:04:06 INFO [auth] ok", "2024-01-02T03:04:07 WARN [db.conn] query timeout"};
    struct timespec t0, t;
    // A second of its own CPU time, however loaded the machine: the same number of samples.
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    long n = 0, hits = 0;
    do {
        for (int i = 0; i < 100; i++) hits += matches(lines[(n + i) % 3]);
        n += 100;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000000L);
    printf("%ld lines, %ld hits\n", n, hits);
    return 0;
}
"#;

/// glibc's regexec builds its automaton in a function whose frame is larger than 16 KB: the
/// stack bytes copied per sample by default reach past it to the user's line, where 8 KB (perf's
/// own default) leaves that time charged to no line. The compile, and the free that undoes it,
/// are one finding at the loop.
#[test]
fn a_regex_compiled_per_line_in_c_is_named_and_its_match_time_reaches_the_line() {
    let s = Scratch::new("logscan");
    let exe = compile_c(&s, "logscan", LOG_SCAN_C, &["-O2", "-g"]);
    let src = s.path("logscan.c");
    let (report, _) = record_command(&s, &["--mode", "cpu"], &[&exe]);
    let f = first_finding(&report);
    assert_eq!(
        (f["line"].clone(), f["rule"].clone()),
        (line_of(&src, "// COMPILE").into(), "regex-compile".into()),
        "{report:#}"
    );
    assert!(f["why"].as_str().unwrap().contains("freeing a compiled regular expression"), "{report:#}");
    assert!(report["outside_user_share"].as_f64().unwrap() < 0.1, "{report:#}");
    assert!(
        report["hot_lines"].as_array().unwrap().iter().any(|h| h["line"] == line_of(&src, "// MATCH")),
        "{report:#}"
    );
    let (short, _) = record_command(&s, &["--mode", "cpu", "--stack-bytes", "8192"], &[&exe]);
    assert!(short["outside_user_share"].as_f64().unwrap() > 0.2, "{short:#}");
    let notes = short["notes"].to_string();
    assert!(notes.contains("native stacks cut short"), "the report says why: {notes}");
}

const SETUP_GO: &str = r#"// Per-pass set-up that a Go service should do once: a trust store built from the system's CA
// bundle, and a regular expression compiled, on every pass.
package main

import (
	"crypto/x509"
	"os"
	"regexp"
	"time"
)

func trustedPool(bundle []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle) // CERTS
	return pool
}

func parse(line string) []string {
	re := regexp.MustCompile(`^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2}) (?P<level>[A-Z]+) \[(?P<module>[\w.]+)\] (?P<msg>.*)$`) // REGEX
	return re.FindStringSubmatch(line)
}

func main() {
	bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		os.Exit(2)
	}
	lines := []string{"2024-01-02T03:04:05 INFO [auth.session] ok", "2024-01-02T03:04:06 WARN [net.pool] slow", "bad line"}
	end := time.Now().Add(2500 * time.Millisecond)
	n := 0
	for time.Now().Before(end) {
		if trustedPool(bundle) != nil {
			n++
		}
		for i := 0; i < 40; i++ {
			if parse(lines[i%len(lines)]) != nil {
				n++
			}
		}
	}
	if n == 0 {
		os.Exit(1)
	}
}
"#;

/// The knowledge base's Go entries fire on a real recording: a CA bundle parsed into a new
/// trust store and a regular expression compiled on every pass are named as repeated set-up
/// at their lines.
#[test]
fn go_set_up_repeated_per_pass_is_named_by_the_knowledge_base() {
    if !have_go() || !Path::new("/etc/ssl/certs/ca-certificates.crt").exists() {
        eprintln!("skipped: needs golang-go and the system CA bundle");
        return;
    }
    let s = Scratch::new("go-setup");
    let src = s.path("main.go");
    std::fs::write(&src, SETUP_GO).unwrap();
    let exe = s.path("setup");
    go_build(&src, &exe, &[]);
    let (report, _) = record_command(&s, &[], &[&exe]);
    let findings = report["findings"].as_array().unwrap();
    let at = |marker: &str| {
        findings
            .iter()
            .find(|f| f["line"] == line_of(&src, marker))
            .unwrap_or_else(|| panic!("no finding at {marker}: {report:#}"))
    };
    assert_eq!(at("// CERTS")["rule"], "tls-trust-store", "{report:#}");
    assert_eq!(at("// REGEX")["rule"], "regex-compile", "{report:#}");
    // Which of the two costs more depends on the machine (they are close here): the findings
    // must come costlier first, whichever it is.
    let shares: Vec<f64> = findings.iter().map(|f| f["share"].as_f64().unwrap()).collect();
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "the costlier set-up first: {report:#}");
}

const STRIPPED_GO: &str = r#"// A checksum loop: one line does the work. Built with -ldflags='-s -w' (no DWARF, no
// symbol table), only Go's own function and line table names it.
package main

import (
	"os"
	"time"
)

//go:noinline
func checksum(data []byte) uint32 {
	var sum uint32
	for i, b := range data {
		sum = sum*31 + uint32(b)*uint32(i|1) // HOT
	}
	return sum
}

func main() {
	data := make([]byte, 1<<16)
	for i := range data {
		data[i] = byte(i * 7)
	}
	end := time.Now().Add(2 * time.Second)
	var total uint32
	for time.Now().Before(end) {
		total += checksum(data)
	}
	if total == 42 {
		os.Exit(1)
	}
}
"#;

/// A Go binary built without DWARF and symbols (`-ldflags='-s -w'`) is named from its own
/// `.gopclntab`: the planted hot line is the first finding, with its file and line.
#[test]
fn a_stripped_go_binary_is_named_from_its_own_line_table() {
    if !have_go() {
        eprintln!("skipped: needs golang-go to build the Go program");
        return;
    }
    let s = Scratch::new("go-stripped");
    let src = s.path("main.go");
    std::fs::write(&src, STRIPPED_GO).unwrap();
    let exe = s.path("checksum");
    go_build(&src, &exe, &["-ldflags=-s -w"]);
    let (report, _) = record_command(&s, &["--mode", "cpu"], &[&exe]);
    let f = first_finding(&report);
    assert_eq!(f["line"], line_of(&src, "// HOT"), "{report:#}");
    assert_eq!(f["file"].as_str().unwrap(), src.to_str().unwrap(), "{report:#}");
}

const PROCESS_POOL: &str = r#"
import time
from multiprocessing import Pool

def crunch(n):
    x = 0
    for i in range(n):
        x += (i * 7) % 13   # CRUNCH
    return x

if __name__ == "__main__":
    with Pool(2) as pool:
        end = time.time() + 3
        while time.time() < end:
            pool.map(crunch, [200000] * 4)
"#;

#[test]
fn subprocesses_are_followed_and_their_work_found() {
    let s = Scratch::new("subproc");
    let prog = s.path("mp.py");
    std::fs::write(&prog, PROCESS_POOL).unwrap();
    let (report, _) = record(&s, &["--subprocesses"], &prog);
    let f = first_finding(&report);
    assert_eq!(f["line"], line_of(&prog, "# CRUNCH"), "{report:#}");
    // The pool's own housekeeping threads wait for work: idle, not cost.
    assert!(report["idle_share"].as_f64().unwrap() > 0.2, "{report:#}");
    // With --no-subprocesses only the parent, which only waits, is sampled: no compute finding.
    let (parent_only, _) = record(&s, &["--no-subprocesses"], &prog);
    let compute: Vec<&Value> = parent_only["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["line"] == line_of(&prog, "# CRUNCH"))
        .collect();
    assert!(compute.is_empty(), "{parent_only:#}");
}

/// The interpreter itself, not a launcher script (pyenv's shims fork it), so that its pid is
/// the Python process.
fn python_executable() -> String {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const SPIN: &str =
    "import time\ndef spin():\n    while True:\n        sum(i * i for i in range(500))   # SPIN\nspin()\n";

fn spawn_spinner(s: &Scratch) -> (std::process::Child, PathBuf) {
    let prog = s.path("spin.py");
    std::fs::write(&prog, SPIN).unwrap();
    let child = Command::new(python_executable()).arg(&prog).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    (child, prog)
}

#[test]
fn attaching_for_a_duration_leaves_the_target_running() {
    let s = Scratch::new("attach");
    let (mut target, prog) = spawn_spinner(&s);
    let json = s.path("a.json");
    let out = onefix()
        .args(["record", "--quiet", "--duration", "2s", "--pid", &target.id().to_string(), "-o"])
        .arg(s.path("a.onefix"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let alive = target.try_wait().unwrap().is_none();
    target.kill().unwrap();
    target.wait().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(alive, "the target must outlive the recording");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(first_finding(&report)["line"], line_of(&prog, "# SPIN"));
    assert_eq!(report["target"]["argv"], Value::Null);
    assert_eq!(report["exit"]["status"], "still-running", "{report:#}");
}

#[test]
fn ctrl_c_ends_an_attached_recording_with_a_full_report() {
    let s = Scratch::new("sigint");
    let (mut target, prog) = spawn_spinner(&s);
    let json = s.path("i.json");
    let profiler = onefix()
        .args(["record", "--quiet", "--pid", &target.id().to_string(), "-o"])
        .arg(s.path("i.onefix"))
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(profiler.id() as i32, libc::SIGINT) };
    let out = profiler.wait_with_output().unwrap();
    let alive = target.try_wait().unwrap().is_none();
    target.kill().unwrap();
    target.wait().unwrap();
    assert!(out.status.success());
    assert!(alive);
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(first_finding(&report)["line"], line_of(&prog, "# SPIN"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("spin.py"));
}

// ---- Programs onefix was not written for (tests/programs): rank 1 must be the planted line ----

/// Programs whose planted line onefix does not reliably put at rank 1, and why (see
/// tests/programs/README.md): not held against it, and reported when they come out right.
/// (api_gateway, client and server threads of one process, was one until the bound of serial
/// calls overlapped counted the server thread's hashing as work that stays on the CPUs.)
const KNOWN_MISSES: &[(&str, &str)] = &[];

#[test]
fn unseen_programs_put_the_planted_line_at_rank_one() {
    let dir = repo().join("tests/programs");
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    programs.sort();
    assert!(programs.len() >= 8, "{programs:?}");
    let mut wrong = Vec::new();
    for prog in &programs {
        let name = prog.file_stem().unwrap().to_str().unwrap().to_owned();
        let s = Scratch::new(&format!("unseen-{name}"));
        let (report, _) = record(&s, &[], prog);
        // A program may plant more than one right answer: a lock and the work held under it.
        let source = std::fs::read_to_string(prog).unwrap();
        let planted: Vec<u64> =
            source.lines().enumerate().filter(|(_, l)| l.contains("# CULPRIT")).map(|(i, _)| i as u64 + 1).collect();
        let top = &report["findings"][0];
        let right = top["line"].as_u64().is_some_and(|l| planted.contains(&l))
            && top["file"].as_str().is_some_and(|f| f.ends_with(&format!("{name}.py")));
        let known = KNOWN_MISSES.iter().any(|(n, _)| *n == name);
        if right && known {
            eprintln!("{name}: a known miss came out right this time");
        }
        if !right && !known {
            wrong.push(format!(
                "{name}: planted {planted:?}, rank 1 {}:{} {} (known miss: {known})",
                top["file"], top["line"], top["kind"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn no_permission_says_how_to_fix_it() {
    // Needs root to run onefix as another user against a root-owned target.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("runuser").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and runuser");
        return;
    }
    let s = Scratch::new("perm");
    let (mut target, _) = spawn_spinner(&s);
    let out = Command::new("runuser")
        .args([
            "-u",
            "nobody",
            "--",
            env!("CARGO_BIN_EXE_onefix"),
            "record",
            "-o",
            "/tmp/onefix-perm-test.onefix",
            "--pid",
        ])
        .arg(target.id().to_string())
        .output()
        .unwrap();
    target.kill().unwrap();
    target.wait().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // The cause here is another user's process: the advice says so, and does not suggest
    // Yama's ptrace_scope, which cannot help with that.
    assert!(err.contains("permission denied") && err.contains("another user (uid 0)") && err.contains("root"), "{err}");
    assert!(!err.contains("ptrace_scope"), "{err}");
    assert!(target.try_wait().unwrap().is_some());
}

// ---- onefix load, end to end through the command line ----

/// A keep-alive HTTP/1.1 server on 127.0.0.1 that answers every request with `ok`, for at most
/// `limit` requests per connection; it stops when the test ends (its listener thread is detached
/// and the process exits).
fn tiny_server() -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                for _ in 0..100_000 {
                    let mut line = String::new();
                    // Read the request head; these requests have no body.
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    if out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn load_sends_exactly_what_was_asked_and_reports_json() {
    let s = Scratch::new("load");
    let port = tiny_server();
    let json = s.path("load.json");
    let out = onefix()
        .args(["load", "-q", "-n", "300", "-c", "4", "--seed", "7", "--json"])
        .arg(&json)
        .arg(format!("http://127.0.0.1:{port}/item?id={{{{int 1 2000}}}}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["sent"], 300, "{v:#}");
    assert_eq!(v["completed"], 300, "{v:#}");
    for key in ["p50", "p90", "p99", "p999", "max", "mean", "stddev"] {
        assert!(v["latency_ms"][key].is_number(), "{key}: {v:#}");
    }
    assert!(v["achieved_rps"].as_f64().unwrap() > 0.0);
}

#[test]
fn load_on_a_closed_port_or_a_bad_template_is_one_sentence() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    fails_with(&["load", "-n", "10", &format!("http://127.0.0.1:{port}/")], "127.0.0.1");
    fails_with(&["load", "-n", "10", "http://127.0.0.1:1/{{int 5}}"], "{{int");
}

// ---- Native programs (perf_event) through the same record command ----

const HOT_C: &str = r#"
#include <time.h>
#include <unistd.h>
static volatile double sink;
static void hot(void) {
    double x = 0;
    for (int i = 0; i < 400000; i++) x += i * 0.5;   /* HOT */
    sink = x;
}
int main(void) {
    time_t end = time(NULL) + 2;
    while (time(NULL) < end) {
        hot();
        usleep(2000);   /* NAP */
    }
    return 3;
}
"#;

#[test]
fn a_native_program_is_sampled_with_perf_and_diagnosed_the_same_way() {
    let s = Scratch::new("native");
    let exe = compile_c(&s, "hot", HOT_C, &["-O1", "-g"]);
    let src = s.path("hot.c");
    let (report, _) = record_command(&s, &["--mode", "cpu", "--rate", "999"], &[&exe]);
    assert_eq!(report["target"]["language"], "native");
    assert_eq!(report["exit"]["code"], 3, "{report:#}");
    let f = first_finding(&report);
    assert_eq!(f["line"], line_of(&src, "/* HOT */"), "{report:#}");
    assert!(f["file"].as_str().unwrap().ends_with("hot.c"));

    // In wall mode the sleep between passes is charged to the line that sleeps.
    let (wall, _) = record_command(&s, &["--rate", "999"], &[&exe]);
    let nap = line_of(&src, "/* NAP */");
    let sleep = wall["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["line"] == nap)
        .expect("the sleep is a finding in wall mode");
    assert_eq!(sleep["kind"], "blocking-wait", "{wall:#}");
    assert_eq!(sleep["rule"], "sleep", "{wall:#}");
}

// ---- Waits charged to their cause (tests/programs): the holder's line, with the waits as evidence ----

/// The evidence of a finding, as one string per line.
fn evidence_of(finding: &Value) -> Vec<String> {
    finding["evidence"].as_array().unwrap().iter().map(|e| e["frame"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_lock_wait_is_charged_to_the_work_held_under_the_lock() {
    let prog = repo().join("tests/programs/snapshot_store.py");
    let s = Scratch::new("held-lock");
    let (report, _) = record(&s, &[], &prog);
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&prog, "# CULPRIT"), "{top:#}");
    let lock_line = line_of(&prog, "# LOCK");
    let evidence = evidence_of(top);
    assert!(
        evidence
            .iter()
            .any(|e| e.starts_with(&format!("other threads waiting for the lock at snapshot_store.py:{lock_line}"))),
        "{evidence:?}"
    );
    assert!(top["advice"].as_str().unwrap().starts_with("move this work out of the lock"), "{top:#}");
    assert_eq!(top["gain_basis"], "critical-path", "{top:#}");
    // Most of the waiting line's time is the holder's: what stays there is the ticks whose
    // holder was not read inside the block (between two of its statements).
    let waits = report["findings"].as_array().unwrap().iter().find(|f| f["line"] == lock_line);
    assert!(waits.map_or(true, |w| w["share"].as_f64().unwrap() < 0.25), "{report:#}");
}

#[test]
fn threads_queuing_for_the_gil_are_charged_to_the_line_that_holds_it() {
    let prog = repo().join("tests/programs/thread_tally.py");
    let s = Scratch::new("gil");
    let (report, _) = record(&s, &[], &prog);
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&prog, "# CULPRIT"), "{top:#}");
    assert!(evidence_of(top).iter().any(|e| e.starts_with("other threads queuing for the GIL")), "{top:#}");
    assert_ne!(top["kind"], "blocking-wait", "a GIL wait is no wait of the line's own: {top:#}");
    let notes: Vec<&str> = report["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(notes.iter().any(|n| n.starts_with("Python threads queued for the GIL")), "{notes:?}");
}

#[test]
fn a_main_thread_that_workers_overlap_gains_on_the_critical_path() {
    let prog = repo().join("tests/programs/csv_uploader.py");
    let s = Scratch::new("critical-path");
    let (report, _) = record(&s, &[], &prog);
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&prog, "# CULPRIT"), "{top:#}");
    assert_eq!(top["gain_basis"], "critical-path", "{top:#}");
    // The uploads' sleeps overlap the main thread: removing them gains nothing end to end,
    // whatever their share of the busy threads' time.
    let sleep = report["findings"].as_array().unwrap().iter().find(|f| f["line"] == line_of(&prog, "time.sleep(0.03)"));
    if let Some(sleep) = sleep {
        assert!(sleep["max_speedup"].as_f64().unwrap() < 1.2, "{sleep:#}");
    }
}

/// Serial calls over one kept-alive connection: the sampler sees one unbroken wait at the same
/// stack, and the kernel's count of the thread's runs splits it into the calls. The bound is
/// the work/span one (the slowest call stays), said with the waits counted: the program makes
/// 150 calls, each ~40 ms; a reply that comes in two pieces (headers, then body) can be two
/// waits, and a call of a tick or less between two longer ones can merge with its neighbour,
/// so the count is near 150, not exact.
#[test]
fn serial_calls_are_counted_and_bound_by_the_slowest() {
    let prog = repo().join("tests/programs/weather_report.py");
    let s = Scratch::new("work-span");
    let (report, _) = record(&s, &[], &prog);
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&prog, "# CULPRIT"), "{top:#}");
    assert_eq!(top["kind"], "serial-io", "{top:#}");
    assert_eq!(top["gain_basis"], "work-span", "{top:#}");
    let why = top["why"].as_str().unwrap();
    let calls = waits_counted(why);
    assert!((120..=225).contains(&calls), "{calls} waits counted for 150 calls: {why}");
    assert!(top["max_speedup"].as_f64().is_some(), "{top:#}");
}

/// A C client asking a server 25 times, one reply after another: the native sampler's switch
/// records make each blocked interval one wait, so the waits are counted without run counts.
const SERIAL_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
static int ask(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    if (write(fd, "status\n", 7) != 7) { close(fd); return -1; }
    char buf[16];
    int n = read(fd, buf, sizeof buf);   /* WAIT */
    close(fd);
    return n;
}
int main(int argc, char **argv) {
    int port = atoi(argv[1]), ok = 0;
    for (int i = 0; i < 25; i++) {   /* SERIAL */
        ok += ask(port) > 0;
    }
    printf("%d ok\n", ok);
    return ok == 25 ? 0 : 1;
}
"#;

#[test]
fn native_serial_calls_are_counted_from_the_switch_records() {
    use std::io::{Read, Write};
    let s = Scratch::new("native-work-span");
    let exe = compile_c(&s, "serial", SERIAL_C, &["-O1", "-g"]);
    let src = s.path("serial.c");
    // The service: 40 ms per reply, 25 replies at most, on loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let server = std::thread::spawn(move || {
        for conn in listener.incoming().take(25) {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0u8; 16];
            let _ = conn.read(&mut buf);
            std::thread::sleep(std::time::Duration::from_millis(40));
            let _ = conn.write_all(b"ok\n");
        }
    });
    let (report, _) = record_command(&s, &[], &[&exe, Path::new(&port)]);
    server.join().unwrap();
    assert_eq!(report["exit"]["code"], 0, "{report:#}");
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&src, "/* SERIAL */"), "{top:#}");
    assert_eq!(top["kind"], "serial-io", "{top:#}");
    assert_eq!(top["gain_basis"], "work-span", "{top:#}");
    // Each read is one wait; a preemption of the client inside its read on a busy machine can
    // add one.
    let why = top["why"].as_str().unwrap();
    let waits = waits_counted(why);
    assert!((25..=30).contains(&waits), "{waits} waits for 25 reads: {why}");
}

/// The waits a serial-io finding's why says it counted ("N separate waits were seen").
fn waits_counted(why: &str) -> u64 {
    why.split_once(" separate waits were seen")
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of waits: {why}"))
}

/// Four threads each parse a request on their own, then rebuild a shared table under one
/// mutex. Native threads are not read at the same instants, so few waits have their holder
/// read inside the lock; the waits still go to the work the lock guards, not to the parsing
/// that runs beside it.
const CONTEND_C: &str = r#"#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static double table[4096];

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static double parse_request(int seed) {
    double x = seed;
    for (int i = 0; i < 20000; i++) x = x * 1.0000001 + (i & 7); /* OUTSIDE */
    return x;
}

static void update_table(double v) {
    for (int k = 0; k < 30; k++)
        for (int i = 0; i < 4096; i++) table[i] = table[i] * 0.5 + v / (i + 1); /* UNDER LOCK */
}

static void *worker(void *arg) {
    int id = (int)(long)arg;
    double end = now() + 2.5;
    for (int n = 0; now() < end; n++) {
        double v = parse_request(id * 1000 + n);
        pthread_mutex_lock(&table_lock); /* WAITS */
        update_table(v);
        pthread_mutex_unlock(&table_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("%f\n", table[7]);
    return 0;
}
"#;

#[test]
fn native_lock_waits_go_to_the_work_the_lock_guards() {
    let s = Scratch::new("native-lock");
    let exe = compile_c(&s, "contend", CONTEND_C, &["-O2", "-g", "-pthread"]);
    let src = s.path("contend.c");
    let (report, _) = record_command(&s, &[], &[&exe]);
    assert_eq!(report["exit"]["code"], 0, "{report:#}");
    let top = first_finding(&report);
    assert_eq!(top["line"], line_of(&src, "/* UNDER LOCK */"), "{top:#}");
    assert_eq!(top["kind"], "lock-contention", "{top:#}");
    let waits_at = format!("contend.c:{}", line_of(&src, "/* WAITS */"));
    assert!(
        top["evidence"].as_array().unwrap().iter().any(|e| {
            let frame = e["frame"].as_str().unwrap();
            frame.starts_with("other threads waiting for the lock at") && frame.contains(&waits_at)
        }),
        "the waits it causes are its evidence: {top:#}"
    );
    // The parsing beside the lock is no cause of the waits, and the waits are not left where
    // they happen.
    let findings = report["findings"].as_array().unwrap();
    let outside = line_of(&src, "/* OUTSIDE */");
    assert!(findings.iter().all(|f| f["line"] != outside || f["kind"] != "lock-contention"), "{report:#}");
    let at_lock: f64 = findings
        .iter()
        .filter(|f| f["line"] == line_of(&src, "/* WAITS */"))
        .map(|f| f["share"].as_f64().unwrap())
        .sum();
    assert!(at_lock < top["share"].as_f64().unwrap() / 2.0, "{report:#}");
}
