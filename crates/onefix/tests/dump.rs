//! `onefix dump`: every thread's stack of a live process, and its deadlocks found with each
//! thread's line: a Python deadlock between two `threading.Lock`s, a native pthread-mutex
//! deadlock, and a read that hangs. The JSON is checked against its schema.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{line_of, onefix, repo, Scratch};
use serde_json::Value;

/// A child killed when the test ends, however it ends.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn assert_follows_dump_schema(dump: &Value) {
    let path = repo().join("crates/onefix-report/schema/dump.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(dump).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}\n{dump:#}", errors.join("\n"));
}

/// Dumps `pid` as JSON until `done` holds of it (the target reaches the state the test wants),
/// for up to 10 s; returns the last dump.
fn dump_until(pid: u32, extra: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let out = onefix().args(["dump", "--pid", &pid.to_string(), "--json", "-"]).args(extra).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let dump: Value = serde_json::from_slice(&out.stdout).unwrap();
        if done(&dump) || started.elapsed() > Duration::from_secs(10) {
            assert_follows_dump_schema(&dump);
            return dump;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// No thread of `pid` is left stopped or traced by the dump.
fn assert_left_running(pid: u32) {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_owned();
        assert_eq!(field("TracerPid:"), "0", "thread {:?} still traced", task.file_name());
        assert!(!field("State:").starts_with('t') && !field("State:").starts_with('T'), "thread stopped: {status}");
    }
}

fn wait_of(dump: &Value, tid: u64) -> &Value {
    dump["analysis"]["waits"].as_array().unwrap().iter().find(|w| w["tid"] == tid).unwrap()
}

/// The line of `file` equal to `text` once trimmed (it must occur once).
fn line_equal(file: &Path, text: &str) -> u64 {
    let src = std::fs::read_to_string(file).unwrap();
    let hits: Vec<usize> = src.lines().enumerate().filter(|(_, l)| l.trim() == text).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1, "{text:?} in {}", file.display());
    hits[0] as u64
}

