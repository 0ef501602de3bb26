//! The report files, read by the tools that read them: pprof files from real Python and native
//! recordings through `go tool pprof` (Debian's golang-go, installed by ./setup), whose top
//! functions and lines must be the ones onefix's own summary names, with the same weights;
//! their speedscope files through speedscope's schema; HTML reports in headless chromium.

mod common;
use common::{assert_follows_findings_schema, compile_c, onefix, Scratch};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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
        .arg("--speedscope")
        .arg(s.path("speedscope.json"))
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
        .args(["tool", "pprof", "-top", "-nodecount=100", "-nodefraction=0"])
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
    text.chars().flat_map(|c| if "\\.+*?()|[]{}^$".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
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

    // Only the user's source files: pprof's -show also matches a location's mapping (the
    // executable's own path, inside the scratch directory too), which would keep an unnamed
    // address in the program (a PLT stub) as a frame of its own, where onefix's frontier, like
    // a user, goes on to the source line that called it.
    let show = format!("-show={}/.*\\.(c|py)$", regex_literal(&s.0.display().to_string()));
    let by_line = pprof_top(&file, &["-lines", &show]);
    let total = report["total_weight"].as_f64().unwrap();
    let hot_lines = report["hot_lines"].as_array().unwrap();
    assert!(hot_lines.len() >= 2, "{report:#}");
    let location =
        |h: &Value| format!("{} {}:{}", h["function"].as_str().unwrap(), h["file"].as_str().unwrap(), h["line"]);
    assert_eq!(by_line[0].name, location(&hot_lines[0]), "{by_line:#?}\n{report:#}");
    // The lines of 1% or more. A read that came back empty (the target changed its stack
    // while it was read) is charged by the diagnosis to the line its thread was in just before
    // and after it, and is in the pprof file as the empty read it was: a line of a sample or
    // two can owe all its weight to such reads.
    for hot in hot_lines.iter().filter(|h| h["weight"].as_f64().unwrap() >= 0.01 * total) {
        let row = by_line
            .iter()
            .find(|r| r.name == location(hot))
            .unwrap_or_else(|| panic!("{} not in {by_line:#?}", location(hot)));
        let expected = 100.0 * hot["weight"].as_f64().unwrap() / total;
        assert!(
            (row.flat_percent - expected).abs() < 0.011,
            "{}: pprof {}%, onefix {expected}%",
            location(hot),
            row.flat_percent
        );
    }
}

