//! The knowledge entries of issue 21's patterns, each recognised from what a recording shows:
//! logging per item, the filesystem asked on every call, and a pattern compiled inside the
//! search that uses it.

use super::*;

/// One item's work with a log call per item: 70% of the time formats and writes the record.
#[test]
fn a_log_record_written_per_item_is_logging() {
    let (dir, app) = write_app(
        "log-per-item",
        "import logging\nlog = logging.getLogger(__name__)\n\ndef ingest(rows):\n    for row in rows:\n        log.info('row %s', row)\n        total = row * 2\n",
    );
    let logging = format!("{LIB}/logging/__init__.py");
    let mut b = Builder::new();
    for ms in 0..200u64 {
        let stack: Vec<(&str, &str, u32)> = if ms % 10 < 7 {
            vec![
                ("<module>", &app, 9),
                ("ingest", &app, 6),
                ("Logger.info", &logging, 1489),
                ("Logger._log", &logging, 1634),
                ("StreamHandler.emit", &logging, 1113),
            ]
        } else {
            vec![("<module>", &app, 9), ("ingest", &app, 7)]
        };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (6, "logging", "logging-per-item"), "{f:?}");
    assert!(f.title.starts_with("Formatting and writing a log record takes 70%"), "{}", f.title);
    assert!(f.advice.contains("once per batch"), "{}", f.advice);
}

/// `os.listdir` has no Python frame: the line that calls it is read for the call.
#[test]
fn a_directory_listed_on_every_call_is_filesystem() {
    let (dir, app) = write_app(
        "listdir-per-call",
        "import os\n\ndef plugin_for(name):\n    names = os.listdir(PLUGINS)\n    return name in names\n",
    );
    let mut b = Builder::new();
    for ms in 0..200u64 {
        let line = if ms % 10 < 8 { 4 } else { 5 };
        b.add(1, ms * 10, true, &[("<module>", &app, 9), ("plugin_for", &app, line)]);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (4, "filesystem", "filesystem-per-call"), "{f:?}");
}

/// A pattern built per call is compiled inside `re.search` (more distinct patterns than the
/// module's cache holds): the compile, inside the search, is what costs, and is named, not the
/// matching around it. With the compile a small part, the matching is named.
#[test]
fn the_specific_cost_inside_a_general_one_names_the_line() {
    let (dir, app) = write_app(
        "regex-in-search",
        "import re\n\ndef mentions(line, names):\n    for n in names:\n        if re.search(rf'user={n}', line):\n            return n\n",
    );
    let re_init = format!("{LIB}/re/__init__.py");
    let compiler = format!("{LIB}/re/_compiler.py");
    let run = |compile_tenths: u64| {
        let mut b = Builder::new();
        for ms in 0..200u64 {
            let mut stack: Vec<(&str, &str, u32)> =
                vec![("<module>", &app, 9), ("mentions", &app, 5), ("search", &re_init, 176)];
            if ms % 10 < compile_tenths {
                stack.push(("_compile", &re_init, 294));
                stack.push(("compile", &compiler, 740));
            }
            b.add(1, ms * 10, true, &stack);
        }
        b.diagnose(dir.to_str().unwrap()).findings[0].clone()
    };
    let compiling = run(7);
    let matching = run(2);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (compiling.kind.as_str(), compiling.rule.as_str()),
        ("repeated-setup", "regex-compile"),
        "{compiling:?}"
    );
    assert_eq!((matching.kind.as_str(), matching.rule.as_str()), ("regex-matching", "regex-matching"), "{matching:?}");
}
