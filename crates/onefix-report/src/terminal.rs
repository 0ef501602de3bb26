//! The human summary: what was recorded, then the findings (the line, its cost, what lies
//! beneath it, the fix, the bound on the gain), then the hot lines, the notes and any doubt
//! about the sampling. Every word about the target comes from the profile or the diagnosis.

use std::io::{self, BufWriter, Write};

use onefix_diagnose::{Diagnosis, Finding, HotLine};
use onefix_model::fmt::escape_controls;
use onefix_model::{Mode, Profile, WeightUnit};

use crate::describe::{self, display_path, percent, percent_tenths, thousands};

/// Lines are wrapped to this many columns when the terminal's width is not known: wide enough
/// for a source line beside its location, narrow enough for a split terminal.
pub const DEFAULT_WIDTH: usize = 100;
/// A finding's share is right-aligned this many columns before the width.
const FINDING_SHARE_MARGIN: usize = 20;
/// Indentation of the lines under a finding's headline.
const INDENT: &str = "    ";
/// How many evidence frames a finding names.
const EVIDENCE_SHOWN: usize = 3;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalOptions {
    /// Add ANSI colours and bold.
    pub color: bool,
    /// Whether the recording was read to its end (see [`crate::JsonOptions::complete`]).
    pub complete: bool,
    pub max_findings: usize,
    pub max_hot_lines: usize,
    /// Columns to fit: the terminal's width (see [`DEFAULT_WIDTH`]).
    pub width: usize,
}

impl Default for TerminalOptions {
    fn default() -> TerminalOptions {
        TerminalOptions { color: false, complete: true, max_findings: 3, max_hot_lines: 10, width: DEFAULT_WIDTH }
    }
}

/// Writes the summary, about 40 lines for a typical run.
pub fn write_terminal<W: Write>(
    w: W,
    profile: &Profile,
    diagnosis: &Diagnosis,
    opts: &TerminalOptions,
) -> io::Result<()> {
    let summary = Summary {
        profile,
        diagnosis,
        opts,
        style: Style { color: opts.color },
        cwd: profile.meta.target.cwd.as_deref(),
    };
    let mut out = BufWriter::new(w);
    for line in summary.lines() {
        // Without colour no escape sequence of onefix's own is in a line: none may be there at all.
        let line = if opts.color { std::borrow::Cow::Borrowed(line.as_str()) } else { escape_controls(&line) };
        writeln!(out, "{line}")?;
    }
    out.flush()
}

struct Summary<'a> {
    profile: &'a Profile,
    diagnosis: &'a Diagnosis,
    opts: &'a TerminalOptions,
    style: Style,
    cwd: Option<&'a str>,
}

