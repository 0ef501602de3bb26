//! The memory diagnosis: charge every sampled allocation to the user's line at its frontier
//! (as the time diagnosis does), then name the lines whose retained bytes keep rising with
//! the work (memory-retention) and the lines that allocate much and keep nothing
//! (allocation-churn). When the allocating line assigns a name that a later line of the same
//! function stores into a longer-lived structure, the finding is that storing line: it is what
//! keeps the objects alive.

use std::collections::HashMap;
use std::path::Path;

use onefix_model::{FrameId, Profile, StackId};
use regex::Regex;
use serde::Deserialize;

use crate::names::{qualified_name, SourceCache};
use crate::origin::{Origin, UserCode};
use crate::{Diagnosis, Evidence, Finding, HotLine};

#[derive(Clone, Debug)]
pub struct MemoryOptions {
    /// Time windows over which growth is judged.
    pub windows: usize,
    /// A line retaining less than this share of the sampled heap at its peak is no finding.
    pub min_retained_share: f64,
    /// A retention finding grew in at least this fraction of the windows.
    pub min_growth: f64,
    /// A churn finding allocates at least this share of all bytes allocated...
    pub min_churn_share: f64,
    /// ...and keeps at most this fraction of what it allocated.
    pub max_churn_kept: f64,
    /// A line that did not grow but holds this share of the heap at its peak, and frees most of
    /// it afterwards, is the peak itself: data held whole...
    pub min_peak_share: f64,
    /// ...when it is at least this many bytes: a small heap's peak is nothing to fix.
    pub min_peak_bytes: u64,
    pub max_findings: usize,
    pub max_hot_lines: usize,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            windows: 10,
            min_retained_share: 0.10,
            min_growth: 0.4,
            min_churn_share: 0.20,
            max_churn_kept: 0.05,
            min_peak_share: 0.5,
            min_peak_bytes: 16 << 20,
            max_findings: 5,
            max_hot_lines: 12,
        }
    }
}

#[derive(Deserialize)]
struct Texts {
    retention: RetentionText,
    churn: LineText,
    peak: LineText,
}

#[derive(Deserialize)]
struct RetentionText {
    kind: crate::Kind,
    title: String,
    why_stored: String,
    why_allocated: String,
    advice: String,
}

#[derive(Deserialize)]
struct LineText {
    kind: crate::Kind,
    title: String,
    why: String,
    advice: String,
}

use crate::template::{fill, unknown_placeholders};

fn texts() -> Texts {
    let texts: Texts = toml::from_str(include_str!("../kb/memory/findings.toml"))
        .expect("the memory knowledge base is valid (tested)");
    if let Err(e) = texts.check_placeholders() {
        panic!("kb/memory/findings.toml: {e} (tested)");
    }
    texts
}

/// The placeholders the memory findings' texts may use, filled from the recording.
const PLACEHOLDERS: [&str; 10] = [
    "retained",
    "share",
    "growth",
    "windows",
    "alloc_line",
    "alloc_code",
    "holder_line",
    "allocated",
    "rate",
    "beneath",
];

