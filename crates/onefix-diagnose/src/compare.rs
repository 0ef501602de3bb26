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
    /// Why no line was compared per window, when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_compared: Option<String>,
}

impl LineComparison {
    /// No line compared per window, and why.
    pub fn none(why: String) -> LineComparison {
        LineComparison { unit: String::new(), window_s: 0.0, lines: Vec::new(), not_compared: Some(why) }
    }
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
/// The verdict rests on the runs' own durations however few samples either holds; with
/// repeated runs of each ([`RunComparison::of_repeated`]) it rests on their statistics.
#[derive(Clone, Debug, Serialize)]
pub struct RunComparison {
    /// Each side's wall time and time on a CPU, A then B, in seconds (the means, with
    /// repeated runs).
    pub wall_s: (f64, f64),
    pub cpu_s: (f64, f64),
    /// A's time over B's: above 1, B is faster.
    pub wall_speedup: f64,
    pub cpu_speedup: f64,
    /// How many timed runs each side had.
    pub runs_each: u32,
    /// The timed runs' wall times compared (Welch's test on their logarithms, a bootstrap
    /// interval of the ratio of their means); absent with one run each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<Metric>,
    /// With repeated runs: each side's median and standard deviation of its wall times, and
    /// how many of its runs were outliers ([`stats::outliers`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<RunSpread>,
    /// With one run each: the relative difference that one run each cannot tell from
    /// run-to-run noise ([`ONE_RUN_NOISE`], plus how late a run's end may have been seen).
    pub one_run_noise: f64,
    /// `faster`, `slower`, or `unclear`.
    pub direction: String,
    /// One plain sentence: "B is 93.2x faster by its wall time (one run each ...)".
    pub verdict: String,
    /// The lines that cost most in either run, with their time in each.
    pub lines: Vec<LineRun>,
    /// A run lasted fewer windows than a per-window test can judge.
    pub too_short_for_windows: bool,
}

/// The spread of each side's repeated wall times, A then B.
#[derive(Clone, Debug, Serialize)]
pub struct RunSpread {
    pub median_s: (f64, f64),
    pub stddev_s: (f64, f64),
    pub min_s: (f64, f64),
    pub max_s: (f64, f64),
    pub outliers: (usize, usize),
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

/// How much one run of a program can differ from the next with nothing changed: repeated runs
/// in `bench/compare/run` spread by up to 9% (sd over mean) on a quiet machine and 13-17% on a
/// busy one (BENCHMARKS.md, "Repeated runs"). With one run each, a smaller difference is not
/// called a difference, and the output says to time several (`compare --runs`).
pub const ONE_RUN_NOISE: f64 = 0.10;

/// One side's timed run(s): its wall and CPU seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunTime {
    pub wall_s: f64,
    pub cpu_s: f64,
}

/// A recording's own run time: what the kernel and the clock said of a program onefix started
/// and saw end, else (a recording made before those were kept) its sampled span and samples
/// on a CPU. `None` for a run cut short by a duration, Ctrl-C or a load, or an attach.
pub fn run_time_of(p: &Profile) -> Option<(RunTime, f64)> {
    let ended = matches!(p.meta.exit, Some(TargetExit::Code(_) | TargetExit::Signal(_)));
    if !ended {
        return None;
    }
    if let Some(t) = p.run_times() {
        return Some((RunTime { wall_s: t.wall_s, cpu_s: t.user_s + t.system_s }, t.resolution_s));
    }
    let spw = p.seconds_per_weight()?;
    let cpu = p.samples.iter().filter(|s| s.state.active()).map(|s| s.weight as u64).sum::<u64>() as f64 * spw;
    let wall = p.meta.duration_s + p.program_start().map_or(0.0, |s| s.unsampled_us as f64 / 1e6);
    (wall > 0.0).then_some((RunTime { wall_s: wall, cpu_s: cpu }, 1.5 / p.meta.rate_hz.max(0.1)))
}

/// Compares two recordings as whole runs, when both went to their end (not cut short by a
/// duration, Ctrl-C or a load); `None` otherwise. `window_s`: the per-window test's window,
/// when one was made.
pub fn compare_runs(
    a: &Profile,
    b: &Profile,
    kb: &KnowledgeBase,
    user: (&UserCode, &UserCode),
    window_s: Option<f64>,
) -> Option<RunComparison> {
    let ((run_a, res_a), (run_b, res_b)) = (run_time_of(a)?, run_time_of(b)?);
    let lines = lines_per_run(a, b, kb, user);
    let mut c = RunComparison::of_one_run_each(run_a, run_b, res_a.max(res_b), lines);
    c.too_short_for_windows = window_s.map_or(true, |w| run_a.wall_s.min(run_b.wall_s) < MIN_WINDOWS * w);
    Some(c)
}

/// The lines that cost most in either of two whole runs, with their seconds in each.
pub fn lines_per_run(a: &Profile, b: &Profile, kb: &KnowledgeBase, user: (&UserCode, &UserCode)) -> Vec<LineRun> {
    let (da, db) = (diagnose_lines(a, kb, user.0, LINES_COMPARED), diagnose_lines(b, kb, user.1, LINES_COMPARED));
    let (spw_a, spw_b) = (da.seconds_per_weight.unwrap_or(0.0), db.seconds_per_weight.unwrap_or(0.0));
    let mut lines: Vec<LineRun> = Vec::new();
    for (hot, spw, in_a) in
        da.hot_lines.iter().map(|h| (h, spw_a, true)).chain(db.hot_lines.iter().map(|h| (h, spw_b, false)))
    {
        let key = line_key(&hot.function, hot.code.as_deref(), hot.line);
        let seconds = hot.weight as f64 * spw;
        let i = match lines.iter().position(|l| l.line == key) {
            Some(i) => i,
            None => {
                lines.push(LineRun { line: key, at: Some(at(&hot.file, hot.line)), seconds_a: 0.0, seconds_b: 0.0 });
                lines.len() - 1
            }
        };
        if in_a {
            lines[i].seconds_a += seconds;
        } else {
            lines[i].seconds_b += seconds;
        }
    }
    lines.sort_by(|x, y| (y.seconds_a.max(y.seconds_b)).total_cmp(&x.seconds_a.max(x.seconds_b)));
    lines.truncate(LINES_COMPARED);
    lines
}

fn ratio(x: f64, y: f64) -> f64 {
    if y > 0.0 {
        x / y
    } else {
        f64::INFINITY
    }
}

/// "93.2x faster", "3.44x slower".
fn factor(speedup: f64) -> String {
    if !speedup.is_finite() {
        "immeasurably faster".to_owned()
    } else if speedup >= 1.0 {
        format!("{}x faster", stats::fmt_num(speedup))
    } else {
        format!("{}x slower", stats::fmt_num(1.0 / speedup))
    }
}

impl RunComparison {
    /// One run each: the verdict is the ratio of their wall times when it is beyond what one
    /// run can tell from noise (`resolution_s`: how late an end may have been seen).
    pub fn of_one_run_each(a: RunTime, b: RunTime, resolution_s: f64, lines: Vec<LineRun>) -> RunComparison {
        let wall_speedup = ratio(a.wall_s, b.wall_s);
        // The shorter run's end is the least precise, relatively.
        let noise = ONE_RUN_NOISE + resolution_s / a.wall_s.min(b.wall_s).max(1e-6);
        // A run's end is seen up to `resolution_s` late, never early: the longer run's time may
        // be that much too long, so the ratio is at least the one from it less that.
        let bound = |long: f64, short: f64| {
            let least = ratio((long - resolution_s).max(short), short);
            if resolution_s / short.max(1e-6) > ONE_RUN_NOISE {
                format!(
                    " (at least {}x: a run's end is seen up to {:.0} ms late)",
                    stats::fmt_num(least),
                    resolution_s * 1e3
                )
            } else {
                String::new()
            }
        };
        let (direction, verdict) = if wall_speedup > 1.0 + noise {
            ("faster", format!("B is {} by its wall time{}", factor(wall_speedup), bound(a.wall_s, b.wall_s)))
        } else if 1.0 / wall_speedup > 1.0 + noise {
            ("slower", format!("B is {} by its wall time{}", factor(wall_speedup), bound(b.wall_s, a.wall_s)))
        } else {
            (
                "unclear",
                format!(
                    "no difference one run each can show: B's wall time is {} of A's, within the {:.0}% one run can differ by on its own",
                    pct_of(wall_speedup),
                    noise * 100.0
                ),
            )
        };
        RunComparison {
            wall_s: (a.wall_s, b.wall_s),
            cpu_s: (a.cpu_s, b.cpu_s),
            wall_speedup,
            cpu_speedup: ratio(a.cpu_s, b.cpu_s),
            runs_each: 1,
            wall: None,
            spread: None,
            one_run_noise: noise,
            direction: direction.to_owned(),
            verdict,
            lines,
            too_short_for_windows: true,
        }
    }