impl Summary<'_> {
    fn lines(&self) -> Vec<String> {
        let mut lines = self.header();
        lines.push(String::new());
        lines.extend(self.findings());
        lines.extend(self.hot_lines());
        let notes: Vec<String> = self
            .diagnosis
            .notes
            .iter()
            .flat_map(|note| wrap(&note.to_string(), "note: ", "      ", self.opts.width))
            .chain(self.sampling_doubts())
            .collect();
        if !notes.is_empty() {
            lines.push(String::new());
            lines.extend(notes);
        }
        lines
    }

    fn time_profile(&self) -> bool {
        matches!(self.profile.meta.weight_unit, WeightUnit::Samples { .. })
    }

    fn header(&self) -> Vec<String> {
        let meta = &self.profile.meta;
        let what = if self.time_profile() {
            format!("{} mode, {}", meta.mode.as_str(), describe::hertz(meta.rate_hz))
        } else {
            format!("allocations, {}", describe::bytes(self.diagnosis.total_weight))
        };
        let mut target = match (&meta.target.argv, self.profile.imported_from()) {
            // Pid 0 is no process: a profile assembled from many (a fleet's aggregate).
            (Some(_), _) if meta.target.pid == 0 => describe::command_line(&meta.target),
            (Some(_), _) => format!("{} — pid {}", describe::command_line(&meta.target), meta.target.pid),
            (None, Some(from)) => format!("a {} read from {}", from.format, escape_controls(&from.source)),
            (None, None) => format!("pid {} (attached)", meta.target.pid),
        };
        if let Some(exit) = &meta.exit {
            target.push_str(", ");
            target.push_str(&describe::exit_clause(exit));
        }
        // A profile imported from a format without a duration (folded stacks) says none.
        let over = if meta.duration_s > 0.0 || self.profile.imported_from().is_none() {
            format!(" over {}", describe::seconds(meta.duration_s))
        } else {
            String::new()
        };
        let first = format!("onefix: {} samples{over} ({what}) of {target}", thousands(self.profile.sample_count()));
        let mut lines = vec![self.style.bold(&first)];

        let mut context = Vec::new();
        if !self.diagnosis.share_of.is_empty() {
            context.push(format!("shares are of the {}", self.diagnosis.share_of));
        }
        if self.diagnosis.idle_weight > 0 && self.diagnosis.total_weight > 0 {
            let idle = self.diagnosis.idle_weight as f64 / self.diagnosis.total_weight as f64;
            context.push(format!("{} of {} was threads idle for want of work", percent(idle), self.time_name()));
        }
        if !context.is_empty() {
            lines.extend(wrap(&context.join("; "), "", "", self.opts.width));
        }
        if !self.opts.complete {
            lines.push(self.style.yellow(
                "the recording ends early (the profiler stopped before writing its end): \
                 this covers what was recorded",
            ));
        }
        lines
    }

    /// `wall time`, `CPU time` or `bytes`: what the recording's weight measures.
    fn time_name(&self) -> &'static str {
        match (self.time_profile(), self.profile.meta.mode) {
            (false, _) => "the bytes",
            (true, Mode::Wall) => "wall time",
            (true, Mode::Cpu) => "CPU time",
        }
    }

    fn findings(&self) -> Vec<String> {
        let findings = &self.diagnosis.findings;
        if findings.is_empty() {
            let mut lines = wrap(
                &format!(
                    "no findings: no line matched a known costly pattern; the hot lines below show where the {} went",
                    self.diagnosis.share_of
                ),
                "",
                "",
                self.opts.width,
            );
            lines.push(String::new());
            return lines;
        }
        let mut lines = Vec::new();
        for finding in findings.iter().take(self.opts.max_findings) {
            lines.extend(self.finding(finding));
            lines.push(String::new());
        }
        let hidden = findings.len().saturating_sub(self.opts.max_findings);
        if hidden > 0 {
            let plural = if hidden == 1 { "" } else { "s" };
            lines.push(format!("… and {hidden} more finding{plural}"));
            lines.push(String::new());
        }
        lines
    }

    fn finding(&self, f: &Finding) -> Vec<String> {
        let rank = format!("#{}", f.rank);
        let location = one_line(&format!("{}:{}", display_path(&f.file, self.cwd), f.line));
        let share = percent(f.share);
        let lead = format!("{rank:<3} {location}  ");
        let room = (self.opts.width.saturating_sub(FINDING_SHARE_MARGIN))
            .saturating_sub(lead.chars().count() + share.chars().count() + 2);
        let what = truncate_end(&source_or_function(f.code.as_deref(), &f.function), room);
        let pad = room.saturating_sub(what.chars().count()) + 2;
        let mut lines =
            vec![format!("{}{}{}{}", self.style.bold(&lead), what, " ".repeat(pad), self.style.red(&share))];

        // A statement too long for the headline is shown whole beneath it.
        let whole = source_or_function(f.code.as_deref(), &f.function);
        if what.chars().count() < whole.chars().count() {
            lines.extend(wrap(&whole, &format!("{INDENT}line: "), &format!("{INDENT}      "), self.opts.width));
        }
        lines.extend(wrap(
            &f.why,
            &format!("{INDENT}{}: ", self.style.yellow(f.kind.as_str())),
            INDENT,
            self.opts.width,
        ));
        if !f.evidence.is_empty() {
            let under: Vec<String> =
                f.evidence.iter().take(EVIDENCE_SHOWN).map(|e| format!("{} {}", e.frame, percent(e.share))).collect();
            lines.extend(wrap(
                &under.join(", "),
                &format!("{INDENT}under it (of this line's time): "),
                INDENT,
                self.opts.width,
            ));
        }
        // A profile without sample times cannot tell when the line ran: nothing is said.
        let seen =
            f.recurrence.map(|r| format!("{INDENT}seen in {} of time windows: {}", percent(r), recurrence_reading(r)));
        match (seen, &f.enclosing_loop) {
            (Some(seen), Some(enclosing)) => {
                lines.push(format!("{seen:<62}  (inside the loop at {})", self.display_location(enclosing)))
            }
            (Some(seen), None) => lines.push(seen),
            (None, Some(enclosing)) => {
                lines.push(format!("{INDENT}inside the loop at {}", self.display_location(enclosing)))
            }
            (None, None) => {}
        }
        lines.extend(wrap(&f.advice, &format!("{INDENT}{} ", self.style.green("fix:")), INDENT, self.opts.width));
        if let Some(bound) = f.max_speedup.filter(|x| x.is_finite()) {
            let gain = match (self.time_profile(), f.gain_basis) {
                (false, _) => "less memory",
                // Read off the run's critical path: the time of the whole run, not a share.
                (true, onefix_diagnose::GainBasis::CriticalPath) => "faster end to end (on the run's critical path)",
                // A server under an open-loop load: its requests' mean latency, queue included.
                (true, onefix_diagnose::GainBasis::LatencyModel) => {
                    "faster per request (mean latency at this load, its queue included)"
                }
                (true, _) => "faster",
            };
            // Serial waits do not go away when fixed: they overlap, and the slowest stays.
            let what_if = match f.gain_basis {
                onefix_diagnose::GainBasis::WorkSpan => "if the calls overlapped",
                _ => "if this cost went away",
            };
            // Past 100x the figure rests on a handful of samples outside the line.
            let mut gain = match bound {
                b if b > 100.0 => format!("{INDENT}{what_if}: more than 100x {gain}"),
                b => format!("{INDENT}{what_if}: up to {b:.1}x {gain}"),
            };
            // A bound over the stretch of the run that repeats the line (start-up left out) is
            // more than the headline share gives: say which part of the run it is of.
            let whole_run_bound = if f.share < 1.0 { 1.0 / (1.0 - f.share) } else { f64::INFINITY };
            if self.time_profile()
                && f.gain_basis == onefix_diagnose::GainBasis::BusyShare
                && bound > 1.1 * whole_run_bound
            {
                let part = (1.0 - 1.0 / bound) * 100.0;
                let part = if part >= 99.5 { format!("{part:.1}") } else { format!("{part:.0}") };
                gain.push_str(&format!(
                    " (over the part of the run that repeats the line, after start-up, where it is {part}% of the time, not {:.0}%)",
                    f.share * 100.0
                ));
            }
            // A program onefix started ran its start-up before the first sample: the bound
            // counts it as what stays, so it is less than the headline share gives.
            if let Some(start) = self
                .profile
                .program_start()
                .filter(|_| f.gain_basis == onefix_diagnose::GainBasis::BusyShare && bound < 0.9 * whole_run_bound)
            {
                gain.push_str(&format!(
                    " (the program's start-up, {:.2} s before the first sample, stays)",
                    start.unsampled_us as f64 / 1e6
                ));
            }
            // Near a share of 1 the bound rests on the few samples outside the line: say how
            // far sampling alone could move it when that is more than a tenth.
            match f.speedup_range() {
                Some((lo, None)) => gain.push_str(&format!(
                    "; this line is nearly all the time, so the samples outside it are too few to say more than at least {lo:.0}x"
                )),
                Some((lo, Some(hi))) if bound > 100.0 && (lo < 0.9 * bound || hi > 1.1 * bound) => gain.push_str(
                    &format!("; this line is nearly all the time, so the few samples outside it leave anywhere from {lo:.0}x to {hi:.0}x possible"),
                ),
                Some((lo, Some(hi))) if lo < 0.9 * bound || hi > 1.1 * bound => gain.push_str(&format!(
                    " (with this many samples, anywhere from {lo:.1}x to {hi:.1}x)"
                )),
                _ => {}
            }
            lines.push(gain);
        } else if self.time_profile() && f.gain_basis != onefix_diagnose::GainBasis::None {
            // No bound: say why rather than leave the line out.
            let why = if let Some(why) = &f.no_bound {
                why.as_str()
            } else if f.kind == onefix_diagnose::Kind::SerialIo {
                "the waits are nearly all of the run; overlapping them gains about as many times as calls can run at once, and the slowest call stays, which samples cannot count"
            } else {
                "the line is nearly all of the run, so the gain is set by what would stay, too little of it was sampled to measure"
            };
            lines.extend(wrap(
                &format!("no bound from the samples: {why}"),
                &format!("{INDENT}if this cost went away: "),
                INDENT,
                self.opts.width,
            ));
        }
        lines
    }

    /// A `file:line` from the diagnosis, with the file shortened like every other location.
    fn display_location(&self, location: &str) -> String {
        match location.rsplit_once(':') {
            Some((file, line)) => one_line(&format!("{}:{line}", display_path(file, self.cwd))),
            None => one_line(location),
        }
    }

    fn hot_lines(&self) -> Vec<String> {
        let all = &self.diagnosis.hot_lines;
        if all.is_empty() {
            return vec!["hot lines: no sample landed in user code".to_owned()];
        }
        let shown = &all[..all.len().min(self.opts.max_hot_lines)];
        let blocked_column = self.time_profile() && self.profile.meta.mode == Mode::Wall;
        let table = HotLineTable::new(shown, self.cwd, blocked_column, self.opts.width);
        let mut lines = vec![self.style.dim(&table.header())];
        lines.extend(shown.iter().map(|h| table.row(h)));
        let hidden = all.len() - shown.len();
        if hidden > 0 {
            lines.push(format!("  … and {hidden} more"));
        }
        lines
    }

    fn sampling_doubts(&self) -> Option<String> {
        let stats = &self.profile.meta.stats;
        if stats.errors == 0 && stats.late == 0 {
            return None;
        }
        let mut parts = Vec::new();
        if stats.errors > 0 {
            let rate = if stats.ticks > 0 {
                format!(" ({})", percent_tenths(stats.errors as f64 / stats.ticks as f64))
            } else {
                String::new()
            };
            parts.push(format!("{} of {} reads failed{rate}", thousands(stats.errors), thousands(stats.ticks)));
        }
        if stats.late > 0 {
            let ticks = stats.ticks.max(stats.late);
            parts.push(format!(
                "{} of {} samples were taken late, because reading the previous one took longer than the interval (a busy machine, or many threads): the rate was lower than asked",
                thousands(stats.late),
                thousands(ticks)
            ));
        }
        Some(format!("sampling: {}", parts.join(", ")))
    }
}