#[test]
fn a_python_deadlock_between_two_locks_is_a_cycle_with_each_threads_line_and_the_line_that_took_the_lock() {
    let program = repo().join("tests/programs/hung/ledger_deadlock.py");
    let target = Target(Command::new("python3").arg(&program).stdout(Stdio::null()).spawn().unwrap());
    let pid = target.0.id();
    let dump = dump_until(pid, &[], |d| d["analysis"]["state"] == "deadlocked");
    assert_left_running(pid);
    assert_eq!(dump["analysis"]["state"], "deadlocked", "{dump:#}");
    let cycles = dump["analysis"]["deadlocks"].as_array().unwrap();
    assert_eq!(cycles.len(), 1);
    let cycle = cycles[0].as_array().unwrap();
    assert_eq!(cycle.len(), 2);
    // Each thread waits at its inner `with`, for the lock the other took at its outer one.
    let waits_audit = line_of(&program, "WAITS-FOR-AUDIT");
    let waits_accounts = line_of(&program, "WAITS-FOR-ACCOUNTS");
    let took_audit = line_equal(&program, "with audit:");
    let took_accounts = line_equal(&program, "with accounts:");
    for edge in cycle {
        let w = wait_of(&dump, edge["waiter"].as_u64().unwrap());
        let (lock, at, held_since) = match w["lock"].as_str().unwrap() {
            "audit" => ("audit", waits_audit, took_audit),
            "accounts" => ("accounts", waits_accounts, took_accounts),
            other => panic!("waits for {other}"),
        };
        assert_eq!(w["at"]["line"], at, "{lock}: {w:#}");
        assert_eq!(w["holder"]["tid"], edge["holder"]);
        assert_eq!(w["holder"]["evidence"], "held-block");
        assert_eq!(w["holder"]["since"]["line"], held_since, "{lock}: {w:#}");
        // The holder is the other thread of the cycle.
        assert_ne!(edge["waiter"], edge["holder"]);
    }
    assert!(dump["snapshot"]["paused_us"].as_u64().unwrap() > 0, "the read paused the target");

    // The text says the same in words, with both lines.
    let text = onefix().args(["dump", "--pid", &pid.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Deadlock: 2 threads wait for each other"), "{text}");
    assert!(text.contains(&format!("ledger_deadlock.py:{waits_audit}")), "{text}");
    assert!(text.contains(&format!("holds since ledger_deadlock.py:{took_audit} `with audit:`")), "{text}");
}

#[test]
fn a_native_deadlock_between_two_pthread_mutexes_is_found_from_their_owners() {
    let s = Scratch::new("dump-native");
    let source = std::fs::read_to_string(repo().join("tests/programs/hung/ledger_deadlock.c")).unwrap();
    let exe = common::compile_c(&s, "ledger_deadlock", &source, &["-g", "-O0", "-pthread"]);
    let src = s.path("ledger_deadlock.c");
    let target = Target(Command::new(&exe).current_dir(&s.0).stdout(Stdio::null()).spawn().unwrap());
    let pid = target.0.id();
    let dump = dump_until(pid, &[], |d| d["analysis"]["state"] == "deadlocked");
    assert_left_running(pid);
    assert_eq!(dump["snapshot"]["runtime"], "native");
    assert_eq!(dump["analysis"]["state"], "deadlocked", "{dump:#}");
    let cycle = dump["analysis"]["deadlocks"][0].as_array().unwrap();
    assert_eq!(cycle.len(), 2);
    let mut lines: Vec<u64> = cycle
        .iter()
        .map(|e| {
            let w = wait_of(&dump, e["waiter"].as_u64().unwrap());
            assert_eq!(w["holder"]["evidence"], "mutex-owner");
            assert_eq!(w["blocked"]["owner"], e["holder"], "the owner field names the holder");
            assert!(w["at"]["file"].as_str().unwrap().ends_with("ledger_deadlock.c"), "{w:#}");
            // The mutexes are globals: their symbols name them.
            assert!(["journal", "ledger"].contains(&w["lock"].as_str().unwrap_or("")), "{w:#}");
            w["at"]["line"].as_u64().unwrap()
        })
        .collect();
    lines.sort_unstable();
    let mut want = vec![line_of(&src, "WAITS-FOR-JOURNAL"), line_of(&src, "WAITS-FOR-LEDGER")];
    want.sort_unstable();
    assert_eq!(lines, want);
}

#[test]
fn a_hung_network_read_is_a_stall_with_the_line_the_connection_and_the_locals() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let program = repo().join("tests/programs/hung/status_poller.py");
    let target = Target(
        Command::new("python3")
            .arg(&program)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Accepted, never answered.
    let (_held, _) = listener.accept().unwrap();
    let pid = target.0.id();
    let dump = dump_until(pid, &["--locals"], |d| d["analysis"]["state"] == "stalled");
    assert_left_running(pid);
    assert_eq!(dump["analysis"]["state"], "stalled", "{dump:#}");
    let waits = dump["analysis"]["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{dump:#}");
    let w = &waits[0];
    assert_eq!(w["blocked"]["kind"], "read");
    let what = w["blocked"]["what"].as_str().unwrap();
    assert!(what.starts_with("TCP 127.0.0.1:") && what.ends_with(&format!("-> 127.0.0.1:{port}")), "{what}");
    assert_eq!(w["at"]["line"], line_of(&program, "HANGS-HERE"));
    // --locals: the frame that hangs shows its arguments with their values.
    let frames = dump["snapshot"]["threads"][0]["frames"].as_array().unwrap();
    let fetch = frames.iter().find(|f| f["function"] == "fetch_status").unwrap();
    let port_arg = fetch["locals"].as_array().unwrap().iter().find(|l| l["name"] == "port").unwrap();
    assert_eq!(port_arg["arg"], true);
    assert_eq!(port_arg["repr"], port.to_string());
}

#[test]
fn a_pid_that_does_not_exist_is_one_sentence_and_a_failure() {
    let out = onefix().args(["dump", "--pid", "4194303"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no process with pid 4194303"), "{err}");
}
