//! Exact-output tests: each writer's output over the fixture is compared byte for byte with a
//! file in `tests/golden/`. The golden files are the spec; after a deliberate change, rerun
//! with `ONEFIX_BLESS=1` to rewrite them, and review the diff.

use std::fs;
use std::path::PathBuf;

use onefix_model::Mode;
use onefix_report::{
    write_folded, write_json, write_speedscope, write_terminal, FoldedOptions, JsonOptions, TerminalOptions,
};

use crate::fixture::{attached_profile, no_findings_diagnosis, render, updater_diagnosis, updater_profile};

pub fn assert_golden(name: &str, actual: &str) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "golden", name].iter().collect();
    if std::env::var_os("ONEFIX_BLESS").is_some_and(|v| v == "1") {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let expected = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with ONEFIX_BLESS=1 to create it)", path.display()));
    if expected == actual {
        return;
    }
    let (line, want, got) = expected
        .split_inclusive('\n')
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(actual.split_inclusive('\n').map(Some).chain(std::iter::repeat(None)))
        .enumerate()
        .find(|(_, (want, got))| want != got)
        .map(|(i, (want, got))| (i + 1, want, got))
        .expect("different texts differ on some line");
    panic!(
        "{name} differs from {} at line {line}\n  expected: {want:?}\n  actual:   {got:?}\n\
         full output:\n{actual}\n(if the change is intended, rerun with ONEFIX_BLESS=1 and review the diff)",
        path.display()
    );
}

#[test]
fn folded_wall() {
    let profile = updater_profile();
    let out = render(|w| write_folded(w, &profile, Mode::Wall, &FoldedOptions::default()));
    assert_golden("folded_wall.txt", &out);
}

#[test]
fn folded_cpu_by_thread() {
    let profile = updater_profile();
    let opts = FoldedOptions { thread_prefix: true };
    let out = render(|w| write_folded(w, &profile, Mode::Cpu, &opts));
    assert_golden("folded_cpu_threads.txt", &out);
}

#[test]
fn speedscope_wall() {
    let profile = updater_profile();
    let out = render(|w| write_speedscope(w, &profile, Mode::Wall));
    assert_golden("speedscope_wall.json", &out);
}

#[test]
fn json_report() {
    let out = render(|w| write_json(w, &updater_profile(), &updater_diagnosis(), &JsonOptions::default()));
    assert_golden("report.json", &out);
}

#[test]
fn json_report_attached_without_findings() {
    let opts = JsonOptions { complete: false };
    let out = render(|w| write_json(w, &attached_profile(), &no_findings_diagnosis(), &opts));
    assert_golden("report_no_findings.json", &out);
}

#[test]
fn terminal_summary() {
    let out = render(|w| write_terminal(w, &updater_profile(), &updater_diagnosis(), &TerminalOptions::default()));
    assert_golden("terminal.txt", &out);
}

#[test]
fn terminal_summary_in_colour() {
    let opts = TerminalOptions { color: true, ..TerminalOptions::default() };
    let out = render(|w| write_terminal(w, &updater_profile(), &updater_diagnosis(), &opts));
    assert_golden("terminal_color.txt", &out);
}

#[test]
fn terminal_summary_without_findings() {
    let opts = TerminalOptions { complete: false, max_hot_lines: 2, ..TerminalOptions::default() };
    let out = render(|w| write_terminal(w, &attached_profile(), &no_findings_diagnosis(), &opts));
    assert_golden("terminal_no_findings.txt", &out);
}

#[test]
fn terminal_plain_has_no_escape_codes_and_colour_does() {
    let diagnosis = updater_diagnosis();
    let profile = updater_profile();
    let plain = render(|w| write_terminal(w, &profile, &diagnosis, &TerminalOptions::default()));
    assert!(!plain.contains('\x1b'));
    let opts = TerminalOptions { color: true, ..TerminalOptions::default() };
    let coloured = render(|w| write_terminal(w, &profile, &diagnosis, &opts));
    assert!(coloured.contains("\x1b["));
}