impl Texts {
    fn check_placeholders(&self) -> Result<(), String> {
        let all = [
            ("retention.title", &self.retention.title),
            ("retention.why_stored", &self.retention.why_stored),
            ("retention.why_allocated", &self.retention.why_allocated),
            ("retention.advice", &self.retention.advice),
            ("churn.title", &self.churn.title),
            ("churn.why", &self.churn.why),
            ("churn.advice", &self.churn.advice),
            ("peak.title", &self.peak.title),
            ("peak.why", &self.peak.why),
            ("peak.advice", &self.peak.advice),
        ];
        for (field, text) in all {
            let unknown = unknown_placeholders(text, &PLACEHOLDERS);
            if !unknown.is_empty() {
                return Err(format!("{field} uses {{{}}}, which onefix does not fill", unknown.join("}, {")));
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct LineAcc {
    frame: FrameId,
    allocated: u64,
    /// Net bytes (allocations minus frees) per time window, up to the heap's peak.
    delta: Vec<i64>,
    retained: i64,
    /// Net bytes at the end of the recording: what the line still held when the target ended.
    live_at_end: i64,
    /// Retained bytes under each frame beneath the line, by qualified name.
    beneath: HashMap<String, (i64, String, u32)>,
    /// Retained bytes by the user frames that called the line (nearest first, up to
    /// [`crate::frontier::CALLERS_KEPT`]): where a value returned from a helper may be stored.
    callers: HashMap<Vec<FrameId>, i64>,
    /// Bytes allocated per time window (at any time): in how much of the run the line allocates.
    allocating: Vec<u64>,
}

/// How many user callers up a value returned from the allocating function is looked for.
use crate::frontier::Frontier;

/// Diagnoses a memory profile (weights in bytes, frees flagged; see onefix_model::memory).
pub fn diagnose_memory(profile: &Profile, user: &UserCode, opts: &MemoryOptions) -> Diagnosis {
    let peak = profile.peak_live_time_us();
    let windows = opts.windows.max(2);
    let window_us = (peak / windows as u64).max(1);
    let mut frontier: HashMap<Option<StackId>, Option<Frontier>> = HashMap::new();
    let mut lines: HashMap<FrameId, LineAcc> = HashMap::new();
    let (mut total_allocated, mut total_retained, mut outside) = (0u64, 0i64, 0i64);
    for s in &profile.samples {
        let f = frontier.entry(s.stack).or_insert_with(|| frontier_of(profile, user, s.stack)).clone();
        let w = s.weight as i64;
        let signed = if s.state.freed() { -w } else { w };
        if !s.state.freed() {
            total_allocated += s.weight as u64;
        }
        let at_peak = s.time_us <= peak;
        if at_peak {
            total_retained += signed;
        }
        let Some(Frontier { frame, beneath, callers, .. }) = f else {
            if at_peak {
                outside += signed;
            }
            continue;
        };
        let acc = lines.entry(frame).or_insert_with(|| LineAcc {
            frame,
            delta: vec![0; windows],
            allocating: vec![0; windows],
            ..LineAcc::default()
        });
        let k = ((s.time_us / window_us) as usize).min(windows - 1);
        if !s.state.freed() {
            acc.allocated += s.weight as u64;
            acc.allocating[k] += s.weight as u64;
        }
        acc.live_at_end += signed;
        if at_peak {
            acc.retained += signed;
            acc.delta[k] += signed;
            *acc.callers.entry(callers).or_default() += signed;
            // The library frame right beneath the line says what allocates ("parse_qs").
            if let Some(&below) = beneath.last() {
                let fr = profile.frame(below);
                let e = acc.beneath.entry(qualified_name(fr)).or_insert((0, fr.file.clone(), fr.line));
                e.0 += signed;
            }
        }
    }
    let total_retained = total_retained.max(0) as u64;
    let texts = texts();
    let mut sources = SourceCache::default();
    let mut ranked: Vec<&LineAcc> = lines.values().collect();
    ranked.sort_by(|a, b| b.retained.cmp(&a.retained).then(b.allocated.cmp(&a.allocated)).then(a.frame.cmp(&b.frame)));

    let mut findings = Vec::new();
    for acc in &ranked {
        let share = if total_retained > 0 { acc.retained.max(0) as f64 / total_retained as f64 } else { 0.0 };
        if share < opts.min_retained_share || findings.len() >= opts.max_findings {
            continue;
        }
        let grew = growth_windows(&acc.delta);
        if (grew as f64) < opts.min_growth * windows as f64 {
            if share >= opts.min_peak_share
                && acc.retained >= opts.min_peak_bytes as i64
                && acc.live_at_end * 2 <= acc.retained
            {
                findings.push(peak_finding(profile, user, &mut sources, acc, share, &texts.peak));
            }
            continue;
        }
        let frame = profile.frame(acc.frame);
        let path = user.resolve(&frame.file);
        let alloc_code = path.as_deref().and_then(|p| sources.line(p, frame.line));
        let holder = path
            .as_deref()
            .zip(alloc_code.as_deref())
            .and_then(|(p, code)| holder_of(&mut sources, p, frame.line, code))
            .map(|(l, c)| (frame.file.clone(), frame.function.clone(), l, c))
            .or_else(|| holder_in_callers(profile, user, &mut sources, acc));
        let beneath = beneath_clause(acc, 0);
        let values = [
            ("retained", bytes(acc.retained.max(0) as u64)),
            ("share", percent(share)),
            ("growth", grew.to_string()),
            ("windows", windows.to_string()),
            ("alloc_line", frame.line.to_string()),
            ("alloc_code", alloc_code.clone().unwrap_or_default()),
            ("beneath", beneath),
        ];
        let t = &texts.retention;
        let (file, function, line, code, why) = match &holder {
            Some((f, func, l, c)) => (f.clone(), func.clone(), *l, Some(c.clone()), fill(&t.why_stored, &values)),
            None => (
                frame.file.clone(),
                frame.function.clone(),
                frame.line,
                alloc_code.clone(),
                fill(&t.why_allocated, &values),
            ),
        };
        // Two allocating lines stored by one line (or one line seen as two frames, a
        // generator's and its function's) are one finding.
        if let Some(same) =
            findings.iter_mut().find(|f: &&mut Finding| f.kind == t.kind && f.file == file && f.line == line)
        {
            same.share += share;
            continue;
        }
        let mut evidence = Vec::new();
        if holder.is_some() {
            evidence.push(Evidence {
                frame: format!("allocated at line {}", frame.line),
                file: frame.file.clone(),
                line: frame.line,
                share,
            });
        }
        evidence.extend(top_beneath(acc, total_retained));
        findings.push(Finding {
            rank: 0,
            kind: t.kind,
            file,
            line,
            function,
            code,
            share,
            max_speedup: None,
            bound_weight: 0,
            title: fill(&t.title, &values),
            advice: t.advice.clone(),
            why,
            evidence,
            recurrence: Some(grew as f64 / windows as f64),
            rule: "memory-growth".into(),
            explained: 1.0,
            enclosing_loop: None,
            gain_basis: crate::GainBasis::None,
            what: String::new(),
            no_bound: None,
            modelled_range: None,
        });
    }

    let duration_s = (profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0) as f64 / 1e6).max(1e-3);
    let mut churners: Vec<&LineAcc> = lines.values().collect();
    churners.sort_by(|a, b| b.allocated.cmp(&a.allocated).then(a.frame.cmp(&b.frame)));
    for acc in churners {
        if findings.len() >= opts.max_findings || total_allocated == 0 {
            break;
        }
        let share = acc.allocated as f64 / total_allocated as f64;
        let kept = acc.retained.max(0) as f64 / acc.allocated.max(1) as f64;
        if share < opts.min_churn_share || kept > opts.max_churn_kept {
            continue;
        }
        let frame = profile.frame(acc.frame);
        if findings.iter().any(|f| f.file == frame.file && f.line == frame.line) {
            continue;
        }
        let values = [
            ("allocated", bytes(acc.allocated)),
            ("share", percent(share)),
            ("rate", format!("{}/s", bytes((acc.allocated as f64 / duration_s) as u64))),
            ("beneath", beneath_clause(acc, 1)),
        ];
        findings.push(allocating_line_finding(
            profile,
            user,
            &mut sources,
            acc,
            share,
            &texts.churn,
            &values,
            "memory-churn",
        ));
    }
    for (i, f) in findings.iter_mut().enumerate() {
        f.rank = i + 1;
    }

    let hot_lines = ranked
        .iter()
        .filter(|a| a.retained > 0)
        .take(opts.max_hot_lines)
        .map(|a| {
            let frame = profile.frame(a.frame);
            let share = a.retained as f64 / total_retained.max(1) as f64;
            HotLine {
                file: frame.file.clone(),
                line: frame.line,
                function: frame.function.clone(),
                code: user.resolve(&frame.file).and_then(|p| sources.line(&p, frame.line)),
                weight: a.retained as u64,
                share,
                self_share: 0.0,
                blocked_share: 0.0,
            }
        })
        .collect();
    let mut notes = Vec::new();
    if total_retained > 0 && outside > 0 {
        notes.push(crate::Note::Said(format!(
            "{} of the sampled heap at its peak was allocated outside your code (start-up, libraries, the runtime)",
            percent(outside as f64 / total_retained as f64)
        )));
    }
    notes.push(crate::Note::Said(format!(
        "{} allocated during the recording; {} sampled bytes live at the heap's peak",
        bytes(total_allocated),
        bytes(total_retained)
    )));
    Diagnosis {
        share_of: "sampled heap at its peak (retained bytes)".into(),
        total_weight: total_retained,
        busy_weight: total_retained,
        idle_weight: 0,
        outside_user_weight: outside.max(0) as u64,
        seconds_per_weight: None,
        findings,
        hot_lines,
        notes,
        idle_samples: Default::default(),
    }
}

/// A line that is the heap's peak by itself: allocated in a burst, freed afterwards.
fn peak_finding(
    profile: &Profile,
    user: &UserCode,
    sources: &mut SourceCache,
    acc: &LineAcc,
    share: f64,
    t: &LineText,
) -> Finding {
    let values = [
        ("retained", bytes(acc.retained.max(0) as u64)),
        ("share", percent(share)),
        ("beneath", beneath_clause(acc, 1)),
    ];
    allocating_line_finding(profile, user, sources, acc, share, t, &values, "memory-peak")
}

/// A finding at the line that allocates, worded from `t` with `values`. Its recurrence is the
/// share of windows in which the line allocates at all (a churning line's net change is about
/// nil, by definition).
#[allow(clippy::too_many_arguments)]
fn allocating_line_finding(
    profile: &Profile,
    user: &UserCode,
    sources: &mut SourceCache,
    acc: &LineAcc,
    share: f64,
    t: &LineText,
    values: &[(&str, String)],
    rule: &str,
) -> Finding {
    let frame = profile.frame(acc.frame);
    Finding {
        rank: 0,
        kind: t.kind,
        file: frame.file.clone(),
        line: frame.line,
        function: frame.function.clone(),
        code: user.resolve(&frame.file).and_then(|p| sources.line(&p, frame.line)),
        share,
        max_speedup: None,
        bound_weight: 0,
        title: fill(&t.title, values),
        advice: t.advice.clone(),
        why: fill(&t.why, values),
        evidence: Vec::new(),
        recurrence: Some(acc.allocating.iter().filter(|a| **a > 0).count() as f64 / acc.allocating.len().max(1) as f64),
        rule: rule.into(),
        explained: 1.0,
        enclosing_loop: None,
        gain_basis: crate::GainBasis::None,
        what: String::new(),
        no_bound: None,
        modelled_range: None,
    }
}

fn frontier_of(profile: &Profile, user: &UserCode, stack: Option<StackId>) -> Option<Frontier> {
    let leaf_first: Vec<FrameId> = profile.stack_frames_leaf_first(stack).collect();
    Frontier::of(&leaf_first, |f| user.origin(profile.frame(f)) == Origin::User)
}

/// The line that stores what a helper allocated and returned: through the user callers that
/// retain most of the line's bytes, nearest first, a call site that stores the result itself
/// (`cache[key] = build(req)`), or assigns it to a name a later line stores
/// (`view = build(req)` ... `cache[key] = view`). As (file, function, line, code).
fn holder_in_callers(
    profile: &Profile,
    user: &UserCode,
    sources: &mut SourceCache,
    acc: &LineAcc,
) -> Option<(String, String, u32, String)> {
    let (chain, _) =
        acc.callers.iter().filter(|(c, w)| !c.is_empty() && **w > 0).max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    for &c in chain {
        let frame = profile.frame(c);
        let path = user.resolve(&frame.file)?;
        let code = sources.line(&path, frame.line)?;
        let found = if stores(&code) {
            Some((frame.line, code.trim().to_owned()))
        } else {
            holder_of(sources, &path, frame.line, &code)
        };
        if let Some((line, text)) = found {
            return Some((frame.file.clone(), frame.function.clone(), line, text));
        }
    }
    None
}

/// A subscript or attribute assignment, or a call that adds to a container.
fn store_pattern() -> Regex {
    Regex::new(
        r"(\]\s*=[^=]|\.\w+\s*=[^=]|->\w+\s*=[^=]|\.(append|add|insert|setdefault|extend|push|push_back|put)\s*\()",
    )
    .unwrap()
}

/// Whether a line stores something into a longer-lived structure.
fn stores(code: &str) -> bool {
    let t = code.trim();
    !t.starts_with('#') && !t.starts_with("//") && store_pattern().is_match(t)
}

/// Windows in which the line's retained bytes rose.
fn growth_windows(delta: &[i64]) -> usize {
    delta.iter().filter(|d| **d > 0).count()
}

fn beneath_clause(acc: &LineAcc, min: usize) -> String {
    let mut names: Vec<(&String, &(i64, String, u32))> = acc.beneath.iter().filter(|(_, v)| v.0 > 0).collect();
    names.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    if names.len() < min.max(1) {
        return String::new();
    }
    format!(", mostly in {}", names.iter().take(2).map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(" and "))
}

fn top_beneath(acc: &LineAcc, total: u64) -> Vec<Evidence> {
    let mut v: Vec<Evidence> = acc
        .beneath
        .iter()
        .filter(|(_, e)| e.0 > 0)
        .map(|(name, e)| Evidence {
            frame: name.clone(),
            file: e.1.clone(),
            line: e.2,
            share: e.0 as f64 / total.max(1) as f64,
        })
        .collect();
    v.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.frame.cmp(&b.frame)));
    v.truncate(3);
    v
}

/// The line after `line`, in the same function, that stores the name `code` assigns into a
/// longer-lived structure: a subscript or attribute assignment, or an append/add/insert call,
/// whose value mentions the name. Python and C-like syntax alike.
fn holder_of(sources: &mut SourceCache, path: &Path, line: u32, code: &str) -> Option<(u32, String)> {
    let assign = Regex::new(r"^\s*(?:[A-Za-z_][\w\s\*]*?[\s\*])?([A-Za-z_]\w*)\s*(?::[^=]+)?=[^=]").ok()?;
    let name = assign.captures(code)?.get(1)?.as_str().to_owned();
    // The name itself, not a field or element of it (`r->body_len`, `r.size`, `r[0]`).
    let word = Regex::new(&format!(r"\b{}\b(?:[^.\[\w-]|-[^>]|$)", regex::escape(&name))).ok()?;
    let store = store_pattern();
    let lines = sources.lines(path)?;
    let start = line as usize;
    let indent = |s: &str| s.len() - s.trim_start().len();
    let own = indent(lines.get(start - 1)?);
    for (i, text) in lines.iter().enumerate().skip(start).take(60) {
        let t = text.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("//") {
            continue;
        }
        // Left the function: a line less indented that starts a definition or closes a block.
        if indent(text) < own
            && (t.starts_with("def ") || t.starts_with("async def ") || t.starts_with("class ") || t == "}")
        {
            return None;
        }
        if indent(text) == 0 && own > 0 {
            return None;
        }
        let Some(m) = store.find(t) else { continue };
        // The name must be what is stored (after the store), not just the container.
        if word.is_match(&t[m.start()..])
            && !Regex::new(&format!(r"^\s*{}\s*=", regex::escape(&name))).ok()?.is_match(t)
        {
            return Some((i as u32 + 1, t.to_owned()));
        }
    }
    None
}

use onefix_model::fmt::bytes;

fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