/// The speedscope file of a real recording validates against speedscope's published schema
/// (vendored in crates/onefix-report/tests/schema).
fn speedscope_follows_its_schema(s: &Scratch) {
    let schema_path = repo().join("crates/onefix-report/tests/schema/speedscope-file-format-schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let file: Value = serde_json::from_slice(&std::fs::read(s.path("speedscope.json")).unwrap()).unwrap();
    let errors: Vec<String> = validator.iter_errors(&file).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(!file["profiles"].as_array().unwrap().is_empty());
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

/// Compute, then a short sleep, in a loop: a sampler reads a thread entering or leaving a 2 ms
/// sleep as running now and then. (In functions: pprof's `-lines` drops a `<module>` name.)
const SLEEPY_PY: &str = r#"
import time

def heavy():
    t = 0
    for i in range(100_000):
        t += i * i
    return t

def main():
    end = time.time() + 2.0
    while time.time() < end:
        heavy()
        time.sleep(0.002)  # SLEEP

main()
"#;

/// One definition of CPU time (issue 18): in CPU mode, every line pprof charges CPU time to is
/// a hot line of the summary with the same share, and the other way round; a sleep the sampler
/// caught as running is CPU time in neither.
#[test]
fn cpu_time_is_one_definition_in_the_summary_and_in_pprof() {
    let s = Scratch::new("pprof-cpu-sleep");
    let prog = s.path("sleepy.py");
    std::fs::write(&prog, SLEEPY_PY).unwrap();
    let report = record_with_pprof(&s, &["--mode", "cpu", "--rate", "200"], &[Path::new("python3"), &prog]);
    pprof_agrees_with_the_summary(&s, &report);
    let show = format!("-show={}/.*\\.py$", regex_literal(&s.0.display().to_string()));
    let by_line = pprof_top(&s.path("profile.pb.gz"), &["-lines", &show]);
    let hot: Vec<String> = report["hot_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{} {}:{}", h["function"].as_str().unwrap(), h["file"].as_str().unwrap(), h["line"]))
        .collect();
    for row in by_line.iter().filter(|r| r.flat_percent > 0.0 && r.name.contains(".py:")) {
        assert!(
            hot.contains(&row.name),
            "pprof charges CPU time to {} ({}%), the summary does not: {hot:#?}",
            row.name,
            row.flat_percent
        );
    }
    let sleep = format!("sleepy.py:{}", line_of(&prog, "# SLEEP"));
    assert!(hot.iter().all(|h| !h.ends_with(&sleep)), "a sleep is no CPU time: {hot:#?}");
}

#[test]
fn pprof_of_a_python_recording_is_read_by_go_tool_pprof_with_the_same_top_lines() {
    let s = Scratch::new("pprof-python");
    let prog = s.path("two.py");
    std::fs::write(&prog, TWO_PY).unwrap();
    let report = record_with_pprof(&s, &["--mode", "cpu", "--rate", "200"], &[Path::new("python3"), &prog]);
    assert_eq!(report["findings"][0]["function"], "heavy", "{report:#}");
    assert_follows_findings_schema(&report);
    pprof_agrees_with_the_summary(&s, &report);
    speedscope_follows_its_schema(&s);
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
    let exe = compile_c(&s, "two", TWO_C, &["-O1", "-g"]);
    let report = record_with_pprof(&s, &["--mode", "cpu", "--rate", "999"], &[&exe]);
    assert_eq!(report["target"]["language"], "native");
    assert_eq!(report["findings"][0]["function"], "heavy", "{report:#}");
    assert_follows_findings_schema(&report);
    pprof_agrees_with_the_summary(&s, &report);
    speedscope_follows_its_schema(&s);
}

/// Opens `html` in headless chromium through tests/browser/html_report.mjs, searching for
/// `search`, and returns what it saw. The screenshot is kept as target/tmp/`screenshot`.
fn open_in_browser(html: &Path, screenshot: &str, search: &str) -> Value {
    let chromium = Path::new("/usr/bin/chromium");
    assert!(chromium.exists(), "chromium is not installed: run ./setup (it installs Debian's chromium package)");
    let driver = repo().join("tests/browser/node_modules/playwright-core");
    assert!(driver.exists(), "playwright-core is not installed in tests/browser: run ./setup (npm ci there)");
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(screenshot);
    let _ = std::fs::remove_file(&screenshot);
    let out = Command::new("node")
        .arg(repo().join("tests/browser/html_report.mjs"))
        .arg(html)
        .arg(&screenshot)
        .arg(search)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install Node.js and run ./setup"));
    assert!(out.status.success(), "the browser check failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        std::fs::metadata(&screenshot).map(|m| m.len() > 10_000).unwrap_or(false),
        "no screenshot at {}",
        screenshot.display()
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The checks every opened report must pass: no console error, no network, and a click on a
/// flame graph frame focuses the graph on that frame.
fn assert_renders_and_zooms(seen: &Value) {
    assert_eq!(seen["consoleErrors"], serde_json::json!([]), "{seen:#}");
    assert_eq!(seen["requests"], serde_json::json!([]), "the page must need no network: {seen:#}");
    let click = &seen["click"];
    assert_eq!(click["focused"], click["name"], "{seen:#}");
    let box_width = click["boxWidth"].as_f64().unwrap();
    assert!(click["widthBefore"].as_f64().unwrap() < 0.9 * box_width, "{seen:#}");
    assert!(click["widthAfter"].as_f64().unwrap() > 0.95 * box_width, "{seen:#}");
    assert!(click["crumbs"].as_str().unwrap().starts_with("zoomed into:"), "{seen:#}");
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The HTML report of a lab recording, opened in Debian's headless chromium (driven by
/// tests/browser/html_report.mjs through playwright-core): it shows the recording's findings,
/// logs no console error, asks for nothing over the network, and a click on a flame graph
/// frame focuses the graph on it. The screenshot stays in target/tmp for a person to look at.
#[test]
fn html_report_of_a_lab_recording_renders_in_a_headless_browser() {
    let s = Scratch::new("html-lab");
    let html = s.path("report.html");
    let profiler = format!(
        "{} record --quiet -o {} --json {} --html {} --",
        env!("CARGO_BIN_EXE_onefix"),
        s.path("rec.onefix").display(),
        s.path("report.json").display(),
        html.display()
    );
    let out = Command::new(repo().join("lab/token-updater/run"))
        .arg("slow")
        .env("PROFILER", &profiler)
        .env("TOKENS", "300")
        .output()
        .unwrap();
    assert!(out.status.success(), "lab run failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(s.path("report.json")).unwrap()).unwrap();
    let finding = &report["findings"][0];
    assert!(!finding.is_null(), "no finding in {report:#}");

    let function = finding["function"].as_str().unwrap();
    let seen = open_in_browser(&html, "html-report-lab-token-updater.png", function);

    assert_renders_and_zooms(&seen);
    let shown = seen["findings"].as_array().unwrap();
    assert_eq!(shown.len(), report["findings"].as_array().unwrap().len(), "{seen:#}");
    let base = finding["file"].as_str().unwrap().rsplit('/').next().unwrap();
    assert_eq!(shown[0]["loc"], format!("{base}:{}", finding["line"]), "{seen:#}");
    assert!(shown[0]["kind"].as_str().unwrap().starts_with(finding["kind"].as_str().unwrap()), "{seen:#}");
    assert!(shown[0]["fix"].as_str().unwrap().contains(finding["advice"].as_str().unwrap()), "{seen:#}");
    assert_eq!(shown[0]["evidence"], finding["evidence"].as_array().unwrap().len(), "{seen:#}");
    if let Some(bound) = finding["max_speedup"].as_f64() {
        // Shown to one decimal (JavaScript and Rust round ties differently: compare numbers).
        let gain = shown[0]["gain"].as_str().unwrap();
        let shown_bound: f64 =
            gain.split("up to ").nth(1).and_then(|t| t.split_once("x faster")).unwrap().0.parse().unwrap();
        if finding["max_speedup_range"].is_array() {
            assert!(gain.contains("(with this many samples, "), "the bound's interval is shown: {gain}");
        }
        assert!((shown_bound - bound).abs() <= 0.051, "{gain} vs {bound}");
    }
    assert_eq!(seen["sections"], serde_json::json!(["Findings", "Flame graph", "Timeline", "Hot lines of your code"]));
    assert!(seen["timelineRows"].as_u64().unwrap() >= 1, "{seen:#}");
    // The finding's line is shown with its source.
    let code = finding["code"].as_str().unwrap().trim();
    assert!(seen["snippets"].as_array().unwrap().iter().any(|t| t.as_str().unwrap().contains(code)), "{seen:#}");

    // Searching for the finding's function highlights frames.
    assert!(seen["search"]["matches"].as_u64().unwrap() >= 1, "{seen:#}");
}

/// Two recordings in one HTML report (before and after a fix): both runs' findings side by
/// side, and the differential flame graph, in a real browser.
#[test]
fn html_report_of_two_recordings_renders_side_by_side_with_the_difference() {
    use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
    use onefix_model::recording::read_recording;

    let s = Scratch::new("html-compare");
    let before = s.path("before.py");
    std::fs::write(&before, TWO_PY).unwrap();
    // The fix: the heavy pass is gone.
    let after = s.path("after.py");
    std::fs::write(&after, TWO_PY.replace("        heavy()\n", "")).unwrap();
    let mut profiles = Vec::new();
    for (name, prog) in [("before", &before), ("after", &after)] {
        let rec = s.path(&format!("{name}.onefix"));
        let out = onefix()
            .current_dir(&s.0)
            .args(["record", "--quiet", "--mode", "cpu", "--rate", "200", "-o"])
            .arg(&rec)
            .args(["--", "python3"])
            .arg(prog)
            .output()
            .unwrap();
        assert!(out.status.success(), "onefix failed: {}", String::from_utf8_lossy(&out.stderr));
        profiles.push(read_recording(std::fs::File::open(&rec).unwrap()).unwrap().profile);
    }
    let kb = KnowledgeBase::builtin();
    let diagnoses: Vec<_> = profiles
        .iter()
        .map(|p| {
            let user = UserCode::new(p.meta.user_code.iter().map(PathBuf::from), None);
            diagnose(p, &kb, &user, &Options { mode: p.meta.mode, ..Options::default() })
        })
        .collect();
    assert_eq!(diagnoses[0].findings[0].function, "heavy");
    assert!(diagnoses[1].findings.iter().all(|f| f.function != "heavy"), "{:#?}", diagnoses[1]);
    // What a user runs: `onefix compare A B --html`, which puts the verdict on top.
    let html = s.path("compare.html");
    let out = onefix()
        .args(["compare"])
        .arg(s.path("before.onefix"))
        .arg(s.path("after.onefix"))
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = open_in_browser(&html, "html-report-compare.png", "light");
    assert_renders_and_zooms(&seen);
    let shown: Vec<&str> = seen["findings"].as_array().unwrap().iter().map(|f| f["loc"].as_str().unwrap()).collect();
    let expected: Vec<String> = diagnoses
        .iter()
        .flat_map(|d| &d.findings)
        .map(|f| format!("{}:{}", f.file.rsplit('/').next().unwrap(), f.line))
        .collect();
    assert_eq!(shown, expected, "both runs' findings, before then after: {seen:#}");
    let diff = &seen["diff"];
    assert!(diff["frames"].as_u64().unwrap() >= 3, "{seen:#}");
    assert!(diff["colours"].as_u64().unwrap() >= 2, "the difference colours what changed: {seen:#}");
    // The verdict leads the page: the whole runs' times, then the lines' change.
    assert_eq!(seen["sections"][0], "Verdict", "{seen:#}");
    let verdicts: Vec<&str> = seen["verdicts"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(
        verdicts[0].starts_with("The runs (each went to its end): ") && verdicts[0].contains("wall time"),
        "{verdicts:?}"
    );
    assert!(verdicts.iter().any(|v| v.starts_with("The lines (per ")), "{verdicts:?}");
    // The heavy pass, gone from B, is in the table of changes.
    let rows = seen["changes"].as_array().unwrap();
    assert!(
        rows.iter().any(|r| r[2].as_str().is_some_and(|c| c.starts_with("down") || c.starts_with("gone"))
            && r[4].as_str().is_some_and(|l| l.starts_with("heavy"))),
        "{seen:#}"
    );
}

/// A tmux server of its own (its own socket), killed when the test ends whatever happens.
struct Tmux(String);

impl Tmux {
    fn new(name: &str) -> Tmux {
        Tmux(format!("onefix-test-{name}-{}", std::process::id()))
    }
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run tmux ({e}): install it with ./setup (Debian's tmux)"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }
    /// Polls the screen until `found` says yes, for at most `limit`.
    fn wait_for(&self, limit: std::time::Duration, found: impl Fn(&str) -> bool) -> (bool, String) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let screen = self.screen();
            if found(&screen) || std::time::Instant::now() > deadline {
                return (found(&screen), screen);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.0).arg("kill-server").output();
    }
}

const FOREVER_PY: &str = r#"
import time

def crunch():
    t = 0
    for i in range(200_000):
        t += i * i % 7   # HOT
    return t

end = time.time() + 40
rounds = 0
while time.time() < end:
    crunch()
    rounds += 1
    print(f"ROUND-{rounds}")
"#;

/// `onefix top` in a real terminal (tmux): the target's hot line appears on the live screen,
/// with the program's own output in a pane under it; `q` quits, the target it started is
/// stopped, the last view and the program's last lines stay on the terminal as a summary, and
/// `--output` kept what it saw.
#[test]
fn top_shows_the_hot_line_live_and_quits_on_q() {
    let s = Scratch::new("top");
    let prog = s.path("forever.py");
    std::fs::write(&prog, FOREVER_PY).unwrap();
    let hot = format!("forever.py:{}", line_of(&prog, "# HOT"));
    let rec = s.path("top.onefix");
    let tmux = Tmux::new("top");
    let command = format!(
        "cd {} && {} top -o {} -- python3 {}; echo TOP-EXITED-$?; sleep 60",
        s.0.display(),
        env!("CARGO_BIN_EXE_onefix"),
        rec.display(),
        prog.display()
    );
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "45", &command]);
    let (seen, screen) =
        tmux.wait_for(std::time::Duration::from_secs(20), |s| s.contains(&hot) && s.contains("hot-loop-compute"));
    assert!(seen, "the hot line {hot} never appeared:\n{screen}");
    assert!(screen.contains("onefix top: python3") && screen.contains("q quits"), "{screen}");
    assert!(screen.contains("MainThread"), "thread states are shown:\n{screen}");
    // The program's prints are not wiped by the redraws: they are in the pane, each whole.
    let (printed, screen) = tmux.wait_for(std::time::Duration::from_secs(20), |s| s.contains("ROUND-"));
    assert!(printed && screen.contains("the program's output"), "the program's output is not shown:\n{screen}");
    let round = |l: &str| l.trim().strip_prefix("ROUND-").is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
    assert!(screen.lines().any(round), "{screen}");
    let pid: u32 = screen.split("(pid ").nth(1).and_then(|t| t.split(')').next()).unwrap().parse().unwrap();

    tmux.run(&["send-keys", "-t", "top", "q"]);
    let (quit, screen) = tmux.wait_for(std::time::Duration::from_secs(10), |s| s.contains("TOP-EXITED-"));
    assert!(quit, "q did not quit:\n{screen}");
    assert!(screen.contains("TOP-EXITED-0"), "{screen}");
    // The view left the alternate screen; what it last showed is printed as the summary, after
    // the program's last lines.
    let summary = &screen[..screen.find("TOP-EXITED-").unwrap()];
    let output_at = summary.find("the program's last output").expect("the program's last lines are kept");
    let view_at = summary.find("hot lines of your code").expect("the last view is kept as a summary");
    assert!(output_at < view_at && summary.contains(&hot), "{screen}");
    assert!(summary.lines().any(|l| l.trim().starts_with("ROUND-")), "{screen}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the target top started is stopped and reaped");

    let out = onefix().arg("report").arg(&rec).arg("--json").arg(s.path("top.json")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(s.path("top.json")).unwrap()).unwrap();
    let f = &report["findings"][0];
    assert_eq!(format!("{}:{}", f["file"].as_str().unwrap().rsplit('/').next().unwrap(), f["line"]), hot, "{report:#}");
}

/// The 1-based line of `file` holding `marker`.
fn line_of(file: &Path, marker: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let hits: Vec<usize> = text.lines().enumerate().filter(|(_, l)| l.contains(marker)).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1);
    hits[0]
}

/// `record` on a terminal shows a progress line (elapsed, samples, read errors, the line hot
/// now); with stderr not a terminal, or with --quiet, it says nothing while recording.
#[test]
fn record_shows_a_progress_line_only_on_a_terminal() {
    let s = Scratch::new("progress");
    let prog = s.path("forever.py");
    std::fs::write(&prog, FOREVER_PY).unwrap();
    let hot = format!("now: forever.py:{} crunch", line_of(&prog, "# HOT"));
    let tmux = Tmux::new("progress");
    let command = format!(
        "cd {} && {} record -d 4s -o {} -- python3 {} > /dev/null; echo RECORD-EXITED-$?; sleep 60",
        s.0.display(),
        env!("CARGO_BIN_EXE_onefix"),
        s.path("tty.onefix").display(),
        prog.display()
    );
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "20", &command]);
    let (seen, screen) = tmux.wait_for(std::time::Duration::from_secs(20), |s| s.contains(&hot));
    assert!(seen, "no progress line naming {hot}:\n{screen}");
    let line = screen.lines().find(|l| l.contains(&hot)).unwrap();
    assert!(line.starts_with("onefix: ") && line.contains(" samples, 0 read errors"), "{line}");
    let (done, screen) = tmux.wait_for(std::time::Duration::from_secs(20), |s| s.contains("RECORD-EXITED-"));
    assert!(done && screen.contains("RECORD-EXITED-0"), "{screen}");

    // The program prints to the same terminal: the progress line stays on the last row, out
    // of the way, and never lands inside one of the program's lines.
    let shared = Tmux::new("progress-shared");
    // 8 s: the line is redrawn once a second, and on a loaded machine (CI runs this beside
    // chromium) the first redraws come late; 4 s left too few to be seen once.
    let command = format!(
        "cd {} && {} record -d 8s -o {} -- python3 {}; echo RECORD-EXITED-$?; sleep 60",
        s.0.display(),
        env!("CARGO_BIN_EXE_onefix"),
        s.path("shared.onefix").display(),
        prog.display()
    );
    shared.run(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "12", &command]);
    let last_row = |screen: &str| screen.trim_end_matches('\n').lines().last().unwrap_or("").to_owned();
    let (seen, screen) = shared.wait_for(std::time::Duration::from_secs(20), |s| {
        let printed = s.lines().any(|l| l.trim().strip_prefix("ROUND-").is_some_and(|n| n.parse::<u32>().is_ok()));
        printed && last_row(s).starts_with("onefix: ") && last_row(s).contains(" samples, ")
    });
    assert!(seen, "the progress line is not on the last row, under the program's output:\n{screen}");
    let (done, _) = shared.wait_for(std::time::Duration::from_secs(20), |s| s.contains("RECORD-EXITED-"));
    assert!(done);
    let all = shared.run(&["capture-pane", "-p", "-S", "-200", "-t", "top"]);
    let rounds: Vec<&str> = all.lines().filter(|l| l.contains("ROUND-") && !l.contains("print(")).collect();
    assert!(rounds.len() >= 2, "{all}");
    for line in rounds {
        let n = line.trim().strip_prefix("ROUND-").unwrap_or("");
        assert!(
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
            "a line of the program was broken: {line:?}\n{all}"
        );
    }

    for quiet in [false, true] {
        let out = onefix()
            .current_dir(&s.0)
            .args(["record", "-d", "1s", "-o"])
            .arg(s.path("pipe.onefix"))
            .args(quiet.then_some("--quiet"))
            .args(["--", "python3"])
            .arg(&prog)
            .output()
            .unwrap();
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("read errors"), "no progress line when stderr is not a terminal: {stderr}");
    }
}