/// The hot-lines table: columns sized to their contents, the source column taking what the
/// width leaves.
struct HotLineTable<'a> {
    cwd: Option<&'a str>,
    location_width: usize,
    function_width: usize,
    code_width: usize,
    blocked_column: bool,
}

const TABLE_TITLE: &str = "hot lines (user code)";
const LOCATION_MAX: usize = 40;
const FUNCTION_MAX: usize = 24;

impl<'a> HotLineTable<'a> {
    fn new(rows: &[HotLine], cwd: Option<&'a str>, blocked_column: bool, columns: usize) -> HotLineTable<'a> {
        let location_width = rows.iter().map(|h| location(h, cwd).chars().count()).max().unwrap_or(0).min(LOCATION_MAX);
        let function_width =
            rows.iter().map(|h| one_line(&h.function).chars().count()).max().unwrap_or(0).min(FUNCTION_MAX);
        let numbers_width = if blocked_column { 25 } else { 16 };
        let code_room = columns.saturating_sub(2 + location_width + 2 + function_width + 2 + numbers_width);
        let longest_code = rows.iter().map(|h| code(h).chars().count()).max().unwrap_or(0);
        let mut table = HotLineTable {
            cwd,
            location_width,
            function_width,
            code_width: longest_code.min(code_room),
            blocked_column,
        };
        // The title sits over the text columns: make them at least as wide as it.
        let text_width = table.text_width();
        if text_width < TABLE_TITLE.len() {
            table.code_width += TABLE_TITLE.len() - text_width;
        }
        table
    }

    fn text_width(&self) -> usize {
        2 + self.location_width + 2 + self.function_width + 2 + self.code_width
    }

    fn header(&self) -> String {
        let mut header = format!("{TABLE_TITLE:<width$}  {:>6}  {:>6}", "share", "self", width = self.text_width());
        if self.blocked_column {
            header.push_str(&format!("  {:>7}", "blocked"));
        }
        header
    }

    fn row(&self, h: &HotLine) -> String {
        let mut row = format!(
            "  {:<lw$}  {:<fw$}  {:<cw$}  {:>6}  {:>6}",
            truncate_start(&location(h, self.cwd), self.location_width),
            truncate_end(&one_line(&h.function), self.function_width),
            truncate_end(&code(h), self.code_width),
            percent_tenths(h.share),
            percent_tenths(h.self_share),
            lw = self.location_width,
            fw = self.function_width,
            cw = self.code_width,
        );
        if self.blocked_column {
            row.push_str(&format!("  {:>7}", percent_tenths(h.blocked_share)));
        }
        row.trim_end().to_owned()
    }
}

fn location(h: &HotLine, cwd: Option<&str>) -> String {
    one_line(&format!("{}:{}", display_path(&h.file, cwd), h.line))
}

fn code(h: &HotLine) -> String {
    h.code.as_deref().map(one_line).unwrap_or_default()
}

fn source_or_function(code: Option<&str>, function: &str) -> String {
    match code.map(one_line).filter(|c| !c.is_empty()) {
        Some(code) => code,
        None => format!("in {}()", one_line(function)),
    }
}

/// Text from the target (names, source lines) made safe for a fixed layout and a terminal: line
/// breaks, tabs and runs of spaces become single spaces, so a column cannot be pushed or split,
/// and every other control character is shown escaped (see [`escape_controls`]).
fn one_line(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    escape_controls(&words.join(" ")).into_owned()
}

/// What the share of time windows says about when the line ran.
fn recurrence_reading(recurrence: f64) -> &'static str {
    if recurrence >= 0.8 {
        "recurring, not start-up"
    } else if recurrence >= 0.3 {
        "intermittent"
    } else {
        "concentrated in a few windows (start-up or a burst)"
    }
}

