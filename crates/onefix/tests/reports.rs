//! The report files, read by the tools that read them: pprof files from real Python and native
//! recordings through `go tool pprof` (Debian's golang-go, installed by ./setup), whose top
//! functions and lines must be the ones onefix's own summary names, with the same weights.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn onefix() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onefix"))
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("onefix-reports-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir.canonicalize().unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Records `command` in the scratch directory with `--json` and `--pprof`, and returns the report.
fn record_with_pprof(s: &Scratch, extra: &[&str], command: &[&Path]) -> Value {
    let out = onefix()
        .current_dir(&s.0)
        .args(["record", "--quiet", "-o"])
        .arg(s.path("rec.onefix"))
        .arg("--json")
        .arg(s.path("report.json"))
        .arg("--pprof")
        .arg(s.path("profile.pb.gz"))
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    assert!(out.status.success(), "onefix failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&std::fs::read(s.path("report.json")).unwrap()).unwrap()
}

/// One row of `go tool pprof -top`: flat percentage and the node's name (with `file:line`
/// under `-lines`).
#[derive(Debug)]
struct TopRow {
    flat_percent: f64,
    name: String,
}

/// Runs `go tool pprof -top ARGS FILE` and parses its table.
fn pprof_top(file: &Path, args: &[&str]) -> Vec<TopRow> {
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodecount=50"])
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `go tool pprof` ({e}): install Go with ./setup (Debian's golang-go)"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "go tool pprof failed: {}{text}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<TopRow> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            // flat flat% sum% cum cum% name...
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.len() >= 6).then(|| TopRow {
                flat_percent: fields[1].trim_end_matches('%').parse().unwrap(),
                name: fields[5..].join(" "),
            })
        })
        .collect();
    assert!(!rows.is_empty(), "no rows in:\n{text}");
    rows
}

/// A regular expression matching `text` literally.
fn regex_literal(text: &str) -> String {
    text.chars()
        .flat_map(|c| if "\\.+*?()|[]{}^$".contains(c) { vec!['\\', c] } else { vec![c] })
        .collect()
}

/// pprof's flat time by function has onefix's first finding's function on top; restricted to
/// the user's files (`-show`, so each sample's leaf is its deepest user frame, onefix's
/// frontier), its flat time by line is onefix's hot lines, line for line, with the same shares
/// of the total weight.
fn pprof_agrees_with_the_summary(s: &Scratch, report: &Value) {
    let file = s.path("profile.pb.gz");
    let finding = &report["findings"][0];
    assert!(!finding.is_null(), "no finding in {report:#}");
    let by_function = pprof_top(&file, &[]);
    assert_eq!(by_function[0].name, finding["function"].as_str().unwrap(), "{by_function:#?}\n{report:#}");

    let show = format!("-show={}", regex_literal(&s.0.display().to_string()));
    let by_line = pprof_top(&file, &["-lines", &show]);
    let total = report["total_weight"].as_f64().unwrap();
    let hot_lines = report["hot_lines"].as_array().unwrap();
    assert!(hot_lines.len() >= 2, "{report:#}");
    let location = |h: &Value| format!("{} {}:{}", h["function"].as_str().unwrap(), h["file"].as_str().unwrap(), h["line"]);
    assert_eq!(by_line[0].name, location(&hot_lines[0]), "{by_line:#?}\n{report:#}");
    for hot in hot_lines {
        let row = by_line.iter().find(|r| r.name == location(hot)).unwrap_or_else(|| panic!("{} not in {by_line:#?}", location(hot)));
        let expected = 100.0 * hot["weight"].as_f64().unwrap() / total;
        assert!((row.flat_percent - expected).abs() < 0.011, "{}: pprof {}%, onefix {expected}%", location(hot), row.flat_percent);
    }
}

const TWO_PY: &str = r#"
import time

def heavy():
    t = 0
    for i in range(300_000):
        t += i * i
    return t

def light():
    t = 0
    for i in range(100_000):
        t += i
    return t

def main():
    end = time.time() + 2.0
    while time.time() < end:
        heavy()
        light()

main()
"#;

#[test]
fn pprof_of_a_python_recording_is_read_by_go_tool_pprof_with_the_same_top_lines() {
    let s = Scratch::new("pprof-python");
    let prog = s.path("two.py");
    std::fs::write(&prog, TWO_PY).unwrap();
    let report = record_with_pprof(&s, &["--mode", "cpu", "--rate", "200"], &[Path::new("python3"), &prog]);
    assert_eq!(report["findings"][0]["function"], "heavy", "{report:#}");
    pprof_agrees_with_the_summary(&s, &report);
}

const TWO_C: &str = r#"
#include <time.h>
static volatile double sink;
static void heavy(void) {
    double x = 0;
    for (int i = 0; i < 300000; i++) x += i * 0.5;
    sink = x;
}
static void light(void) {
    double x = 0;
    for (int i = 0; i < 100000; i++) x += i * 0.25;
    sink = x;
}
int main(void) {
    time_t end = time(NULL) + 2;
    while (time(NULL) < end) {
        heavy();
        light();
    }
    return 0;
}
"#;

#[test]
fn pprof_of_a_native_recording_is_read_by_go_tool_pprof_with_the_same_top_lines() {
    let s = Scratch::new("pprof-native");
    let src = s.path("two.c");
    std::fs::write(&src, TWO_C).unwrap();
    let exe = s.path("two");
    let cc = Command::new("cc").args(["-O1", "-g", "-o"]).arg(&exe).arg(&src).status().unwrap();
    assert!(cc.success());
    let report = record_with_pprof(&s, &["--mode", "cpu", "--rate", "999"], &[&exe]);
    assert_eq!(report["target"]["language"], "native");
    assert_eq!(report["findings"][0]["function"], "heavy", "{report:#}");
    pprof_agrees_with_the_summary(&s, &report);
}
