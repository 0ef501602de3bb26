//! Reporting a memory recording: its diagnosis with the facts beyond the samples (RSS, child
//! processes, how Python objects were seen), and its JSON with a `memory` object. Shared by
//! `record --memory` and `report`.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use onefix_diagnose::{diagnose_memory, Diagnosis, MemoryOptions as DiagnoseOptions, Note};
use onefix_model::{MemoryInfo, MemoryView, Mode, Profile};
use onefix_report::{write_json, JsonOptions};

use crate::cli::{MemoryViewArg, OutputArgs};
use crate::outputs;

/// Where recordings made before the facts were attached kept them: beside the file.
pub fn info_path(recording: &Path) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(".memory.json");
    PathBuf::from(name)
}

pub fn read_info(recording: &Path) -> Option<MemoryInfo> {
    let text = std::fs::read_to_string(info_path(recording)).ok()?;
    serde_json::from_str(&text).ok()
}

fn view_of(arg: MemoryViewArg) -> MemoryView {
    match arg {
        MemoryViewArg::Retained => MemoryView::Retained,
        MemoryViewArg::Allocated => MemoryView::Allocated,
    }
}

/// Diagnoses a memory recording and writes every output: the flame graph, speedscope and
/// folded stacks weigh the chosen view; the JSON report adds a `memory` object.
pub fn report(
    profile: &Profile,
    info: Option<&MemoryInfo>,
    view: MemoryViewArg,
    args: &OutputArgs,
    mut planned: outputs::Planned,
    complete: bool,
) -> Result<Diagnosis> {
    let user = outputs::user_code(profile, args);
    // A child that exited took its heap with it: the target's heap is that of the processes
    // that lasted; the children are told apart in a note.
    let lasting;
    let profile = match info.filter(|i| !i.exited_children.is_empty()) {
        Some(i) => {
            lasting = profile.only_processes(|pid| i.exited_children.binary_search(&pid).is_err());
            &lasting
        }
        None => profile,
    };
    let mut diagnosis = diagnose_memory(profile, &user, &DiagnoseOptions::default());
    if let Some(info) = info {
        add_notes(&mut diagnosis, info);
    }
    let shown = profile.memory_view(view_of(view));
    if let Some(out) = planned.json.take() {
        let shown_at = out.shown.display().to_string();
        write_memory_json(out, &shown, &diagnosis, info, view, complete)
            .with_context(|| format!("could not write the JSON report to {shown_at}"))?;
    }
    outputs::write_all(&shown, &diagnosis, Mode::Wall, planned, complete)?;
    Ok(diagnosis)
}

fn add_notes(d: &mut Diagnosis, info: &MemoryInfo) {
    let mut leading: Vec<String> = Vec::new();
    let mut said: Vec<String> = Vec::new();
    if let Some(peak) = info.peak_rss_bytes {
        let (first, last) = (info.rss.first(), info.rss.last());
        let over = match (first, last) {
            (Some(a), Some(b)) if info.rss.len() > 1 => format!(
                "; RSS went from {} to {} over {:.1} s",
                mb(a.rss_bytes),
                mb(b.rss_bytes),
                (b.time_us - a.time_us) as f64 / 1e6
            ),
            _ => String::new(),
        };
        leading.push(format!("peak RSS of the target: {}{over}", mb(peak)));
    }
    match (info.python_frames, info.python_malloc.as_deref()) {
        (true, Some("malloc")) if info.python_malloc_by_onefix => said.push(
            "Python objects were tracked through PYTHONMALLOC=malloc, set by onefix (pymalloc's arenas hide small objects from the allocator; this costs the target about a third more CPU)"
                .into(),
        ),
        (true, Some(v)) if !v.starts_with("malloc") => said.push(format!(
            "PYTHONMALLOC={v} was kept as you set it: objects of 512 bytes or less come from pymalloc's 1 MiB arenas, which are sampled as mmaps and charged to the line that needed a new arena; unset PYTHONMALLOC to see every object"
        )),
        _ => {}
    }
    if !info.exited_children.is_empty() {
        let n = info.exited_children.len();
        let largest = info.children_peak_bytes.iter().max().copied().unwrap_or(0);
        said.push(format!(
            "{n} child process{} exited during the recording: each one's heap was its own and ended with it, so it is not counted above (the largest child heap peaked at {} sampled)",
            if n == 1 { "" } else { "es" },
            mb(largest)
        ));
    }
    if info.untracked > 0 {
        said.push(format!(
            "{} sampled allocations could not be followed to their free: retained bytes are overestimated",
            info.untracked
        ));
    }
    d.notes.splice(0..0, leading.into_iter().map(Note::Said));
    d.notes.extend(said.into_iter().map(Note::Said));
}

use onefix_model::fmt::bytes as mb;

fn write_memory_json(
    out: crate::output::Output,
    profile: &Profile,
    d: &Diagnosis,
    info: Option<&MemoryInfo>,
    view: MemoryViewArg,
    complete: bool,
) -> Result<()> {
    let mut buf = Vec::new();
    write_json(&mut buf, profile, d, &JsonOptions { complete })?;
    let mut value: serde_json::Value = serde_json::from_slice(&buf)?;
    let mut memory = serde_json::to_value(info.cloned().unwrap_or_default())?;
    memory["view"] = serde_json::Value::String(match view {
        MemoryViewArg::Retained => "retained".into(),
        MemoryViewArg::Allocated => "allocated".into(),
    });
    value["memory"] = memory;
    out.write_with(|w| serde_json::to_writer_pretty(w, &value).map_err(io::Error::from))?;
    Ok(())
}
