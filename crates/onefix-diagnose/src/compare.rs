//! Two recordings of one program, before and after a change: which lines' cost went down, up,
//! away or appeared. Each recording is cut into windows of one length, each window diagnosed
//! like a whole recording (the same frontier attribution as the report), and a line's cost per
//! window gives the samples of a Welch test ([`onefix_model::stats`]). Two memory recordings
//! are compared by the bytes each line keeps live at the heap's peak. The rendering is
//! onefix-report's; the loads that drove the runs are compared by onefix-load.

use std::collections::{BTreeMap, HashMap};

use onefix_model::stats::{self, Metric};
use onefix_model::{Profile, TargetExit};
use serde::Serialize;

use crate::{diagnose, diagnose_memory, KnowledgeBase, MemoryOptions, Options, UserCode};

/// Lines of each recording taken into the comparison: its hottest ones.
const LINES_COMPARED: usize = 8;
/// Lines below this fraction of the busiest side's total are left out.
const MIN_LINE_SHARE: f64 = 0.02;
/// A line whose cost changed by less than this factor is reported as unchanged.
const MIN_CHANGE: f64 = 1.1;

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("a recording holds no samples to compare")]
    Empty,
}

/// The lines of two time recordings.
#[derive(Clone, Debug, Serialize)]
pub struct LineComparison {
    /// What each line's cost is measured in.
    pub unit: String,
    /// The windows' length, in seconds.
    #[serde(skip)]
    pub window_s: f64,
    pub lines: Vec<LineChange>,
}

/// One line's cost in A and in B.
#[derive(Clone, Debug, Serialize)]
pub struct LineChange {
    /// `function  code` (or `function:line` without source), which identifies the line in
    /// both runs even when the code around it moved.
    pub line: String,
    /// `file:line` in A and in B, when the line ran there.
    pub at_a: Option<String>,
    pub at_b: Option<String>,
    pub cost: Metric,
    /// `down`, `up`, `unchanged`, `gone`, `new`, or `unclear` (in one run only, too rarely to
    /// be sure it went away; or too few windows to test).
    pub change: String,
}

/// Two runs of a program that each went to its end (a batch job, a script), compared as a
/// whole: a batch fix shows in the run's time, which per-window rates of its lines hide (a
/// line that took 3 s of a 3.4 s run and 0.1 s of a 0.18 s one is at about the same rate).
#[derive(Clone, Debug, Serialize)]
pub struct RunComparison {
    /// Each run's wall time and time on a CPU, A then B, in seconds.
    pub wall_s: (f64, f64),
    pub cpu_s: (f64, f64),
    /// A's time over B's: above 1, B is faster.
    pub wall_speedup: f64,
    pub cpu_speedup: f64,
    /// One run each: no spread to test the difference against.
    pub runs_each: u32,
    /// The lines that cost most in either run, with their time in each.
    pub lines: Vec<LineRun>,
    /// A run lasted fewer windows than a per-window test can judge.
    pub too_short_for_windows: bool,
}

/// A line's time in each of two whole runs.
#[derive(Clone, Debug, Serialize)]
pub struct LineRun {
    pub line: String,
    pub at: Option<String>,
    pub seconds_a: f64,
    pub seconds_b: f64,
}

/// A per-window test needs at least this many windows of a run.
const MIN_WINDOWS: f64 = 3.0;

