//! The JSON report against the contract of DESIGN.md §3: every contract key present with its
//! JSON type, shares and speed-ups rounded, `samples` counting the profile's samples.

use onefix_model::Profile;
use onefix_report::{write_json, JsonOptions};
use serde_json::Value;

use crate::fixture::{attached_profile, no_findings_diagnosis, render, updater_diagnosis, updater_profile};

fn report(profile: &Profile, diagnosis: &onefix_diagnose::Diagnosis) -> Value {
    let out = render(|w| write_json(w, profile, diagnosis, &JsonOptions::default()));
    serde_json::from_str(&out).expect("the report is JSON")
}

fn is_share(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x))
}

/// Rounded to at most `decimals` decimals.
fn is_rounded(v: &Value, decimals: i32) -> bool {
    let x = v.as_f64().unwrap();
    let scale = 10f64.powi(decimals);
    ((x * scale).round() / scale - x).abs() < 1e-12
}

fn check_contract(report: &Value) {
    assert_eq!(report["tool"], "onefix");
    assert!(report["version"].is_string());
    let target = &report["target"];
    assert!(target.is_object());
    assert!(target["argv"].is_null() || target["argv"].as_array().unwrap().iter().all(Value::is_string));
    assert!(target["pid"].is_u64());
    assert!(target["language"].is_string() || target["language"].is_null());
    assert!(["wall", "cpu"].contains(&report["mode"].as_str().unwrap()));
    assert!(report["duration_s"].is_number());
    assert!(report["samples"].is_u64());
    for (i, finding) in report["findings"].as_array().expect("findings is an array").iter().enumerate() {
        assert_eq!(finding["rank"].as_u64(), Some(i as u64 + 1), "best first");
        for key in ["kind", "file", "function", "title", "advice"] {
            assert!(finding[key].is_string(), "finding.{key} is a string");
        }
        assert!(finding["line"].is_u64());
        assert!(finding.get("code").is_some_and(|c| c.is_string() || c.is_null()));
        assert!(is_share(&finding["share"]) && is_rounded(&finding["share"], 4));
        let speedup = finding.get("max_speedup").expect("max_speedup is present, null or not");
        assert!(speedup.is_null() || (speedup.is_f64() && is_rounded(speedup, 2)));
        for evidence in finding["evidence"].as_array().expect("evidence is an array") {
            assert!(evidence["frame"].is_string());
            assert!(evidence["file"].is_string());
            assert!(evidence["line"].is_u64());
            assert!(is_share(&evidence["share"]) && is_rounded(&evidence["share"], 4));
        }
    }
}

#[test]
fn report_keeps_the_contract() {
    let profile = updater_profile();
    let report = report(&profile, &updater_diagnosis());
    check_contract(&report);
    assert_eq!(report["samples"], profile.sample_count());
    assert_eq!(report["target"]["argv"], serde_json::json!(["python3", "updater.py", "--batch", "50"]));
    assert_eq!(report["target"]["language"], "python");
    assert_eq!(report["mode"], "wall");
    let first = &report["findings"][0];
    assert_eq!(first["share"], 0.5833, "7/12 rounded to 4 decimals");
    assert_eq!(first["max_speedup"], 2.4, "12/5 rounded to 2 decimals");
    assert_eq!(first["file"], "/srv/updater/updater.py", "paths as the target sees them");
    assert_eq!(first["code"], "        async with httpx.AsyncClient() as client:");
    assert_eq!(first["evidence"].as_array().unwrap().len(), 4, "the JSON keeps all evidence");
}

#[test]
fn additions_are_typed_too() {
    let report = report(&updater_profile(), &updater_diagnosis());
    assert_eq!(report["idle_share"], 0.2941, "5/17");
    assert_eq!(report["outside_user_share"], 0.0833, "1/12");
    assert_eq!(report["exit"], serde_json::json!({"status": "exited", "code": 0}));
    assert_eq!(report["sampling"], serde_json::json!({"ticks": 1240, "errors": 3, "late": 1}));
    assert_eq!(report["complete"], true);
    assert!(report["hot_lines"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| is_share(&h["share"]) && is_share(&h["self_share"]) && is_share(&h["blocked_share"])));
    let first = &report["findings"][0];
    assert_eq!(first["recurrence"], 1.0);
    assert_eq!(first["enclosing_loop"], "/srv/updater/updater.py:28");
    assert!(report["findings"][1]["enclosing_loop"].is_null());
}

#[test]
fn no_findings_is_an_empty_list_and_unknowns_are_null() {
    let report = report(&attached_profile(), &no_findings_diagnosis());
    check_contract(&report);
    assert_eq!(report["findings"], serde_json::json!([]));
    assert!(report["target"]["argv"].is_null());
    assert!(report["exit"].is_null());
}

#[test]
fn unbounded_speedups_are_null() {
    let mut diagnosis = updater_diagnosis();
    diagnosis.findings[0].max_speedup = None;
    diagnosis.findings[1].max_speedup = Some(f64::INFINITY);
    let report = report(&updater_profile(), &diagnosis);
    check_contract(&report);
    assert!(report["findings"][0]["max_speedup"].is_null());
    assert!(report["findings"][1]["max_speedup"].is_null());
}