/// Cuts `text` to `max` characters, marking the cut with `…`.
fn truncate_end(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// Cuts `text` to `max` characters from the left, so a path keeps its file name and line.
fn truncate_start(text: &str, max: usize) -> String {
    let len = text.chars().count();
    if len <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut cut = String::from("…");
    cut.extend(text.chars().skip(len - (max - 1)));
    cut
}

/// Greedy word wrap to `columns`; `first` starts the first line, `rest` the others. Prefixes
/// may hold colour codes, so their width is measured without them.
fn wrap(text: &str, first: &str, rest: &str, columns: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_owned();
    let mut width = visible_width(first);
    let mut empty = true;
    for word in text.split_whitespace() {
        // The text may name the target's functions and files: no control character of theirs
        // reaches the terminal.
        let word = escape_controls(word);
        let word = word.as_ref();
        let word_width = word.chars().count();
        if !empty && width + 1 + word_width > columns {
            lines.push(std::mem::replace(&mut line, rest.to_owned()));
            width = visible_width(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
            width += 1;
        }
        line.push_str(word);
        width += word_width;
        empty = false;
    }
    lines.push(line);
    lines
}

fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => width += 1,
        }
    }
    width
}

/// ANSI styling, a no-op unless colour was asked for.
#[derive(Clone, Copy)]
struct Style {
    color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
    fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
    fn red(self, text: &str) -> String {
        self.paint("1;31", text)
    }
    fn green(self, text: &str) -> String {
        self.paint("32", text)
    }
    fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_words_whole_and_indents_continuations() {
        let text = "word ".repeat(40);
        let lines = wrap(&text, "fix: ", "     ", DEFAULT_WIDTH);
        assert!(lines.len() > 1);
        assert!(lines[0].starts_with("fix: word"));
        assert!(lines[1].starts_with("     word"));
        assert!(lines.iter().all(|l| l.chars().count() <= DEFAULT_WIDTH));
        assert_eq!(lines.iter().map(|l| l.split_whitespace().filter(|w| *w == "word").count()).sum::<usize>(), 40);
    }

