//! The self-contained HTML report: one file that opens in any browser with no network, the CSS
//! and the viewer's JavaScript inline and the data embedded as JSON.
//!
//! It shows, for one recording or two side by side:
//! - the findings first, from the same object the JSON report writes (the contract);
//! - an interactive flame graph per weight the recording allows (wall and CPU time for a wall
//!   recording, CPU time for a CPU one, allocated bytes for an allocation one), with search,
//!   zoom and click to focus; for two recordings also the differential graph;
//! - the timeline of samples per thread, split by state (running or waiting), and of the
//!   request rate and latency of the load that drove the target, when there was one;
//! - the hot user lines with a few lines of source around them, when the file is readable.
//!
//! The page is built by [`html_data`] (a JSON value, tested against golden files) and the
//! viewer in `html/` (tested in a headless browser by the onefix crate's tests).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use onefix_diagnose::Diagnosis;
use onefix_model::{CallTree, FrameId, FrameKind, Mode, Profile, WeightUnit};
use serde::Serialize;
use serde_json::Value;

use crate::describe;
use crate::json::{report, JsonOptions};

const TEMPLATE: &str = include_str!("html/report.html");
const STYLE: &str = include_str!("html/report.css");
const SCRIPT: &str = include_str!("html/report.js");

/// Frames narrower than this fraction of the graph's total are left out of the embedded graph
/// (their weight stays in their parent): flamegraph.pl leaves out frames below 0.1 pixel for
/// the same reason, to keep big recordings' pages small and quick.
const MIN_NODE_FRACTION: f64 = 1.0 / 5000.0;
/// Lines of source shown on each side of a hot line.
const SOURCE_CONTEXT: u32 = 3;
/// The timeline's buckets: at least this long, and at most this many.
const MIN_BUCKET_S: f64 = 0.1;
const MAX_BUCKETS: usize = 300;
/// Threads shown in the timeline, busiest first; the rest are counted.
const MAX_TIMELINE_THREADS: usize = 40;

/// Where the report reads source files from (the file system, or a map in tests).
pub trait SourceFiles {
    /// The text of `path` as the target named it, or `None` when it cannot be read.
    fn read(&self, path: &str) -> Option<String>;
}

/// Reads sources from the file system, relative paths from the target's working directory.
pub struct FileSystemSources {
    pub cwd: Option<String>,
}

impl SourceFiles for FileSystemSources {
    fn read(&self, path: &str) -> Option<String> {
        let full = match (&self.cwd, path.starts_with('/')) {
            (Some(cwd), false) => std::path::Path::new(cwd).join(path),
            _ => std::path::PathBuf::from(path),
        };
        // Source files only: a frame may name a huge or special file.
        let meta = std::fs::metadata(&full).ok()?;
        if !meta.is_file() || meta.len() > 4 << 20 {
            return None;
        }
        std::fs::read_to_string(full).ok()
    }
}

impl SourceFiles for BTreeMap<String, String> {
    fn read(&self, path: &str) -> Option<String> {
        self.get(path).cloned()
    }
}

/// One recording to show.
pub struct HtmlRun<'a> {
    /// What to call it: `before`, `after`, or the recording's file name.
    pub label: String,
    pub profile: &'a Profile,
    pub diagnosis: &'a Diagnosis,
    /// The weight the diagnosis used.
    pub mode: Mode,
    pub complete: bool,
}

/// Writes the report of one recording, or of two side by side (before, after) with the
/// differential flame graph.
pub fn write_html<W: Write>(w: W, runs: &[HtmlRun], sources: &dyn SourceFiles) -> io::Result<()> {
    write_html_compared(w, runs, sources, None)
}

