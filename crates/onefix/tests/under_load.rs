//! `record --load` and `compare` of recordings, on a real Python HTTP server: the server is
//! started, driven and profiled for the load's duration, and the line it wastes time on is
//! named; a fixed server's recording compared with the slow one shows that line's cost gone.
//! The assertions are about which line and what kind, never about how fast anything ran.

mod common;
use common::{free_port, line_of, onefix, Scratch};

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

fn server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/servers/catalog_api.py").canonicalize().unwrap()
}

/// Profiles the catalog server (slow or fixed) under a 4-second open-loop load.
fn record_under_load(dir: &Path, variant: &str) -> (Value, Value, Output) {
    let port = free_port();
    let load = format!(
        "http://127.0.0.1:{port}/price?sku={{{{int 0 3999}}}} --rate 40 --duration 4s -c 4 --json {}",
        dir.join(format!("load-{variant}.json")).display()
    );
    let mut cmd = onefix();
    cmd.current_dir(dir)
        // 160 requests of about 3 ms each are under 50 busy samples at the default 100 Hz on a
        // fast machine, at the edge of the evidence needed to name a line: sampled at 250 Hz.
        .args(["record", "--quiet", "--rate", "250", "-o"])
        .arg(dir.join(format!("{variant}.onefix")))
        .arg("--json")
        .arg(dir.join(format!("{variant}.json")))
        .args(["--load", &load, "--", "python3"])
        .arg(server())
        .arg(port.to_string());
    if variant == "fixed" {
        cmd.arg("--fixed");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "onefix failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server was left running after the recording"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{variant}.json"))).unwrap()).unwrap();
    let load: Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("load-{variant}.json"))).unwrap()).unwrap();
    (report, load, out)
}

