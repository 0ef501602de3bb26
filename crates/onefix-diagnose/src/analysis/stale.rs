//! Reads that caught a line of the user's code after its call had returned.
//!
//! The sampler reads a running Python thread without stopping it (py-spy's non-blocking mode; a
//! paused read costs the target far more), innermost frame first. A call that returns while the
//! read walks outwards leaves the callee's frames under its caller's *next* line: in
//! `for ...: s = copy.deepcopy(state); n += 1`, some reads show `n += 1` calling `deepcopy`.
//! Measured on bench/gain's programs, 3 to 5% of all reads of a loop around one long call. They
//! move time from the line that makes the call to the cheap lines after it, and a gain bound,
//! 1/(1-share) with its share near 1, is most sensitive to exactly that: on `deepcopy.py` the
//! loop's lines held 33 reads where the loop's own clock measured 21.
//!
//! Such a read is recognised in the source: its line does not name the function it appears to
//! call. When exactly one other line of the same function calls that function by name and is
//! read calling it at least [`CALLER_MARGIN`] times as often, the read is that line's. Otherwise,
//! when the other reads of its innermost frame (at least as many again, four times over) were
//! nearly all at one other line, the read takes their stack: a generator expression's frame can
//! sit where the returned call's frame was, so the read shows `sum(k * k for k in ...)` calling
//! the TOML parser. The reads are charged so in the profile itself, so that every writer counts what the diagnosis counts (as
//! [`settle_running`](super::settle_running) does for CPU time). How much moved is kept as the
//! `stale-reads` attachment, which the diagnosis reports as a note.

use std::collections::HashMap;

use onefix_model::attachments::{StaleReads, IMPORTED, STALE_READS};
use onefix_model::{FrameId, FrameKind, Language, Profile, StackId, WeightUnit};

use crate::names::{called_names, written_name, SourceCache};
use crate::origin::{Origin, UserCode};

/// The line that names the callee must be read calling it at least this many times as often as
/// the line that does not: a read caught late is a small fraction of the call's reads, while a
/// call made through another name (a local bound to the function) is not.
const CALLER_MARGIN: u64 = 4;

/// Whether `word` appears in `code` as a whole identifier.
fn names(code: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Charges the reads of `profile` that caught a user line after its call returned to the line
/// that made the call (see the module's comment). Returns the weight moved.
pub fn settle_stale_reads(profile: &mut Profile, user: &UserCode) -> u64 {
    // Paused reads (native stacks) are consistent; a profile from another tool is left as read.
    if profile.meta.native
        || profile.meta.target.language == Some(Language::Native)
        || profile.attachments.contains_key(IMPORTED)
        || matches!(profile.meta.weight_unit, WeightUnit::Bytes)
    {
        return 0;
    }
    let mut source = SourceCache::default();
    let moves = stale_callers(profile, user, &mut source);
    let mut by_stack: HashMap<StackId, u64> = HashMap::new();
    for s in &profile.samples {
        if let Some(stack) = s.stack {
            *by_stack.entry(stack).or_default() += s.weight as u64;
        }
    }
    let mut stacks: Vec<StackId> = by_stack.keys().copied().collect();
    stacks.sort_unstable();
    // A line read calling what another line of its function calls: that line's.
    let mut rewritten: HashMap<StackId, StackId> = HashMap::new();
    for &stack in &stacks {
        let mut frames = profile.stack_frames_root_first(Some(stack));
        let mut changed = false;
        for k in 0..frames.len().saturating_sub(1) {
            let callee = callee_key(profile, frames[k + 1]);
            if let Some(&to) = moves.get(&(frames[k], callee)) {
                frames[k] = to;
                changed = true;
            }
        }
        if changed {
            if let Some(s) = profile.intern_stack(frames) {
                rewritten.insert(stack, s);
            }
        }
    }
    // What is left of such reads goes where the other reads of its innermost frame go.
    let placed = placed_by_leaf(profile, user, &mut source, &stacks, &by_stack, &rewritten);
    rewritten.extend(placed);
    let mut moved = 0u64;
    for sample in &mut profile.samples {
        if let Some(&to) = sample.stack.and_then(|s| rewritten.get(&s)) {
            if Some(to) != sample.stack {
                sample.stack = Some(to);
                moved += sample.weight as u64;
            }
        }
    }
    if moved > 0 {
        if let Ok(json) = serde_json::to_vec(&StaleReads { weight: moved }) {
            profile.attachments.insert(STALE_READS.to_owned(), json);
        }
    }
    moved
}

/// A function called: its file and name, whatever line it was read at.
type Callee = (String, String);

/// The lines of one user function (its file and name) read calling one callee, with the weight.
type CallersOf<'p> = HashMap<(&'p str, &'p str, &'p Callee), Vec<(FrameId, u64)>>;

