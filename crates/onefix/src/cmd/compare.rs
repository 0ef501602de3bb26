//! `onefix compare A B`: is B faster than A, and which lines' cost went down or up?
//!
//! A and B are two load results (`onefix load --json`) or two recordings (`onefix record`).
//! Recordings are compared line by line: each is cut into time windows, each window is
//! diagnosed like a whole recording (the same frontier attribution as the report), and a
//! line's cost per window gives the samples of a Welch test. Recordings made with `--load`
//! also carry the load's result, which is compared as two load results are.

use onefix_model::fmt::escape_controls_keeping_lines;
use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use onefix_diagnose::compare::{
    compare_heaps, compare_lines, compare_runs, run_time_of, HeapComparison, LineComparison, RunComparison,
};
use onefix_diagnose::gate::{lines_slower_beyond, runs_slower_beyond, slower_beyond, SlowdownVerdict};
use onefix_load::compare::{self, Comparison};
use onefix_load::LoadResult;
use onefix_model::recording::read_recording;
use onefix_model::{Profile, WeightUnit};
use onefix_report::compare::{render_heaps, render_lines, render_runs};
use serde::Serialize;

use crate::cli::{CompareArgs, OutputArgs};
use crate::outputs;

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

/// What `--json` writes for two time recordings: the loads' comparison, when both were driven
/// by one, beside the lines'.
#[derive(Serialize)]
struct RecordingComparison {
    load: Option<Comparison>,
    /// Two runs that each went to their end, without a load: compared as whole runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<RunComparison>,
    #[serde(flatten)]
    lines: LineComparison,
}

