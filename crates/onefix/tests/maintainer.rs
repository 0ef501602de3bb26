//! The maintainer's view: an installed package named with `--user-code` or `--package` is the
//! user's code, though it lies under site-packages; and when no sample ran in the user's code,
//! the note says which exclusion applied and how to lift it.

mod common;
use common::{line_of, onefix, record, Scratch};

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A package whose lookup walks its whole table on every call (the slow line is marked).
const PACKAGE: &str = r#"
class Registry:
    def __init__(self, n):
        self.items = [("key%d" % i, i) for i in range(n)]

    def find(self, key):
        for k, v in self.items:   # WALK
            if k == key:          # WALK
                return v
        return None
"#;

const DRIVER: &str = r#"
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "venv/lib/python3.11/site-packages"))
import tallylib

registry = tallylib.Registry(4000)
total = 0
deadline = time.monotonic() + 2.0
for i in range(40000):
    total += registry.find("key%d" % (i * 7 % 4000))  # CALL
    if time.monotonic() > deadline:
        break
print(total)
"#;

/// Lays out a site-packages with `tallylib` installed as the distribution `tally-lib`.
fn installed_package(s: &Scratch) -> (PathBuf, PathBuf) {
    let site = s.path("venv/lib/python3.11/site-packages");
    let package = site.join("tallylib");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("__init__.py"), PACKAGE).unwrap();
    let dist_info = site.join("tally_lib-2.0.dist-info");
    std::fs::create_dir_all(&dist_info).unwrap();
    std::fs::write(dist_info.join("METADATA"), "Metadata-Version: 2.1\nName: tally-lib\nVersion: 2.0\n").unwrap();
    std::fs::write(dist_info.join("top_level.txt"), "tallylib\n").unwrap();
    (site, package)
}

fn report(s: &Scratch, extra: &[&str]) -> (Value, String) {
    let json = s.path("view.json");
    let out = onefix()
        .current_dir(&s.0)
        .args(["report", "--json"])
        .arg(&json)
        .arg(s.path("rec.onefix"))
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "onefix report failed: {}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn rank_one(report: &Value) -> (String, u64) {
    let f = &report["findings"][0];
    assert!(!f.is_null(), "no finding in {report:#}");
    (f["file"].as_str().unwrap().to_owned(), f["line"].as_u64().unwrap())
}

fn notes(report: &Value) -> Vec<String> {
    report["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()).collect()
}

#[test]
fn an_installed_package_named_by_directory_or_name_is_the_maintainers_code() {
    let s = Scratch::new("maintainer");
    let (_site, package) = installed_package(&s);
    let driver = s.path("driver.py");
    std::fs::write(&driver, DRIVER).unwrap();
    // The walk's two lines are one loop: the finding may sit at either.
    let source = std::fs::read_to_string(package.join("__init__.py")).unwrap();
    let walk_lines: Vec<u64> =
        source.lines().enumerate().filter(|(_, l)| l.contains("# WALK")).map(|(i, _)| i as u64 + 1).collect();

    // The user's view: the driver's line that calls into the package.
    let (user_view, _) = record(&s, &[], &driver);
    let (file, line) = rank_one(&user_view);
    assert!(file.ends_with("driver.py") && line == line_of(&driver, "# CALL"), "{user_view:#}");

    let package_dir = package.display().to_string();
    for view in
        [vec!["--user-code", package_dir.as_str()], vec!["--package", "tallylib"], vec!["--package", "tally-lib"]]
    {
        let (maintainer, _) = report(&s, &view);
        let (file, line) = rank_one(&maintainer);
        assert!(
            Path::new(&file).starts_with(&package) && walk_lines.contains(&line),
            "{view:?}: rank 1 is {file}:{line}, not the package's walk at lines {walk_lines:?}"
        );
    }
}

#[test]
fn no_user_code_says_which_exclusion_applied_and_an_unknown_package_is_said() {
    let s = Scratch::new("maintainer-none");
    let (_site, package) = installed_package(&s);
    let driver = s.path("driver.py");
    std::fs::write(&driver, DRIVER).unwrap();
    record(&s, &[], &driver);

    // A user-code directory in which nothing ran: the note names the package the time went to.
    let elsewhere = s.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let (none, _) = report(&s, &["--user-code", elsewhere.to_str().unwrap()]);
    assert!(none["findings"].as_array().unwrap().is_empty(), "{none:#}");
    let said = notes(&none).into_iter().find(|n| n.starts_with("no sample ran in your code")).expect("the note");
    assert!(
        said.contains("installed package `tallylib`")
            && said.contains("--package tallylib")
            && said.contains(&package.display().to_string()),
        "{said}"
    );

    // A package that did not run: one sentence naming those that did, status 2, no report
    // (it would be some other code's).
    let json = s.path("unknown.json");
    let out = onefix()
        .current_dir(&s.0)
        .args(["report", "--json"])
        .arg(&json)
        .arg(s.path("rec.onefix"))
        .args(["--package", "nosuchpkg"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--package nosuchpkg") && stderr.contains("packages that ran:") && stderr.contains("tallylib"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
    assert!(!json.exists(), "no report written");
    // Named with a package that did run, the unknown one is said and the report is made.
    let (both, stderr) = report(&s, &["--package", "nosuchpkg", "--package", "tallylib"]);
    assert!(stderr.contains("--package nosuchpkg"), "{stderr}");
    assert!(!both["findings"].as_array().unwrap().is_empty(), "{both:#}");
}

#[test]
fn a_recording_made_with_package_is_read_with_it_by_report_sarif_and_compare() {
    let s = Scratch::new("maintainer-kept");
    let (_site, package) = installed_package(&s);
    let driver = s.path("driver.py");
    std::fs::write(&driver, DRIVER).unwrap();
    let (recorded, _) = record(&s, &["--package", "tallylib"], &driver);
    let (file, line) = rank_one(&recorded);
    assert!(Path::new(&file).starts_with(&package), "the recording run's rank 1 is the package's: {file}:{line}");

    // No flag: the recording's own view.
    let (reported, _) = report(&s, &[]);
    assert_eq!(rank_one(&reported), (file.clone(), line), "report gives the recording run's rank 1");
    // Told otherwise, it reads otherwise: the driver's line.
    let (user_view, _) = report(&s, &["--user-code", s.0.to_str().unwrap()]);
    assert!(rank_one(&user_view).0.ends_with("driver.py"), "{user_view:#}");

    let sarif = s.path("r.sarif");
    let out = onefix().arg("report").arg(s.path("rec.onefix")).arg("--sarif").arg(&sarif).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sarif: Value = serde_json::from_slice(&std::fs::read(&sarif).unwrap()).unwrap();
    assert!(!sarif["runs"][0]["results"].as_array().unwrap().is_empty(), "{sarif:#}");

    let json = s.path("c.json");
    let out = onefix()
        .arg("compare")
        .arg(s.path("rec.onefix"))
        .arg(s.path("rec.onefix"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let lines = c["lines"].as_array().unwrap();
    assert!(
        lines.iter().any(|l| l["at_a"].as_str().is_some_and(|at| at.starts_with("__init__.py:"))),
        "compare reads the package's lines: {c:#}"
    );
}