/// A callee as a function (its file and name), whatever line it was read at.
fn callee_key(profile: &Profile, frame: FrameId) -> Callee {
    let f = profile.frame(frame);
    (f.file.clone(), f.function.clone())
}

/// The (caller frame, callee function) pairs read late, each with the frame of the line that
/// made the call.
fn stale_callers(profile: &Profile, user: &UserCode, source: &mut SourceCache) -> HashMap<(FrameId, Callee), FrameId> {
    let mut by_stack: HashMap<StackId, u64> = HashMap::new();
    for s in &profile.samples {
        if let Some(stack) = s.stack {
            *by_stack.entry(stack).or_default() += s.weight as u64;
        }
    }
    let mut is_user: HashMap<FrameId, bool> = HashMap::new();
    // Weight read with a user line calling a function, by (caller frame, callee function).
    let mut calls: HashMap<(FrameId, Callee), u64> = HashMap::new();
    for (&stack, &w) in &by_stack {
        let frames = profile.stack_frames_root_first(Some(stack));
        for pair in frames.windows(2) {
            let (caller, callee) = (profile.frame(pair[0]), profile.frame(pair[1]));
            if caller.kind != FrameKind::Python || callee.kind != FrameKind::Python {
                continue;
            }
            let user_frame = *is_user.entry(pair[0]).or_insert_with(|| user.origin(caller) == Origin::User);
            if user_frame {
                *calls.entry((pair[0], callee_key(profile, pair[1]))).or_default() += w;
            }
        }
    }
    // The lines of each user function seen calling each callee.
    let mut callers: CallersOf = HashMap::new();
    for ((caller, callee), &w) in &calls {
        let f = profile.frame(*caller);
        callers.entry((f.file.as_str(), f.function.as_str(), callee)).or_default().push((*caller, w));
    }
    let mut code = |frame: FrameId| -> Option<String> {
        let f = profile.frame(frame);
        let path = user.resolve(&f.file)?;
        source.line(&path, f.line)
    };
    let mut moves = HashMap::new();
    for ((caller, callee), &w) in &calls {
        let Some(name) = written_name(&callee.1) else { continue };
        let Some(text) = code(*caller) else { continue };
        if names(&text, name) {
            continue;
        }
        let f = profile.frame(*caller);
        let Some(siblings) = callers.get(&(f.file.as_str(), f.function.as_str(), callee)) else { continue };
        let making: Vec<FrameId> = siblings
            .iter()
            .filter(|&&(other, ow)| other != *caller && ow >= CALLER_MARGIN * w)
            .filter(|&&(other, _)| {
                code(other).is_some_and(|t| called_names(&t).iter().any(|n| n.rsplit('.').next() == Some(name)))
            })
            .map(|&(other, _)| other)
            .collect();
        if let [to] = making[..] {
            moves.insert((*caller, callee.clone()), to);
        }
    }
    moves
}

