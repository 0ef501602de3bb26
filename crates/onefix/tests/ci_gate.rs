//! onefix in CI: `--fail-on` fails a run whose finding crosses a threshold, after writing every
//! output; `--sarif` writes SARIF 2.1.0 that validates against the OASIS schema and puts the
//! finding at the planted line; `--firefox` writes the Firefox Profiler's processed format with
//! consistent tables; `compare --fail-if-slower` fails only when B is slower with confidence.

mod common;
use common::{free_port, line_of, onefix, repo, Scratch};

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde::Deserialize;
use serde_json::Value;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The Python lab program with a planted regex compile per call, copied under `app/` in the
/// scratch directory; returns its path and the line marked `# CULPRIT`.
fn culprit_program(s: &Scratch) -> (std::path::PathBuf, u64) {
    let app = s.path("app");
    std::fs::create_dir_all(&app).unwrap();
    let program = app.join("log_redactor.py");
    std::fs::copy(repo().join("tests/programs/log_redactor.py"), &program).unwrap();
    let line = line_of(&program, "# CULPRIT");
    (program, line)
}

#[test]
fn a_finding_over_the_threshold_fails_the_run_after_every_output_and_sarif_and_firefox_name_its_line() {
    let s = Scratch::new("ci-gate-fail-on");
    let (_, culprit) = culprit_program(&s);
    let out = onefix()
        .current_dir(&s.0)
        .args(["record", "--quiet", "-d", "2s", "-o", "rec.onefix", "--json", "report.json"])
        .args(["--sarif", "out.sarif", "--firefox", "profile.json", "--fail-on", "share>20%"])
        .args(["--", "python3", "app/log_redactor.py"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "the gate's status: {err}");
    assert!(err.contains("--fail-on share>20%: finding #1 (repeated-setup"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Every output was written before the gate failed the run.
    for name in ["rec.onefix", "report.json", "out.sarif", "profile.json"] {
        assert!(s.path(name).metadata().is_ok_and(|m| m.len() > 0), "{name} was not written: {err}");
    }
    let report: Value = serde_json::from_slice(&std::fs::read(s.path("report.json")).unwrap()).unwrap();
    assert_eq!(report["findings"][0]["line"], culprit, "{report:#}");

    check_sarif(&s.path("out.sarif"), &report, culprit);
    check_firefox(&s.path("profile.json"), &report, culprit);

    // The same recording, reported again: a kind list that names the finding fails, one that
    // does not passes.
    let report_with = |condition: &str| {
        onefix().current_dir(&s.0).args(["report", "rec.onefix", "--fail-on", condition]).output().unwrap()
    };
    let out = report_with("kind=n-plus-one-query,repeated-setup");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let out = report_with("kind=deep-copy,n-plus-one-query");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_bad_condition_is_one_sentence_before_the_target_starts() {
    let s = Scratch::new("ci-gate-bad");
    let marker = s.path("started");
    for (condition, expect) in [("share<20%", "is not a condition"), ("kind=n-plus-one", "is not a kind")] {
        let out = onefix()
            .args(["record", "--no-save", "--fail-on", condition, "--", "touch"])
            .arg(&marker)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more")).collect();
        assert_eq!(lines.len(), 1, "one sentence: {err}");
        assert!(!marker.exists(), "the target was started for a run that cannot gate");
    }
    let out = onefix().args(["compare", "a.json", "b.json", "--fail-if-slower", "lots"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not a limit"), "{}", stderr(&out));
}

/// The SARIF log validates against the SARIF 2.1.0 schema, and the culprit is a result at its
/// file (relative to where onefix ran) and line, its kind the rule.
fn check_sarif(path: &Path, report: &Value, culprit: u64) {
    let log: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let schema: Value =
        serde_json::from_slice(&std::fs::read(repo().join("tests/schemas/sarif-2.1.0.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&log).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}\n{log:#}", errors.join("\n"));
    // The schema itself must be able to fail: a log without its version is refused.
    let mut broken = log.clone();
    broken.as_object_mut().unwrap().remove("version");
    assert!(!validator.is_valid(&broken), "the schema accepts a log without a version");

    let run = &log["runs"][0];
    let results = run["results"].as_array().unwrap();
    let top = results.iter().find(|r| r["properties"]["rank"] == 1).unwrap_or_else(|| panic!("{log:#}"));
    let place = &top["locations"][0]["physicalLocation"];
    assert_eq!(place["artifactLocation"]["uri"], "app/log_redactor.py", "{top:#}");
    assert_eq!(place["artifactLocation"]["uriBaseId"], "%SRCROOT%", "{top:#}");
    assert_eq!(place["region"]["startLine"], culprit, "{top:#}");
    assert_eq!(top["ruleId"], "repeated-setup");
    let rule = &run["tool"]["driver"]["rules"][top["ruleIndex"].as_u64().unwrap() as usize];
    assert_eq!(rule["id"], "repeated-setup", "{run:#}");
    assert!(!rule["help"]["text"].as_str().unwrap().is_empty(), "{rule:#}");
    let share = top["properties"]["share"].as_f64().unwrap();
    assert!(share > 0.2, "{top:#}");
    assert_eq!(top["level"], "error", "a share above 20% is an error: {top:#}");
    // The gain is the report's, when it has a finite one (a share of 100% has no bound).
    // (The JSON report rounds to 2 decimals; SARIF keeps the value.)
    let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 0.006 * a.abs().max(1.0),
        (a, b) => a.is_none() && b.is_none(),
    };
    let gain = report["findings"][0]["max_speedup"].as_f64();
    assert!(close(top["properties"]["maxSpeedup"].as_f64(), gain), "{gain:?} {top:#}");
    assert!(close(Some(share), report["findings"][0]["share"].as_f64()), "{top:#}");
    assert!(top["message"]["text"].as_str().unwrap().contains("Fix: "), "{top:#}");
    let root = run["originalUriBaseIds"]["%SRCROOT%"]["uri"].as_str().unwrap();
    assert!(root.starts_with("file:///") && root.ends_with('/'), "{root}");
}

/// The Firefox Profiler's processed format, as its documentation describes it
/// (https://github.com/firefox-devtools/profiler/blob/main/docs-developer/processed-profile-format.md),
/// read with serde: a file missing a table or column fails to read.
#[derive(Deserialize)]
struct FxProfile {
    meta: FxMeta,
    threads: Vec<FxThread>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FxMeta {
    version: u32,
    preprocessed_profile_version: u32,
    interval: f64,
    start_time: f64,
    categories: Vec<FxCategory>,
    marker_schema: Vec<Value>,
    sample_units: Value,
}

#[derive(Deserialize)]
struct FxCategory {
    name: String,
    subcategories: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FxThread {
    name: String,
    pid: Value,
    tid: Value,
    process_name: String,
    samples: FxSamples,
    stack_table: FxStackTable,
    frame_table: FxFrameTable,
    func_table: FxFuncTable,
    string_array: Vec<String>,
    markers: FxMarkers,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FxSamples {
    length: usize,
    stack: Vec<Option<usize>>,
    time_deltas: Vec<f64>,
    weight: Vec<i64>,
    weight_type: String,
    #[serde(rename = "threadCPUDelta")]
    thread_cpu_delta: Vec<Option<f64>>,
}

#[derive(Deserialize)]
struct FxStackTable {
    length: usize,
    prefix: Vec<Option<usize>>,
    frame: Vec<usize>,
}

#[derive(Deserialize)]
struct FxFrameTable {
    length: usize,
    category: Vec<Option<usize>>,
    subcategory: Vec<Option<usize>>,
    func: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FxFuncTable {
    length: usize,
    name: Vec<usize>,
    resource: Vec<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FxMarkers {
    length: usize,
    name: Vec<usize>,
    start_time: Vec<Option<f64>>,
    end_time: Vec<Option<f64>>,
    phase: Vec<u8>,
    category: Vec<usize>,
    data: Vec<Value>,
}

fn check_firefox(path: &Path, report: &Value, culprit: u64) {
    let profile: FxProfile = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let meta = &profile.meta;
    assert!(meta.version > 0 && meta.preprocessed_profile_version > 0);
    assert!(meta.interval > 0.0 && meta.start_time > 0.0);
    assert_eq!(meta.sample_units["threadCPUDelta"], "µs");
    let category_names: Vec<&str> = meta.categories.iter().map(|c| c.name.as_str()).collect();
    assert!(category_names.contains(&"Running"), "{category_names:?}");
    let marker_types: Vec<&str> = meta.marker_schema.iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(!profile.threads.is_empty());

    let mut total_weight = 0i64;
    let mut culprit_frames = 0;
    let mut culprit_markers = 0;
    for t in &profile.threads {
        let strings = t.string_array.len();
        let s = &t.samples;
        assert!(
            [s.stack.len(), s.time_deltas.len(), s.weight.len(), s.thread_cpu_delta.len()]
                .iter()
                .all(|&n| n == s.length),
            "thread {}: sample columns of unequal length",
            t.name
        );
        assert_eq!(s.weight_type, "samples");
        assert!(!t.process_name.is_empty() && !t.pid.is_null() && !t.tid.is_null());
        let st = &t.stack_table;
        assert!(st.prefix.len() == st.length && st.frame.len() == st.length, "{}", t.name);
        let ft = &t.frame_table;
        assert!([ft.category.len(), ft.subcategory.len(), ft.func.len()].iter().all(|&n| n == ft.length));
        let fu = &t.func_table;
        assert!(fu.name.len() == fu.length && fu.resource.len() == fu.length);
        for (i, stack) in s.stack.iter().enumerate() {
            assert!(stack.map_or(true, |x| x < st.length), "sample {i}'s stack out of range");
            // Times are deltas from the previous sample: never negative, so in time order.
            assert!(s.time_deltas[i] >= 0.0, "sample {i} goes back in time");
            // CPU time (µs) since the previous sample fits in the wall time since it (ms).
            if i > 0 {
                let cpu = s.thread_cpu_delta[i].unwrap_or(0.0);
                assert!(
                    cpu <= s.time_deltas[i] * 1000.0 + 1.0,
                    "sample {i}: {cpu} µs of CPU in {} ms",
                    s.time_deltas[i]
                );
            }
            assert!(s.weight[i] > 0);
        }
        total_weight += s.weight.iter().sum::<i64>();
        for i in 0..st.length {
            assert!(st.prefix[i].map_or(true, |p| p < i), "a stack's prefix comes before it");
            assert!(st.frame[i] < ft.length);
        }
        for i in 0..ft.length {
            assert!(ft.func[i] < fu.length);
            let category = ft.category[i].expect("every frame has a category");
            assert!(category < meta.categories.len());
            assert!(ft.subcategory[i].expect("and a subcategory") < meta.categories[category].subcategories.len());
        }
        for &name in &fu.name {
            assert!(name < strings);
            if t.string_array[name].contains(&format!("mentions_erased_user (log_redactor.py:{culprit})")) {
                culprit_frames += 1;
            }
        }
        let m = &t.markers;
        assert!([m.name.len(), m.start_time.len(), m.end_time.len(), m.phase.len(), m.category.len(), m.data.len()]
            .iter()
            .all(|&n| n == m.length));
        for i in 0..m.length {
            assert!(m.name[i] < strings && m.category[i] < meta.categories.len());
            let (start, end) = (m.start_time[i].unwrap(), m.end_time[i].unwrap());
            assert!(end >= start, "marker {i} ends before it starts");
            let kind = m.data[i]["type"].as_str().unwrap();
            assert!(marker_types.contains(&kind), "marker type {kind} has no schema");
            // String fields are `unique-string`: indices into the thread's strings.
            let field = |key: &str| m.data[i][key].as_u64().map(|s| t.string_array[s as usize].as_str());
            if field("location").is_some_and(|l| l.ends_with(&format!("app/log_redactor.py:{culprit}"))) {
                assert_eq!(field("kind"), Some("repeated-setup"));
                assert!(field("fix").is_some_and(|f| f.contains("compile")), "{:?}", field("fix"));
                culprit_markers += 1;
            }
        }
    }
    assert!(culprit_frames > 0, "no frame names the culprit line");
    assert!(culprit_markers > 0, "no marker shows when the culprit line ran");
    // Wall mode: every sample of the recording is in the profile, with its weight.
    assert_eq!(total_weight, report["samples"].as_i64().unwrap(), "{report:#}");
}

/// A server whose `/work?ms=N` answers after N ms: the same program both times, or planted
/// slower by asking it for more.
const SERVER: &str = r#"
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ms = int(self.path.split("ms=")[1])
        time.sleep(ms / 1000)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_gate_passes_two_runs_of_the_same_server_and_fails_one_planted_slower() {
    let s = Scratch::new("ci-gate-compare");
    std::fs::write(s.path("server.py"), SERVER).unwrap();
    let port = free_port();
    let _server = Server(
        Command::new("python3").arg(s.path("server.py")).arg(port.to_string()).stdout(Stdio::null()).spawn().unwrap(),
    );
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the test server did not listen");
    let load = |name: &str, ms: u32| {
        let out = onefix()
            .args(["load", "--quiet", "--rate", "40", "-d", "4s", "-c", "4", "--json"])
            .arg(s.path(name))
            .arg(format!("http://127.0.0.1:{port}/work?ms={ms}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // Sleeps long beside the server's own work and the machine's noise, planted 3x slower; the
    // limit (25%) leaves two runs of the same server room on a machine busy with other tests.
    load("a.json", 20);
    load("same.json", 20);
    load("slower.json", 60);
    let gate = |b: &str| {
        onefix().arg("compare").arg(s.path("a.json")).arg(s.path(b)).args(["--fail-if-slower", "25%"]).output().unwrap()
    };
    let gate_line = |out: &Output| {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text.lines().find(|l| l.starts_with("gate (--fail-if-slower 25%): ")).map(str::to_owned);
        line.unwrap_or_else(|| panic!("no gate line in: {text}"))
    };

    let out = gate("same.json");
    let line = gate_line(&out);
    assert_eq!(out.status.code(), Some(0), "{line}");
    assert!(!line.contains("above the 25% limit"), "{line}");

    let out = gate("slower.json");
    let line = gate_line(&out);
    assert_eq!(out.status.code(), Some(3), "{line}\n{}", stderr(&out));
    assert!(
        line.contains("latency") && line.contains("B is slower: +") && line.contains("above the 25% limit"),
        "{line}"
    );
    // The slower run as A: B is faster, and the gate passes.
    let out = onefix()
        .arg("compare")
        .arg(s.path("slower.json"))
        .arg(s.path("a.json"))
        .args(["--fail-if-slower", "25%"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", gate_line(&out));
    assert!(gate_line(&out).contains("B is faster"));
}

#[test]
fn the_gate_judges_two_recordings_made_under_load_by_their_loads() {
    let s = Scratch::new("ci-gate-recordings");
    std::fs::write(s.path("server.py"), SERVER).unwrap();
    let record = |name: &str, ms: u32| {
        let port = free_port();
        // Five one-second windows a run: enough for the test on a busy machine.
        let load = format!("http://127.0.0.1:{port}/work?ms={ms} --rate 40 -d 5s -c 4");
        let out = onefix()
            .current_dir(&s.0)
            .args(["record", "--quiet", "-o", name, "--load", &load, "--", "python3", "server.py"])
            .arg(port.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    record("a.onefix", 20);
    record("b.onefix", 60);
    let out = onefix()
        .current_dir(&s.0)
        .args(["compare", "a.onefix", "b.onefix", "--fail-if-slower", "5%"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}{}", stderr(&out));
    let line =
        text.lines().find(|l| l.starts_with("gate (--fail-if-slower 5%): latency")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("B is slower: +") && line.contains("above the 5% limit"), "{line}");
}
