//! `onefix compare A B`: is B faster than A, and which lines' cost went down or up?
//!
//! A and B are two load results (`onefix load --json`) or two recordings (`onefix record`).
//! Recordings are compared line by line: each is cut into time windows, each window is
//! diagnosed like a whole recording (the same frontier attribution as the report), and a
//! line's cost per window gives the samples of a Welch test. Recordings made with `--load`
//! also carry the load's result, which is compared as two load results are.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use onefix_load::compare::{self, Comparison, Metric};
use onefix_load::LoadResult;
use onefix_model::recording::read_recording;
use onefix_model::{Profile, WeightUnit};
use serde::Serialize;

use crate::cli::{CompareArgs, OutputArgs};
use crate::outputs;

/// Lines of each recording taken into the comparison: its hottest ones.
const LINES_COMPARED: usize = 8;
/// Lines below this fraction of the busiest side's total are left out.
const MIN_LINE_SHARE: f64 = 0.02;
/// A line whose cost changed by less than this factor is reported as unchanged.
const MIN_CHANGE: f64 = 1.1;

enum Input {
    Load(Box<LoadResult>),
    Recording(Box<Profile>),
}

fn read_input(path: &Path) -> Result<Input> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.starts_with(onefix_model::recording::MAGIC) {
        let loaded = read_recording(BufReader::new(&bytes[..]))
            .with_context(|| format!("cannot read the recording {}", path.display()))?;
        if !loaded.complete {
            crate::messages::say(format_args!("{} is truncated; comparing what it holds", path.display()));
        }
        return Ok(Input::Recording(Box::new(loaded.profile)));
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is neither a recording nor a load result (not JSON)", path.display()))?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(onefix_load::stats::FORMAT) => {}
        Some(other) => bail!("{} is a `{other}` file, not a load result this onefix reads", path.display()),
        None => bail!("{} is not a load result written by `onefix load --json`", path.display()),
    }
    let result =
        serde_json::from_value(value).with_context(|| format!("{} is a damaged load result", path.display()))?;
    Ok(Input::Load(Box::new(result)))
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

#[derive(Serialize)]
struct RecordingComparison {
    /// Present when both recordings were driven by a load.
    load: Option<Comparison>,
    /// What each line's cost is measured in.
    unit: String,
    lines: Vec<LineChange>,
}

