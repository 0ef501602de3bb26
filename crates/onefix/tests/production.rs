//! What production does to a recording: the profiler killed with SIGKILL mid-run (an OOM kill,
//! a CI timeout), and targets that fork children.

mod common;
use common::{line_of, onefix, Scratch};

use std::time::Duration;

use serde_json::Value;

/// A program that keeps growing at one line for `secs` seconds, and writes its pid first.
fn grower(s: &Scratch, secs: u32) -> std::path::PathBuf {
    let prog = s.path("grow.py");
    std::fs::write(
        &prog,
        format!(
            "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\nkeep = []\nend = time.time() + {secs}\nwhile time.time() < end:\n    keep.append(bytearray(200_000))  # CULPRIT\n    time.sleep(0.01)\n"
        ),
    )
    .unwrap();
    prog
}

#[test]
fn a_memory_recording_killed_at_any_moment_keeps_what_came_before() {
    for (i, after) in [1500u64, 2500, 3500].into_iter().enumerate() {
        let s = Scratch::new(&format!("memkill{i}"));
        let prog = grower(&s, 8);
        let pidfile = s.path("pid");
        let mut profiler = onefix()
            .args(["record", "--quiet", "--memory", "--memory-rate", "64k", "-o", &s.arg("rec.onefix"), "--", "python3"])
            .arg(&prog)
            .arg(&pidfile)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(after));
        profiler.kill().unwrap();
        profiler.wait().unwrap();
        // The target outlives its profiler; end it.
        if let Ok(pid) = std::fs::read_to_string(&pidfile).unwrap_or_default().trim().parse::<i32>() {
            // SAFETY: kill(2) on the pid the target wrote, which is still our grandchild.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(!s.path("rec.onefix").exists(), "an unfinished recording does not take the final name");
        let partial = s.path("rec.onefix.partial");
        let json = s.path("r.json");
        let out = onefix().args(["report", "--quiet"]).arg(&partial).arg("--json").arg(&json).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "killed after {after} ms: {err}");
        assert!(err.contains("ends early"), "{err}");
        let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let first = &report["findings"][0];
        assert_eq!(first["line"], line_of(&prog, "# CULPRIT"), "killed after {after} ms: {report:#}");
        assert_eq!(first["kind"], "memory-retention", "{first:#}");
    }
}

#[test]
fn a_forking_target_s_heap_is_its_own_and_its_children_are_told_apart() {
    let s = Scratch::new("forker");
    let prog = s.path("forker.py");
    std::fs::write(
        &prog,
        "import os, time\nbase = [bytearray(1000) for _ in range(2000)]\n\ndef child_work():\n    blob = [bytearray(10_000) for _ in range(1000)]  # CHILD\n    time.sleep(0.05)\n    os._exit(0)\n\nfor i in range(20):\n    pid = os.fork()\n    if pid == 0:\n        child_work()\n    os.waitpid(pid, 0)\n",
    )
    .unwrap();
    let json = s.path("r.json");
    let out = onefix()
        .args(["record", "--quiet", "--no-save", "--memory", "--memory-rate", "64k", "--json"])
        .arg(&json)
        .args(["--", "python3"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let child_line = line_of(&prog, "# CHILD");
    let on_child: Vec<&Value> = report["findings"].as_array().unwrap().iter().filter(|f| f["line"] == child_line).collect();
    assert!(on_child.is_empty(), "20 children each freeing 10 MB at exit retain nothing: {on_child:#?}");
    // Twenty 10 MB heaps, one after another, never add up: the sampled heap at its peak stays
    // below the target's peak RSS (which also holds the interpreter's code and libraries).
    let heap = report["busy_weight"].as_f64().unwrap();
    let rss = report["memory"]["peak_rss_bytes"].as_f64().unwrap();
    assert!(heap <= 1.2 * rss, "sampled heap at peak {heap} against peak RSS {rss}");
    assert!(report["memory"]["exited_children"].as_array().unwrap().len() >= 20, "{:#}", report["memory"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("child processes exited during the recording"));
}
