//! Folded (collapsed) stacks: one line per stack, `root;…;leaf count`, as `stackcollapse-perf.pl`,
//! inferno's collapsers, `py-spy record --format raw` and onefix's `--folded` write them.
//!
//! A frame label is read as:
//! - `function (file.py:LINE)` (py-spy, onefix): a Python frame at that line; with another
//!   file (`main.go:12`), a native frame at that line;
//! - `function (module)` (onefix, for native code without line information): a native frame in
//!   that shared object or executable;
//! - `module`function` (DTrace and some perf collapsers): a native frame in that module;
//! - `function_[k]` (inferno, `stackcollapse-perf.pl --kernel`): a kernel frame; the other
//!   annotations (`_[j]` JIT, `_[i]` inlined, `_[w]` waker) are dropped;
//! - anything else: a native function.
//!
//! A first frame `thread (TID)` or `thread (TID): NAME` (py-spy `--threads`, onefix) is the
//! thread, and `process PID:"COMMAND"` (py-spy `--subprocesses`) its process.
//!
//! Folded stacks have no sample times, no thread states and no sampling interval.

use std::collections::HashMap;

use onefix_model::{Frame, FrameId, FrameKind, Meta, Mode, Profile, StackId, ThreadState, WeightUnit};

use crate::{push_weight, Format, ImportError, Imported, Lacks, ASSUMED_INTERVAL_US};

/// What onefix's writer puts for a sample without frames.
const NO_FRAMES: &str = "[no frames]";

/// Whether the bytes are text whose first line is `stack count`: a file cut short, or damaged
/// further on, is then said to be so at its bad line by [`read`].
pub fn looks_folded(bytes: &[u8]) -> bool {
    // Judged by the first line that holds anything, however long: a stack of thousands of
    // frames is one line of hundreds of kilobytes.
    let Some(first) = bytes.split(|&b| b == b'\n').map(<[u8]>::trim_ascii).find(|l| !l.is_empty()) else {
        return false;
    };
    std::str::from_utf8(first).ok().and_then(split_line).is_some_and(|(stack, _)| !stack.is_empty())
}

/// `stack count` into the stack and the count (the last of two counts, in a differential file).
/// A count alone is a sample without frames (py-spy writes ` 1` for a thread it read none of).
fn split_line(line: &str) -> Option<(&str, u64)> {
    let line = line.trim();
    let (stack, count) = line.rsplit_once(' ').unwrap_or(("", line));
    let count = parse_count(count)?;
    // A differential file (`stack before after`): the second count is the profile's.
    let stack = match stack.rsplit_once(' ') {
        Some((s, c)) if parse_count(c).is_some() => s,
        _ => stack,
    };
    Some((stack.trim(), count))
}

fn parse_count(token: &str) -> Option<u64> {
    if let Ok(n) = token.parse::<u64>() {
        return Some(n);
    }
    // Some collapsers write fractional weights.
    token.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0 && token.contains('.')).map(|v| v.round() as u64)
}

/// Reads folded stacks.
pub fn read(bytes: &[u8]) -> Result<Imported, ImportError> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            return Err(ImportError::FoldedLine { line });
        }
    };
    let meta = Meta {
        mode: Mode::Wall,
        rate_hz: 1e6 / ASSUMED_INTERVAL_US as f64,
        weight_unit: WeightUnit::Samples { interval_us: ASSUMED_INTERVAL_US },
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);
    let mut frame_of: HashMap<&str, FrameId> = HashMap::new();
    let mut threads_seen = false;
    let mut weights: HashMap<(u32, Option<StackId>), u64> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (stack, count) = split_line(line).ok_or(ImportError::FoldedLine { line: n + 1 })?;
        let mut labels = stack.split(';').peekable();
        let mut pid = 0u32;
        if let Some(p) = labels.peek().and_then(|l| process_label(l)) {
            pid = p;
            labels.next();
        }
        let thread = match labels.peek().and_then(|l| thread_label(l)) {
            Some((tid, name)) => {
                labels.next();
                threads_seen = true;
                profile.intern_thread(pid, tid, name)
            }
            None => profile.intern_thread(pid, 0, None),
        };
        let mut root_first: Vec<FrameId> = Vec::new();
        for label in labels {
            if label == NO_FRAMES || label.is_empty() {
                continue;
            }
            let id = match frame_of.get(label) {
                Some(&id) => id,
                None => {
                    let id = profile.intern_frame(parse_frame(label));
                    frame_of.insert(label, id);
                    id
                }
            };
            root_first.push(id);
        }
        let stack = profile.intern_stack(root_first);
        let total = weights.entry((thread, stack)).or_default();
        *total = total.saturating_add(count);
    }
    // In a fixed order, so that the same file gives the same profile.
    let mut weights: Vec<((u32, Option<StackId>), u64)> = weights.into_iter().filter(|(_, w)| *w > 0).collect();
    weights.sort_unstable_by_key(|&((thread, stack), _)| (thread, stack.map(i64::from).unwrap_or(-1)));
    for ((thread, stack), weight) in weights {
        push_weight(&mut profile, thread, stack, ThreadState::new(true, false), 0, weight)?;
    }
    if profile.samples.is_empty() {
        return Err(ImportError::NoSamples);
    }
    profile.meta.target.language = Some(crate::pprof::language_of(&profile));
    Ok(Imported {
        profile,
        format: Format::Folded,
        lacks: Lacks { timeline: true, threads: !threads_seen, waits: false, states: true, interval: true },
        sample_type: None,
    })
}

