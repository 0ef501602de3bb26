//! The HTML report: the data it embeds is compared with golden files (one recording; two side
//! by side with the differential graph), and the page is checked to be self-contained. The
//! onefix crate's tests render it in a real browser.

use std::collections::BTreeMap;

use onefix_model::{Mode, Profile};
use onefix_report::html::html_data;
use onefix_report::{write_html, HtmlRun};
use serde_json::Value;

use crate::fixture::{bytes_profile, no_findings_diagnosis, render, updater_diagnosis, updater_profile, UPDATER};
use crate::golden::assert_golden;

/// The updater's source as the report would read it: the finding's line 31 and hot lines.
fn sources() -> BTreeMap<String, String> {
    let mut text: Vec<String> = (1..=45).map(|n| format!("# line {n}")).collect();
    text[30] = "        async with httpx.AsyncClient() as client:".into();
    text[32] = "            r = await client.post(url, content=body)".into();
    BTreeMap::from([(UPDATER.to_owned(), text.join("\n") + "\n")])
}

fn run<'a>(label: &str, profile: &'a Profile, diagnosis: &'a onefix_diagnose::Diagnosis) -> HtmlRun<'a> {
    HtmlRun { label: label.to_owned(), profile, diagnosis, mode: Mode::Wall, complete: true }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

#[test]
fn html_data_of_one_recording() {
    let (profile, diagnosis) = (updater_profile(), updater_diagnosis());
    let data = html_data(&[run("recording", &profile, &diagnosis)], &sources());
    assert_golden("html_data.json", &pretty(&data));
}

#[test]
fn html_data_of_two_recordings_side_by_side() {
    let (before, diagnosis) = (updater_profile(), updater_diagnosis());
    // The after run: the same program with its set-up stack gone.
    let mut after = updater_profile();
    let setup_leaf = before.samples[0].stack;
    after.samples.retain(|s| s.stack != setup_leaf);
    let none = no_findings_diagnosis();
    let data = html_data(&[run("before", &before, &diagnosis), run("after", &after, &none)], &sources());
    assert_golden("html_data_compare.json", &pretty(&data));
    // The setup frames shrink to nothing in the after run: the diff says so.
    let diff = &data["diff"][0];
    assert_eq!(diff["d"], 0, "the root comes first");
    assert_eq!(diff["a"], before.total_weight(Mode::Wall));
    assert_eq!(diff["b"], after.total_weight(Mode::Wall));
}

#[test]
fn html_flame_graph_totals_match_the_recording_in_each_mode() {
    let (profile, diagnosis) = (updater_profile(), updater_diagnosis());
    let data = html_data(&[run("recording", &profile, &diagnosis)], &sources());
    let flames = data["runs"][0]["flames"].as_array().unwrap();
    let names: Vec<&str> = flames.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["wall time", "CPU time"], "a wall recording is also drawn as CPU time");
    assert_eq!(flames[0]["nodes"][0]["v"], profile.total_weight(Mode::Wall));
    assert_eq!(flames[1]["nodes"][0]["v"], profile.total_weight(Mode::Cpu));
    // Children never weigh more than their parent. The nodes are in preorder with their depths:
    // a node's children are the nodes one deeper that follow it before one at its own depth.
    for flame in flames {
        let nodes = flame["nodes"].as_array().unwrap();
        let depth = |n: &Value| n["d"].as_u64().unwrap();
        assert_eq!(depth(&nodes[0]), 0);
        for (i, node) in nodes.iter().enumerate() {
            let below = nodes[i + 1..].iter().take_while(|n| depth(n) > depth(node));
            let sum: u64 = below.filter(|n| depth(n) == depth(node) + 1).map(|c| c["v"].as_u64().unwrap()).sum();
            assert!(sum + node["s"].as_u64().unwrap() <= node["v"].as_u64().unwrap(), "{node}");
        }
    }
    // The finding's line is marked hot; a library frame is not.
    let frames = data["runs"][0]["frames"].as_array().unwrap();
    let hot = |name: &str| frames.iter().find(|f| f["name"] == name).unwrap()["hot"].as_bool().unwrap();
    assert!(hot("update_all (updater.py:31)"));
    assert!(!hot("create_default_context (ssl.py:770)"));
    // The snippet holds three lines on each side of the finding's line.
    let snippet = &data["runs"][0]["sources"][0];
    assert_eq!((snippet["line"].as_u64(), snippet["first"].as_u64()), (Some(31), Some(28)));
    assert_eq!(snippet["text"][3], "        async with httpx.AsyncClient() as client:");
    assert_eq!(snippet["text"].as_array().unwrap().len(), 7);
}

