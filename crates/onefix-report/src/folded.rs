//! Collapsed stacks: one line per distinct stack, `root;…;leaf count`, the input of
//! flamegraph.pl, inferno and most flame graph viewers.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufWriter, Write};

use onefix_model::{Mode, Profile, StackId, ThreadId, ThreadInfo};

/// Stands in for the frames of a sample whose thread had none (a thread caught before its
/// first frame, or a native thread with nothing to unwind), so that line totals still add up to
/// the recorded weight.
const NO_FRAMES: &str = "[no frames]";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldedOptions {
    /// Start every stack with its thread (`thread (4243): MainThread`), as py-spy's
    /// `--threads` does, so the flame graph splits by thread first.
    pub thread_prefix: bool,
}

/// Writes the samples that count in `mode` as collapsed stacks, sorted by stack so the output
/// is deterministic. Frames are labelled `function (file:line)` through [`escape_label`].
pub fn write_folded<W: Write>(w: W, profile: &Profile, mode: Mode, opts: &FoldedOptions) -> io::Result<()> {
    let mut out = BufWriter::new(w);
    for (stack, weight) in folded_stacks(profile, mode, opts) {
        writeln!(out, "{stack} {weight}")?;
    }
    out.flush()
}

/// The collapsed stacks and their weights, sorted by stack. Distinct stacks whose labels are
/// equal (the same function at the same line of two files with the same base name) merge, as
/// they would in any folded-stack tool.
pub(crate) fn folded_stacks(profile: &Profile, mode: Mode, opts: &FoldedOptions) -> BTreeMap<String, u64> {
    // Aggregate by stack id first: there are far fewer distinct stacks than samples, and each
    // stack's text is then built once.
    let mut by_stack: HashMap<(Option<ThreadId>, Option<StackId>), u64> = HashMap::new();
    for sample in profile.samples.iter().filter(|s| mode.counts(s.state)) {
        let thread = opts.thread_prefix.then_some(sample.thread);
        *by_stack.entry((thread, sample.stack)).or_default() += u64::from(sample.weight);
    }

    let labels: Vec<String> = profile.frames().iter().map(|f| escape_label(&f.label())).collect();
    let mut folded = BTreeMap::new();
    for ((thread, stack), weight) in by_stack {
        // A zero count means nothing to a flame graph and trips some readers.
        if weight == 0 {
            continue;
        }
        let mut parts: Vec<&str> = Vec::new();
        let thread_label = thread.map(|t| thread_label(profile.thread(t)));
        parts.extend(thread_label.as_deref());
        let frames = profile.stack_frames_root_first(stack);
        if frames.is_empty() {
            parts.push(NO_FRAMES);
        }
        parts.extend(frames.iter().map(|&f| labels[f as usize].as_str()));
        *folded.entry(parts.join(";")).or_default() += weight;
    }
    folded
}

fn thread_label(thread: &ThreadInfo) -> String {
    let label = match &thread.name {
        Some(name) => format!("thread ({}): {}", thread.tid, name),
        None => format!("thread ({})", thread.tid),
    };
    escape_label(&label)
}

/// Makes a frame label safe inside a folded line: `;` separates frames, so it becomes `,`
/// (Rust's `[u8; 8]` reads as `[u8, 8]`); line breaks and other whitespace become single
/// spaces; and a label ending in a space and a number gets `_` for that space, or readers would
/// take the number for a sample count (a trailing pair of counts means a differential graph).
pub fn escape_label(label: &str) -> String {
    let mut escaped = String::with_capacity(label.len());
    let mut pending_space = false;
    for c in label.chars() {
        if c.is_whitespace() || c.is_control() {
            pending_space = true;
            continue;
        }
        if pending_space && !escaped.is_empty() {
            escaped.push(' ');
        }
        pending_space = false;
        escaped.push(if c == ';' { ',' } else { c });
    }
    if escaped.is_empty() {
        return "[unknown]".to_owned();
    }
    if let Some(space) = escaped.rfind(' ') {
        if looks_like_count(&escaped[space + 1..]) {
            escaped.replace_range(space..=space, "_");
        }
    }
    escaped
}

/// What inferno (after flamegraph.pl) accepts as a count: digits with at most one dot.
fn looks_like_count(token: &str) -> bool {
    token.chars().all(|c| c.is_ascii_digit() || c == '.') && token.matches('.').count() <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_labels_are_unchanged() {
        assert_eq!(escape_label("main (app.py:31)"), "main (app.py:31)");
        assert_eq!(escape_label("<module> (app.py:1)"), "<module> (app.py:1)");
        assert_eq!(escape_label("memcpy (libc.so.6)"), "memcpy (libc.so.6)");
    }

    #[test]
    fn separators_and_line_breaks_cannot_break_a_line() {
        assert_eq!(escape_label("<[u8; 8] as Debug>::fmt"), "<[u8, 8] as Debug>::fmt");
        assert_eq!(escape_label("a\nb\r\n\tc"), "a b c");
        assert_eq!(escape_label("  padded  "), "padded");
        assert_eq!(escape_label(""), "[unknown]");
        assert_eq!(escape_label("\n"), "[unknown]");
    }

    #[test]
    fn a_trailing_number_is_not_mistaken_for_a_count() {
        assert_eq!(escape_label("worker 12"), "worker_12");
        assert_eq!(escape_label("step 1.5"), "step_1.5");
        assert_eq!(escape_label("version 1.2.3"), "version 1.2.3");
        assert_eq!(escape_label("0x7f3a12"), "0x7f3a12");
    }
}