/// Compares two recordings as whole runs, when both went to their end (not cut short by a
/// duration, Ctrl-C or a load); `None` otherwise.
pub fn compare_runs(a: &Profile, b: &Profile, kb: &KnowledgeBase, window_s: f64) -> Option<RunComparison> {
    let ended = |p: &Profile| matches!(p.meta.exit, Some(TargetExit::Code(_) | TargetExit::Signal(_)));
    if !ended(a) || !ended(b) {
        return None;
    }
    let (spw_a, spw_b) = (a.seconds_per_weight()?, b.seconds_per_weight()?);
    let cpu = |p: &Profile, spw: f64| {
        p.samples.iter().filter(|s| s.state.active()).map(|s| s.weight as u64).sum::<u64>() as f64 * spw
    };
    let wall = |p: &Profile| p.meta.duration_s;
    let (wall_a, wall_b) = (wall(a), wall(b));
    let (cpu_a, cpu_b) = (cpu(a, spw_a), cpu(b, spw_b));
    if wall_a <= 0.0 || wall_b <= 0.0 {
        return None;
    }
    let (da, db) = (diagnose_lines(a, kb, LINES_COMPARED), diagnose_lines(b, kb, LINES_COMPARED));
    let mut lines: Vec<LineRun> = Vec::new();
    for (hot, spw, in_a) in
        da.hot_lines.iter().map(|h| (h, spw_a, true)).chain(db.hot_lines.iter().map(|h| (h, spw_b, false)))
    {
        let key = line_key(&hot.function, hot.code.as_deref(), hot.line);
        let seconds = hot.weight as f64 * spw;
        let entry = match lines.iter_mut().position(|l| l.line == key) {
            Some(i) => &mut lines[i],
            None => {
                lines.push(LineRun { line: key, at: Some(at(&hot.file, hot.line)), seconds_a: 0.0, seconds_b: 0.0 });
                lines.last_mut().unwrap()
            }
        };
        if in_a {
            entry.seconds_a += seconds;
        } else {
            entry.seconds_b += seconds;
        }
    }
    lines.sort_by(|x, y| (y.seconds_a.max(y.seconds_b)).total_cmp(&x.seconds_a.max(x.seconds_b)));
    lines.truncate(LINES_COMPARED);
    Some(RunComparison {
        wall_s: (wall_a, wall_b),
        cpu_s: (cpu_a, cpu_b),
        wall_speedup: wall_a / wall_b,
        cpu_speedup: if cpu_b > 0.0 { cpu_a / cpu_b } else { f64::INFINITY },
        runs_each: 1,
        lines,
        too_short_for_windows: wall_a.min(wall_b) < MIN_WINDOWS * window_s,
    })
}