/// Reads whose deepest user line does not name the function it is read calling, and whose
/// innermost frame the other reads place at one other line (90% of them, at least
/// [`CALLER_MARGIN`] times as many): the read's inner frames are an earlier call's, read before
/// the frames above them moved on (a generator expression's frame now where the call's was), and
/// the read is that call's. Each is given the commonest of those other reads' stacks. A line that
/// calls through another name (a callback, a decorator's wrapper) is read so every time, and no
/// other line's reads outnumber it: it stays.
fn placed_by_leaf(
    profile: &mut Profile,
    user: &UserCode,
    source: &mut SourceCache,
    stacks: &[StackId],
    by_stack: &HashMap<StackId, u64>,
    rewritten: &HashMap<StackId, StackId>,
) -> HashMap<StackId, StackId> {
    let mut is_user: HashMap<FrameId, bool> = HashMap::new();
    // By the innermost frame, its function, its file (as the engine places torn reads): the
    // other reads' deepest user frame -> (weight, the heaviest stack and its weight).
    let mut clean: HashMap<LeafKey, HashMap<FrameId, (u64, StackId, u64)>> = HashMap::new();
    let mut suspects: Vec<(StackId, [LeafKey; 3], FrameId)> = Vec::new();
    let mut suspect_weight: HashMap<LeafKey, u64> = HashMap::new();
    for &stack in stacks {
        let w = by_stack[&stack];
        let current = rewritten.get(&stack).copied().unwrap_or(stack);
        let frames = profile.stack_frames_root_first(Some(current));
        let Some(&leaf) = frames.last() else { continue };
        let deepest = frames.iter().rposition(|&f| {
            let frame = profile.frame(f);
            frame.kind == FrameKind::Python && *is_user.entry(f).or_insert_with(|| user.origin(frame) == Origin::User)
        });
        let Some(d) = deepest else { continue };
        let frontier = frames[d];
        let unnamed = frames.get(d + 1).is_some_and(|&c| {
            let callee = profile.frame(c);
            let Some(name) = (callee.kind == FrameKind::Python).then(|| written_name(&callee.function)).flatten()
            else {
                return false;
            };
            let f = profile.frame(frontier);
            user.resolve(&f.file).and_then(|p| source.line(&p, f.line)).is_some_and(|text| !names(&text, name))
        });
        let l = profile.frame(leaf);
        let keys = [
            LeafKey::Frame(leaf),
            LeafKey::Function(l.file.clone(), l.function.clone()),
            LeafKey::File(l.file.clone()),
        ];
        if unnamed {
            for k in &keys {
                *suspect_weight.entry(k.clone()).or_default() += w;
            }
            suspects.push((stack, keys, frontier));
        } else {
            for k in keys {
                let e = clean.entry(k).or_default().entry(frontier).or_insert((0, current, 0));
                e.0 += w;
                if w > e.2 {
                    (e.1, e.2) = (current, w);
                }
            }
        }
    }
    let mut placed = HashMap::new();
    for (stack, keys, frontier) in suspects {
        // The finest grain with enough other reads decides.
        let decided = keys.iter().find_map(|k| {
            let lines = clean.get(k)?;
            let total: u64 = lines.values().map(|e| e.0).sum();
            (total >= CALLER_MARGIN * suspect_weight[k]).then_some((lines, total))
        });
        let Some((lines, total)) = decided else { continue };
        let Some((&line, &(w, heaviest, _))) = lines.iter().max_by_key(|(&f, e)| (e.0, std::cmp::Reverse(f))) else {
            continue;
        };
        if line != frontier && w * 10 >= total * 9 {
            placed.insert(stack, heaviest);
        }
    }
    placed
}