/// `thread (4243)` or `thread (4243): MainThread`.
fn thread_label(label: &str) -> Option<(u64, Option<&str>)> {
    let rest = label.strip_prefix("thread (")?;
    let (tid, name) = rest.split_once(')')?;
    let tid =
        tid.trim().strip_prefix("0x").map_or_else(|| tid.trim().parse().ok(), |h| u64::from_str_radix(h, 16).ok())?;
    let name = name.strip_prefix(':').map(str::trim).filter(|n| !n.is_empty());
    Some((tid, name))
}

/// `process 4242:"python app.py"`.
fn process_label(label: &str) -> Option<u32> {
    let rest = label.strip_prefix("process ")?;
    let (pid, _) = rest.split_once(':')?;
    pid.trim().parse().ok()
}

/// One frame's label; see the module's documentation.
pub fn parse_frame(label: &str) -> Frame {
    for (suffix, kernel) in [("_[k]", true), ("_[j]", false), ("_[i]", false), ("_[w]", false)] {
        if let Some(function) = label.strip_suffix(suffix) {
            let frame = parse_frame(function);
            return if kernel { Frame { kind: FrameKind::Kernel, ..frame } } else { frame };
        }
    }
    if let Some((function, place)) =
        label.strip_suffix(')').and_then(|l| l.rsplit_once(" (")).filter(|(f, p)| !f.is_empty() && !p.is_empty())
    {
        if let Some((file, line)) = place.rsplit_once(':').filter(|(file, _)| !file.is_empty()) {
            if let Ok(line) = line.parse::<u32>() {
                let python = [".py", ".pyw", ".pyx"].iter().any(|e| file.ends_with(e)) || file.starts_with('<');
                return if python {
                    Frame::python(function, file, line)
                } else {
                    Frame { file: file.to_owned(), line, ..Frame::native(function, "") }
                };
            }
        }
        if !place.contains(|c: char| c.is_whitespace() || c == '(' || c == ':') {
            return Frame::native(function, place);
        }
    }
    if let Some((module, function)) = label.split_once('`').filter(|(m, f)| !m.is_empty() && !f.is_empty()) {
        return Frame::native(function, module);
    }
    Frame::native(label, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_of_each_collapser_become_frames() {
        assert_eq!(parse_frame("handle (app.py:40)"), Frame::python("handle", "app.py", 40));
        assert_eq!(parse_frame("<module> (/srv/app/main.py:3)"), Frame::python("<module>", "/srv/app/main.py", 3));
        assert_eq!(parse_frame("_find_and_load (<frozen importlib._bootstrap>:1176)").kind, FrameKind::Python);
        let go = parse_frame("main.handler (main.go:31)");
        assert_eq!((go.kind, go.file.as_str(), go.line), (FrameKind::Native, "main.go", 31));
        assert_eq!(parse_frame("memcpy (libc.so.6)"), Frame::native("memcpy", "libc.so.6"));
        assert_eq!(parse_frame("libc.so.6`memcpy"), Frame::native("memcpy", "libc.so.6"));
        assert_eq!(parse_frame("do_syscall_64_[k]").kind, FrameKind::Kernel);
        assert_eq!(parse_frame("do_syscall_64_[k]").function, "do_syscall_64");
        assert_eq!(parse_frame("Interpreter_[j]"), Frame::native("Interpreter", ""));
        // C++ and Rust signatures are names, not places.
        assert_eq!(
            parse_frame("std::vector<int>::push_back(int const&)").function,
            "std::vector<int>::push_back(int const&)"
        );
        assert_eq!(parse_frame("operator() (int, char)"), Frame::native("operator() (int, char)", ""));
        assert_eq!(parse_frame("[unknown]"), Frame::native("[unknown]", ""));
    }

    #[test]
    fn threads_counts_and_bad_lines() {
        let text = "thread (7): MainThread;<module> (app.py:1);work (app.py:5) 30\n\
                    thread (8);<module> (app.py:1);idle (app.py:9) 10\n\
                    \n\
                    thread (7): MainThread;<module> (app.py:1);work (app.py:5) 2\n";
        let imported = read(text.as_bytes()).unwrap();
        let p = &imported.profile;
        assert_eq!(p.threads().len(), 2);
        assert_eq!(p.threads()[0].name.as_deref(), Some("MainThread"));
        assert_eq!(p.sample_count(), 42);
        assert!(!imported.lacks.threads && imported.lacks.timeline && imported.lacks.states);
        assert!(matches!(read(b"a;b 3\na;b\n"), Err(ImportError::FoldedLine { line: 2 })));
        assert!(matches!(read(b"a;b 0\n"), Err(ImportError::NoSamples)));
        assert_eq!(split_line("a;b 3 5"), Some(("a;b", 5)), "differential: the second count");
        assert_eq!(split_line("a;worker_12 3"), Some(("a;worker_12", 3)));
        assert_eq!(split_line(" 1"), Some(("", 1)), "py-spy's sample without frames");
        assert!(!looks_folded(b"12\n"), "a number alone does not make a file folded stacks");
        let with_empty = read(b"a;b 3\n 1\n").unwrap();
        assert_eq!(with_empty.profile.sample_count(), 4);
    }
}