#[test]
fn a_server_under_load_is_profiled_for_the_load_and_its_slow_line_named_then_compared() {
    let scratch = Scratch::new("under-load-catalog");
    let dir = scratch.0.clone();
    let parse_line = line_of(&server(), "return json.load(f)");

    let (slow, slow_load, out) = record_under_load(&dir, "slow");
    let top = &slow["findings"][0];
    assert!(top["file"].as_str().unwrap().ends_with("catalog_api.py"), "{slow:#}");
    assert_eq!(top["line"], parse_line, "the settings parsed per request must be rank 1: {slow:#}");
    assert_eq!(top["kind"], "repeated-setup", "{top:#}");
    // Sampled for the load's 4 s (plus the last in-flight answers), not the server's lifetime.
    let secs = slow["duration_s"].as_f64().unwrap();
    assert!((3.5..8.0).contains(&secs), "recorded {secs} s for a 4 s load");
    assert!(slow_load["completed"].as_u64().unwrap() > 0, "{slow_load:#}");
    assert!(slow_load["sent"].as_u64().unwrap() <= 40 * 4 + 1, "{slow_load:#}");
    // Before the open-loop load, requests sent one at a time measured its floor, and the
    // server's CPU time over them: the finding's gain is then the latency model's.
    let unloaded = &slow_load["unloaded"];
    assert!(unloaded["completed"].as_u64().unwrap() >= 5, "{slow_load:#}");
    let floor = unloaded["latency_ms"]["mean"].as_f64().unwrap();
    let cpu = unloaded["server_cpu_ms"].as_f64().unwrap();
    assert!(floor > 0.0 && cpu > 0.0, "{unloaded:#}");
    assert_eq!(top["gain_basis"], "latency-model", "{top:#}");
    assert!(top["max_speedup"].as_f64().unwrap() > 1.0, "{top:#}");
    // stdout is the server's (a pipe here): the summary and the load's are on stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the load, while the server was profiled"), "{stderr}");

    let (fixed, _, _) = record_under_load(&dir, "fixed");
    let still: Vec<&Value> = fixed["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["line"] == parse_line && f["kind"] == "repeated-setup")
        .collect();
    assert!(still.is_empty(), "the fixed server still parses per request: {fixed:#}");

    let cmp = dir.join("compare.json");
    let out = onefix()
        .arg("compare")
        .arg(dir.join("slow.onefix"))
        .arg(dir.join("fixed.onefix"))
        .arg("--json")
        .arg(&cmp)
        .arg("--html")
        .arg(dir.join("compare.html"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.join("compare.html")).unwrap();
    assert!(page.contains("slow.onefix") && page.contains("fixed.onefix"), "the page shows both runs");
    let c: Value = serde_json::from_slice(&std::fs::read(&cmp).unwrap()).unwrap();
    assert!(c["load"]["latency"]["mean_a"].is_number(), "both loads travel with their recordings: {c:#}");
    assert_eq!(c["unit"], "ms of the line per request");
    let parse = c["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line"].as_str().unwrap().contains("return json.load(f)"))
        .unwrap_or_else(|| panic!("the parse line is not compared: {c:#}"));
    assert!(
        ["gone", "down"].contains(&parse["change"].as_str().unwrap()),
        "the parse line's cost must go away: {parse:#}"
    );
    assert!(parse["cost"]["mean_a"].as_f64().unwrap() > 0.0);

    // The CI gate on the same recordings, judged by their loads: the fix as B never fails it
    // (how much slower the slow server is depends on the machine: ci_gate.rs plants a slowdown
    // that does not).
    let out = onefix()
        .arg("compare")
        .arg(dir.join("slow.onefix"))
        .arg(dir.join("fixed.onefix"))
        .args(["--fail-if-slower", "5%"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("gate (--fail-if-slower 5%): "), "{text}");
}

fn one_sentence_failure(out: &Output, expect: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should have failed: {err}");
    assert!(err.contains(expect), "expected {expect:?} in: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

#[test]
fn a_bad_load_is_refused_before_the_server_starts_and_a_server_that_never_listens_is_one_sentence() {
    let scratch = Scratch::new("under-load-bad");
    let dir = scratch.0.clone();
    let marker = dir.join("started");
    // The template is invalid: nothing may be started.
    let out = onefix()
        .current_dir(&dir)
        .args(["record", "--load", "http://127.0.0.1:9/{{int 5}} -d 2s", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    one_sentence_failure(&out, "{{int");
    assert!(!marker.exists(), "the server was started for a load that cannot run");

    // A server that ends before it listens.
    let port = free_port();
    let out = onefix()
        .current_dir(&dir)
        .args([
            "record",
            "--load",
            &format!("http://127.0.0.1:{port}/ -d 2s"),
            "--",
            "python3",
            "-c",
            "import time; time.sleep(0.5)",
        ])
        .output()
        .unwrap();
    one_sentence_failure(&out, "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
}

#[test]
fn a_load_that_could_hit_the_wrong_server_is_refused_in_one_sentence() {
    let scratch = Scratch::new("under-load-wrong-server");
    let dir = scratch.0.clone();
    let marker = dir.join("started");

    // The load's port already answers before the server starts: the server is never started.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = onefix()
        .current_dir(&dir)
        .args(["record", "--load", &format!("http://127.0.0.1:{port}/ -d 2s"), "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    one_sentence_failure(&out, "already answers before your server starts");
    assert!(!marker.exists(), "the server was started though another listens on the load's port");
    drop(taken);

    // The server ends before it listens: said at once, with how it ended.
    let out = onefix()
        .current_dir(&dir)
        .args(["record", "--load", &format!("http://127.0.0.1:{}/ -d 2s", free_port()), "--"])
        .args(["python3", "-c", "import sys; sys.exit(3)"])
        .output()
        .unwrap();
    one_sentence_failure(&out, "exited with 3 before anything listened");

    // The server listens on another port than the load's: said, with that port, long before
    // the 30 s a server is given to start.
    let (load_port, listen_port) = (free_port(), free_port());
    let started = std::time::Instant::now();
    let out = onefix()
        .current_dir(&dir)
        .args(["record", "--load", &format!("http://127.0.0.1:{load_port}/ -d 2s"), "--"])
        .args(["python3", "-c"])
        .arg(format!(
            "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', {listen_port}))\ns.listen()\ntime.sleep(20)"
        ))
        .output()
        .unwrap();
    one_sentence_failure(&out, &format!("the server listens on port {listen_port}, not on 127.0.0.1:{load_port}"));
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
}

#[test]
fn a_load_whose_every_response_is_an_error_fails_the_run() {
    let scratch = Scratch::new("under-load-errors");
    let dir = scratch.0.clone();
    let port = free_port();
    let out = onefix()
        .current_dir(&dir)
        .args([
            "record",
            "--quiet",
            "--no-save",
            "--load",
            &format!("http://127.0.0.1:{port}/missing --rate 20 -d 2s -c 2"),
            "--",
        ])
        .args(["python3", "-m", "http.server", "--bind", "127.0.0.1", &port.to_string(), "--directory"])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("every request of the load failed") && err.contains("x 404"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Every server in tests/servers with a planted mistake (`# CULPRIT`) and the path its load
/// asks for (`# load: /path?query`), profiled under a short load: the planted line must be
/// rank 1. These servers were written to try onefix as a new user would, not tuned to it.
#[test]
fn servers_with_a_planted_mistake_have_it_named_under_load() {
    let scratch = Scratch::new("under-load-planted");
    let dir = scratch.0.clone();
    let servers = server().parent().unwrap().to_path_buf();
    let mut tried = 0;
    let mut wrong = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&servers).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries.into_iter().filter(|p| p.extension().is_some_and(|e| e == "py")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let (Some(culprit), Some(load_path)) = (
            text.lines().position(|l| l.trim_end().ends_with("# CULPRIT")),
            text.lines().find_map(|l| l.strip_prefix("# load: ")),
        ) else {
            continue;
        };
        tried += 1;
        let port = free_port();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let json = dir.join(format!("{name}.json"));
        let out = onefix()
            .current_dir(&dir)
            .args(["record", "--quiet", "-o"])
            .arg(dir.join(format!("{name}.onefix")))
            .arg("--json")
            .arg(&json)
            // A server that is mostly idle between requests is busy for a few hundred samples at
            // most: sample it at 400 Hz so that its busy time is seen often enough to judge.
            .args(["--rate", "400"])
            .args(["--load", &format!("http://127.0.0.1:{port}{} --rate 100 --duration 3s -c 4", load_path.trim())])
            .args(["--", "python3"])
            .arg(&path)
            .arg(port.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let top = &report["findings"][0];
        if top["line"] != (culprit + 1) as u64 || !top["file"].as_str().unwrap_or("").ends_with(&format!("{name}.py")) {
            wrong.push(format!(
                "{name}: planted line {}, rank 1 {}:{} {}",
                culprit + 1,
                top["file"],
                top["line"],
                top["kind"]
            ));
        }
    }
    assert!(tried >= 3, "expected the planted servers in {}", servers.display());
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The tracker story end to end: each tracker is started with the allocation agent, loaded
/// with announces by onefix's own load, and the slow one's storing line is named; comparing
/// the two recordings shows the memory (and the load) side by side.
#[test]
fn the_tracker_under_load_names_the_retaining_line_and_compare_shows_the_memory_difference() {
    let scratch = Scratch::new("under-load-tracker");
    let dir = scratch.0.clone();
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/tracker").canonicalize().unwrap();
    for variant in ["slow", "fixed"] {
        let port = free_port();
        let load = format!(
            "http://127.0.0.1:{port}/announce?info_hash={{{{pick 100 bytes 20 urlencode}}}}&peer_id=-OF0001-{{{{seq}}}}\
             &port={{{{int 1024 65535}}}}&uploaded=0&downloaded=0&left={{{{int 0 1000000}}}}&compact=1&numwant=50&event=started \
             --rate max -c 4 -n 15000 -d 60s"
        );
        let out = onefix()
            .current_dir(&dir)
            .args(["record", "--memory", "--quiet", "-o"])
            .arg(dir.join(format!("{variant}.onefix")))
            .arg("--json")
            .arg(dir.join(format!("{variant}.json")))
            .args(["--load", &load, "--", "python3"])
            .arg(lab.join(format!("tracker_{variant}.py")))
            .args(["--port-file"])
            .arg(dir.join("port"))
            .args(["--port", &port.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{variant}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let slow: Value = serde_json::from_slice(&std::fs::read(dir.join("slow.json")).unwrap()).unwrap();
    let top = &slow["findings"][0];
    assert_eq!(top["kind"], "memory-retention", "{slow:#}");
    assert_eq!(top["line"], line_of(&lab.join("tracker_slow.py"), "torrent[peer_id] = Peer("), "{slow:#}");

    let cmp = dir.join("compare.json");
    let out = onefix()
        .arg("compare")
        .arg(dir.join("slow.onefix"))
        .arg(dir.join("fixed.onefix"))
        .arg("--json")
        .arg(&cmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&std::fs::read(&cmp).unwrap()).unwrap();
    let retained: Vec<u64> = c["retained_bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    // Both trackers hold the same 15,000 peers and the same ~15 MB of imported modules; the slow
    // one also keeps each peer's parsed query (about 1 KB each), which is what must show.
    assert!(retained[0] > retained[1] + 5_000_000, "the slow tracker keeps far more: {c:#}");
    let parse_line = line_of(&lab.join("tracker_slow.py"), "parse_qs(");
    let parse_at = format!("tracker_slow.py:{parse_line}");
    let parsed = c["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["at_a"] == parse_at.as_str())
        .unwrap_or_else(|| panic!("{parse_at} in {c:#}"));
    let by_line: Vec<u64> = parsed["retained_bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(by_line[0] > 3 * by_line[1], "the parsed queries are what the slow tracker keeps: {c:#}");
    let peak: Vec<u64> = c["peak_rss_bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(peak[0] > peak[1], "{c:#}");
    assert!(c["load"]["latency"]["mean_a"].is_number(), "the loads are compared too: {c:#}");
}

#[test]
fn ctrl_c_before_any_answer_of_the_load_is_said_and_the_report_follows() {
    // A server that takes 5 s per request: Ctrl-C (to onefix and the server, as a terminal
    // sends it) comes before any answer. The load did not fail; the recording was cut short.
    use std::os::unix::process::CommandExt;
    let s = Scratch::new("under-load-ctrlc");
    let server = s.path("slow_server.py");
    std::fs::write(
        &server,
        "import sys, time\nfrom http.server import BaseHTTPRequestHandler, ThreadingHTTPServer\n\
         class H(BaseHTTPRequestHandler):\n    def do_GET(self):\n        time.sleep(5)\n        \
         self.send_response(200); self.end_headers()\n    def log_message(self, *a): pass\n\
         threading_server = ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H)\n\
         threading_server.timeout = 30\nthreading_server.serve_forever()\n",
    )
    .unwrap();
    let port = free_port();
    let profiler = onefix()
        .args(["record", "--no-save", "--load"])
        .arg(format!("http://127.0.0.1:{port}/ --rate 20 --duration 10s -c 2 --threads 1"))
        .args(["--", "python3"])
        .arg(&server)
        .arg(port.to_string())
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Past the server's start and the unloaded probe (its one request times out at 1 s).
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SAFETY: signalling the process group our own child leads.
    unsafe { libc::killpg(profiler.id() as i32, libc::SIGINT) };
    let out = profiler.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("interrupted before the server answered any of the load's requests"), "{err}");
    assert!(!err.contains("every request of the load failed"), "{err}");
    assert!(err.contains("slow_server.py"), "the report follows, on stderr (stdout is the server's)");
}