/// `onefix top --pid` attached to a running program: Ctrl-C quits top, and the program it
/// watched goes on running, unharmed.
#[test]
fn top_attached_quits_on_ctrl_c_and_leaves_the_target_running() {
    let s = Scratch::new("top-attach");
    let prog = s.path("forever.py");
    std::fs::write(&prog, FOREVER_PY).unwrap();
    // The interpreter itself, not a version manager's shim script that execs it: top must
    // attach to Python, not to a shell about to become Python.
    let python = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    let python = String::from_utf8(python.stdout).unwrap().trim().to_owned();
    let mut target = Command::new(python).arg(&prog).current_dir(&s.0).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    struct Reap<'a>(&'a mut std::process::Child);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = target.id();
    let target = Reap(&mut target);
    let hot = format!("forever.py:{}", line_of(&prog, "# HOT"));
    let tmux = Tmux::new("top-attach");
    let command = format!("{} top --pid {pid}; echo TOP-EXITED-$?; sleep 60", env!("CARGO_BIN_EXE_onefix"));
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "45", &command]);
    let (seen, screen) = tmux.wait_for(std::time::Duration::from_secs(20), |s| s.contains(&hot));
    assert!(seen, "the hot line {hot} never appeared:\n{screen}");
    assert!(screen.contains(&format!("pid {pid} (attached)")), "{screen}");
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    let (quit, screen) = tmux.wait_for(std::time::Duration::from_secs(10), |s| s.contains("TOP-EXITED-"));
    assert!(quit && screen.contains("TOP-EXITED-0"), "Ctrl-C did not quit cleanly:\n{screen}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(matches!(target.0.try_wait(), Ok(None)), "the watched program must go on running");
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = state.rsplit(')').next().unwrap().split_whitespace().next().unwrap().to_owned();
    assert!(state == "R" || state == "S", "the target is left running, not stopped: state {state}");
}

/// A memory recording's page draws the RSS and the live heap over time, and its flame graph of
/// retained bytes zooms like any other.
#[test]
fn html_report_of_a_memory_recording_draws_rss_and_the_live_heap() {
    let s = Scratch::new("html-memory");
    let html = s.path("memory.html");
    let prog = s.path("grow.py");
    std::fs::write(
        &prog,
        "import time\nkept = []\ndef keep(i):\n    kept.append({'id': i, 'tags': [str(i)] * 20})   # KEEP\n\
         def churn(i):\n    return sum(len(str(x)) for x in range(i % 50))\n\
         for i in range(60000):\n    keep(i)\n    churn(i)\n    if i % 10000 == 0:\n        time.sleep(0.05)\n",
    )
    .unwrap();
    let out = onefix()
        .current_dir(&s.0)
        .args(["record", "--memory", "--quiet", "-o"])
        .arg(s.path("mem.onefix"))
        .arg("--html")
        .arg(&html)
        .args(["--", "python3"])
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = open_in_browser(&html, "html-report-memory.png", "keep");
    assert_renders_and_zooms(&seen);
    assert_eq!(seen["memoryCurves"], 2, "RSS and live heap: {seen:#}");
}
