//! What production does to a recording: the profiler killed with SIGKILL mid-run (an OOM kill,
//! a CI timeout), and targets that fork children.

mod common;
use common::{assert_follows_findings_schema, line_of, onefix, Scratch};

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
            .args([
                "record",
                "--quiet",
                "--memory",
                "--memory-rate",
                "64k",
                "-o",
                &s.arg("rec.onefix"),
                "--",
                "python3",
            ])
            .arg(&prog)
            .arg(&pidfile)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Counted from the target's start (it writes its pid first), not the profiler's: on a
        // busy machine start-up alone can take a second.
        let started = std::time::Instant::now();
        while !pidfile.exists() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
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
    assert_follows_findings_schema(&report);
    let child_line = line_of(&prog, "# CHILD");
    let on_child: Vec<&Value> =
        report["findings"].as_array().unwrap().iter().filter(|f| f["line"] == child_line).collect();
    assert!(on_child.is_empty(), "20 children each freeing 10 MB at exit retain nothing: {on_child:#?}");
    // Twenty 10 MB heaps, one after another, never add up: the sampled heap at its peak stays
    // below the target's peak RSS (which also holds the interpreter's code and libraries).
    let heap = report["busy_weight"].as_f64().unwrap();
    let rss = report["memory"]["peak_rss_bytes"].as_f64().unwrap();
    assert!(heap <= 1.2 * rss, "sampled heap at peak {heap} against peak RSS {rss}");
    assert!(report["memory"]["exited_children"].as_array().unwrap().len() >= 20, "{:#}", report["memory"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("child processes exited during the recording"));
}

/// Writes `name` into the scratch directory and gives its path.
fn program(s: &Scratch, name: &str, text: &str) -> std::path::PathBuf {
    let path = s.path(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn record_json(s: &Scratch, command: &[&str]) -> (Value, String) {
    let json = s.path("r.json");
    let out = onefix()
        .args(["record", "--quiet", "--no-save", "--json"])
        .arg(&json)
        .arg("--")
        .args(command)
        .current_dir(s.path(""))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_follows_findings_schema(&report);
    // stdout is the target's (a pipe here): onefix's summary is on stderr.
    (report, String::from_utf8_lossy(&out.stderr).into_owned())
}

const SECOND: &str = "import time\ndef second_work():\n    return sum(i * i for i in range(5000))  # SECOND\nend = time.time() + 2\nwhile time.time() < end:\n    second_work()\n";

#[test]
fn an_exec_d_program_is_sampled_under_the_same_pid() {
    let s = Scratch::new("exec");
    let second = program(&s, "second.py", SECOND);
    let first = program(
        &s,
        "first.py",
        "import os, sys, time\nend = time.time() + 0.8\nwhile time.time() < end:\n    sum(range(1000))\nos.execv(sys.executable, [sys.executable, sys.argv[1]])\n",
    );
    let (report, stdout) = record_json(&s, &["python3", first.to_str().unwrap(), second.to_str().unwrap()]);
    let top = &report["findings"][0];
    assert!(top["file"].as_str().unwrap().ends_with("second.py"), "{report:#}");
    assert_eq!(top["line"], line_of(&second, "# SECOND"), "{top:#}");
    assert!(stdout.contains("exec'd into"), "the exec is said: {stdout}");
}

#[test]
fn a_shell_script_that_execs_python_is_profiled_as_python() {
    let s = Scratch::new("wrapper");
    let second = program(&s, "app.py", SECOND);
    let wrapper = program(
        &s,
        "run.sh",
        "#!/bin/sh\ncd \"$(dirname \"$0\")\"\nexport APP_MODE=prod\nexec python3 app.py \"$@\"\n",
    );
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (report, _) = record_json(&s, &[wrapper.to_str().unwrap()]);
    assert_eq!(report["target"]["language"], "python", "{:#}", report["target"]);
    assert_eq!(report["findings"][0]["line"], line_of(&second, "# SECOND"), "{report:#}");
}

#[test]
fn subprocesses_are_sampled_from_their_start() {
    let s = Scratch::new("subproc");
    let parent = program(
        &s,
        "parent.py",
        "import subprocess, sys, time\ntime.sleep(0.3)\nsubprocess.run([sys.executable, '-c', 'import time\\nend = time.time() + 1\\nwhile time.time() < end:\\n    sum(range(1000))\\n'])\ntime.sleep(0.2)\n",
    );
    let folded = s.path("cpu.folded");
    let out = onefix()
        .args(["record", "--quiet", "--no-save", "--subprocesses", "--mode", "cpu", "--rate", "100", "--folded"])
        .arg(&folded)
        .args(["--", "python3"])
        .arg(&parent)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The child's own frames (`<string>`: its code came with -c), at 100 Hz.
    let child: u64 = std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .filter(|l| l.contains("<string>"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()))
        .sum();
    assert!(child >= 80, "a 1 s child was sampled for {} s", child as f64 / 100.0);
}

#[test]
fn a_killed_onefix_leaves_no_temporary_directory() {
    for memory in [false, true] {
        let s = Scratch::new(&format!("leftovers{memory}"));
        let prog = grower(&s, 20);
        let pidfile = s.path("pid");
        let mut cmd = onefix();
        cmd.args(["record", "--quiet", "--no-save"]);
        if memory {
            cmd.arg("--memory");
        }
        let mut profiler = cmd
            .args(["--", "python3"])
            .arg(&prog)
            .arg(&pidfile)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let onefix_pid = profiler.id();
        let ours = |name: &str| {
            let prefix = [format!("onefix-asyncio-{onefix_pid}-"), format!("onefix-agent-{onefix_pid}-")];
            prefix.iter().any(|p| name.starts_with(p.as_str()))
        };
        let left = || -> Vec<String> {
            std::fs::read_dir(std::env::temp_dir())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| ours(n))
                .collect()
        };
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!left().is_empty(), "the recording made its directory (memory: {memory})");
        profiler.kill().unwrap();
        profiler.wait().unwrap();
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The target outlives onefix and may still need the directory; once it ends, it goes.
        assert!(!left().is_empty(), "kept while the target runs (memory: {memory})");
        // SAFETY: kill(2) on the pid the target wrote.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !left().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(left().is_empty(), "left behind (memory: {memory}): {:?}", left());
    }
}

#[test]
fn a_program_that_fails_before_its_own_code_runs_is_not_a_profile() {
    let s = Scratch::new("syntax");
    let prog = program(&s, "broken.py", "import time\ndef handler(:\n    time.sleep(1)\n");
    let out = onefix().args(["record", "--quiet", "--no-save", "--", "python3"]).arg(&prog).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // However fast it fails: before the interpreter could be read, before the first read (both
    // 2), or after reads that saw no line of its own (1). Each is one sentence with its status.
    assert!(matches!(out.status.code(), Some(1 | 2)), "{err}");
    assert!(err.contains("SyntaxError"), "the program's own message stays visible: {err}");
    let said = err.lines().filter(|l| l.starts_with("onefix: ")).collect::<Vec<_>>();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        (said[0].contains("before a sample landed in your code") || said[0].contains("exited before"))
            && said[0].contains("exited with 1"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("#1 "), "no finding");
}
