//! The proof of a fix for a batch program: two runs judged by their run time however few
//! samples either holds, a gate that fails a slower run (one run each, and repeated runs timed
//! by `compare --runs`), and a recording that leaves the program's own output alone.

mod common;
use common::{compile_c, onefix, Scratch};

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

/// Spins on the CPU for the seconds given as its argument (by the clock, so that a busy
/// machine stretches neither side), then prints a line of its own.
const SPIN: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.0;
    double start = now();
    volatile unsigned long acc = 0;
    while (now() - start < seconds) {
        for (int i = 0; i < 1000; i++) acc += i * i;  /* SPIN */
    }
    printf("spun %.3f s\n", seconds);
    return 0;
}
"#;

fn spin(s: &Scratch) -> PathBuf {
    compile_c(s, "spin", SPIN, &["-O1", "-g"])
}

/// Records `spin SECONDS` to `NAME.onefix`; the recording is kept even when no sample landed.
fn record_spin(s: &Scratch, exe: &Path, seconds: &str, name: &str) -> PathBuf {
    let rec = s.path(&format!("{name}.onefix"));
    let out = onefix()
        .args(["record", "--quiet", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(exe)
        .arg(seconds)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Status 1 with no sample (a run shorter than one read): its run time is kept.
    assert!(out.status.code() == Some(0) || err.contains("its run time is saved"), "{err}");
    assert!(rec.exists(), "{err}");
    rec
}

fn compare(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, Value, String) {
    // Tests run in parallel in one process: each comparison has a scratch of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let s = Scratch::new(&format!("proof-compare-json-{n}"));
    let json = s.path("c.json");
    let out = onefix().arg("compare").args(args).arg("--json").arg(&json).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let value = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
    (out.status.code(), text, value, err)
}

#[test]
fn a_batch_fix_from_two_seconds_to_a_few_milliseconds_is_judged_by_its_run_time() {
    let s = Scratch::new("proof-batch");
    let exe = spin(&s);
    let slow = record_spin(&s, &exe, "2.0", "slow");
    let fixed = record_spin(&s, &exe, "0.005", "fixed");
    let (code, text, c, err) = compare(&[slow.as_os_str(), fixed.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    let runs = &c["runs"];
    let speedup = runs["wall_speedup"].as_f64().unwrap_or_else(|| panic!("{c:#}"));
    assert!(speedup >= 10.0, "judged faster by at least 10x: {speedup}\n{text}");
    assert_eq!(runs["direction"], "faster", "{c:#}");
    assert!(text.starts_with("the runs (each went to its end): B is "), "{text}");
    // One run each: what one run can show is said, with the way to time several.
    assert!(text.contains("one run each") && text.contains("--runs"), "{text}");
    // The slow run's spin (its loop's lines) is where the time went away.
    let spin_lines: Vec<&Value> = runs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["at"].as_str().unwrap_or("").starts_with("spin.c:"))
        .collect();
    let seconds = |side: &str| spin_lines.iter().map(|l| l[side].as_f64().unwrap()).sum::<f64>();
    assert!(seconds("seconds_a") > 1.0 && seconds("seconds_b") < 0.1, "{c:#}");
}

#[test]
fn a_run_three_times_slower_fails_the_gate_with_one_run_each() {
    let s = Scratch::new("proof-gate-one");
    let exe = spin(&s);
    let fast = record_spin(&s, &exe, "0.3", "fast");
    let slow = record_spin(&s, &exe, "0.9", "slow");
    let gate = std::ffi::OsStr::new("--fail-if-slower=5%");
    let (code, text, _, err) = compare(&[fast.as_os_str(), slow.as_os_str(), gate]);
    assert_eq!(code, Some(3), "a 3x slower run fails the gate: {text}{err}");
    assert!(text.contains("gate (--fail-if-slower 5%): B's run is slower") && text.contains("weak evidence"), "{text}");
    // The same two runs the other way round pass it.
    let (code, text, _, err) = compare(&[slow.as_os_str(), fast.as_os_str(), gate]);
    assert_eq!(code, Some(0), "{text}{err}");
}

#[test]
fn repeated_interleaved_runs_are_timed_compared_and_gated() {
    let s = Scratch::new("proof-runs");
    let exe = spin(&s);
    let exe = exe.to_str().unwrap();
    let run = |b_seconds: &str, extra: &[&str]| {
        let json = s.path("runs.json");
        let out = onefix()
            .args(["compare", "--runs", "5", "--fail-if-slower", "5%", "--json"])
            .arg(&json)
            .args(extra)
            .args(["--", exe, "0.1", ":::", exe, b_seconds])
            .output()
            .unwrap();
        let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            c,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text, c, err) = run("0.3", &["--no-profile"]);
    assert_eq!(code, Some(3), "3x slower over 5 runs each fails the gate: {text}{err}");
    assert_eq!(c["times"][0].as_array().unwrap().len(), 5, "{c:#}");
    assert_eq!(c["times"][1].as_array().unwrap().len(), 5, "{c:#}");
    let mean_b = c["runs"]["wall_s"][1].as_f64().unwrap();
    assert!((0.3..0.6).contains(&mean_b), "B's mean is its run time: {mean_b}");
    let [lo, hi] = [0, 1].map(|i| c["runs"]["wall"]["ci95"][i].as_f64().unwrap());
    assert!(lo < hi && hi < 1.0 / 1.05, "the whole interval is a slowdown beyond 5%: [{lo}, {hi}]");
    assert!(text.contains("5 timed runs each") && text.contains("median") && text.contains("outliers"), "{text}");

    // The same command on both sides: no difference, and the gate passes; one more recorded run
    // of each names the line.
    let (code, text, c, err) = run("0.1", &[]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert_ne!(c["runs"]["direction"], "slower", "{c:#}");
    assert!(text.contains("spin.c:"), "the recorded runs name the spinning lines: {text}{err}");
}

#[test]
fn a_failing_command_ends_the_timed_comparison_in_one_sentence() {
    let out = onefix().args(["compare", "--runs", "3", "--", "true", ":::", "false"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("false exited with status 1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = onefix().args(["compare", "--runs", "3", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains(":::"), "{err}");
}

#[test]
fn a_recording_leaves_the_programs_own_output_byte_for_byte() {
    let s = Scratch::new("proof-stdout");
    let program = s.path("tool.py");
    std::fs::write(
        &program,
        "import time\nprint('<html>the tool\\'s own output</html>')\nend = time.monotonic() + 0.8\nn = 0\nwhile time.monotonic() < end:\n    n += sum(i for i in range(1000))  # WORK\nprint('last line', flush=True)\n",
    )
    .unwrap();
    let out_file = s.path("out.html");
    let out = onefix()
        .current_dir(&s.0)
        .args(["record", "-o"])
        .arg(s.path("rec.onefix"))
        .args(["--", "python3"])
        .arg(&program)
        .stdout(std::fs::File::create(&out_file).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(written, "<html>the tool's own output</html>\nlast line\n");
    // The findings went to stderr instead.
    assert!(err.contains("tool.py") && err.contains("hot lines"), "{err}");
}
