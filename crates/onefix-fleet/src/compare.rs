//! Two deploys (or two windows) of a service, line by line: each host's slot (an interval, or
//! a few) is diagnosed like a recording, a line's cost per slot gives the samples of Welch's
//! test and a bootstrap interval ([`onefix_model::stats`]), as `onefix compare` does with a
//! recording's time windows. Regressions come first.

use std::collections::HashMap;

use onefix_diagnose::compare::{LineChange, LineComparison};
use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
use onefix_model::stats;
use onefix_model::Profile;

use crate::query::SlotProfile;

/// Lines below this fraction of the busier side's total are left out.
const MIN_LINE_SHARE: f64 = 0.02;
/// A change smaller than this factor is "unchanged".
const MIN_CHANGE: f64 = 1.1;
const LINES_SHOWN: usize = 16;

fn line_key(function: &str, code: Option<&str>, line: u32) -> String {
    match code.map(str::trim).filter(|c| !c.is_empty()) {
        Some(code) => format!("{function}  {code}"),
        None => format!("{function}:{line}"),
    }
}

/// Each slot's milliseconds per second charged to each user line, and where each line is.
fn per_slot(side: &SlotProfile, kb: &KnowledgeBase) -> (Vec<HashMap<String, f64>>, HashMap<String, String>) {
    let p = &side.profile;
    let user = UserCode::of_recording(p);
    let mut by_slot: Vec<Vec<onefix_model::Sample>> = vec![Vec::new(); side.slots];
    for s in &p.samples {
        by_slot[(s.time_us / 1_000_000) as usize].push(*s);
    }
    let mut places = HashMap::new();
    let mut slice: Profile = p.clone();
    let values = by_slot
        .into_iter()
        .map(|samples| {
            slice.samples = samples;
            let opts = Options { mode: p.meta.mode, max_hot_lines: usize::MAX, ..Options::default() };
            let d = diagnose(&slice, kb, &user, &opts);
            let ms_per_weight = d.seconds_per_weight.unwrap_or(0.0) * 1e3;
            d.hot_lines
                .iter()
                .map(|h| {
                    let key = line_key(&h.function, h.code.as_deref(), h.line);
                    places
                        .entry(key.clone())
                        .or_insert_with(|| format!("{}:{}", onefix_model::fmt::file_name(&h.file), h.line));
                    (key, h.weight as f64 * ms_per_weight / side.slot_s as f64)
                })
                .collect()
        })
        .collect();
    (values, places)
}

/// The lines of A and B, compared over their slots; regressions first, then by cost.
pub fn compare_slots(a: &SlotProfile, b: &SlotProfile, kb: &KnowledgeBase) -> LineComparison {
    let (slots_a, at_a) = per_slot(a, kb);
    let (slots_b, at_b) = per_slot(b, kb);
    let mut keys: Vec<&String> = at_a.keys().chain(at_b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines: Vec<LineChange> = keys
        .into_iter()
        .map(|key| {
            let series = |slots: &[HashMap<String, f64>]| -> Vec<f64> {
                slots.iter().map(|s| s.get(key).copied().unwrap_or(0.0)).collect()
            };
            let (va, vb) = (series(&slots_a), series(&slots_b));
            let cost = stats::metric(key, &va, &vb, |ma, mb| ma / mb);
            let clear = cost.test.as_ref().is_some_and(|t| t.p_value < stats::ALPHA);
            let (in_a, in_b) = (at_a.get(key).cloned(), at_b.get(key).cloned());
            let change = match (&in_a, &in_b) {
                (Some(_), None) if clear => "gone",
                (None, Some(_)) if clear => "new",
                (Some(_), None) | (None, Some(_)) => "unclear",
                _ if cost.test.is_none() => "unclear",
                _ if clear && cost.speedup >= MIN_CHANGE => "down",
                _ if clear && cost.speedup <= 1.0 / MIN_CHANGE => "up",
                _ => "unchanged",
            };
            LineChange { line: key.clone(), at_a: in_a, at_b: in_b, cost, change: change.to_owned() }
        })
        .collect();
    let total =
        |side: fn(&stats::Metric) -> f64| lines.iter().map(|l| side(&l.cost)).filter(|x| x.is_finite()).sum::<f64>();
    let floor = MIN_LINE_SHARE * total(|m| m.mean_a).max(total(|m| m.mean_b));
    lines.retain(|l| l.cost.mean_a.max(l.cost.mean_b) >= floor);
    // A regression (up or new) first, the largest increase leading; then by cost.
    let worse = |l: &LineChange| matches!(l.change.as_str(), "up" | "new");
    lines.sort_by(|x, y| {
        let growth = |l: &LineChange| l.cost.mean_b - l.cost.mean_a;
        let cost = |l: &LineChange| l.cost.mean_a.max(l.cost.mean_b);
        worse(y).cmp(&worse(x)).then_with(|| {
            if worse(x) {
                growth(y).total_cmp(&growth(x))
            } else {
                cost(y).total_cmp(&cost(x))
            }
        })
    });
    lines.truncate(LINES_SHOWN);
    LineComparison {
        unit: "ms of the line per second, per host".to_owned(),
        window_s: a.slot_s.min(b.slot_s) as f64,
        lines,
        not_compared: None,
    }
}
