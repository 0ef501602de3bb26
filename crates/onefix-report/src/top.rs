//! `onefix top`'s screen: what the target is doing now (the last few seconds), redrawn every
//! second: the hottest lines of the user's code, the current findings, and each thread's state.

use std::io::{self, Write};

use onefix_diagnose::Diagnosis;
use onefix_model::Profile;

use crate::describe::{display_path, percent, percent_tenths, thousands};

/// What the screen says about the session as a whole, beside the window's diagnosis.
#[derive(Clone, Debug, Default)]
pub struct TopStatus {
    /// `python3 app.py — pid 4242` or `pid 4242 (attached)`.
    pub target: String,
    pub elapsed_s: f64,
    /// Observations since the start.
    pub samples: u64,
    pub errors: u64,
    /// Length of the window the diagnosis covers.
    pub window_s: f64,
    /// Set once the target has ended: the screen stays up until `q`.
    pub ended: Option<String>,
    /// Screen size.
    pub columns: usize,
    pub rows: usize,
}

/// Writes one screen: the caller clears the terminal first. `profile` holds the window's samples.
pub fn write_top<W: Write>(mut w: W, profile: &Profile, diagnosis: &Diagnosis, status: &TopStatus) -> io::Result<()> {
    let width = status.columns.max(40);
    let mut lines: Vec<String> = Vec::new();
    lines.push(format!(
        "onefix top: {} | {:.0} s, {} samples, {} read errors | q quits",
        status.target,
        status.elapsed_s,
        thousands(status.samples),
        thousands(status.errors)
    ));
    if let Some(ended) = &status.ended {
        lines.push(format!("the target {ended}; press q to quit"));
    }
    let cwd = profile.meta.target.cwd.as_deref();
    lines.push(String::new());
    lines.push(format!("hot lines of your code, last {:.0} s{}", status.window_s, share_of(diagnosis)));
    lines.push(format!("{:>6} {:>6} {:>7}  {}", "share", "self", "blocked", "line"));
    if diagnosis.hot_lines.is_empty() {
        lines.push("  (no sample in your code yet)".to_owned());
    }
    for h in diagnosis.hot_lines.iter().take(10) {
        let code = h.code.as_deref().map(str::trim).unwrap_or("");
        lines.push(format!(
            "{:>6} {:>6} {:>7}  {}:{}  {}  {}",
            percent_tenths(h.share),
            percent_tenths(h.self_share),
            percent_tenths(h.blocked_share),
            display_path(&h.file, cwd),
            h.line,
            h.function,
            code
        ));
    }
    lines.push(String::new());
    lines.push("findings".to_owned());
    if diagnosis.findings.is_empty() {
        lines.push("  (none yet)".to_owned());
    }
    for f in diagnosis.findings.iter().take(3) {
        lines.push(format!(
            "#{} {}:{} {:>4}  {}: {}",
            f.rank,
            display_path(&f.file, cwd),
            f.line,
            percent(f.share),
            f.kind,
            f.title
        ));
        lines.push(format!("     fix: {}", f.advice));
    }
    lines.push(String::new());
    lines.push(format!("threads, last {:.0} s", status.window_s));
    lines.push(format!("  {:<28} {:>8} {:>8}", "thread", "running", "waiting"));
    for (name, running, waiting) in thread_states(profile).into_iter().take(8) {
        let total = (running + waiting).max(1) as f64;
        lines.push(format!(
            "  {:<28} {:>8} {:>8}",
            truncate(&name, 28),
            percent(running as f64 / total),
            percent(waiting as f64 / total)
        ));
    }
    let rows = status.rows.max(10);
    for line in lines.iter().take(rows - 1) {
        writeln!(w, "{}", truncate(one_line(line).trim_end(), width))?;
    }
    w.flush()
}

fn share_of(d: &Diagnosis) -> String {
    if d.share_of.is_empty() {
        String::new()
    } else {
        format!(" (shares of the {})", d.share_of)
    }
}

/// Each thread's running and waiting weight in the window, busiest first.
fn thread_states(profile: &Profile) -> Vec<(String, u64, u64)> {
    let mut rows: Vec<(String, u64, u64)> = profile
        .threads()
        .iter()
        .map(|t| (t.name.clone().map_or_else(|| format!("thread {}", t.tid), |n| format!("{n} ({})", t.tid)), 0, 0))
        .collect();
    for s in &profile.samples {
        let row = &mut rows[s.thread as usize];
        if s.state.active() {
            row.1 += u64::from(s.weight);
        } else {
            row.2 += u64::from(s.weight);
        }
    }
    rows.retain(|r| r.1 + r.2 > 0);
    rows.sort_by(|a, b| (b.1 + b.2).cmp(&(a.1 + a.2)).then(a.0.cmp(&b.0)));
    rows
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut t: String = text.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A name or source line from the target may hold line breaks or control characters: on a
/// screen redrawn in place they would break the layout, so any run of line breaks and tabs
/// becomes one space, and every other control character is shown escaped.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut gap = false;
    for c in text.chars() {
        if c.is_whitespace() && c != ' ' {
            gap = true;
            continue;
        }
        if gap {
            out.push(' ');
            gap = false;
        }
        out.push(c);
    }
    onefix_model::fmt::escape_controls(&out).into_owned()
}
