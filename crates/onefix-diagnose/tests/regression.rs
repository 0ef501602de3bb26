//! The regression suite, in the style of ripgrep's tests/regression.rs: committed recordings
//! of programs (tests/regression/recordings, made by tests/regression/record) are diagnosed
//! again, and their top three findings (file, line, kind, in order) must stay as blessed in
//! tests/regression/expected.txt. A diagnosis change is checked in seconds against every
//! program that once went wrong, without running them. `ONEFIX_BLESS=1` rewrites the expected
//! file; review its diff.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
use onefix_model::recording::read_recording;
use onefix_model::{Profile, WeightUnit};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn diagnosis(profile: &Profile, kb: &KnowledgeBase) -> onefix_diagnose::Diagnosis {
    let base = profile.meta.target.cwd.as_deref().map(Path::new);
    let user = UserCode::new(profile.meta.user_code.iter().map(PathBuf::from), base);
    // The CPUs of the recording machine, kept with the recording (see the CLI's `Machine`).
    let cpus = profile
        .attachments
        .get("machine")
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .and_then(|v| v["cpus"].as_u64())
        .map(|n| n as u32);
    diagnose(profile, kb, &user, &Options { mode: profile.meta.mode, cpus, ..Options::default() })
}

/// The line a recording's diagnosis comes to: its top three findings, or that there is none.
fn verdict(profile: &Profile, kb: &KnowledgeBase) -> String {
    let d = diagnosis(profile, kb);
    if d.findings.is_empty() {
        return "no finding".into();
    }
    let top: Vec<String> = d
        .findings
        .iter()
        .take(3)
        .map(|f| {
            let file = Path::new(&f.file).file_name().map_or(f.file.clone(), |n| n.to_string_lossy().into_owned());
            format!("{file}:{} {}", f.line, f.kind)
        })
        .collect();
    top.join(" | ")
}

/// Every committed recording, read and relocated to this checkout, by name.
fn recordings() -> Vec<(String, Profile)> {
    let root = root();
    let dir = root.join("tests/regression");
    let recorded_at = std::fs::read_to_string(dir.join("recorded-at")).unwrap();
    let recorded_at = recorded_at.trim();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join("recordings"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onefix"))
        .collect();
    names.sort();
    assert!(names.len() >= 30, "the suite holds {} recordings", names.len());
    names
        .iter()
        .map(|path| {
            let loaded = read_recording(std::io::BufReader::new(std::fs::File::open(path).unwrap())).unwrap();
            assert!(loaded.complete, "{} is truncated", path.display());
            let mut profile = loaded.profile;
            assert_ne!(profile.meta.weight_unit, WeightUnit::Bytes, "memory recordings are not in this suite yet");
            profile.relocate(recorded_at, root.to_str().unwrap());
            (path.file_stem().unwrap().to_string_lossy().into_owned(), profile)
        })
        .collect()
}

/// A finding's title says its share, and its evidence is parts of it, heaviest first: on every
/// committed recording, every finding.
#[test]
fn every_title_says_its_findings_share_and_evidence_is_parts_of_it() {
    let kb = KnowledgeBase::builtin();
    let mut checked = 0;
    for (name, profile) in recordings() {
        for f in diagnosis(&profile, &kb).findings {
            let said = first_percent(&f.title).unwrap_or_else(|| panic!("{name}: no percentage in {:?}", f.title));
            assert_eq!(said, format!("{:.0}", f.share * 100.0), "{name}: {:?} with share {:.3}", f.title, f.share);
            let shares: Vec<f64> = f.evidence.iter().map(|e| e.share).collect();
            assert!(shares.iter().all(|s| *s > 0.0 && *s <= 1.0), "{name}: {:?}", f.evidence);
            assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{name}: evidence not heaviest first: {:?}", f.evidence);
            let mut names: Vec<&str> = f.evidence.iter().map(|e| e.frame.as_str()).collect();
            names.sort();
            assert!(names.windows(2).all(|w| w[0] != w[1]), "{name}: a function twice in {:?}", f.evidence);
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} findings checked");
}

/// The number before the first `%` of a text.
fn first_percent(text: &str) -> Option<String> {
    let end = text.find('%')?;
    let start = text[..end].rfind(|c: char| !c.is_ascii_digit() && c != '.').map_or(0, |i| i + 1);
    (start < end).then(|| text[start..end].to_owned())
}

#[test]
fn committed_recordings_keep_their_findings() {
    let kb = KnowledgeBase::builtin();
    let dir = root().join("tests/regression");
    let mut actual = String::new();
    let recordings = recordings();
    for (name, profile) in &recordings {
        writeln!(actual, "{name}: {}", verdict(profile, &kb)).unwrap();
    }
    let expected_path = dir.join("expected.txt");
    if std::env::var_os("ONEFIX_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&expected_path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with ONEFIX_BLESS=1)", expected_path.display()));
    let changed: Vec<String> = expected
        .lines()
        .zip(actual.lines())
        .filter(|(e, a)| e != a)
        .map(|(e, a)| format!("  was: {e}\n  now: {a}"))
        .collect();
    assert!(
        changed.is_empty() && expected.lines().count() == actual.lines().count(),
        "{} of {} recordings are diagnosed differently:\n{}\n(if intended, rerun with ONEFIX_BLESS=1 and review tests/regression/expected.txt)",
        changed.len(),
        recordings.len(),
        changed.join("\n")
    );
}