/// One line's cost in A and in B.
#[derive(Serialize)]
struct LineChange {
    /// `function  code` (or `function:line` without source), which identifies the line in
    /// both runs even when the code around it moved.
    line: String,
    /// `file:line` in A and in B, when the line ran there.
    at_a: Option<String>,
    at_b: Option<String>,
    cost: Metric,
    /// `down`, `up`, `unchanged`, `gone`, `new`, or `unclear` (in one run only, too rarely to
    /// be sure it went away).
    change: String,
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    // The outputs are checked before the inputs are read; neither may land on an input.
    let json = args.json.as_deref().map(|p| crate::output::check(p, "comparison's JSON", false)).transpose()?;
    let html = args.html.as_deref().map(|p| crate::output::check(p, "HTML comparison", false)).transpose()?;
    let all: Vec<_> = json.iter().chain(html.iter()).collect();
    crate::output::check_distinct(&all, &[args.a.as_path(), args.b.as_path()])?;
    let (mut json, mut html) = (json, html);
    let (a, b) = (read_input(&args.a)?, read_input(&args.b)?);
    let (name_a, name_b) = (file_name(&args.a), file_name(&args.b));
    let mut html_done = false;
    match (a, b) {
        (Input::Load(a), Input::Load(b)) => {
            let c = compare::compare(&a, &b);
            print!("{}", compare::render(&c, &a, &b, &name_a, &name_b));
            write_json(json.take(), &c)?;
        }
        (Input::Recording(a), Input::Recording(b)) => match (a.meta.weight_unit, b.meta.weight_unit) {
            (WeightUnit::Bytes, WeightUnit::Bytes) => {
                let c = compare_memory(&a, &b, &name_a, &name_b);
                write_json(json.take(), &c)?;
            }
            (WeightUnit::Bytes, _) | (_, WeightUnit::Bytes) => {
                bail!("one recording tracks memory and the other time: compare two of the same kind")
            }
            _ => {
                let c = compare_recordings(&a, &b, &name_a, &name_b)?;
                write_json(json.take(), &c)?;
                if let Some(out) = html.take() {
                    write_html_pair(out, (&a, &name_a), (&b, &name_b))?;
                    html_done = true;
                }
            }
        },
        _ => bail!("compare takes two recordings or two load results, not one of each"),
    }
    if args.html.is_some() && !html_done {
        crate::messages::say(format_args!(
            "--html shows two time recordings side by side; it was not written for these inputs"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The two recordings on one page, side by side, with their differential flame graph.
fn write_html_pair(
    out: crate::output::Output,
    (a, name_a): (&Profile, &str),
    (b, name_b): (&Profile, &str),
) -> Result<()> {
    use onefix_report::{write_html, FileSystemSources, HtmlRun};
    let (da, db) = (
        outputs::run_diagnosis(a, a.meta.mode, &OutputArgs::default()),
        outputs::run_diagnosis(b, b.meta.mode, &OutputArgs::default()),
    );
    let runs = [
        HtmlRun { label: name_a.to_owned(), profile: a, diagnosis: &da, mode: a.meta.mode, complete: true },
        HtmlRun { label: name_b.to_owned(), profile: b, diagnosis: &db, mode: b.meta.mode, complete: true },
    ];
    let shown = out.shown.display().to_string();
    out.write_with(|w| write_html(w, &runs, &FileSystemSources { cwd: a.meta.target.cwd.clone() }))
        .with_context(|| format!("cannot write the HTML comparison to {shown}"))
}

fn write_json<T: Serialize>(out: Option<crate::output::Output>, value: &T) -> Result<()> {
    let Some(out) = out else { return Ok(()) };
    let shown = out.shown.display().to_string();
    out.write_with(|w| {
        serde_json::to_writer_pretty(&mut *w, value)?;
        writeln!(w)
    })
    .with_context(|| format!("cannot write the comparison's JSON to {shown}"))
}

fn load_of(p: &Profile) -> Option<LoadResult> {
    p.attachments.get(onefix_model::attachments::LOAD).and_then(|bytes| serde_json::from_slice(bytes).ok())
}

fn compare_recordings(a: &Profile, b: &Profile, name_a: &str, name_b: &str) -> Result<RecordingComparison> {
    let (load_a, load_b) = (load_of(a), load_of(b));
    let mut out = String::new();
    let load = match (&load_a, &load_b) {
        (Some(la), Some(lb)) => {
            let c = compare::compare(la, lb);
            out.push_str("the loads:\n");
            out.push_str(&compare::render(&c, la, lb, name_a, name_b));
            out.push('\n');
            Some(c)
        }
        _ => None,
    };
    let secs = |p: &Profile| p.samples.iter().map(|s| s.time_us).max().unwrap_or(0) as f64 / 1e6;
    let (dur_a, dur_b) = (secs(a), secs(b));
    if dur_a <= 0.0 || dur_b <= 0.0 {
        bail!("a recording holds no samples to compare");
    }
    // The same window length on both sides, so that their per-window costs are alike; at
    // least a few windows even in short runs.
    let window_s = if dur_a.min(dur_b) >= 10.0 { 1.0 } else { (dur_a.min(dur_b) / 5.0).max(0.1) };
    // Per request when both runs were driven by a load (their mean rate), else per second.
    let per_request = match (&load_a, &load_b) {
        (Some(la), Some(lb)) if la.completed > 0 && lb.completed > 0 => Some((la.achieved_rps, lb.achieved_rps)),
        _ => None,
    };
    let unit = if per_request.is_some() { "ms of the line per request" } else { "ms of the line per second" };

    let whole_a = outputs::run_diagnosis(a, a.meta.mode, &OutputArgs::default());
    let whole_b = outputs::run_diagnosis(b, b.meta.mode, &OutputArgs::default());
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
    let windows_a = line_ms_by_window(a, window_s);
    let windows_b = line_ms_by_window(b, window_s);
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
        let cost = compare::metric(&key, &va, &vb, |ma, mb| ma / mb);
        // Welch's test alone: the bootstrap interval of a ratio is undefined when a side is 0.
        let clear = cost.test.as_ref().is_some_and(|t| t.p_value < compare::ALPHA);
        let change = match (at_a.is_some(), at_b.is_some()) {
            (true, false) if cost.mean_b == 0.0 && clear => "gone",
            (false, true) if cost.mean_a == 0.0 && clear => "new",
            (true, false) | (false, true) => "unclear",
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

    out.push_str(&render_lines(&lines, unit, name_a, name_b, window_s));
    print!("{out}");
    Ok(RecordingComparison { load, unit: unit.to_owned(), lines })
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
fn line_ms_by_window(p: &Profile, window_s: f64) -> Vec<HashMap<String, f64>> {
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
            let d = outputs::run_diagnosis_all_lines(&slice, p.meta.mode);
            let ms_per_weight = d.seconds_per_weight.unwrap_or(0.0) * 1e3;
            d.hot_lines
                .iter()
                .map(|h| (line_key(&h.function, h.code.as_deref(), h.line), h.weight as f64 * ms_per_weight))
                .collect()
        })
        .collect()
}

fn render_lines(lines: &[LineChange], unit: &str, name_a: &str, name_b: &str, window_s: f64) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "the lines ({unit}; mean over {window_s:.1} s windows, Welch's t-test):");
    let _ = writeln!(s, "  {:>10} {:>10}  {:<24} line", format!("A"), format!("B"), "change");
    let _ = writeln!(s, "  {:>10} {:>10}  {:<24} ({name_a} → {name_b})", "", "", "");
    for l in lines {
        let change = match l.change.as_str() {
            "down" | "up" => {
                let factor = if l.change == "down" { l.cost.speedup } else { 1.0 / l.cost.speedup };
                let p = l.cost.test.as_ref().map(|t| {
                    if t.p_value < 0.001 {
                        "p<0.001".to_owned()
                    } else {
                        format!("p={:.3}", t.p_value)
                    }
                });
                let factor = if factor.is_finite() { format!("{factor:.1}x") } else { "to 0".to_owned() };
                format!("{} {factor} {}", l.change, p.unwrap_or_default())
            }
            other => other.to_owned(),
        };
        let place = match (&l.at_a, &l.at_b) {
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) => format!("{x} → {y}"),
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            s,
            "  {:>10} {:>10}  {:<24} {place}  {}",
            fmt_ms(l.cost.mean_a),
            fmt_ms(l.cost.mean_b),
            change,
            l.line
        );
    }
    s
}

fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "-".into()
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

#[derive(Serialize)]
struct MemoryComparison {
    load: Option<Comparison>,
    peak_rss_bytes: [Option<u64>; 2],
    /// Sampled bytes live at the heap's peak, in all.
    retained_bytes: [u64; 2],
    lines: Vec<RetainedLine>,
}

/// One line's bytes live at the heap's peak in A and B (the estimate from sampled allocations:
/// one snapshot per run, so no test of significance).
#[derive(Serialize)]
struct RetainedLine {
    line: String,
    at_a: Option<String>,
    at_b: Option<String>,
    retained_bytes: [u64; 2],
}

/// Two memory recordings: peak RSS, the heap retained at its peak, and by line.
fn compare_memory(a: &Profile, b: &Profile, name_a: &str, name_b: &str) -> MemoryComparison {
    use std::fmt::Write as _;
    let mut out = String::new();
    let load = match (load_of(a), load_of(b)) {
        (Some(la), Some(lb)) => {
            let c = compare::compare(&la, &lb);
            out.push_str("the loads:\n");
            out.push_str(&compare::render(&c, &la, &lb, name_a, name_b));
            out.push('\n');
            Some(c)
        }
        _ => None,
    };
    let opts = onefix_diagnose::MemoryOptions { max_hot_lines: usize::MAX, ..Default::default() };
    let diagnose =
        |p: &Profile| onefix_diagnose::diagnose_memory(p, &outputs::user_code(p, &OutputArgs::default()), &opts);
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

    let mb = |b: Option<u64>| b.map_or("-".to_owned(), |b| format!("{:.1} MB", b as f64 / 1e6));
    let ratio = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) if y > 0 => format!("{:.1}x less in B", x as f64 / y as f64),
        _ => String::new(),
    };
    let _ = writeln!(out, "memory:            A: {name_a:<24} B: {name_b}");
    let _ = writeln!(
        out,
        "  peak RSS        {:<27} {:<14} {}",
        mb(peak_rss_bytes[0]),
        mb(peak_rss_bytes[1]),
        ratio(peak_rss_bytes[0], peak_rss_bytes[1])
    );
    let _ = writeln!(
        out,
        "  heap at peak    {:<27} {:<14} {}",
        mb(Some(retained_bytes[0])),
        mb(Some(retained_bytes[1])),
        ratio(Some(retained_bytes[0]), Some(retained_bytes[1]))
    );
    let _ = writeln!(
        out,
        "\nthe lines (MB live at the heap's peak, estimated from sampled allocations; one snapshot per run):"
    );
    for l in &lines {
        let place = match (&l.at_a, &l.at_b) {
            (Some(x), Some(y)) if x != y => format!("{x} → {y}"),
            (Some(x), _) | (None, Some(x)) => x.clone(),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:>9} {:>9}  {place}  {}",
            format!("{:.1}", l.retained_bytes[0] as f64 / 1e6),
            format!("{:.1}", l.retained_bytes[1] as f64 / 1e6),
            l.line
        );
    }
    print!("{out}");
    MemoryComparison { load, peak_rss_bytes, retained_bytes, lines }
}
