//! `onefix record --memory` end to end: the tracker story's line at rank 1 (not on the fixed
//! tracker), a native program's retaining and churning sites, and the refusal of --pid.

mod common;
use common::{line_of, repo, Scratch};

use std::process::{Command, Output};

use serde_json::Value;

fn tracker(variant: &str, s: &Scratch) -> (Value, Value) {
    let json = s.path(&format!("{variant}.json"));
    let profiler = format!(
        "{} record --memory --memory-rate 64k --quiet -o {} --json {} --",
        env!("CARGO_BIN_EXE_onefix"),
        s.path(&format!("{variant}.onefix")).display(),
        json.display()
    );
    let out: Output = Command::new(repo().join("lab/tracker/run"))
        .arg(variant)
        .env("PROFILER", profiler)
        .env("ONEFIX", env!("CARGO_BIN_EXE_onefix"))
        .env("TORRENTS", "50")
        .env("PEERS", "200")
        .env("ANNOUNCES", "1000")
        .env("MAX_SECONDS", "60")
        .output()
        .unwrap();
    assert!(out.status.success(), "tracker {variant}: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stats: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("the tracker's JSON line");
    (serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(), stats)
}

#[test]
fn lab_tracker_names_the_line_that_keeps_each_peers_parsed_query() {
    let s = Scratch::new("tracker");
    let (slow, slow_stats) = tracker("slow", &s);
    let file = repo().join("lab/tracker/tracker_slow.py");
    let first = &slow["findings"][0];
    assert_eq!(first["kind"], "memory-retention", "{slow:#}");
    assert!(first["file"].as_str().unwrap().ends_with("tracker_slow.py"), "{first:#}");
    assert_eq!(first["line"], line_of(&file, "torrent[peer_id] = Peer(params, ip)"), "{first:#}");
    // The evidence: what was stored was allocated by the query parse.
    assert!(
        first["evidence"].as_array().unwrap().iter().any(|e| e["frame"].as_str().unwrap().contains("parse_qs")),
        "{first:#}"
    );
    assert!(first["share"].as_f64().unwrap() > 0.25, "{first:#}");
    // Growth: its retained bytes rose in most time windows while peers were being added.
    assert!(first["recurrence"].as_f64().unwrap() >= 0.5, "{first:#}");
    assert!(
        slow["memory"]["peak_rss_bytes"].as_u64().unwrap() > 0 && slow["memory"]["rss"].as_array().unwrap().len() > 3
    );

    let (fixed, fixed_stats) = tracker("fixed", &s);
    assert_eq!(fixed_stats["peers"], slow_stats["peers"], "the same load");
    // The fixed tracker still keeps each peer's id (a key the parse allocated), a small part of
    // its heap that can reach a finding's threshold on a busy machine; never the parsed query.
    let slow_share = first["share"].as_f64().unwrap();
    let kept_line = line_of(&repo().join("lab/tracker/tracker_fixed.py"), "torrent[peer_id] = mine");
    for f in fixed["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "memory-retention") {
        assert!(
            f["share"].as_f64().unwrap() * 2.0 < slow_share && f["line"] != kept_line,
            "the fixed tracker keeps 6 bytes per peer: {fixed:#}"
        );
    }
    let (slow_heap, fixed_heap) = (slow["busy_weight"].as_f64().unwrap(), fixed["busy_weight"].as_f64().unwrap());
    assert!(fixed_heap * 1.5 < slow_heap, "sampled heap at peak: slow {slow_heap}, fixed {fixed_heap}");
}

#[test]
fn a_native_program_s_retaining_and_churning_sites() {
    let s = Scratch::new("native");
    let exe = s.path("allocs");
    let src = repo().join("crates/onefix-memory/tests/programs/allocs.c");
    assert!(Command::new("cc").args(["-g", "-O0", "-pthread", "-o"]).arg(&exe).arg(&src).status().unwrap().success());
    let json = s.path("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_onefix"))
        .args(["record", "--memory", "--memory-rate", "16k", "--quiet", "--user-code"])
        .arg(src.parent().unwrap())
        .arg("-o")
        .arg(s.path("r.onefix"))
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(&exe)
        .arg("retain")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["hot_lines"][0]["function"], "keep_blocks", "{r:#}");
    assert!(r["hot_lines"][0]["share"].as_f64().unwrap() > 0.9, "{r:#}");
    let churn =
        r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "allocation-churn").expect("a churn finding");
    assert_eq!(churn["function"], "churn_blocks", "{r:#}");
    // The recording renders again, here as allocated bytes.
    let folded = s.path("a.folded");
    let out = Command::new(env!("CARGO_BIN_EXE_onefix"))
        .arg("report")
        .arg(s.path("r.onefix"))
        .args(["--quiet", "--memory-view", "allocated", "--folded"])
        .arg(&folded)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&folded).unwrap();
    let bytes = |f: &str| -> u64 {
        text.lines().filter(|l| l.contains(f)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
    };
    assert!(bytes("churn_blocks") > 5 * bytes("keep_blocks"), "{text}");
}

#[test]
fn memory_tracking_cannot_attach_and_says_why() {
    let out = Command::new(env!("CARGO_BIN_EXE_onefix")).args(["record", "--memory", "--pid", "1"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LD_PRELOAD") && err.contains("onefix record --memory -- CMD"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