    #[test]
    fn a_word_longer_than_the_width_gets_its_own_line() {
        let long = "x".repeat(DEFAULT_WIDTH + 5);
        let lines = wrap(&format!("a {long} b"), "", "", DEFAULT_WIDTH);
        assert_eq!(lines, vec!["a".to_owned(), long, "b".to_owned()]);
    }

    #[test]
    fn colour_codes_take_no_width() {
        assert_eq!(visible_width("\x1b[33mkind\x1b[0m: "), 6);
    }

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate_end("abcdef", 4), "abc…");
        assert_eq!(truncate_end("abc", 4), "abc");
        assert_eq!(truncate_start("/very/long/path.py:3", 10), "…path.py:3");
    }

    #[test]
    fn target_text_is_kept_on_one_line() {
        assert_eq!(one_line("  async with\tx:\n  y  "), "async with x: y");
        assert_eq!(one_line("f\x1b]0;pwn\x07()"), "f\\x1b]0;pwn\\x07()");
        assert_eq!(one_line(""), "");
    }

    #[test]
    fn recurrence_reads_as_words() {
        assert_eq!(recurrence_reading(1.0), "recurring, not start-up");
        assert_eq!(recurrence_reading(0.5), "intermittent");
        assert_eq!(recurrence_reading(0.05), "concentrated in a few windows (start-up or a burst)");
    }
}