/// The same for two memory recordings.
#[derive(Serialize)]
struct MemoryComparison {
    load: Option<Comparison>,
    #[serde(flatten)]
    heaps: HeapComparison,
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    if !args.commands.is_empty() {
        return super::timed_runs::run(args);
    }
    let (Some(path_a), Some(path_b)) = (args.a.clone(), args.b.clone()) else {
        bail!("give two recordings or load results to compare, or two commands after `--` (-- ./old ::: ./new)");
    };
    let view =
        OutputArgs { user_code: args.user_code.clone(), packages: args.packages.clone(), ..OutputArgs::default() };
    // The outputs are checked before the inputs are read; neither may land on an input.
    let json = args.json.as_deref().map(|p| crate::output::check(p, "comparison's JSON", false)).transpose()?;
    let html = args.html.as_deref().map(|p| crate::output::check(p, "HTML comparison", false)).transpose()?;
    let all: Vec<_> = json.iter().chain(html.iter()).collect();
    crate::output::check_distinct(&all, &[path_a.as_path(), path_b.as_path()])?;
    let (mut json, mut html) = (json, html);
    let (a, b) = (read_input(&path_a)?, read_input(&path_b)?);
    let (name_a, name_b) = (file_name(&path_a), file_name(&path_b));
    let mut html_done = false;
    let gate = args.fail_if_slower;
    let verdict = match (a, b) {
        (Input::Load(a), Input::Load(b)) => {
            let c = compare::compare(&a, &b);
            print!("{}", escape_controls_keeping_lines(&compare::render(&c, &a, &b, &name_a, &name_b)));
            write_json(json.take(), &c)?;
            gate.map(|limit| load_gate(&c, limit))
        }
        (Input::Recording(a), Input::Recording(b)) => match (a.meta.weight_unit, b.meta.weight_unit) {
            (WeightUnit::Bytes, WeightUnit::Bytes) => {
                let c = compare_memory(&a, &b, &name_a, &name_b);
                write_json(json.take(), &c)?;
                gate.map(|_| SlowdownVerdict {
                    fails: false,
                    sentence: "not judged: two memory recordings say how much memory, not how fast".to_owned(),
                })
            }
            (WeightUnit::Bytes, _) | (_, WeightUnit::Bytes) => {
                bail!("one recording tracks memory and the other time: compare two of the same kind")
            }
            _ => {
                let c = compare_recordings(&a, &b, &name_a, &name_b, &view)?;
                write_json(json.take(), &c)?;
                if let Some(out) = html.take() {
                    let verdicts = onefix_report::compare::verdicts(
                        c.runs.as_ref(),
                        c.load.as_ref().map(|l| format!("{} (judged on {})", l.verdict, l.primary)),
                        &c.lines,
                    );
                    let mut comparison = serde_json::to_value(&c).context("cannot describe the comparison")?;
                    comparison["verdicts"] = serde_json::json!(verdicts);
                    comparison["window_s"] = serde_json::json!(c.lines.window_s);
                    write_html_pair(out, (&a, &name_a), (&b, &name_b), &comparison)?;
                    html_done = true;
                }
                // A server by its load; a batch run by its run time; else (an attach, a run cut
                // short) by its lines' cost per window.
                gate.map(|limit| match (&c.load, &c.runs) {
                    (Some(load), _) => load_gate(load, limit),
                    (None, Some(runs)) => runs_slower_beyond(runs, limit),
                    (None, None) => lines_slower_beyond(&c.lines, limit),
                })
            }
        },
        _ => bail!("compare takes two recordings or two load results, not one of each"),
    };
    if args.html.is_some() && !html_done {
        crate::messages::say(format_args!(
            "--html shows two time recordings side by side; it was not written for these inputs"
        ));
    }
    if let (Some(limit), Some(v)) = (gate, verdict) {
        println!("\ngate (--fail-if-slower {}): {}", percent(limit), v.sentence);
        if v.fails {
            return Ok(ExitCode::from(crate::messages::GATE_FAILED));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn percent(fraction: f64) -> String {
    format!("{}%", (fraction * 1000.0).round() / 10.0)
}

/// Two loads are judged by the metric their verdict rests on (latency when both kept an open
/// loop's schedule, else throughput).
fn load_gate(c: &Comparison, limit: f64) -> SlowdownVerdict {
    let metric = if c.primary == "latency" { &c.latency } else { &c.throughput };
    let v = slower_beyond(metric, limit);
    SlowdownVerdict { fails: v.fails, sentence: format!("{} ({}): {}", c.primary, metric.name, v.sentence) }
}

/// The two recordings on one page, side by side, with their differential flame graph.
pub(crate) fn write_html_pair(
    out: crate::output::Output,
    (a, name_a): (&Profile, &str),
    (b, name_b): (&Profile, &str),
    comparison: &serde_json::Value,
) -> Result<()> {
    use onefix_report::{write_html_compared, FileSystemSources, HtmlRun};
    let (da, db) = (
        outputs::run_diagnosis(a, a.meta.mode, &OutputArgs::default()),
        outputs::run_diagnosis(b, b.meta.mode, &OutputArgs::default()),
    );
    let runs = [
        HtmlRun { label: name_a.to_owned(), profile: a, diagnosis: &da, mode: a.meta.mode, complete: true },
        HtmlRun { label: name_b.to_owned(), profile: b, diagnosis: &db, mode: b.meta.mode, complete: true },
    ];
    let shown = out.shown.display().to_string();
    let sources = FileSystemSources { cwd: a.meta.target.cwd.clone() };
    out.write_with(|w| write_html_compared(w, &runs, &sources, Some(comparison)))
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

/// The loads of two recordings that were both driven by one, compared, and printed.
fn compare_loads(a: &Profile, b: &Profile, name_a: &str, name_b: &str) -> Option<(Comparison, LoadResult, LoadResult)> {
    let (la, lb) = (load_of(a)?, load_of(b)?);
    let c = compare::compare(&la, &lb);
    println!("the loads:\n{}", escape_controls_keeping_lines(&compare::render(&c, &la, &lb, name_a, name_b)));
    Some((c, la, lb))
}

fn compare_recordings(
    a: &Profile,
    b: &Profile,
    name_a: &str,
    name_b: &str,
    view: &OutputArgs,
) -> Result<RecordingComparison> {
    let load = compare_loads(a, b, name_a, name_b);
    // Per request when both runs were driven by a load (their mean rate), else per second.
    let per_request = match &load {
        Some((_, la, lb)) if la.completed > 0 && lb.completed > 0 => Some((la.achieved_rps, lb.achieved_rps)),
        _ => None,
    };
    let (user_a, user_b) = (outputs::user_code(a, view), outputs::user_code(b, view));
    let kb = outputs::knowledge_base();
    let runs_possible = load.is_none() && run_time_of(a).is_some() && run_time_of(b).is_some();
    let lines = match compare_lines(a, b, kb, (&user_a, &user_b), per_request) {
        Ok(lines) => lines,
        // Two whole runs are judged by their run time however few samples they hold.
        Err(e) if runs_possible => LineComparison::none(format!("{e} (a run this short is judged by its run time)")),
        Err(e) => return Err(e.into()),
    };
    // A batch program's fix shows in its run time first.
    let window = (lines.not_compared.is_none()).then_some(lines.window_s);
    let runs = if load.is_none() { compare_runs(a, b, kb, (&user_a, &user_b), window) } else { None };
    if let Some(r) = &runs {
        println!("{}", escape_controls_keeping_lines(&render_runs(r, name_a, name_b)));
    }
    print!("{}", escape_controls_keeping_lines(&render_lines(&lines, name_a, name_b)));
    Ok(RecordingComparison { load: load.map(|l| l.0), runs, lines })
}

fn compare_memory(a: &Profile, b: &Profile, name_a: &str, name_b: &str) -> MemoryComparison {
    let load = compare_loads(a, b, name_a, name_b);
    let heaps = compare_heaps(a, b);
    print!("{}", escape_controls_keeping_lines(&render_heaps(&heaps, name_a, name_b)));
    MemoryComparison { load: load.map(|l| l.0), heaps }
}