/// [`write_html`] of two runs with their comparison on top (`onefix compare --html`): the
/// verdict sentences and the lines' change, as `compare` computed them (its JSON).
pub fn write_html_compared<W: Write>(
    mut w: W,
    runs: &[HtmlRun],
    sources: &dyn SourceFiles,
    comparison: Option<&Value>,
) -> io::Result<()> {
    if runs.is_empty() || runs.len() > 2 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "an HTML report shows one or two recordings"));
    }
    let mut data = html_data(runs, sources);
    if let Some(c) = comparison {
        data["comparison"] = c.clone();
    }
    let title = data["title"].as_str().unwrap_or("onefix").to_owned();
    // Inside <script>, `<` is escaped so that no string in the data can close the element.
    let json = serde_json::to_string(&data)?.replace('<', "\\u003c");
    let page = TEMPLATE
        .replace("{{TITLE}}", &escape_html(&title))
        .replace("{{STYLE}}", STYLE)
        .replace("{{SCRIPT}}", SCRIPT)
        .replace("{{DATA}}", &json);
    w.write_all(page.as_bytes())?;
    w.flush()
}

fn escape_html(text: &str) -> String {
    // `{` too, so that nothing in a title reads as one of the template's placeholders.
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('{', "&#123;")
}

#[derive(Serialize)]
struct RunData<'a> {
    label: &'a str,
    report: crate::json::Report<'a>,
    /// `function (file:line)` per frame index the graphs use.
    frames: Vec<FrameData>,
    flames: Vec<Flame>,
    /// `None` for a profile without sample times (imported from pprof or folded stacks).
    timeline: Option<Timeline>,
    sources: Vec<SourceSnippet>,
    /// The load that drove the target (`record --load`), when the recording carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    load: Option<Value>,
    /// A memory recording's RSS and live sampled heap over time (`record --memory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<Value>,
}

#[derive(Serialize)]
struct FrameData {
    name: String,
    /// `python`, `native` or `kernel`.
    kind: &'static str,
    /// Whether a finding or a hot line is at this frame's line: drawn in the finding colour.
    hot: bool,
}

#[derive(Serialize)]
struct Flame {
    /// `wall time`, `CPU time`, `allocated bytes`.
    name: String,
    /// `seconds` or `bytes`.
    unit: &'static str,
    /// Seconds (or bytes) one unit of weight stands for.
    per_weight: f64,
    nodes: Vec<Node>,
}

/// A call-tree node: `f` is the frame index (-1 for the root), `v` the total weight, `s` the
/// self weight, `c` the children, sorted by name as flame graphs are.
#[derive(Serialize)]
/// A node of a flame graph. The graph is a flat list in preorder, each node with its depth
/// (`d`, 0 for the root): a stack of any depth is written, and rebuilt by the page, without
/// recursion, where a nested tree would overflow a stack at some thousands of frames.
struct Node {
    f: i64,
    v: u64,
    s: u64,
    d: usize,
}

#[derive(Serialize)]
struct Timeline {
    bucket_s: f64,
    /// Weight that one thread sampled at every tick of a bucket adds up to.
    bucket_full: f64,
    threads: Vec<ThreadRow>,
    threads_left_out: usize,
}

#[derive(Serialize)]
struct ThreadRow {
    name: String,
    /// Weight per bucket with the thread running (on a CPU, or runnable).
    running: Vec<u64>,
    /// Weight per bucket with the thread waiting (blocked, sleeping, idle).
    waiting: Vec<u64>,
}

#[derive(Serialize)]
struct SourceSnippet {
    file: String,
    line: u32,
    /// 1-based number of the first line in `text`.
    first: u32,
    text: Vec<String>,
}

#[derive(Serialize)]
/// A node of the differential graph, in the same flat preorder as [`Node`].
struct DiffNode {
    name: String,
    a: u64,
    b: u64,
    d: usize,
}

/// The data the page embeds, as a JSON value: `title`, `runs` (each with `report`, `frames`,
/// `flames`, `timeline`, `sources`) and, for two runs, `diff`.
pub fn html_data(runs: &[HtmlRun], sources: &dyn SourceFiles) -> Value {
    let title = match runs {
        [one] => match one.profile.imported_from() {
            Some(from) if one.profile.meta.target.argv.is_none() => format!("onefix: {}", from.source),
            _ => format!("onefix: {}", describe::command_line(&one.profile.meta.target)),
        },
        [a, b, ..] => format!("onefix: {} vs {}", a.label, b.label),
        [] => "onefix".to_owned(),
    };
    let run_data: Vec<RunData> = runs.iter().map(|run| run_data(run, sources)).collect();
    let diff = match runs {
        [a, b] => Some(diff_tree(a, b)),
        _ => None,
    };
    serde_json::json!({
        "title": title,
        "tool": format!("onefix {}", runs.first().map(|r| describe::tool_version(&r.profile.meta)).unwrap_or("")),
        "runs": run_data,
        "diff": diff,
    })
}