/// Compares the lines of two time recordings. `per_request`: the two runs' mean request rates
/// when both were driven by a load, to weigh each line per request instead of per second.
pub fn compare_lines(
    a: &Profile,
    b: &Profile,
    kb: &KnowledgeBase,
    per_request: Option<(f64, f64)>,
) -> Result<LineComparison, CompareError> {
    let secs = |p: &Profile| p.samples.iter().map(|s| s.time_us).max().unwrap_or(0) as f64 / 1e6;
    let (dur_a, dur_b) = (secs(a), secs(b));
    if dur_a <= 0.0 || dur_b <= 0.0 {
        return Err(CompareError::Empty);
    }
    // The same window length on both sides, so that their per-window costs are alike; at
    // least a few windows even in short runs.
    let window_s = if dur_a.min(dur_b) >= 10.0 { 1.0 } else { (dur_a.min(dur_b) / 5.0).max(0.1) };
    let unit = if per_request.is_some() { "ms of the line per request" } else { "ms of the line per second" };

    let whole_a = diagnose_lines(a, kb, Options::default().max_hot_lines);
    let whole_b = diagnose_lines(b, kb, Options::default().max_hot_lines);
    let mut keys: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    let mut add = |key: String, at_a: Option<String>, at_b: Option<String>| match keys.iter_mut().find(|k| k.0 == key) {
        Some(k) => {
            k.1 = k.1.take().or(at_a);
            k.2 = k.2.take().or(at_b);
        }
        None => keys.push((key, at_a, at_b)),
    };
    for h in whole_a.hot_lines.iter().take(LINES_COMPARED) {
        add(line_key(&h.function, h.code.as_deref(), h.line), Some(at(&h.file, h.line)), None);
    }
    for h in whole_b.hot_lines.iter().take(LINES_COMPARED) {
        add(line_key(&h.function, h.code.as_deref(), h.line), None, Some(at(&h.file, h.line)));
    }
    for h in &whole_a.hot_lines {
        add(line_key(&h.function, h.code.as_deref(), h.line), Some(at(&h.file, h.line)), None);
    }
    for h in &whole_b.hot_lines {
        add(line_key(&h.function, h.code.as_deref(), h.line), None, Some(at(&h.file, h.line)));
    }
    let windows_a = line_ms_by_window(a, kb, window_s);
    let windows_b = line_ms_by_window(b, kb, window_s);
    let scale = |ms: f64, rate: Option<f64>| match rate {
        Some(rps) if rps > 0.0 => ms / (rps * window_s),
        _ => ms / window_s,
    };
    let mut lines = Vec::new();
    for (key, at_a, at_b) in keys {
        if at_a.is_none() && at_b.is_none() {
            continue;
        }
        let series = |windows: &[HashMap<String, f64>], rate: Option<f64>| -> Vec<f64> {
            windows.iter().map(|w| scale(w.get(&key).copied().unwrap_or(0.0), rate)).collect()
        };
        let va = series(&windows_a, per_request.map(|r| r.0));
        let vb = series(&windows_b, per_request.map(|r| r.1));
        let cost = stats::metric(&key, &va, &vb, |ma, mb| ma / mb);
        // Welch's test alone: the bootstrap interval of a ratio is undefined when a side is 0.
        let clear = cost.test.as_ref().is_some_and(|t| t.p_value < stats::ALPHA);
        let change = match (at_a.is_some(), at_b.is_some()) {
            (true, false) if cost.mean_b == 0.0 && clear => "gone",
            (false, true) if cost.mean_a == 0.0 && clear => "new",
            (true, false) | (false, true) => "unclear",
            // Too few windows for a test (a run shorter than two of them): nothing can be said
            // per window, not even that the line is unchanged.
            _ if cost.test.is_none() => "unclear",
            _ if clear && cost.speedup >= MIN_CHANGE => "down",
            _ if clear && cost.speedup <= 1.0 / MIN_CHANGE => "up",
            _ => "unchanged",
        };
        lines.push(LineChange { line: key, at_a, at_b, cost, change: change.to_owned() });
    }
    // Lines that are noise on both sides (a sample or two) say nothing either way.
    let total = |side: fn(&Metric) -> f64| lines.iter().map(|l| side(&l.cost)).filter(|x| x.is_finite()).sum::<f64>();
    let floor = MIN_LINE_SHARE * total(|m| m.mean_a).max(total(|m| m.mean_b));
    lines.retain(|l| l.cost.mean_a.max(l.cost.mean_b) >= floor);
    // Biggest cost first, on either side.
    lines.sort_by(|x, y| {
        let m = |l: &LineChange| l.cost.mean_a.max(l.cost.mean_b);
        m(y).total_cmp(&m(x))
    });
    lines.truncate(2 * LINES_COMPARED);
    Ok(LineComparison { unit: unit.to_owned(), window_s, lines })
}

/// The diagnosis of a recording as it was recorded, with up to `max_hot_lines` user lines.
fn diagnose_lines(p: &Profile, kb: &KnowledgeBase, max_hot_lines: usize) -> crate::Diagnosis {
    let opts = Options { mode: p.meta.mode, max_hot_lines, cpus: p.machine().map(|m| m.cpus), ..Options::default() };
    diagnose(p, kb, &UserCode::of_recording(p), &opts)
}

fn at(file: &str, line: u32) -> String {
    format!("{}:{line}", onefix_model::fmt::file_name(file))
}

/// What identifies a line in two runs of a program that changed: its function and its code.
fn line_key(function: &str, code: Option<&str>, line: u32) -> String {
    match code.map(str::trim).filter(|c| !c.is_empty()) {
        Some(code) => format!("{function}  {code}"),
        None => format!("{function}:{line}"),
    }
}