#[test]
fn html_of_an_allocation_recording_draws_bytes() {
    let profile = bytes_profile();
    let diagnosis = no_findings_diagnosis();
    let data = html_data(&[run("recording", &profile, &diagnosis)], &BTreeMap::new());
    let flames = data["runs"][0]["flames"].as_array().unwrap();
    assert_eq!(flames.len(), 1);
    assert_eq!(flames[0]["name"], "allocated bytes");
    assert_eq!(flames[0]["unit"], "bytes");
    assert_eq!(flames[0]["nodes"][0]["v"], 1_572_864);
}

#[test]
fn html_page_is_self_contained_and_its_data_cannot_break_out_of_the_script() {
    let mut profile = updater_profile();
    profile.meta.target.argv = Some(vec!["python3".into(), "</script><script>alert(1)</script>".into()]);
    let diagnosis = updater_diagnosis();
    let page = render(|w| write_html(w, &[run("recording", &profile, &diagnosis)], &sources()));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("</script>").count(), 2, "only the data and the viewer's own script elements close");
    assert!(!page.contains("<script>alert"), "the command line is escaped in the title and the data");
    for external in ["src=\"http", "href=\"http", "<link", "@import", "url(http", "fetch(", "XMLHttpRequest"] {
        assert!(!page.contains(external), "the page must not load {external}");
    }
    // The embedded data is the data html_data gives.
    let start = page.find("id=\"onefix-data\">").unwrap() + "id=\"onefix-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let embedded: Value = serde_json::from_str(&page[start..end]).unwrap();
    assert_eq!(embedded, html_data(&[run("recording", &profile, &diagnosis)], &sources()));
}

#[test]
fn html_takes_one_or_two_recordings() {
    let (profile, diagnosis) = (updater_profile(), updater_diagnosis());
    let r = || run("x", &profile, &diagnosis);
    assert!(write_html(Vec::new(), &[], &sources()).is_err());
    assert!(write_html(Vec::new(), &[r(), r(), r()], &sources()).is_err());
    assert!(write_html(Vec::new(), &[r(), r()], &sources()).is_ok());
}

#[test]
fn html_data_carries_the_load_that_drove_the_target() {
    let mut profile = updater_profile();
    let window = |start: f64, rps: f64, p50: f64, p99: f64| {
        serde_json::json!({"start_s": start, "duration_s": 1.0, "sent": 50, "completed": 50, "errors": 0, "rps": rps,
            "latency_ms": {"mean": p50, "stddev": 1.0, "p50": p50, "p90": p99, "p99": p99, "max": p99}})
    };
    let result = serde_json::json!({
        "url": "http://127.0.0.1:8000/price?sku={{int 1 4000}}", "target_rps": 50.0, "achieved_rps": 49.5,
        "completed": 99, "errors": {"total": 1, "timeout": 1},
        "latency_ms": {"p50": 20.0, "p90": 80.0, "p99": 120.0, "p999": 130.0, "min": 2.0, "max": 131.0, "mean": 30.0, "stddev": 9.0},
        "windows": [window(0.0, 50.0, 20.0, 110.0), window(1.0, 49.0, 21.0, 125.0)],
    });
    profile.attachments.insert("load".into(), serde_json::to_vec(&result).unwrap());
    let diagnosis = updater_diagnosis();
    let data = html_data(&[run("recording", &profile, &diagnosis)], &sources());
    let load = &data["runs"][0]["load"];
    assert_eq!(load["errors"], 1);
    assert_eq!(load["achieved_rps"], 49.5);
    assert_eq!(load["latency_ms"]["p99"], 120.0);
    assert_eq!(
        load["windows"],
        serde_json::json!([
            {"start_s": 0.0, "duration_s": 1.0, "rps": 50.0, "errors": 0, "p50_ms": 20.0, "p99_ms": 110.0},
            {"start_s": 1.0, "duration_s": 1.0, "rps": 49.0, "errors": 0, "p50_ms": 21.0, "p99_ms": 125.0},
        ])
    );
    // No load, no section; an attachment that is not a load result is ignored.
    assert!(html_data(&[run("recording", &updater_profile(), &diagnosis)], &sources())["runs"][0]
        .get("load")
        .is_none());
    profile.attachments.insert("load".into(), b"not json".to_vec());
    assert!(html_data(&[run("recording", &profile, &diagnosis)], &sources())["runs"][0].get("load").is_none());
}
