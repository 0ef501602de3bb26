//! `compare` of two runs of a batch program, each to its end: the fix shows first in the run
//! time, with each line's time per run, since per-window rates hide it (the slow line runs at
//! about the same rate in both, only far less of it).

mod common;
use common::{onefix, record, Scratch};

use serde_json::Value;

/// A batch job that looks up every record in a list (slow) or a set (fixed), then does the
/// same sum in both. The sum lasts long enough (about 0.4 s) for the sampler to attach before
/// the fixed run ends on a busy machine.
const JOB: &str = "fixed = VARIANT == 'fixed'\nknown = list(range(6000))\nlookup = set(known) if fixed else known\nhits = 0\nfor rep in range(4):\n    for x in range(0, 12000, 3):\n        hits += x in lookup  # LOOKUP\ntotal = sum(i * i for i in range(4000000))  # SAME\nprint(hits, total)\n";

#[test]
fn two_runs_of_a_batch_job_are_compared_by_their_run_time_and_each_lines_time_per_run() {
    let s = Scratch::new("compare-batch");
    let mut recordings = Vec::new();
    for variant in ["slow", "fixed"] {
        let run = Scratch::new(&format!("compare-batch-{variant}"));
        let job = run.path("job.py");
        std::fs::write(&job, JOB.replace("VARIANT", &format!("{variant:?}"))).unwrap();
        let (_, out) = record(&run, &[], &job);
        assert!(out.status.success());
        recordings.push((run.path("rec.onefix"), run));
    }
    let json = s.path("c.json");
    let out =
        onefix().arg("compare").arg(&recordings[0].0).arg(&recordings[1].0).arg("--json").arg(&json).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("the runs (each went to its end): B is "), "{text}");
    assert!(text.contains("x faster by its wall time"), "{text}");
    assert!(text.contains("one run each: a difference under"), "{text}");
    let c: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = &c["runs"];
    assert!(runs["wall_speedup"].as_f64().unwrap() > 2.0, "{c:#}");
    // The lookup line's time per run went down, whatever its rate per second did.
    let lookup = runs["lines"].as_array().unwrap().iter().find(|l| l["line"].as_str().unwrap().contains("# LOOKUP"));
    let lookup = lookup.unwrap_or_else(|| panic!("{c:#}"));
    // A line the per-window test could not judge is not called unchanged.
    for line in c["lines"].as_array().unwrap() {
        assert!(line["change"] != "unchanged" || !line["cost"]["test"].is_null(), "{line:#}");
    }
    assert!(lookup["seconds_a"].as_f64().unwrap() > 3.0 * lookup["seconds_b"].as_f64().unwrap(), "{lookup:#}");
}