/// Each window's milliseconds charged to each user line, by the diagnosis's own attribution.
fn line_ms_by_window(p: &Profile, kb: &KnowledgeBase, window_s: f64) -> Vec<HashMap<String, f64>> {
    let window_us = (window_s * 1e6) as u64;
    let end = p.samples.iter().map(|s| s.time_us).max().unwrap_or(0);
    // Whole windows only: a trailing partial window would read as a drop in cost.
    let n = (end / window_us).max(1) as usize;
    let mut by_window: BTreeMap<usize, Vec<onefix_model::Sample>> = BTreeMap::new();
    for s in &p.samples {
        let w = (s.time_us / window_us) as usize;
        if w < n {
            by_window.entry(w).or_default().push(*s);
        }
    }
    let mut slice = p.clone();
    (0..n)
        .map(|w| {
            slice.samples = by_window.remove(&w).unwrap_or_default();
            // Every user line of the window, not only the hottest.
            let d = diagnose_lines(&slice, kb, usize::MAX);
            let ms_per_weight = d.seconds_per_weight.unwrap_or(0.0) * 1e3;
            d.hot_lines
                .iter()
                .map(|h| (line_key(&h.function, h.code.as_deref(), h.line), h.weight as f64 * ms_per_weight))
                .collect()
        })
        .collect()
}

/// Two memory recordings: their peak RSS, the heap retained at its peak, and by line.
#[derive(Clone, Debug, Serialize)]
pub struct HeapComparison {
    pub peak_rss_bytes: [Option<u64>; 2],
    /// Sampled bytes live at the heap's peak, in all.
    pub retained_bytes: [u64; 2],
    pub lines: Vec<RetainedLine>,
}

/// One line's bytes live at the heap's peak in A and B (the estimate from sampled allocations:
/// one snapshot per run, so no test of significance).
#[derive(Clone, Debug, Serialize)]
pub struct RetainedLine {
    pub line: String,
    pub at_a: Option<String>,
    pub at_b: Option<String>,
    pub retained_bytes: [u64; 2],
}

pub fn compare_heaps(a: &Profile, b: &Profile) -> HeapComparison {
    let opts = MemoryOptions { max_hot_lines: usize::MAX, ..Default::default() };
    let diagnose = |p: &Profile| diagnose_memory(p, &UserCode::of_recording(p), &opts);
    let (da, db) = (diagnose(a), diagnose(b));
    let peak = |p: &Profile| p.memory_info().and_then(|i| i.peak_rss_bytes);
    let peak_rss_bytes = [peak(a), peak(b)];
    let retained_bytes = [da.busy_weight, db.busy_weight];
    let mut lines: Vec<RetainedLine> = Vec::new();
    for (side, d) in [&da, &db].into_iter().enumerate() {
        for h in &d.hot_lines {
            let key = line_key(&h.function, h.code.as_deref(), h.line);
            let i = match lines.iter().position(|l| l.line == key) {
                Some(i) => i,
                None => {
                    lines.push(RetainedLine { line: key, at_a: None, at_b: None, retained_bytes: [0, 0] });
                    lines.len() - 1
                }
            };
            let l = &mut lines[i];
            l.retained_bytes[side] += h.weight;
            let place = Some(at(&h.file, h.line));
            if side == 0 {
                l.at_a = l.at_a.take().or(place)
            } else {
                l.at_b = l.at_b.take().or(place)
            }
        }
    }
    let floor = (MIN_LINE_SHARE * retained_bytes[0].max(retained_bytes[1]) as f64) as u64;
    lines.retain(|l| l.retained_bytes[0].max(l.retained_bytes[1]) >= floor.max(1));
    lines.sort_by_key(|l| std::cmp::Reverse(l.retained_bytes[0].max(l.retained_bytes[1])));
    lines.truncate(2 * LINES_COMPARED);
    HeapComparison { peak_rss_bytes, retained_bytes, lines }
}