#[test]
fn a_long_statement_is_shown_whole_and_a_wide_terminal_is_used() {
    let profile = updater_profile();
    let mut diagnosis = updater_diagnosis();
    let long = "async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0), http2=False) as client:";
    diagnosis.findings[0].code = Some(long.to_owned());
    let narrow = render(|w| write_terminal(w, &profile, &diagnosis, &TerminalOptions::default()));
    let headline = narrow.lines().find(|l| l.starts_with("#1 ")).unwrap();
    assert!(headline.contains('…') && !headline.contains("as client:"), "{headline}");
    assert!(narrow.contains("    line: async with httpx.AsyncClient(timeout="), "{narrow}");
    let statement: Vec<&str> = narrow
        .lines()
        .skip_while(|l| !l.starts_with("    line: "))
        .take_while(|l| l.starts_with("    "))
        .take(2)
        .collect();
    assert!(statement.iter().all(|l| l.chars().count() <= 100), "{statement:?}");
    let joined = statement.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
    assert!(joined.ends_with("http2=False) as client:"), "the whole statement: {statement:?}");
    let wide = render(|w| {
        write_terminal(w, &profile, &diagnosis, &TerminalOptions { width: 180, ..TerminalOptions::default() })
    });
    let headline = wide.lines().find(|l| l.starts_with("#1 ")).unwrap();
    assert!(headline.contains(long), "{headline}");
    assert!(!wide.contains("    line: "), "{wide}");
}

#[test]
fn terminal_summary_stays_short_and_shows_at_most_the_asked_findings() {
    let profile = updater_profile();
    let mut diagnosis = updater_diagnosis();
    // Ten findings and thirty hot lines: the summary must still fit a screen.
    let template = diagnosis.findings[0].clone();
    diagnosis.findings = (1..=10).map(|rank| onefix_diagnose::Finding { rank, ..template.clone() }).collect();
    let hot_line = diagnosis.hot_lines[0].clone();
    diagnosis.hot_lines = vec![hot_line; 30];
    let out = render(|w| write_terminal(w, &profile, &diagnosis, &TerminalOptions::default()));
    assert!(out.contains("#3 ") && !out.contains("#4 "), "{out}");
    assert!(out.contains("and 7 more findings"), "{out}");
    assert!(out.contains("and 20 more"), "{out}");
    assert!(out.lines().count() <= 50, "{} lines:\n{out}", out.lines().count());
}

#[test]
fn top_screen() {
    let status = onefix_report::TopStatus {
        target: "python3 updater.py --batch 50 (pid 4242)".into(),
        elapsed_s: 12.4,
        samples: 1240,
        errors: 3,
        window_s: 10.0,
        ended: None,
        columns: 100,
        rows: 40,
    };
    let out = render(|w| onefix_report::write_top(w, &updater_profile(), &updater_diagnosis(), &status));
    assert_golden("top.txt", &out);
    // A narrow, short terminal: lines are cut to the width and the screen to the height.
    let small = onefix_report::TopStatus { columns: 50, rows: 12, ended: Some("exited with 0".into()), ..status };
    let out = render(|w| onefix_report::write_top(w, &updater_profile(), &updater_diagnosis(), &small));
    assert!(out.lines().all(|l| l.chars().count() <= 50), "{out}");
    assert_eq!(out.lines().count(), 11, "{out}");
    assert!(out.contains("the target exited with 0; press q to quit"), "{out}");
}

/// A bound taken over the stretch of the run that repeats the line is more than its share of the
/// whole run gives: the text says which part of the run the bound is of, so the two agree.
#[test]
fn a_bound_over_the_repeating_stretch_says_what_it_is_of() {
    let mut diagnosis = updater_diagnosis();
    // 58% of the whole run, but 90% of the stretch that repeats it: 10x.
    diagnosis.findings[0].max_speedup = Some(10.0);
    let out = render(|w| write_terminal(w, &updater_profile(), &diagnosis, &TerminalOptions::default()));
    let said = out.replace('\n', " ").split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(said.contains("up to 10.0x faster (over the part of the run that repeats the line, after start-up, where it is 90% of the time, not 58%)"), "{out}");
    // A bound from the share itself says nothing more.
    let plain = render(|w| write_terminal(w, &updater_profile(), &updater_diagnosis(), &TerminalOptions::default()));
    assert!(!plain.contains("part of the run that repeats"), "{plain}");
}