/// Where a read's innermost frame is placed by the other reads: the frame itself, its function,
/// its file.
#[derive(Clone, PartialEq, Eq, Hash)]
enum LeafKey {
    Frame(FrameId),
    Function(String, String),
    File(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use onefix_model::{Frame, Meta, Sample, ThreadState};
    use std::path::Path;

    const LIB: &str = "/usr/lib/python3.11/copy.py";

    fn app(tag: &str, source: &str) -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("onefix-stale-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("app.py");
        std::fs::write(&file, source).unwrap();
        let s = file.to_str().unwrap().to_owned();
        (dir, s)
    }

    fn add(p: &mut Profile, stack: &[(&str, &str, u32)], times: u32) {
        let t = p.intern_thread(1, 1, None);
        let ids: Vec<FrameId> =
            stack.iter().map(|&(f, file, line)| p.intern_frame(Frame::python(f, file, line))).collect();
        let s = p.intern_stack(ids);
        for _ in 0..times {
            let time_us = p.samples.len() as u64 * 10_000;
            p.samples.push(Sample { time_us, thread: t, stack: s, state: ThreadState::new(true, true), weight: 1 });
        }
    }

    fn weight_at(p: &Profile, file: &str, line: u32, callee: Option<&str>) -> u32 {
        p.samples
            .iter()
            .filter(|s| {
                let frames = p.stack_frames_root_first(s.stack);
                let at = frames.iter().position(|&f| p.frame(f).file == file && p.frame(f).line == line);
                at.is_some_and(|i| frames.get(i + 1).map(|&f| p.frame(f).function.as_str()) == callee)
            })
            .map(|s| s.weight)
            .sum()
    }

    const LOOP: &str =
        "import copy\nfor step in range(100):\n    snapshot = copy.deepcopy(state)\n    history.append(1)\n    n += 1\n";

    #[test]
    fn a_line_read_calling_what_the_line_before_it_calls_is_charged_there() {
        let (dir, file) = app("moved", LOOP);
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 3), ("deepcopy", LIB, 128)], 90);
        add(&mut p, &[("<module>", &file, 5), ("deepcopy", LIB, 128)], 4);
        add(&mut p, &[("<module>", &file, 4), ("deepcopy", LIB, 140)], 2);
        add(&mut p, &[("<module>", &file, 5)], 6);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 6);
        assert_eq!(weight_at(&p, &file, 3, Some("deepcopy")), 96);
        assert_eq!(weight_at(&p, &file, 5, Some("deepcopy")), 0);
        // The line's own time stays.
        assert_eq!(weight_at(&p, &file, 5, None), 6);
        let kept: StaleReads = serde_json::from_slice(&p.attachments[STALE_READS]).unwrap();
        assert_eq!(kept.weight, 6);
    }

    #[test]
    fn a_call_through_another_name_or_as_often_as_the_named_one_stays() {
        // Line 4 calls `deepcopy` through a local bound to it: as often as line 3, so not late.
        let src = "import copy\ndup = copy.deepcopy\nfor s in states:\n    a = copy.deepcopy(s)\n    b = dup(s)\n";
        let (dir, file) = app("kept", src);
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 4), ("deepcopy", LIB, 128)], 50);
        add(&mut p, &[("<module>", &file, 5), ("deepcopy", LIB, 128)], 50);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 0);
        assert!(!p.attachments.contains_key(STALE_READS));
        // A line that names what it calls is never moved, however rarely it is read calling it.
        let (dir, file) = app("named", LOOP.replace("n += 1", "n += len(copy.deepcopy(x))").as_str());
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 3), ("deepcopy", LIB, 128)], 90);
        add(&mut p, &[("<module>", &file, 5), ("deepcopy", LIB, 128)], 4);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 0);
    }

    #[test]
    fn two_lines_calling_it_by_name_leave_the_late_read_where_it_is() {
        let src = "import copy\nfor s in states:\n    a = copy.deepcopy(s)\n    b = copy.deepcopy(t)\n    n += 1\n";
        let (dir, file) = app("two", src);
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 3), ("deepcopy", LIB, 128)], 50);
        add(&mut p, &[("<module>", &file, 4), ("deepcopy", LIB, 128)], 50);
        add(&mut p, &[("<module>", &file, 5), ("deepcopy", LIB, 128)], 4);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 0);
    }

    #[test]
    fn a_constructor_is_called_by_its_class_name() {
        let src = "for q in quotes:\n    t = Tariff(path)\n    total += t.price(q)\n";
        let (dir, file) = app("ctor", src);
        let lib = dir.join("tariff.py");
        let lib = lib.to_str().unwrap();
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 2), ("Tariff.__init__", lib, 10)], 40);
        add(&mut p, &[("<module>", &file, 3), ("Tariff.__init__", lib, 10)], 3);
        add(&mut p, &[("<module>", &file, 3), ("Tariff.price", lib, 30)], 20);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 3);
        assert_eq!(weight_at(&p, &file, 3, Some("Tariff.price")), 20);
        assert_eq!(weight_at(&p, &file, 2, Some("Tariff.__init__")), 43);
    }

    #[test]
    fn a_read_whose_inner_frames_are_an_earlier_calls_goes_where_that_calls_reads_go() {
        // Line 3's generator expression took the frame slot of the `loads` call of line 2: the
        // read shows it calling the parser's `skip_chars`, which only `loads` reaches.
        let src = "for job in jobs:\n    config = tomllib.loads(text)\n    n += sum(k * k for k in range(4000))\n";
        let (dir, file) = app("leaf", src);
        let parser = "/usr/lib/python3.11/tomllib/_parser.py";
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 2), ("loads", parser, 40), ("skip_chars", parser, 300)], 40);
        add(&mut p, &[("<module>", &file, 3), ("<genexpr>", &file, 3), ("skip_chars", parser, 300)], 5);
        add(&mut p, &[("<module>", &file, 3), ("<genexpr>", &file, 3)], 20);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 5);
        assert_eq!(weight_at(&p, &file, 2, Some("loads")), 45);
        assert_eq!(weight_at(&p, &file, 3, Some("<genexpr>")), 20);
    }

    #[test]
    fn a_callback_read_through_another_name_every_time_stays() {
        // `handler(x)` calls `on_data`; no other line's reads reach its frames.
        let src = "handler = on_data\nfor x in feed:\n    handler(x)\n    n += 1\n";
        let (dir, file) = app("callback", src);
        let lib = "/usr/lib/python3.11/json/decoder.py";
        let mut p = Profile::new(Meta::default());
        add(&mut p, &[("<module>", &file, 3), ("on_data", lib, 12)], 40);
        add(&mut p, &[("<module>", &file, 4)], 4);
        let user = UserCode::new([&dir], Some(Path::new(&dir)));
        assert_eq!(settle_stale_reads(&mut p, &user), 0);
        assert_eq!(weight_at(&p, &file, 3, Some("on_data")), 40);
    }

    #[test]
    fn names_no_call_spells_are_not_judged() {
        assert_eq!(written_name("copy.deepcopy"), Some("deepcopy"));
        assert_eq!(written_name("Tariff.__init__"), Some("Tariff"));
        assert_eq!(written_name("__init__"), None);
        assert_eq!(written_name("<genexpr>"), None);
        assert_eq!(written_name("Table.__getitem__"), None);
        assert!(names("x = copy.deepcopy(s)", "deepcopy"));
        assert!(!names("x = copy.deepcopy2(s)", "deepcopy"));
    }
}