fn run_data<'a>(run: &'a HtmlRun, sources: &dyn SourceFiles) -> RunData<'a> {
    let profile = run.profile;
    let hot_places: Vec<(&str, u32)> = run
        .diagnosis
        .findings
        .iter()
        .map(|f| (f.file.as_str(), f.line))
        .chain(run.diagnosis.hot_lines.iter().map(|h| (h.file.as_str(), h.line)))
        .collect();

    let mut frames = FrameTable::default();
    let mut flames = Vec::new();
    let spw = profile.seconds_per_weight();
    let (unit, per_weight) = match spw {
        Some(s) => ("seconds", s),
        None => ("bytes", 1.0),
    };
    let modes: Vec<(Mode, String)> = match (profile.meta.weight_unit, run.mode) {
        (WeightUnit::Bytes, _) => vec![(Mode::Wall, "allocated bytes".to_owned())],
        (WeightUnit::Samples { .. }, Mode::Wall) => {
            vec![(Mode::Wall, "wall time".to_owned()), (Mode::Cpu, "CPU time".to_owned())]
        }
        (WeightUnit::Samples { .. }, Mode::Cpu) => vec![(Mode::Cpu, "CPU time".to_owned())],
    };
    for (mode, name) in modes {
        let tree = CallTree::build(profile, |s| mode.counts(s.state));
        if tree.root().total == 0 {
            continue;
        }
        let min = (tree.root().total as f64 * MIN_NODE_FRACTION).ceil() as u64;
        let nodes = flame_nodes(profile, &tree, min, &mut frames, &hot_places);
        flames.push(Flame { name, unit, per_weight, nodes });
    }

    RunData {
        label: &run.label,
        report: report(profile, run.diagnosis, &JsonOptions { complete: run.complete }),
        frames: frames.frames,
        flames,
        timeline: has_times(profile).then(|| timeline(profile)),
        sources: snippets(&hot_places, sources),
        load: load(profile),
        memory: memory(profile),
    }
}

