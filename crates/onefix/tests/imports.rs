//! Profiles recorded elsewhere (issue 19): `onefix report` reads pprof, folded stacks and
//! speedscope files and pprof URLs, and runs the same diagnosis on them.
//!
//! - a live Python recording written as all three formats by onefix's own writers reads back to
//!   the same rank-1 line, with the note saying what each format lacks and no recurrence claim;
//! - damaged files and bad URLs get one sentence and exit status 2;
//! - a Go server with `net/http/pprof` and a regular expression compiled per request, profiled
//!   over its own endpoint while `onefix load` drives it: the planted line is rank 1.

mod common;
use common::{assert_follows_findings_schema, first_finding, line_of, onefix, repo, Scratch};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The one sentence onefix printed on stderr (no panic, backtrace or error chain).
fn one_sentence(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace", "Caused by", "Error: "] {
        assert!(!err.contains(bad), "{bad:?} on stderr: {err}");
    }
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one sentence on stderr, got: {err}");
    lines[0].to_owned()
}

/// `onefix report ARG --json` from `dir`; the report, once checked against the findings schema.
fn report(dir: &Path, arg: &str) -> Value {
    let json = dir.join("imported.json");
    let out = onefix().current_dir(dir).args(["report", arg, "--json"]).arg(&json).output().unwrap();
    assert!(out.status.success(), "onefix report {arg} failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_follows_findings_schema(&report);
    report
}

/// `onefix report ARG` fails with status 2 and one sentence containing `expect`.
fn refused(dir: &Path, arg: &str, expect: &str) {
    let out = onefix().current_dir(dir).args(["report", arg]).output().unwrap();
    let sentence = one_sentence(&out);
    assert_eq!(out.status.code(), Some(2), "{sentence}");
    assert!(sentence.contains(expect), "expected {expect:?} in: {sentence}");
}

const PRICES: &str = r#"import time

def price(n):
    total = 0
    for i in range(n):
        total += (i * 7919) % 104729   # HOT
    return total

def main():
    end = time.time() + 2.5
    while time.time() < end:
        price(20000)

main()
"#;

#[test]
fn onefix_s_own_pprof_folded_and_speedscope_read_back_to_the_same_line() {
    let s = Scratch::new("imports-roundtrip");
    let prog = s.path("prices.py");
    std::fs::write(&prog, PRICES).unwrap();
    let out = onefix()
        .current_dir(&s.0)
        .args(["record", "--quiet", "--no-save", "--json", "r.json", "--pprof", "p.pb.gz"])
        .args(["--folded", "f.txt", "--speedscope", "s.json", "--", "python3"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded: Value = serde_json::from_slice(&std::fs::read(s.path("r.json")).unwrap()).unwrap();
    let hot = line_of(&prog, "# HOT");
    assert_eq!(first_finding(&recorded)["line"], hot, "{recorded:#}");

    for (file, lacks) in [
        ("p.pb.gz", "this pprof profile (wall/nanoseconds) has no sample times"),
        ("f.txt", "this folded-stacks file has no sample times"),
        ("s.json", "this speedscope profile has no sample times"),
    ] {
        let imported = report(&s.0, file);
        let f = first_finding(&imported);
        assert_eq!(f["line"], hot, "{file}: {imported:#}");
        assert_eq!(f["file"], prog.display().to_string(), "{file}: the file is found where the report is made");
        assert_eq!(f["kind"], first_finding(&recorded)["kind"], "{file}");
        assert!(f["recurrence"].is_null(), "{file}: no sample times, no recurrence claim: {imported:#}");
        // The same samples: the recording's diagnosis leaves out the reads that tore (or places
        // them by their neighbours), which a file does not mark, so the shares differ a little.
        let share = |r: &Value| r["findings"][0]["share"].as_f64().unwrap();
        let (a, b) = (share(&recorded), share(&imported));
        eprintln!("{file}: share {a} recorded, {b} imported");
        assert!((a - b).abs() < 0.1, "{file}: {a} vs {b}: {imported:#} {recorded:#}");
        let notes: Vec<&str> = imported["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(notes[0].starts_with(lacks), "{file}: {notes:?}");
        assert_eq!(notes.iter().filter(|n| n.contains("no sample times")).count(), 1, "one note: {notes:?}");
    }

    // The HTML report of an imported profile, opened in headless chromium (as reports.rs does):
    // it renders without a console error, shows the finding, and draws no timeline, since the
    // samples have no times.
    let html = s.path("imported.html");
    let out = onefix().current_dir(&s.0).args(["report", "p.pb.gz", "--html"]).arg(&html).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = open_in_browser(&html, "html-report-imported-pprof.png", "price");
    assert_eq!(seen["consoleErrors"], serde_json::json!([]), "{seen:#}");
    assert_eq!(seen["findings"][0]["loc"], format!("prices.py:{hot}"), "{seen:#}");
    assert_eq!(seen["timelineRows"], 0, "{seen:#}");
    assert_eq!(seen["title"], "onefix: p.pb.gz", "{seen:#}");

    // The same files, damaged.
    let cut = |name: &str, to: &str, at: fn(&[u8]) -> usize| {
        let bytes = std::fs::read(s.path(name)).unwrap();
        std::fs::write(s.path(to), &bytes[..at(&bytes)]).unwrap();
    };
    cut("p.pb.gz", "cut.pb.gz", |b| b.len() / 2);
    refused(&s.0, "cut.pb.gz", "cannot read cut.pb.gz: the gzip stream is damaged or cut short");
    cut("s.json", "cut.json", |b| b.len() - 20);
    refused(&s.0, "cut.json", "cannot read cut.json: the JSON is damaged or cut short");
    // Cut inside a stack: its last line has no count.
    cut("f.txt", "cut.txt", |b| b.iter().rposition(|&c| c == b';').unwrap());
    refused(&s.0, "cut.txt", "is not `frame;frame;… count`");
    std::fs::write(
        s.path("noise.bin"),
        (0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect::<Vec<u8>>(),
    )
    .unwrap();
    refused(&s.0, "noise.bin", "it is not an onefix recording, nor a profile onefix imports");
}

/// Real `py-spy record` output, raw (folded) and speedscope: the hot line is rank 1, and the
/// JSON line is classified as in a recording (py-spy's short file names, `json/__init__.py`, keep
/// a library's package in the raw format; the speedscope one has full paths).
#[test]
fn py_spy_raw_and_speedscope_output_is_diagnosed() {
    if !Command::new("py-spy").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: needs py-spy (./setup installs it from tests/programs/requirements.txt)");
        return;
    }
    let s = Scratch::new("imports-py-spy");
    let prog = s.path("shop.py");
    std::fs::write(&prog, SHOP).unwrap();
    for (format, file, lacks) in [
        ("raw", "raw.txt", "this folded-stacks file has no sample times"),
        ("speedscope", "ss.json", "this speedscope profile has no sample times"),
    ] {
        let out = Command::new("py-spy")
            .current_dir(&s.0)
            .args(["record", "--format", format, "--rate", "100", "-o", file, "--", "python3"])
            .arg(&prog)
            .output()
            .unwrap();
        assert!(out.status.success(), "py-spy failed: {}", String::from_utf8_lossy(&out.stderr));
        let report = report(&s.0, file);
        let f = first_finding(&report);
        assert_eq!(f["line"], line_of(&prog, "# HOT"), "{format}: {report:#}");
        assert_eq!(f["file"], prog.display().to_string(), "{format}: {report:#}");
        let json = report["findings"].as_array().unwrap().iter().find(|f| f["line"] == line_of(&prog, "# JSON"));
        assert_eq!(json.unwrap_or_else(|| panic!("{report:#}"))["kind"], "serialization", "{format}: {report:#}");
        assert!(report["notes"][0].as_str().unwrap().starts_with(lacks), "{format}: {report:#}");
    }
}

const SHOP: &str = r#"import json, time

def price(n):
    total = 0
    for i in range(n):
        total += (i * 7919) % 104729   # HOT
    return total

def render(rows):
    return json.dumps(rows)   # JSON

def main():
    rows = [{"sku": i, "name": "x" * 20, "tags": list(range(10))} for i in range(300)]
    end = time.time() + 2.5
    while time.time() < end:
        price(20000)
        render(rows)

main()
"#;

/// Opens `html` in headless chromium through tests/browser/html_report.mjs (./setup installs
/// chromium and playwright-core) and returns what it saw.
fn open_in_browser(html: &Path, screenshot: &str, search: &str) -> Value {
    assert!(Path::new("/usr/bin/chromium").exists(), "chromium is not installed: run ./setup");
    let driver = repo().join("tests/browser/node_modules/playwright-core");
    assert!(driver.exists(), "playwright-core is not installed in tests/browser: run ./setup (npm ci there)");
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(screenshot);
    let out = Command::new("node")
        .arg(repo().join("tests/browser/html_report.mjs"))
        .arg(html)
        .arg(&screenshot)
        .arg(search)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install Node.js and run ./setup"));
    assert!(out.status.success(), "the browser check failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Answers every connection with `response` until the test ends.
fn answering(response: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten().take(4) {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(response.as_bytes());
        }
    });
    format!("http://{addr}/debug/pprof/profile?seconds=1")
}

#[test]
fn a_url_that_gives_no_profile_is_one_sentence() {
    let s = Scratch::new("imports-urls");
    let closed = common::free_port();
    refused(
        &s.0,
        &format!("http://127.0.0.1:{closed}/debug/pprof/profile?seconds=1"),
        "could not fetch http://127.0.0.1",
    );
    let missing =
        answering("HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\nConnection: close\r\n\r\n404 page not found\n");
    refused(&s.0, &missing, "answered HTTP 404 Not Found: 404 page not found");
    let not_a_profile = answering("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n");
    refused(&s.0, &not_a_profile, "cannot read the profile from http://");
    refused(&s.0, "https://127.0.0.1:1/debug/pprof/profile", "plain http:// only");
}

#[test]
fn a_go_server_profiled_over_its_own_pprof_endpoint_names_the_planted_line() {
    if !Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: needs golang-go (./setup installs it)");
        return;
    }
    let s = Scratch::new("imports-go");
    let src = repo().join("tests/programs/go/sku_check.go");
    let exe = s.path("sku_check");
    // Standard library only, so no module is downloaded; a private build cache.
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&exe)
        .arg(&src)
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "-buildvcs=false")
        .env("GOCACHE", s.path("gocache"))
        .current_dir(&s.0)
        .status()
        .unwrap();
    assert!(built.success());
    let mut server = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
    let mut addr = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut addr).unwrap();
    let addr = addr.trim().to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");

    // Bounded load: 6 s at most, on one thread, while the profile takes 3 s of it.
    let mut load = onefix()
        .args(["load", &format!("http://{addr}/check?sku=DE-ELEC-00042-b"), "--duration", "6s"])
        .args(["--connections", "4", "--threads", "1", "--quiet"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let url = format!("http://{addr}/debug/pprof/profile?seconds=3");
    let json = s.path("go.json");
    let out = onefix().current_dir(&s.0).args(["report", &url, "--json"]).arg(&json).output().unwrap();
    let _ = load.wait();
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_follows_findings_schema(&report);
    let f = first_finding(&report);
    assert_eq!(f["line"], line_of(&src, "// CULPRIT"), "{report:#}");
    assert_eq!(f["file"], src.display().to_string(), "{report:#}");
    assert_eq!(f["rule"], "regex-compile", "{report:#}");
    assert!(f["recurrence"].is_null());
    assert_eq!(report["mode"], "cpu");
    let note = report["notes"][0].as_str().unwrap();
    assert!(note.starts_with("this pprof profile (cpu/nanoseconds) has no sample times"), "{note}");
    assert!(note.contains("no threads") && note.contains("only time on a CPU"), "{note}");
    // Go's stacks are taken as they are: none is said to be cut short by an unwinder.
    let notes = report["notes"].as_array().unwrap();
    assert!(!notes.iter().any(|n| n.as_str().unwrap().contains("cut short")), "{report:#}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.lines().next().unwrap().ends_with(&format!("of a pprof profile read from {url}")), "{summary}");
}

#[test]
fn a_stack_of_thirty_thousand_frames_opens_in_the_browser_down_to_its_last_frame() {
    let s = Scratch::new("imports-deep");
    let stack: Vec<String> = (0..30_000).map(|i| format!("frame_{i}")).collect();
    std::fs::write(s.path("deep.folded"), format!("{} 5\nmain;other 3\n", stack.join(";"))).unwrap();
    let out = onefix().args(["report", &s.arg("deep.folded"), "--html", &s.arg("deep.html")]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = open_in_browser(&s.path("deep.html"), "imports-deep.png", "^frame_29999$");
    assert_eq!(seen["consoleErrors"], serde_json::json!([]), "{seen:#}");
    assert_eq!(seen["search"]["matches"], 1, "the deepest frame is drawn: {seen:#}");
}
