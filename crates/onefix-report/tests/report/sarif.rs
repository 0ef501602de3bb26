//! The SARIF log of the hand-built diagnosis: valid against the SARIF 2.1.0 schema (vendored in
//! tests/schemas), each finding a result at its line, relative to the source root when under it.

use std::path::PathBuf;

use onefix_report::{write_sarif, SarifOptions};
use serde_json::Value;

use crate::fixture::{render, updater_diagnosis, updater_profile};

fn sarif(root: &str) -> Value {
    sarif_of(root, &updater_diagnosis())
}

fn sarif_of(root: &str, diagnosis: &onefix_diagnose::Diagnosis) -> Value {
    let opts = SarifOptions { source_root: Some(PathBuf::from(root)) };
    let out = render(|w| write_sarif(w, &updater_profile(), diagnosis, &opts));
    serde_json::from_str(&out).expect("SARIF is JSON")
}

fn validator() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/schemas/sarif-2.1.0.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

#[test]
fn findings_are_results_at_their_lines_and_the_log_follows_the_schema() {
    let log = sarif("/srv");
    let errors: Vec<String> = validator().iter_errors(&log).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{}\n{log:#}", errors.join("\n"));
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let first = &results[0];
    assert_eq!(first["ruleId"], "repeated-setup");
    let place = &first["locations"][0]["physicalLocation"];
    assert_eq!(place["artifactLocation"]["uri"], "updater/updater.py");
    assert_eq!(place["artifactLocation"]["uriBaseId"], "%SRCROOT%");
    assert_eq!(place["region"]["startLine"], 31);
    // 7 of 12 busy intervals, and 3 of 12: errors (from 20%).
    assert_eq!(first["level"], "error");
    assert_eq!(results[1]["level"], "error");
    assert!((first["properties"]["share"].as_f64().unwrap() - 7.0 / 12.0).abs() < 1e-9);
    assert!((first["properties"]["maxSpeedup"].as_f64().unwrap() - 12.0 / 5.0).abs() < 1e-9);
    let text = first["message"]["text"].as_str().unwrap();
    assert!(text.contains("Why: httpx.AsyncClient()") && text.contains("Fix: create the client once"), "{text}");
    let rules = log["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["repeated-setup", "serial-io"]);
    assert_eq!(rules[0]["name"], "RepeatedSetup");
}

#[test]
fn a_file_outside_the_source_root_keeps_its_absolute_uri() {
    let log = sarif("/elsewhere");
    assert!(validator().is_valid(&log));
    let place = &log["runs"][0]["results"][0]["locations"][0]["physicalLocation"];
    assert_eq!(place["artifactLocation"]["uri"], "file:///srv/updater/updater.py");
    assert!(place["artifactLocation"].get("uriBaseId").is_none());
}

#[test]
fn the_level_follows_the_share() {
    let mut diagnosis = updater_diagnosis();
    let levels = |d: &onefix_diagnose::Diagnosis| -> Vec<String> {
        let log = sarif_of("/srv", d);
        log["runs"][0]["results"].as_array().unwrap().iter().map(|r| r["level"].as_str().unwrap().to_owned()).collect()
    };
    diagnosis.findings[0].share = 0.20;
    diagnosis.findings[1].share = 0.199;
    assert_eq!(levels(&diagnosis), ["error", "warning"]);
    diagnosis.findings[0].share = 0.05;
    diagnosis.findings[1].share = 0.049;
    assert_eq!(levels(&diagnosis), ["warning", "note"]);
}