/// The `memory` attachment of a memory recording (the model's `MemoryInfo`), cut to what the
/// page draws: the RSS and the live sampled heap over time, in MB, and the peak RSS.
fn memory(profile: &Profile) -> Option<Value> {
    let info: Value = serde_json::from_slice(profile.attachments.get("memory")?).ok()?;
    let series = |key: &str| -> Vec<Value> {
        info[key]
            .as_array()
            .map(|points| {
                points
                    .iter()
                    .map(|p| {
                        serde_json::json!([
                            p["time_us"].as_f64().unwrap_or(0.0) / 1e6,
                            p["rss_bytes"].as_f64().unwrap_or(0.0) / 1e6
                        ])
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    Some(serde_json::json!({
        "peak_rss_mb": info["peak_rss_bytes"].as_f64().map(|b| b / 1e6),
        "rss_mb": series("rss"),
        "live_mb": series("live"),
    }))
}

/// The `load` attachment (`onefix load`'s JSON result, see
/// crates/onefix-load/schema/load-result.schema.json), cut to what the page draws: totals,
/// latency percentiles and the per-window request rate and latency.
fn load(profile: &Profile) -> Option<Value> {
    let result: Value = serde_json::from_slice(profile.attachments.get("load")?).ok()?;
    let windows: Vec<Value> = result["windows"]
        .as_array()?
        .iter()
        .map(|w| {
            serde_json::json!({
                "start_s": w["start_s"], "duration_s": w["duration_s"], "rps": w["rps"], "errors": w["errors"],
                "p50_ms": w["latency_ms"]["p50"], "p99_ms": w["latency_ms"]["p99"],
            })
        })
        .collect();
    Some(serde_json::json!({
        "url": result["url"], "achieved_rps": result["achieved_rps"], "target_rps": result["target_rps"],
        "completed": result["completed"], "errors": result["errors"]["total"], "latency_ms": result["latency_ms"],
        "windows": windows,
    }))
}

#[derive(Default)]
struct FrameTable {
    frames: Vec<FrameData>,
    index: HashMap<FrameId, i64>,
}

/// The call tree's nodes of at least `min` weight, in preorder with their depths, each node's
/// children by label; walked with a stack of its own, so any depth a recording holds is drawn.
fn flame_nodes(
    profile: &Profile,
    tree: &CallTree,
    min: u64,
    frames: &mut FrameTable,
    hot_places: &[(&str, u32)],
) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut pending = vec![(CallTree::ROOT, 0usize)];
    while let Some((id, depth)) = pending.pop() {
        let n = &tree.nodes[id];
        let f = match n.frame {
            None => -1,
            Some(frame_id) => *frames.index.entry(frame_id).or_insert_with(|| {
                let frame = profile.frame(frame_id);
                frames.frames.push(FrameData {
                    name: frame.label(),
                    kind: match frame.kind {
                        FrameKind::Python => "python",
                        FrameKind::Native => "native",
                        FrameKind::Kernel => "kernel",
                    },
                    hot: frame.line > 0
                        && hot_places.iter().any(|&(file, line)| file == frame.file && line == frame.line),
                });
                frames.frames.len() as i64 - 1
            }),
        };
        nodes.push(Node { f, v: n.total, s: n.self_weight, d: depth });
        let mut children: Vec<usize> =
            n.children.iter().copied().filter(|&c| tree.nodes[c].total >= min.max(1)).collect();
        children.sort_by_cached_key(|&c| tree.nodes[c].frame.map(|f| profile.frame(f).label()));
        // Popped in label order: the first child is pushed last.
        pending.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    nodes
}

/// Whether the samples carry their times: not so for a profile imported from a format without
/// them, whose samples are all at time 0.
fn has_times(profile: &Profile) -> bool {
    profile.imported_from().is_none() || profile.samples.iter().any(|s| s.time_us > 0)
}

fn timeline(profile: &Profile) -> Timeline {
    let duration_s =
        profile.meta.duration_s.max(profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0) as f64 / 1e6);
    let bucket_s = (duration_s / MAX_BUCKETS as f64).max(MIN_BUCKET_S);
    // Rounded to the millisecond so the embedded data stays readable and stable.
    let bucket_s = (bucket_s * 1000.0).ceil() / 1000.0;
    let buckets = ((duration_s / bucket_s).floor() as usize + 1).min(MAX_BUCKETS + 1);
    let mut rows: Vec<(u64, Vec<u64>, Vec<u64>)> =
        vec![(0, vec![0; buckets], vec![0; buckets]); profile.threads().len()];
    for s in &profile.samples {
        let b = ((s.time_us as f64 / 1e6 / bucket_s) as usize).min(buckets - 1);
        let row = &mut rows[s.thread as usize];
        row.0 += u64::from(s.weight);
        if s.state.active() {
            row.1[b] += u64::from(s.weight);
        } else {
            row.2[b] += u64::from(s.weight);
        }
    }
    let mut order: Vec<usize> = (0..rows.len()).filter(|&t| rows[t].0 > 0).collect();
    order.sort_by_key(|&t| (std::cmp::Reverse(rows[t].0), t));
    let left_out = order.len().saturating_sub(MAX_TIMELINE_THREADS);
    order.truncate(MAX_TIMELINE_THREADS);
    let threads = order
        .into_iter()
        .map(|t| {
            let info = profile.thread(t as u32);
            let (_, running, waiting) = std::mem::take(&mut rows[t]);
            ThreadRow {
                name: match &info.name {
                    Some(name) => format!("{name} ({})", info.tid),
                    None => format!("thread {}", info.tid),
                },
                running,
                waiting,
            }
        })
        .collect();
    let bucket_full = match profile.seconds_per_weight() {
        Some(spw) if spw > 0.0 => describe::round_to(bucket_s / spw, 3),
        _ => 0.0,
    };
    Timeline { bucket_s, bucket_full, threads, threads_left_out: left_out }
}

fn snippets(places: &[(&str, u32)], sources: &dyn SourceFiles) -> Vec<SourceSnippet> {
    let mut texts: HashMap<&str, Option<Vec<String>>> = HashMap::new();
    let mut out: Vec<SourceSnippet> = Vec::new();
    for &(file, line) in places {
        if line == 0 || out.iter().any(|s| s.file == file && s.line == line) {
            continue;
        }
        let text =
            texts.entry(file).or_insert_with(|| sources.read(file).map(|t| t.lines().map(str::to_owned).collect()));
        let Some(lines) = text else { continue };
        if line as usize > lines.len() {
            continue;
        }
        let first = line.saturating_sub(SOURCE_CONTEXT).max(1);
        let last = (line + SOURCE_CONTEXT).min(lines.len() as u32);
        out.push(SourceSnippet {
            file: file.to_owned(),
            line,
            first,
            text: lines[first as usize - 1..last as usize].to_vec(),
        });
    }
    out
}

/// The two runs' call trees merged by function name, each node holding both weights, in each
/// run's own mode. Function names, not lines or files: a fix moves lines and may live in a
/// renamed file (`app_slow.py`, `app_fixed.py`), and the graph must still line the two up.
fn diff_tree(a: &HtmlRun, b: &HtmlRun) -> Vec<DiffNode> {
    /// A node of the merged tree, its children by name, held in one list (index 0 the root) so
    /// that neither building, walking nor dropping it recurses.
    #[derive(Default)]
    struct Merged {
        a: u64,
        b: u64,
        children: BTreeMap<String, usize>,
    }
    fn add(merged: &mut Vec<Merged>, profile: &Profile, tree: &CallTree, side_b: bool) {
        let mut pending = vec![(CallTree::ROOT, 0usize)];
        while let Some((id, at)) = pending.pop() {
            let n = &tree.nodes[id];
            if side_b {
                merged[at].b += n.total;
            } else {
                merged[at].a += n.total;
            }
            for &c in &n.children {
                let label = tree.nodes[c].frame.map(|f| profile.frame(f).function.clone()).unwrap_or_default();
                let next = merged.len();
                let child = *merged[at].children.entry(label).or_insert(next);
                if child == next {
                    merged.push(Merged::default());
                }
                pending.push((c, child));
            }
        }
    }
    let mut merged = vec![Merged::default()];
    for (run, side_b) in [(a, false), (b, true)] {
        let mode = run.mode;
        // Idle threads (waiting for work) are left out: their waits would draw as the widest
        // change whenever the runs lasted differently, and are no cost of the work.
        // `build` asks about each sample once, in order: the count is the sample's index.
        let mut index = 0usize;
        let tree = CallTree::build(run.profile, |s| {
            let idle = run.diagnosis.idle_samples.contains(index);
            index += 1;
            mode.counts(s.state) && !idle
        });
        add(&mut merged, run.profile, &tree, side_b);
    }
    let min = |total: u64| ((total as f64 * MIN_NODE_FRACTION).ceil() as u64).max(1);
    let (min_a, min_b) = (min(merged[0].a), min(merged[0].b));
    // Preorder, children by name, each kept when it weighs enough in either run.
    let mut nodes = Vec::new();
    let mut pending = vec![("all".to_owned(), 0usize, 0usize)];
    while let Some((name, at, depth)) = pending.pop() {
        let m = &merged[at];
        nodes.push(DiffNode { name, a: m.a, b: m.b, d: depth });
        let kept: Vec<(String, usize)> = m
            .children
            .iter()
            .filter(|(_, &c)| merged[c].a >= min_a || merged[c].b >= min_b)
            .map(|(name, &c)| (name.clone(), c))
            .collect();
        pending.extend(kept.into_iter().rev().map(|(name, c)| (name, c, depth + 1)));
    }
    nodes
}