    /// Repeated timed runs of each side: the verdict is that of Welch's test on the wall
    /// times' logarithms with a 95% bootstrap interval of the ratio of their means.
    pub fn of_repeated(a: &[RunTime], b: &[RunTime], lines: Vec<LineRun>) -> RunComparison {
        let wall = |v: &[RunTime]| v.iter().map(|r| r.wall_s).collect::<Vec<f64>>();
        let cpu = |v: &[RunTime]| stats::mean(&v.iter().map(|r| r.cpu_s).collect::<Vec<f64>>());
        let metric = stats::metric("wall_s", &wall(a), &wall(b), ratio);
        let direction = match (metric.significant, metric.speedup > 1.0) {
            (true, true) => "faster",
            (true, false) => "slower",
            _ => "unclear",
        };
        // The interval in the verdict's own terms: of how many times slower, when slower.
        let interval = metric
            .ci95
            .map(|[lo, hi]| if metric.speedup < 1.0 { [1.0 / hi, 1.0 / lo] } else { [lo, hi] })
            .map(|[lo, hi]| format!(" [{}, {}]", stats::fmt_num(lo), stats::fmt_num(hi)))
            .unwrap_or_default();
        let p = metric.test.as_ref().map(|t| format!(", {}", stats::fmt_p(t.p_value))).unwrap_or_default();
        let verdict = match direction {
            "unclear" => format!("no significant difference: {}{interval}{p}", stats::fmt_x(metric.speedup)),
            _ => format!("B is {} by its mean wall time{interval}{p}", factor(metric.speedup)),
        };
        RunComparison {
            wall_s: (metric.mean_a, metric.mean_b),
            cpu_s: (cpu(a), cpu(b)),
            wall_speedup: metric.speedup,
            cpu_speedup: ratio(cpu(a), cpu(b)),
            runs_each: a.len().min(b.len()) as u32,
            wall: Some(metric),
            spread: Some(RunSpread {
                median_s: (stats::median(&wall(a)), stats::median(&wall(b))),
                stddev_s: (stats::variance(&wall(a)).sqrt(), stats::variance(&wall(b)).sqrt()),
                min_s: (lowest(&wall(a)), lowest(&wall(b))),
                max_s: (highest(&wall(a)), highest(&wall(b))),
                outliers: (stats::outliers(&wall(a)), stats::outliers(&wall(b))),
            }),
            one_run_noise: ONE_RUN_NOISE,
            direction: direction.to_owned(),
            verdict,
            lines,
            too_short_for_windows: false,
        }
    }
}

fn lowest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn highest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// B's time as a percentage of A's, from A's time over B's.
fn pct_of(speedup: f64) -> String {
    format!("{:.0}%", 100.0 / speedup)
}

/// Compares the lines of two time recordings. `per_request`: the two runs' mean request rates
/// when both were driven by a load, to weigh each line per request instead of per second.
pub fn compare_lines(
    a: &Profile,
    b: &Profile,
    kb: &KnowledgeBase,
    user: (&UserCode, &UserCode),
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

    let whole_a = diagnose_lines(a, kb, user.0, Options::default().max_hot_lines);
    let whole_b = diagnose_lines(b, kb, user.1, Options::default().max_hot_lines);
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
    let windows_a = line_ms_by_window(a, kb, user.0, window_s);
    let windows_b = line_ms_by_window(b, kb, user.1, window_s);
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
    Ok(LineComparison { unit: unit.to_owned(), window_s, lines, not_compared: None })
}

/// The diagnosis of a recording as it was recorded, with up to `max_hot_lines` user lines.
fn diagnose_lines(p: &Profile, kb: &KnowledgeBase, user: &UserCode, max_hot_lines: usize) -> crate::Diagnosis {
    let opts = Options { mode: p.meta.mode, max_hot_lines, cpus: p.machine().map(|m| m.cpus), ..Options::default() };
    diagnose(p, kb, user, &opts)
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
fn line_ms_by_window(p: &Profile, kb: &KnowledgeBase, user: &UserCode, window_s: f64) -> Vec<HashMap<String, f64>> {
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
            let d = diagnose_lines(&slice, kb, user, usize::MAX);
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
