//! Helpers shared by the onefix binary's integration tests (each test file is its own crate and
//! uses only some of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn onefix() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onefix"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A private directory for one test, removed when the test ends.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("onefix-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// [`Scratch::path`] as a command-line argument.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The 1-based line of `file` that contains `marker`: tests find lines by their text, so
/// editing a program never silently breaks what a test checks.
pub fn line_of(file: &Path, marker: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap();
    let hits: Vec<usize> = text.lines().enumerate().filter(|(_, l)| l.contains(marker)).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1, "marker {marker:?} must occur once in {}", file.display());
    hits[0] as u64
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Writes `source` to `NAME.c` in the scratch directory and compiles it with `cc` and `flags`
/// into `NAME` there; returns the executable (the source is beside it, `NAME.c`).
pub fn compile_c(s: &Scratch, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = s.path(&format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = s.path(name);
    let ok = Command::new("cc").args(flags).arg("-o").arg(&exe).arg(&src).status().unwrap();
    assert!(ok.success(), "cc failed on {}", src.display());
    exe
}

/// A findings report (`--json`) validates against the committed contract,
/// crates/onefix-report/schema/findings.schema.json.
pub fn assert_follows_findings_schema(report: &serde_json::Value) {
    let path = repo().join("crates/onefix-report/schema/findings.schema.json");
    let schema: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(report).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}\n{report:#}", errors.join("\n"));
}

/// Records `python3 program` from the scratch directory; see [`record_command`].
pub fn record(scratch: &Scratch, extra: &[&str], program: &Path) -> (Value, Output) {
    record_command(scratch, extra, &[Path::new("python3"), program])
}

/// Records a command into the scratch directory's `rec.onefix` and returns its JSON report.
pub fn record_command(scratch: &Scratch, extra: &[&str], command: &[&Path]) -> (Value, Output) {
    let json = scratch.path("report.json");
    let out = onefix()
        .current_dir(&scratch.0)
        .args(["record", "--quiet", "-o"])
        .arg(scratch.path("rec.onefix"))
        .arg("--json")
        .arg(&json)
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    assert!(out.status.success(), "onefix failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (report, out)
}

pub fn first_finding(report: &Value) -> &Value {
    let f = &report["findings"][0];
    assert!(!f.is_null(), "no finding in {report:#}");
    f
}

/// Whether the Go toolchain is here (./setup installs Debian's golang-go).
pub fn have_go() -> bool {
    Command::new("go").arg("version").output().is_ok_and(|o| o.status.success())
}

/// Builds the one-file Go program `src` into `exe` (GOPATH mode, no module), with `flags`
/// given to `go build` before `-o`; panics if the build fails.
pub fn go_build(src: &Path, exe: &Path, flags: &[&str]) {
    let built = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(exe)
        .arg(src)
        .env("GO111MODULE", "off")
        .current_dir(src.parent().unwrap())
        .status()
        .unwrap();
    assert!(built.success(), "go build {} failed", src.display());
}
