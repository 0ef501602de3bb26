//! The diagnosis: charge every sample to the user's line at its frontier, rank the lines, and
//! explain the top ones with the knowledge base.
//!
//! Work is done per distinct stack, not per sample: a recording of a million samples has a few
//! thousand stacks, so the per-sample loop only adds weights and marks time windows.

use std::collections::HashMap;
use std::path::PathBuf;

use onefix_model::{FrameId, FrameKind, Mode, Profile, Sample, StackId, ThreadId, WeightUnit};

use crate::kb::{KnowledgeBase, Role, When};
use crate::names::{called_names, qualified_name, unqualified_name, SourceCache};
use crate::origin::{Origin, UserCode};
use crate::{Diagnosis, Evidence, Finding, HotLine};

#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Lines below this share of the busy weight are not findings.
    pub min_share: f64,
    pub max_findings: usize,
    pub max_hot_lines: usize,
    /// A line seen in fewer than this fraction of the time windows is start-up, not a finding.
    pub min_recurrence: f64,
    /// CPUs of the machine the recording was made on, when known: the work that stays after
    /// a fix runs on them, which bounds what the fix can gain.
    pub cpus: Option<u32>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            mode: Mode::Wall,
            min_share: 0.05,
            max_findings: 5,
            max_hot_lines: 12,
            min_recurrence: 0.3,
            cpus: None,
        }
    }
}

/// A thread works when at least this fraction of its samples are not parked; only then do its
/// event-loop waits count in the busy time.
const WORKING_THREAD: f64 = 0.10;
/// A thread that sleeps this fraction of its samples, while others work, is a background timer.
const TIMER_THREAD: f64 = 0.95;
/// In CPU mode, below this fraction of the ticks on a CPU, a program has no CPU cost to report.
const MIN_CPU_USE: f64 = 0.05;
/// Fewer samples than this say nothing reliable about a line, whatever their share.
const MIN_FINDING_WEIGHT: u64 = 5;
/// Below this many busy samples no line is named and no gain given: a share read from fewer
/// is too uncertain to act on (80% of 10 samples has a 95% interval of 49% to 94%, and a gain
/// bound from 1.9x to 17x; with 40 samples, 65% to 90%).
pub const MIN_BUSY_SAMPLES: u64 = 40;
/// A knowledge-base entry explains a line when it is under this fraction of the line's weight.
const ENTRY_EXPLAINS: f64 = 0.3;
/// Waits at a line are counted in windows of this length to tell how many are in flight at once.
const IN_FLIGHT_WINDOW_US: u64 = 50_000;
/// Network waits with at least this many in flight (mean over the windows) already overlap:
/// they are not issued one at a time.
const OVERLAPPING_WAITS: f64 = 1.5;
/// Threads counted per window: more than this is overlap enough.
const MAX_THREADS_PER_WINDOW: usize = 16;
/// A torn read is charged to the line that holds this share of the clean reads with its
/// innermost frame (or, with too few of those, its innermost function, then its file)...
const TORN_SOLE_LINE: f64 = 0.9;
/// ...when there are at least this many of them (weight).
const TORN_MIN_CLEAN: u64 = 5;
/// A read left unplaced is charged to the line its thread's reads just before and after it
/// were charged to, when those two are at most this far apart: a merged sample's time is its
/// first tick, so one merge span plus a tick on each side.
const BRACKET_US: u64 = 2 * onefix_model::MERGE_SPAN_US;

/// A stretch of the run: its busy weight (the gain bound's denominator), the part of it on a
/// CPU, and its length.
struct Stretch {
    busy: u64,
    running: u64,
    seconds: f64,
}

/// What the clean reads sharing a torn read's innermost frame (or function, or file) say.
enum SoleLine {
    /// This many of them went to one line: charge it through this stack of that line.
    Line(StackId),
    /// They went to several lines: the torn read cannot be placed by its innermost frame.
    Split,
    /// Too few clean reads to say: ask at a coarser key.
    TooFew,
}

struct FrameFacts {
    origin: Origin,
    qualified: String,
    cost: Vec<u16>,
    idle: Option<u16>,
}

struct StackFacts {
    /// User frames above the frontier, nearest first: where the loop that repeats it may be.
    callers: Vec<FrameId>,
    /// Frames under the frontier, leaf first (all frames when there is no frontier).
    beneath: Vec<FrameId>,
    /// Idle entry matched by the innermost Python frame.
    idle: Option<u16>,
    /// The outermost frame is not where a thread starts (`<module>`, `threading`, `runpy`):
    /// a read that tore while the target changed its stack.
    truncated: bool,
    /// Cost entries matched beneath the frontier or by the innermost line's calls.
    cost: Vec<u16>,
    line: Option<usize>,
    /// The innermost frame is Python and it is in a call that waits (sleep, a socket read, a
    /// lock: a knowledge-base entry for blocked time). Such a thread is waiting even when the
    /// OS said it was runnable: it had just been woken and was waiting for a CPU.
    waiting_call: bool,
    /// The frontier is a module's top level run by an import: once per process.
    importing: bool,
    /// The innermost frame: read first, so right even when the rest of the read tore.
    leaf: Option<FrameId>,
    /// A native stack whose outermost frame is not where a thread begins: the unwinder stopped
    /// early (a frame larger than the stack bytes copied, or code without unwind information).
    cut_short: bool,
}

#[derive(Default)]
struct LineAcc {
    frame: FrameId,
    weight: u64,
    self_weight: u64,
    blocked: u64,
    /// Weight seen while a module was being imported (see [`StackFacts::importing`]).
    importing: u64,
    windows: Vec<u64>,
    /// First and last time the line was seen, in µs: the stretch of the run that repeats it.
    first_us: u64,
    last_us: u64,
    /// Weight by (stack, active): expanded into frames once per stack, at the end.
    by_stack: HashMap<(StackId, bool), u64>,
    /// Blocked weight by window of IN_FLIGHT_WINDOW_US, over every thread, and the threads
    /// seen waiting in it (a few at most): how many waits at this line are in flight at once.
    blocked_windows: HashMap<u64, (u64, Vec<u32>)>,
}

/// Clean reads charged to a line, by their innermost frame, its function and its file, with
/// the weight of each stack: what a torn read sharing that innermost frame most likely was.
#[derive(Default)]
struct CleanByLeaf<'p> {
    by_frame: HashMap<FrameId, HashMap<StackId, u64>>,
    by_function: HashMap<(&'p str, &'p str), HashMap<StackId, u64>>,
    by_file: HashMap<&'p str, HashMap<StackId, u64>>,
}

impl<'p> CleanByLeaf<'p> {
    fn add(&mut self, profile: &'p Profile, leaf: FrameId, stack: StackId, w: u64) {
        let f = profile.frame(leaf);
        *self.by_frame.entry(leaf).or_default().entry(stack).or_default() += w;
        *self.by_function.entry((f.file.as_str(), f.function.as_str())).or_default().entry(stack).or_default() += w;
        *self.by_file.entry(f.file.as_str()).or_default().entry(stack).or_default() += w;
    }
}

pub fn diagnose(profile: &Profile, kb: &KnowledgeBase, user: &UserCode, opts: &Options) -> Diagnosis {
    let mut engine = Engine {
        profile,
        kb,
        user,
        frames: (0..profile.frames().len()).map(|_| None).collect(),
        stacks: vec![None; profile.stack_count()],
        stack_facts: Vec::new(),
        lines: Vec::new(),
        line_of_frame: HashMap::new(),
        source: SourceCache::default(),
    };
    engine.run(opts)
}

struct Engine<'a> {
    profile: &'a Profile,
    kb: &'a KnowledgeBase,
    user: &'a UserCode,
    frames: Vec<Option<FrameFacts>>,
    stacks: Vec<Option<u32>>,
    stack_facts: Vec<StackFacts>,
    lines: Vec<LineAcc>,
    line_of_frame: HashMap<FrameId, usize>,
    source: SourceCache,
}

impl Engine<'_> {
    fn frame(&mut self, id: FrameId) -> &FrameFacts {
        if self.frames[id as usize].is_none() {
            let frame = self.profile.frame(id);
            let origin = self.user.origin(frame);
            let qualified = qualified_name(frame);
            let unqualified = unqualified_name(frame);
            let mut cost = Vec::new();
            let mut idle = None;
            for (i, e) in self.kb.entries.iter().enumerate() {
                if e.matches_frame(frame.kind, &qualified)
                    || unqualified.as_deref().is_some_and(|u| e.matches_frame(frame.kind, u))
                {
                    match e.spec.role {
                        Role::Cost => cost.push(i as u16),
                        Role::Idle => idle = idle.or(Some(i as u16)),
                    }
                }
            }
            self.frames[id as usize] = Some(FrameFacts { origin, qualified, cost, idle });
        }
        self.frames[id as usize].as_ref().unwrap()
    }

    fn stack(&mut self, stack: Option<StackId>) -> Option<usize> {
        let id = stack?;
        if let Some(i) = self.stacks[id as usize] {
            return Some(i as usize);
        }
        let leaf_first: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(id)).collect();
        let frontier_at = leaf_first.iter().position(|&f| self.frame(f).origin == Origin::User);
        let frontier = frontier_at.map(|i| leaf_first[i]);
        let beneath: Vec<FrameId> = leaf_first[..frontier_at.unwrap_or(leaf_first.len())].to_vec();
        let callers: Vec<FrameId> = match frontier_at {
            Some(i) => {
                leaf_first[i + 1..].iter().copied().filter(|&f| self.frame(f).origin == Origin::User).take(3).collect()
            }
            None => Vec::new(),
        };
        let innermost_python = leaf_first.iter().copied().find(|&f| self.profile.frame(f).kind == FrameKind::Python);
        // The parking entry, and where in the stack (leaf first) the frame that matched it is.
        let mut idle = innermost_python.and_then(|f| {
            let at = leaf_first.iter().position(|&x| x == f)?;
            self.frame(f).idle.map(|e| (e, at))
        });
        // Native stacks: a user line that calls a wait for other threads (a join, a wait group,
        // a channel receive) is parked; the entry is matched on the function the line calls.
        // A leaf the sampler added to say what the thread waits for (a client's next request).
        if idle.is_none() && innermost_python.is_none() {
            idle = leaf_first
                .first()
                .filter(|&&f| self.profile.frame(f).function == onefix_model::INBOUND_WAIT_FRAME)
                .and_then(|&f| self.frame(f).idle.map(|e| (e, 0)));
        }
        if idle.is_none() && innermost_python.is_none() {
            idle = beneath.last().and_then(|&called| {
                let at = leaf_first.iter().position(|&x| x == called)?;
                self.frame(called).idle.map(|e| (e, at))
            });
        }
        if idle.is_none() && frontier.is_none() {
            let candidates: Vec<(u16, usize)> =
                leaf_first.iter().enumerate().filter_map(|(at, &f)| self.frame(f).idle.map(|e| (e, at))).collect();
            idle = candidates.into_iter().find(|&(e, _)| self.kb.entries[e as usize].spec.anywhere);
        }
        // A parking primitive called by a known cost (an HTTP client waiting for its reply
        // through an asyncio.Event) is waiting for that cost, not parked for want of work. A
        // cost under the parking frame (a kept-alive server connection reading its next
        // request) does not count: the thread is parked in it.
        let idle = match idle {
            // Native stacks: the Go runtime parks goroutines under library costs that wait for
            // nothing the program asked for (a kept-alive connection's read loop under
            // net.(*conn).Read); a native parking entry decides alone.
            Some((e, _)) if innermost_python.is_none() => Some(e),
            Some((e, at)) if !beneath.iter().skip(at + 1).any(|&f| !self.frame(f).cost.is_empty()) => Some(e),
            _ => None,
        };
        let truncated = leaf_first.last().is_some_and(|&root| !self.profile.frame(root).can_start_stack());
        let waiting_call = match leaf_first.first() {
            Some(&leaf) if self.profile.frame(leaf).kind == FrameKind::Python => {
                let mut entries = self.frame(leaf).cost.clone();
                entries.extend(self.call_entries(leaf));
                entries.iter().any(|&e| self.kb.entries[e as usize].spec.when == When::Blocked)
            }
            _ => false,
        };
        let mut cost: Vec<u16> = Vec::new();
        for &f in &beneath {
            cost.extend(self.frame(f).cost.iter().copied());
        }
        // Calls into C have no frame of their own: read them off the innermost Python line.
        if let Some(f) = innermost_python.filter(|_| frontier.is_some()) {
            cost.extend(self.call_entries(f));
        }
        cost.sort_unstable();
        cost.dedup();
        let line = frontier.map(|f| {
            let next = self.lines.len();
            *self.line_of_frame.entry(f).or_insert_with(|| next)
        });
        if line == Some(self.lines.len()) {
            self.lines.push(LineAcc { frame: frontier.unwrap(), ..LineAcc::default() });
        }
        let importing = frontier_at.is_some_and(|i| {
            self.profile.frame(leaf_first[i]).function == "<module>"
                && leaf_first[i + 1..].iter().any(|&f| self.profile.frame(f).is_import_machinery())
        });
        let i = self.stack_facts.len();
        let leaf = leaf_first.first().copied();
        let cut_short = leaf_first.last().is_some_and(|&root| {
            let f = self.profile.frame(root);
            f.kind == FrameKind::Native && !onefix_model::native_frame_can_start_stack(&f.function)
        });
        self.stack_facts.push(StackFacts {
            callers,
            beneath,
            idle,
            truncated,
            cost,
            line,
            waiting_call,
            importing,
            leaf,
            cut_short,
        });
        self.stacks[id as usize] = Some(i as u32);
        Some(i)
    }

    /// Whether the sample's thread was running: the state it was read in, unless its stack
    /// shows it inside a call that waits.
    fn running(&mut self, s: &Sample) -> bool {
        s.state.active() && !self.stack(s.stack).is_some_and(|i| self.stack_facts[i].waiting_call)
    }

    fn incomplete(&mut self, stack: Option<StackId>) -> bool {
        match self.stack(stack) {
            None => true,
            Some(i) => self.stack_facts[i].line.is_none() && self.stack_facts[i].truncated,
        }
    }

    /// For a line that waits for a lock, the line where the time goes while the lock is held
    /// (the frontier of the samples read inside the held block, on any thread), and its weight.
    fn held_work(&mut self, l: usize, mode: Mode) -> Option<(usize, u64)> {
        let profile = self.profile;
        let lock = profile.frame(self.lines[l].frame);
        let path = self.user.resolve(&lock.file)?;
        let (first, last) = self.source.held_block(&path, lock.line)?;
        let inside = |f: &onefix_model::Frame| {
            f.file == lock.file && f.function == lock.function && (first..=last).contains(&f.line)
        };
        let mut in_block: HashMap<StackId, bool> = HashMap::new();
        let mut by_line: HashMap<usize, u64> = HashMap::new();
        for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
            let Some(stack) = s.stack else { continue };
            let held = *in_block
                .entry(stack)
                .or_insert_with(|| profile.stack_frames_leaf_first(Some(stack)).any(|f| inside(profile.frame(f))));
            if !held || self.parked(Some(stack)).is_some() {
                continue;
            }
            if let Some(line) = self.stack(Some(stack)).and_then(|i| self.stack_facts[i].line) {
                *by_line.entry(line).or_default() += s.weight as u64;
            }
        }
        by_line.into_iter().filter(|&(line, _)| line != l).max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// Adds sample `s` to `line`, as read with `stack` (its own, or for a torn read the clean
    /// stack it stands for).
    fn charge(&mut self, line: usize, stack: StackId, s: &Sample, running: bool, window: usize, nwindows: usize) {
        let w = s.weight as u64;
        let facts = &self.stack_facts[self.stacks[stack as usize].unwrap() as usize];
        let (is_self, importing) = (facts.beneath.is_empty(), facts.importing);
        let acc = &mut self.lines[line];
        acc.weight += w;
        if importing {
            acc.importing += w;
        }
        if is_self {
            acc.self_weight += w;
        }
        if !running {
            acc.blocked += w;
            let (weight, threads) = acc.blocked_windows.entry(s.time_us / IN_FLIGHT_WINDOW_US).or_default();
            *weight += w;
            if threads.len() < MAX_THREADS_PER_WINDOW && !threads.contains(&s.thread) {
                threads.push(s.thread);
            }
        }
        if acc.windows.is_empty() {
            acc.windows = vec![0; nwindows.div_ceil(64)];
            acc.first_us = s.time_us;
        }
        acc.first_us = acc.first_us.min(s.time_us);
        acc.last_us = acc.last_us.max(s.time_us);
        acc.windows[window / 64] |= 1 << (window % 64);
        *acc.by_stack.entry((stack, running)).or_default() += w;
    }

    /// Charges a read that was left out at first (torn or empty) to `line` through `stack`,
    /// and counts it in the busy time; gives its weight.
    fn place(
        &mut self,
        s: &Sample,
        line: usize,
        stack: StackId,
        (window_us, nwindows): (u64, usize),
        busy_timeline: &mut Vec<(u64, u64, u64)>,
        active_windows: &mut [bool],
    ) -> u64 {
        let w = s.weight as u64;
        let running = self.running(s);
        busy_timeline.push((s.time_us, w, if running { w } else { 0 }));
        let window = (s.time_us / window_us) as usize;
        active_windows[window] = true;
        self.charge(line, stack, s, running, window, nwindows);
        w
    }

    /// Of clean stacks sharing an innermost frame (with their weights), the heaviest stack of
    /// the line they are charged to, when that line holds [`TORN_SOLE_LINE`] of their weight
    /// and there are enough of them to say so.
    fn sole_line_stack(&mut self, stacks: Option<&HashMap<StackId, u64>>) -> SoleLine {
        let Some(stacks) = stacks else { return SoleLine::TooFew };
        // line -> (weight, heaviest stack, its weight)
        let mut by_line: HashMap<usize, (u64, StackId, u64)> = HashMap::new();
        let mut total = 0u64;
        for (&stack, &w) in stacks {
            let Some(line) = self.stack(Some(stack)).and_then(|i| self.stack_facts[i].line) else {
                return SoleLine::Split;
            };
            total += w;
            let e = by_line.entry(line).or_insert((0, stack, 0));
            e.0 += w;
            if w > e.2 || (w == e.2 && stack < e.1) {
                (e.1, e.2) = (stack, w);
            }
        }
        match by_line.iter().max_by_key(|(&l, &(w, _, _))| (w, std::cmp::Reverse(l))) {
            _ if total < TORN_MIN_CLEAN => SoleLine::TooFew,
            Some((_, &(weight, stack, _))) if weight as f64 >= TORN_SOLE_LINE * total as f64 => SoleLine::Line(stack),
            _ => SoleLine::Split,
        }
    }

    /// The stack to charge a torn read with innermost frame `leaf` through: asked of the clean
    /// reads with that frame, then (too few of those) with its function, then with its file.
    fn sole_line_by_leaf(&mut self, clean: &CleanByLeaf, leaf: FrameId) -> Option<StackId> {
        let f = self.profile.frame(leaf);
        let by_function = clean.by_function.get(&(f.file.as_str(), f.function.as_str()));
        let by_file = clean.by_file.get(f.file.as_str()).filter(|_| !f.file.is_empty());
        for stacks in [clean.by_frame.get(&leaf), by_function, by_file] {
            match self.sole_line_stack(stacks) {
                SoleLine::Line(stack) => return Some(stack),
                SoleLine::Split => return None,
                SoleLine::TooFew => {}
            }
        }
        None
    }

    /// The user line a stack is charged to, if any.
    fn line_of(&mut self, stack: Option<StackId>) -> Option<usize> {
        self.stack(stack).and_then(|i| self.stack_facts[i].line)
    }

    /// Whether the stack waits on the clock (a sleep): see [`crate::kb::EntrySpec::timer`].
    fn on_timer(&mut self, stack: Option<StackId>) -> bool {
        let Some(i) = self.stack(stack) else { return false };
        self.stack_facts[i].cost.iter().any(|&e| self.kb.entries[e as usize].spec.timer)
    }

    /// `Some(busy_time)` when the stack is parked for want of work.
    fn parked(&mut self, stack: Option<StackId>) -> Option<bool> {
        let i = self.stack(stack)?;
        let e = self.stack_facts[i].idle?;
        Some(self.kb.entries[e as usize].spec.busy_time)
    }

    fn call_entries(&mut self, frame: FrameId) -> Vec<u16> {
        let f = self.profile.frame(frame);
        let Some(path) = self.user.resolve(&f.file) else { return Vec::new() };
        let Some(code) = self.source.line(&path, f.line) else { return Vec::new() };
        let names = called_names(&code);
        self.kb
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.spec.role == Role::Cost && names.iter().any(|n| e.matches_call(n)))
            .map(|(i, _)| i as u16)
            .collect()
    }

    fn run(&mut self, opts: &Options) -> Diagnosis {
        let profile = self.profile;
        let mode = opts.mode;
        let end_us = profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0);
        let window_us = if end_us >= 10_000_000 { 1_000_000 } else { (end_us / 10).max(onefix_model::MERGE_SPAN_US) };
        let nwindows = (end_us / window_us + 1) as usize;

        // Pass 1: how much of each thread is parked, and how. A parked sample is never a cost;
        // an event-loop wait still counts in the elapsed time of a thread that also works.
        let nthreads = profile.threads().len();
        let mut thread_total = vec![0u64; nthreads];
        let mut thread_parked = vec![0u64; nthreads];
        let mut thread_on_timer = vec![0u64; nthreads];
        for s in profile.samples.iter() {
            let running = self.running(s);
            if mode == Mode::Cpu && !running {
                continue;
            }
            // Torn and empty stacks say nothing about whether a thread works.
            if self.incomplete(s.stack) {
                continue;
            }
            thread_total[s.thread as usize] += s.weight as u64;
            if self.parked(s.stack).is_some() {
                thread_parked[s.thread as usize] += s.weight as u64;
            }
            if !running && self.on_timer(s.stack) {
                thread_on_timer[s.thread as usize] += s.weight as u64;
            }
        }
        let works: Vec<bool> = (0..nthreads)
            .map(|t| {
                thread_total[t] > 0
                    && (thread_total[t] - thread_parked[t]) as f64 >= WORKING_THREAD * thread_total[t] as f64
            })
            .collect();
        // A watchdog or a flusher sleeping beside threads that do the work is not their cost.
        let on_timer: Vec<bool> = (0..nthreads)
            .map(|t| thread_total[t] > 0 && thread_on_timer[t] as f64 >= TIMER_THREAD * thread_total[t] as f64)
            .collect();
        let background: Vec<bool> =
            (0..nthreads).map(|t| on_timer[t] && (0..nthreads).any(|o| o != t && works[o] && !on_timer[o])).collect();

        // Pass 2: charge the samples to their frontier lines.
        let mut active_windows = vec![false; nwindows];
        // Busy weight over time: the denominator of a line's share over the stretch where it
        // recurs (first to last sighting), which leaves start-up and wind-down out of its gain
        // bound.
        // With each sample's running weight: the CPU work that stays when a line's cost goes.
        let mut busy_timeline: Vec<(u64, u64, u64)> = Vec::new();
        let mut total_weight = 0u64;
        let mut idle_weight = 0u64;
        let mut incomplete = 0u64;
        let mut parked_in_busy = 0u64;
        let mut outside_user = 0u64;
        // Idle weight by the user line that waits: where a program that does nothing stalls.
        let mut idle_at: HashMap<usize, u64> = HashMap::new();
        // Reads that could not be charged (torn with no user frame, or empty), and the clean
        // stacks charged to a line by innermost frame, to place them afterwards (see below).
        let mut unplaced: Vec<&Sample> = Vec::new();
        let mut cut_short = 0u64;
        let mut clean = CleanByLeaf::default();
        // Every charged read, by thread and time: the reads around an unplaced one.
        let mut placed: Vec<(ThreadId, u64, usize, StackId)> = Vec::new();
        for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
            let running = self.running(s);
            let w = s.weight as u64;
            // Every sample the mode counts is in the total, as every writer counts it; one read
            // as running inside a call that waits is no CPU cost, and is left out as idle.
            total_weight += w;
            if mode == Mode::Cpu && !running {
                idle_weight += w;
                continue;
            }
            let window = (s.time_us / window_us) as usize;
            if background[s.thread as usize] {
                idle_weight += w;
                if let Some(line) = self.line_of(s.stack) {
                    *idle_at.entry(line).or_default() += w;
                }
                continue;
            }
            match self.parked(s.stack) {
                Some(true) if works[s.thread as usize] => {
                    parked_in_busy += w;
                    busy_timeline.push((s.time_us, w, 0));
                    continue;
                }
                Some(_) => {
                    idle_weight += w;
                    if let Some(line) = self.line_of(s.stack) {
                        *idle_at.entry(line).or_default() += w;
                    }
                    continue;
                }
                None => {}
            }
            let Some(i) = self.stack(s.stack) else {
                // No frames at all: a torn read or a thread outside the interpreter.
                incomplete += w;
                unplaced.push(s);
                continue;
            };
            let facts = &self.stack_facts[i];
            if facts.line.is_none() && facts.truncated {
                incomplete += w;
                unplaced.push(s);
                continue;
            }
            busy_timeline.push((s.time_us, w, if running { w } else { 0 }));
            active_windows[window] = true;
            let Some(line) = facts.line else {
                outside_user += w;
                if facts.cut_short {
                    cut_short += w;
                }
                continue;
            };
            if let (false, Some(leaf)) = (facts.truncated, facts.leaf) {
                clean.add(profile, leaf, s.stack.unwrap(), w);
            }
            self.charge(line, s.stack.unwrap(), s, running, window, nwindows);
            placed.push((s.thread, s.time_us, line, s.stack.unwrap()));
        }
        // A torn read lost its outer frames, not its innermost one, which is read first. When
        // the clean reads with that innermost frame were (90% at least) charged to one line,
        // the torn read is charged there too: leaving it out would bias the shares against
        // deep, fast-changing code, where reads tear most. With too few clean reads of that
        // very frame, its function's, then its file's say where it belongs.
        let mut recovered = 0u64;
        let mut by_leaf: HashMap<FrameId, Option<StackId>> = HashMap::new();
        let mut still_unplaced: Vec<&Sample> = Vec::new();
        for s in unplaced {
            let leaf = self.stack(s.stack).and_then(|i| self.stack_facts[i].leaf);
            let stack = leaf.and_then(|leaf| match by_leaf.get(&leaf) {
                Some(&known) => known,
                None => {
                    let chosen = self.sole_line_by_leaf(&clean, leaf);
                    by_leaf.insert(leaf, chosen);
                    chosen
                }
            });
            let Some((stack, line)) =
                stack.and_then(|st| Some((st, self.stack(Some(st)).and_then(|i| self.stack_facts[i].line)?)))
            else {
                still_unplaced.push(s);
                continue;
            };
            let w = self.place(s, line, stack, (window_us, nwindows), &mut busy_timeline, &mut active_windows);
            incomplete -= w;
            recovered += w;
            placed.push((s.thread, s.time_us, line, stack));
        }
        // What is still unplaced (an empty read, a torn one of code seen nowhere else) is
        // charged to the line its thread was read in just before and just after it, when both
        // reads are that line and close in time: leaving it out would again bias the shares
        // against the code where reads fail most, and a line on both sides is where the thread
        // most likely was.
        placed.sort_unstable_by_key(|&(thread, t, _, _)| (thread, t));
        let mut bracketed = 0u64;
        for s in still_unplaced {
            let from = placed.partition_point(|&(thread, t, _, _)| (thread, t) <= (s.thread, s.time_us));
            let (Some(before), Some(after)) = (from.checked_sub(1).map(|i| placed[i]), placed.get(from).copied())
            else {
                continue;
            };
            if before.0 != s.thread || after.0 != s.thread || before.2 != after.2 || after.1 - before.1 > BRACKET_US {
                continue;
            }
            let w = self.place(s, before.2, before.3, (window_us, nwindows), &mut busy_timeline, &mut active_windows);
            incomplete -= w;
            bracketed += w;
        }
        let busy_weight = total_weight - idle_weight - incomplete;
        busy_timeline.sort_by_key(|&(t, _, _)| t);
        let (mut cumulative, mut cumulative_running) = (0u64, 0u64);
        let busy_cumulative: Vec<(u64, u64, u64)> = busy_timeline
            .iter()
            .map(|&(t, w, r)| {
                cumulative += w;
                cumulative_running += r;
                (t, cumulative, cumulative_running)
            })
            .collect();
        // Busy and running weight of the samples taken from `from` to `to` inclusive.
        let busy_between = |from: u64, to: u64| -> Stretch {
            let start = busy_cumulative.partition_point(|&(t, _, _)| t < from);
            let end = busy_cumulative.partition_point(|&(t, _, _)| t <= to);
            let upto = |i: usize| if i == 0 { (0, 0) } else { (busy_cumulative[i - 1].1, busy_cumulative[i - 1].2) };
            let ((b0, r0), (b1, r1)) = (upto(start), upto(end));
            Stretch { busy: b1 - b0, running: r1 - r0, seconds: to.saturating_sub(from) as f64 / 1e6 }
        };
        let active_window_count = active_windows.iter().filter(|&&a| a).count().max(1);

        let share = |w: u64| if busy_weight == 0 { 0.0 } else { w as f64 / busy_weight as f64 };
        let mut order: Vec<usize> = (0..self.lines.len()).filter(|&l| self.lines[l].weight > 0).collect();
        order.sort_by(|&a, &b| {
            self.lines[b].weight.cmp(&self.lines[a].weight).then(self.lines[a].frame.cmp(&self.lines[b].frame))
        });

        let mut hot_lines = Vec::new();
        for &l in order.iter().take(opts.max_hot_lines) {
            let acc = &self.lines[l];
            let frame = profile.frame(acc.frame).clone();
            let code = self.code(&frame.file, frame.line);
            let acc = &self.lines[l];
            hot_lines.push(HotLine {
                file: frame.file.clone(),
                line: frame.line,
                function: frame.function.clone(),
                code,
                weight: acc.weight,
                share: share(acc.weight),
                self_share: share(acc.self_weight),
                blocked_share: share(acc.blocked),
            });
        }

        let mut findings: Vec<Finding> = Vec::new();
        let mut notes = Vec::new();
        // A program that is almost never on a CPU has no CPU cost worth a finding: a few stray
        // samples would otherwise make "100% of the CPU time".
        let ticks = profile.meta.stats.ticks;
        let mostly_waiting = mode == Mode::Cpu && ticks > 0 && (busy_weight as f64) < MIN_CPU_USE * ticks as f64;
        if mostly_waiting {
            notes.push(format!(
                "the program was on a CPU in only {:.0}% of the samples: its time goes to waiting, so record in wall mode to see where",
                busy_weight as f64 * 100.0 / ticks as f64
            ));
        }
        let too_few = matches!(profile.meta.weight_unit, WeightUnit::Samples { .. })
            && busy_weight < MIN_BUSY_SAMPLES
            && !mostly_waiting;
        if too_few {
            let idle = if total_weight > 0 {
                format!(", idle {:.1}% of the time", idle_weight as f64 * 100.0 / total_weight as f64)
            } else {
                String::new()
            };
            notes.push(format!(
                "too few busy samples ({busy_weight} of {total_weight}{idle}) to name a line: at least {MIN_BUSY_SAMPLES} are needed; drive it with --load, or record longer or at a higher --rate"
            ));
        }
        for &l in order.iter().filter(|_| !mostly_waiting && !too_few) {
            if findings.len() >= opts.max_findings || share(self.lines[l].weight) < opts.min_share {
                break;
            }
            if self.lines[l].weight < MIN_FINDING_WEIGHT {
                continue;
            }
            let recurrence = {
                let seen: u32 = self.lines[l].windows.iter().map(|w| w.count_ones()).sum();
                seen as f64 / active_window_count as f64
            };
            let frame = profile.frame(self.lines[l].frame).clone();
            if self.lines[l].importing * 2 > self.lines[l].weight {
                notes.push(format!(
                    "{}:{} took {:.0}% while its module was being imported (start-up, once per process), so it is not a finding",
                    short(&frame.file),
                    frame.line,
                    share(self.lines[l].weight) * 100.0
                ));
                continue;
            }
            if active_window_count >= 4 && recurrence < opts.min_recurrence {
                notes.push(format!(
                    "{}:{} took {:.0}% but only in {:.0}% of the time windows (start-up or a one-off), so it is not a finding",
                    short(&frame.file),
                    frame.line,
                    share(self.lines[l].weight) * 100.0,
                    recurrence * 100.0
                ));
                continue;
            }
            let stretch = busy_between(self.lines[l].first_us, self.lines[l].last_us);
            let mut finding = self.explain(l, recurrence, &stretch, &share, opts);
            if finding.kind == "lock-contention" {
                // Said with what the holder does meanwhile: that is the work to move out.
                if let Some((held_line, w)) = self.held_work(l, mode) {
                    let f = profile.frame(self.lines[held_line].frame).clone();
                    let code = self.code(&f.file, f.line).unwrap_or_else(|| f.function.clone());
                    finding.why = format!(
                        "{}; while it is held, the holder spends {:.0}% of the time at {}:{} `{}`",
                        finding.why,
                        share(w) * 100.0,
                        short(&f.file),
                        f.line,
                        code
                    );
                    finding.evidence.insert(
                        0,
                        Evidence {
                            frame: format!("{code} (while the lock is held)"),
                            file: f.file.clone(),
                            line: f.line,
                            share: share(w),
                        },
                    );
                    finding.evidence.truncate(6);
                }
            }
            // Several lines repeated by one loop are one finding at that loop.
            if let Some(prev) = findings.iter_mut().find(|f| f.file == finding.file && f.line == finding.line) {
                prev.share += finding.share;
                prev.max_speedup = match (prev.max_speedup, finding.max_speedup) {
                    // Amdahl over the two lines' steady shares, recovered from their bounds.
                    (Some(a), Some(b)) => speedup((1.0 - 1.0 / a) + (1.0 - 1.0 / b)),
                    _ => None,
                };
                // Their stretches overlap: the longer one stands for both.
                prev.bound_weight = prev.bound_weight.max(finding.bound_weight);
                prev.evidence.extend(finding.evidence);
                prev.evidence.truncate(6);
                continue;
            }
            findings.push(finding);
        }
        merge_within_functions(&mut findings, |rule| self.kb.entries.iter().any(|e| e.spec.id == rule));
        self.merge_consequences(&mut findings);
        findings.sort_by(|a, b| b.share.total_cmp(&a.share));
        for (i, f) in findings.iter_mut().enumerate() {
            f.rank = i + 1;
        }

        let share_of = match mode {
            Mode::Wall => "wall time of the busy threads",
            Mode::Cpu => "CPU time",
        };
        if idle_weight > 0 && idle_weight * 100 >= total_weight {
            notes.insert(0, format!(
                "threads idle for want of work (waiting on a queue, for connections, for other threads, or sleeping beside threads that work): {:.0}% of the sampled time, not counted as cost",
                idle_weight as f64 * 100.0 / total_weight as f64
            ));
        }
        // A program idle nearly all the time may be stalled on the wait itself (a poll for an
        // answer that comes late): say where its threads wait, without calling it a cost.
        if idle_weight * 10 >= total_weight * 9 {
            let mut waits: Vec<(usize, u64)> = idle_at.iter().map(|(&l, &w)| (l, w)).collect();
            waits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let named: Vec<String> = waits
                .iter()
                .take(2)
                .filter(|&&(_, w)| w * 10 >= total_weight)
                .map(|&(line, w)| {
                    let f = profile.frame(self.lines[line].frame).clone();
                    let code = self.code(&f.file, f.line).map(|c| format!(" `{c}`")).unwrap_or_default();
                    format!("{}:{}{} ({:.0}%)", short(&f.file), f.line, code, w as f64 * 100.0 / total_weight as f64)
                })
                .collect();
            if !named.is_empty() {
                notes.push(format!(
                    "the threads waited for work or for each other {:.0}% of the time, mostly at {}: if the program should have been busy, that is where it stalls",
                    idle_weight as f64 * 100.0 / total_weight as f64,
                    named.join(" and ")
                ));
            }
        }
        if incomplete > 0 && total_weight > 0 && incomplete * 100 >= total_weight {
            notes.push(format!(
                "{:.0}% of the samples had an incomplete stack (read while the target changed it) and were left out",
                incomplete as f64 * 100.0 / total_weight as f64
            ));
        }
        if recovered > 0 && total_weight > 0 && recovered * 100 >= total_weight {
            notes.push(format!(
                "{:.0}% of the samples were read torn and charged to the one line that complete reads with the same innermost frame were charged to",
                recovered as f64 * 100.0 / total_weight as f64
            ));
        }
        if bracketed > 0 && total_weight > 0 && bracketed * 100 >= total_weight {
            notes.push(format!(
                "{:.0}% of the samples were read empty or torn and charged to the line their thread was read in just before and after",
                bracketed as f64 * 100.0 / total_weight as f64
            ));
        }
        if parked_in_busy > 0 && share(parked_in_busy) >= 0.01 {
            notes.push(format!(
                "{:.0}% of the busy threads' time was spent waiting in an event loop or on other threads, charged to no line",
                share(parked_in_busy) * 100.0
            ));
        }
        let elsewhere = outside_user - cut_short;
        if elsewhere > 0 && share(elsewhere) >= 0.01 {
            notes.push(format!(
                "{:.0}% of the busy threads' time ran outside your code (start-up, imports, the interpreter or runtime)",
                share(elsewhere) * 100.0
            ));
        }
        if cut_short > 0 && share(cut_short) >= 0.01 {
            notes.push(format!(
                "{:.0}% of the busy threads' time is in native stacks cut short before they reached your code (a frame larger than the stack bytes copied per sample, see --stack-bytes, or code without unwind information), so it is charged to no line",
                share(cut_short) * 100.0
            ));
        }
        if self.lines.iter().all(|l| l.weight == 0) && busy_weight > 0 {
            let dirs: Vec<String> = self.user.dirs().iter().map(|d| d.display().to_string()).collect();
            notes.push(format!(
                "no sample ran in your code (taken to be under {}); pass --user-code DIR to say where it is",
                dirs.join(", ")
            ));
        }

        Diagnosis {
            share_of: share_of.to_owned(),
            total_weight,
            busy_weight,
            idle_weight,
            outside_user_weight: outside_user,
            seconds_per_weight: profile.seconds_per_weight(),
            findings,
            hot_lines,
            notes,
        }
    }

    /// Folds a finding into another whose knowledge-base entry causes it, when both are
    /// repeated by the same loop: one cause, one fix, one gain bound.
    fn merge_consequences(&self, findings: &mut Vec<Finding>) {
        let mut i = 0;
        while i < findings.len() {
            let cause = (0..findings.len()).find(|&c| {
                c != i
                    && findings[i].enclosing_loop.is_some()
                    && findings[c].enclosing_loop == findings[i].enclosing_loop
                    && self
                        .kb
                        .entries
                        .iter()
                        .any(|e| e.spec.id == findings[c].rule && e.spec.also_causes.contains(&findings[i].rule))
            });
            let Some(c) = cause else {
                i += 1;
                continue;
            };
            let effect = findings.remove(i);
            let c = if c > i { c - 1 } else { c };
            let target = &mut findings[c];
            // Only the part of the effect's line that the caused entry explains goes away.
            target.share += effect.share * effect.explained;
            target.max_speedup = match (target.max_speedup, effect.max_speedup) {
                (Some(a), Some(b)) => speedup((1.0 - 1.0 / a) + (1.0 - 1.0 / b) * effect.explained),
                _ => None,
            };
            target.bound_weight = target.bound_weight.max(effect.bound_weight);
            let effect_what = self
                .kb
                .entries
                .iter()
                .find(|e| e.spec.id == effect.rule)
                .map(|e| e.spec.what.as_str())
                .unwrap_or("its cost");
            target.why = format!(
                "{}; the same cause means {} at {}:{} ({:.0}%)",
                target.why,
                effect_what,
                short(&effect.file),
                effect.line,
                effect.share * 100.0
            );
            target.evidence.extend(effect.evidence);
            target.evidence.truncate(6);
            i = 0;
        }
    }

    fn code(&mut self, file: &str, line: u32) -> Option<String> {
        let path = self.user.resolve(file)?;
        self.source.line(&path, line).filter(|c| !c.is_empty())
    }

    fn loop_of(&mut self, frame: FrameId) -> Option<(FrameId, u32)> {
        let f = self.profile.frame(frame);
        let path: PathBuf = self.user.resolve(&f.file)?;
        self.source.enclosing_loop(&path, f.line).map(|l| (frame, l))
    }

    /// Says why a line costs: the knowledge-base entry under most of its weight, or what its
    /// thread state and self time show.
    /// `stretch` is the part of the run between the line's first and last sighting: the part
    /// that repeats it, from which the gain bound is computed.
    fn explain(
        &mut self,
        l: usize,
        recurrence: f64,
        stretch: &Stretch,
        share: &dyn Fn(u64) -> f64,
        opts: &Options,
    ) -> Finding {
        let profile = self.profile;
        let mode = opts.mode;
        let by_stack: Vec<((StackId, bool), u64)> = self.lines[l].by_stack.iter().map(|(k, v)| (*k, *v)).collect();
        let mut entry_weight: HashMap<u16, u64> = HashMap::new();
        let mut frame_incl: HashMap<FrameId, u64> = HashMap::new();
        let mut leaf_self: HashMap<FrameId, u64> = HashMap::new();
        // Callers by how far up they are (the line's function's caller first), by weight.
        let mut caller_weight: Vec<HashMap<FrameId, u64>> = Vec::new();
        // The functions the line itself calls, by the weight under each.
        let mut direct_callee: HashMap<FrameId, u64> = HashMap::new();
        // The first frame seen of each function (file, name), which stands for all its lines.
        let mut function_frame: HashMap<(&str, &str), FrameId> = HashMap::new();
        let function_of = |f: FrameId| {
            let fr = profile.frame(f);
            (fr.file.as_str(), fr.function.as_str())
        };
        for &((stack, active), w) in &by_stack {
            let i = self.stacks[stack as usize].unwrap() as usize;
            let facts = &self.stack_facts[i];
            for &e in &facts.cost {
                if self.kb.entries[e as usize].spec.when == When::Any || !active {
                    *entry_weight.entry(e).or_default() += w;
                }
            }
            // By function, not by frame: a function seen at several of its lines is one piece of
            // evidence with all of its time.
            let mut seen = Vec::with_capacity(facts.beneath.len());
            for &f in &facts.beneath {
                let f = *function_frame.entry(function_of(f)).or_insert(f);
                if !seen.contains(&f) {
                    seen.push(f);
                    *frame_incl.entry(f).or_default() += w;
                }
            }
            if let Some(&leaf) = facts.beneath.first() {
                let leaf = *function_frame.entry(function_of(leaf)).or_insert(leaf);
                *leaf_self.entry(leaf).or_default() += w;
            }
            if let Some(&called) = facts.beneath.last() {
                let called = *function_frame.entry(function_of(called)).or_insert(called);
                *direct_callee.entry(called).or_default() += w;
            }
            for (depth, &c) in facts.callers.iter().enumerate() {
                if caller_weight.len() <= depth {
                    caller_weight.push(HashMap::new());
                }
                *caller_weight[depth].entry(c).or_default() += w;
            }
        }
        let acc = &self.lines[l];
        let (weight, self_weight, blocked, frame_id) = (acc.weight, acc.self_weight, acc.blocked, acc.frame);
        let frame = profile.frame(frame_id).clone();

        let best = entry_weight
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&e, &w)| (e, w))
            .filter(|&(_, w)| w as f64 >= ENTRY_EXPLAINS * weight as f64);

        // Evidence: the frame of each matching entry that carries the most weight, then the
        // innermost functions where the time is actually spent.
        let mut evidence: Vec<Evidence> = Vec::new();
        let mut entries: Vec<(u16, u64)> = entry_weight.iter().map(|(&e, &w)| (e, w)).collect();
        entries.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (e, _) in entries.iter().take(3) {
            let top = frame_incl
                .iter()
                .filter(|(&f, _)| self.frames[f as usize].as_ref().is_some_and(|ff| ff.cost.contains(e)))
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
            // Under a hundredth of the time, an entry's frame is noise next to the ones that cost.
            if let Some((&f, &w)) = top.filter(|(_, &w)| share(w) >= 0.01) {
                self.push_evidence(&mut evidence, f, share(w));
            }
        }
        let mut leaves: Vec<(FrameId, u64)> = leaf_self.into_iter().collect();
        leaves.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (f, w) in leaves.into_iter().take(3) {
            if share(w) >= 0.01 {
                self.push_evidence(&mut evidence, f, share(w));
            }
        }

        let line_share = share(weight);
        let loop_here = self.loop_of(frame_id);
        // The loop that repeats the line may be a few calls up (a helper called by a helper
        // called in the loop): the nearest caller, through the heaviest at each level, in a loop.
        let loop_in_caller = caller_weight.iter().find_map(|by_frame| {
            let (&c, _) = by_frame.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
            self.loop_of(c)
        });

        let called: Vec<String> = self
            .code(&frame.file, frame.line)
            // Only method and module calls: builtins (min, len, sum) on a line are part of its
            // own computation.
            .map(|c| called_names(&c).into_iter().filter(|n| n.contains('.')).collect())
            .unwrap_or_default();
        // The self time of a line is in a call with no frame of its own: not one of the
        // calls that show Python frames under the line (those run Python code, seen apart).
        let python_callees: Vec<&str> = direct_callee
            .keys()
            .map(|&f| profile.frame(f))
            .filter(|f| f.kind == FrameKind::Python)
            .map(|f| f.function.rsplit('.').next().unwrap_or(&f.function))
            .collect();
        let compiled_call = called.iter().find(|n| !python_callees.contains(&n.rsplit('.').next().unwrap_or(n)));
        let (kind, rule, what, why, fix) = match (best, compiled_call) {
            (Some((e, _)), _) => {
                let spec = &self.kb.entries[e as usize].spec;
                let mut why = spec.why.clone();
                // A second entry under most of the same time names where it goes inside.
                if let Some(&(inner, w)) = entries.iter().find(|(o, w)| *o != e && *w * 2 >= weight) {
                    why = format!("{why}; most of it is {} ({:.0}%)", self.kb.entries[inner as usize].spec.what, share(w) * 100.0);
                }
                (spec.kind.clone(), spec.id.clone(), spec.what.clone(), why, spec.fix_for(frame.kind).to_owned())
            }
            (None, _) if mode == Mode::Wall && blocked * 2 >= weight => (
                "blocking-wait".to_owned(),
                "blocked".to_owned(),
                "waiting".to_owned(),
                format!("the thread is blocked here {:.0}% of the time, not running", blocked as f64 * 100.0 / weight as f64),
                "find what the line waits for (a lock, a reply, a child process) and overlap or remove the wait".to_owned(),
            ),
            // Self time on a line that calls something is time inside a C function, which has
            // no Python frame of its own.
            (None, Some(c_call)) if self_weight * 2 >= weight => (
                "hot-call".to_owned(),
                "c-call".to_owned(),
                format!("calling {c_call}()"),
                format!("the time is spent inside {c_call}(), compiled code called from this line that has no Python frames of its own (record with --native to see inside it)"),
                format!("call {c_call}() less often (hoist it out of the loop, cache its result, batch the calls), or pass it less data"),
            ),
            (None, _) if self_weight * 2 >= weight => (
                "hot-loop-compute".to_owned(),
                "self-time".to_owned(),
                "running its own code".to_owned(),
                "the time is spent executing this line's own code, not in a library it calls".to_owned(),
                "do less work per pass: move invariant work out of the loop, use a better algorithm or data structure, or a vectorised or compiled library".to_owned(),
            ),
            (None, _) => {
                // Named by the call on the line that carries the most time (not by an entry that
                // explains too little of it to classify the line).
                let heaviest = direct_callee.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(&f, &w)| (f, w));
                if let Some((f, w)) = heaviest {
                    let native = profile.frame(f).kind != FrameKind::Python;
                    let name = unqualified_name(profile.frame(f)).filter(|_| native).unwrap_or_else(|| self.frame(f).qualified.clone());
                    let raw = self.frame(f).qualified.clone();
                    evidence.retain(|e| e.frame != name && e.frame != raw);
                    evidence.insert(0, Evidence { frame: name, file: profile.frame(f).file.clone(), line: profile.frame(f).line, share: share(w) });
                }
                let callee = evidence.first().map(|e| e.frame.clone()).unwrap_or_else(|| "the calls it makes".into());
                (
                    "hot-call".to_owned(),
                    "hot-call".to_owned(),
                    format!("calling {callee}"),
                    format!("most of this line's time is spent in {callee} and what it calls"),
                    format!("call {callee} less often (cache its result, batch the calls) or use a faster alternative"),
                )
            }
        };

        // Serial waits are fixed at the loop that issues them, which may be in a caller.
        let (mut file, mut line, mut function, mut code) =
            (frame.file.clone(), frame.line, frame.function.clone(), self.code(&frame.file, frame.line));

        // Time inside a method of an object built a few lines above, in the same function, by a
        // known set-up call is that set-up's cost paid lazily (a database connection reads its
        // schema on the first statement): the fix is where the object is made.
        let (mut kind, mut rule, mut why, mut fix) = (kind, rule, why, fix);
        // A bound called in a loop's condition runs again on every pass (`i < strlen(s)`
        // re-scans the string each time: the loop is quadratic), though its answer rarely changes.
        let in_condition = matches!(rule.as_str(), "hot-call" | "c-call")
            && self.user.resolve(&frame.file).is_some_and(|p| self.source.bound_recomputed_every_pass(&p, frame.line));
        if in_condition {
            kind = "hot-loop-compute".to_owned();
            rule = "call-in-loop-condition".to_owned();
            why = format!("the loop's condition on this line makes the call again on every pass; {why}");
            fix = "compute it once before the loop (or update it inside the loop when what it depends on changes) instead of calling it in the condition".to_owned();
        }
        // Waits issued one at a time are fixed at the loop; waits that already overlap are not.
        if kind == "serial-io" {
            if let Some((mean, peak)) = self.in_flight(l) {
                if mean >= OVERLAPPING_WAITS {
                    kind = "blocking-wait".to_owned();
                    rule = format!("{rule}-concurrent");
                    why = format!("{:.1} waits are in flight at once here (mean over {} ms windows, at most {:.1}): they already overlap, so the time is the replies' own latency", mean, IN_FLIGHT_WINDOW_US / 1000, peak);
                    fix = "the waits already overlap: make each shorter (a closer or faster service, smaller replies, a cache) or issue fewer of them".to_owned();
                } else {
                    why = format!(
                        "{why}; one wait in flight at a time (mean {mean:.1} over {} ms windows, at most {peak:.1})",
                        IN_FLIGHT_WINDOW_US / 1000
                    );
                    evidence.push(Evidence {
                        frame: format!("waits in flight at once: {mean:.1} (mean), {peak:.1} (peak)"),
                        file: String::new(),
                        line: 0,
                        share: line_share,
                    });
                }
            }
        }
        // A query on a connection opened a few lines above is that connection's set-up too.
        if kind == "hot-call" || kind == "n-plus-one-query" {
            if let Some((made_at, made_code, e)) = self.lazy_setup(&frame.file, frame.line, &called) {
                let spec = &self.kb.entries[e as usize].spec;
                evidence.insert(
                    0,
                    Evidence {
                        frame: format!("{} (first use)", code.clone().unwrap_or_default()),
                        file: file.clone(),
                        line,
                        share: line_share,
                    },
                );
                why = format!(
                    "{}; the set-up is finished lazily, so its cost shows at the first use on line {}",
                    spec.why, frame.line
                );
                (kind, rule, fix) = (spec.kind.clone(), spec.id.clone(), spec.fix_for(frame.kind).to_owned());
                line = made_at;
                code = Some(made_code);
            }
        }
        let enclosing = loop_here.or(loop_in_caller);
        // Waits no loop of the user's repeats (a handler's one call to its backend) have
        // nothing to overlap with: the reply's own latency is the cost.
        if kind == "serial-io" && enclosing.is_none() {
            kind = "blocking-wait".to_owned();
            rule = format!("{rule}-single");
            why = "the thread waits here for one reply at a time, and no loop in your code repeats the call, so there is nothing to overlap it with: the time is the reply's own latency".to_owned();
            fix = "make the reply faster (a closer or faster service, a kept-alive connection, smaller replies, a cache of answers that repeat), or start the request earlier, alongside other work".to_owned();
        }
        if kind == "serial-io" {
            if let Some((owner, loop_line)) = enclosing {
                let owner = profile.frame(owner).clone();
                evidence.insert(
                    0,
                    Evidence {
                        frame: format!(
                            "{} (the call that waits)",
                            code.clone().unwrap_or_else(|| frame.function.clone())
                        ),
                        file: file.clone(),
                        line,
                        share: line_share,
                    },
                );
                file = owner.file.clone();
                line = loop_line;
                function = owner.function.clone();
                code = self.code(&owner.file, loop_line);
            }
        }
        let enclosing_loop = enclosing.map(|(owner, l)| format!("{}:{}", short(&profile.frame(owner).file), l));
        let advice = match (&enclosing_loop, kind.as_str()) {
            (Some(at), k) if k != "serial-io" => format!("{fix} (the loop is at {at})"),
            _ => fix,
        };
        let explained_share = best.map(|(_, w)| share(w)).unwrap_or(line_share);
        let title = format!(
            "{} takes {:.0}% of the {} under {}:{}",
            capitalize(&what),
            explained_share * 100.0,
            match mode {
                Mode::Wall => "busy threads' wall time",
                Mode::Cpu => "CPU time",
            },
            short(&frame.file),
            frame.line
        );
        evidence.truncate(6);
        let amdahl = speedup(weight as f64 / stretch.busy.max(1) as f64);
        // The work the line does not do stays, and runs on the machine's CPUs at best: a
        // bound past that (a lock whose holders compute, on fewer CPUs than threads) is no bound.
        let line_running = weight - blocked;
        let cpu_cap = match (opts.cpus, profile.seconds_per_weight()) {
            (Some(cpus), Some(spw)) if stretch.seconds > 0.0 && stretch.running > line_running => {
                let cpu_seconds = (stretch.running - line_running) as f64 * spw;
                Some((cpus as f64 * stretch.seconds / cpu_seconds, cpus, cpu_seconds))
            }
            _ => None,
        };
        let max_speedup = match (amdahl, cpu_cap) {
            (Some(a), Some((cap, cpus, cpu_seconds))) if cap < a => {
                why = format!(
                    "{why}; the work that stays needs {cpu_seconds:.1} CPU-seconds of this {:.1} s stretch on the machine's {cpus} CPUs, so removing this cost can gain {cap:.1}x at most",
                    stretch.seconds
                );
                Some(cap.max(1.0))
            }
            (a, _) => a,
        };
        Finding {
            rank: 0,
            kind,
            file,
            line,
            function,
            code,
            share: line_share,
            max_speedup,
            bound_weight: stretch.busy,
            explained: best.map(|(_, w)| w as f64 / weight.max(1) as f64).unwrap_or(1.0),
            title,
            advice,
            why,
            evidence,
            recurrence,
            rule,
            enclosing_loop,
        }
    }

    /// For a line calling `obj.method(...)`, the line above in the same function that made
    /// `obj` with a call a set-up entry knows, and that entry.
    fn lazy_setup(&mut self, file: &str, line: u32, called: &[String]) -> Option<(u32, String, u16)> {
        let path = self.user.resolve(file)?;
        let receiver =
            called.iter().find_map(|c| c.rsplit_once('.').map(|(r, _)| r.trim_start_matches("self.").to_owned()))?;
        let (made_at, made_code) = self.source.assignment_of(&path, line, &receiver)?;
        let names = called_names(&made_code);
        let entry = self.kb.entries.iter().position(|e| {
            e.spec.role == Role::Cost
                && matches!(e.spec.kind.as_str(), "repeated-setup" | "new-connection-per-request")
                && names.iter().any(|n| e.matches_call(n))
        })?;
        Some((made_at, made_code, entry as u16))
    }

    /// How many blocked samples of line `l` are in flight at once: the mean and the peak over
    /// the windows where the line waits, leaving out the first and last (partly covered). The
    /// mean, not the median: a sampler's late tick moves weight between neighbouring windows,
    /// which the mean cancels out. A window counts at most as many waits as threads waited in
    /// it: one thread's late tick can put more than a window's worth of weight in one window.
    fn in_flight(&self, l: usize) -> Option<(f64, f64)> {
        let window_weight = IN_FLIGHT_WINDOW_US as f64 / 1e6 / self.profile.seconds_per_weight()?;
        let windows = &self.lines[l].blocked_windows;
        let (first, last) = (*windows.keys().min()?, *windows.keys().max()?);
        let counts: Vec<f64> = windows
            .iter()
            .filter(|(&k, _)| last - first < 3 || (k != first && k != last))
            .map(|(_, (w, threads))| (*w as f64 / window_weight).min(threads.len() as f64))
            .collect();
        let peak = counts.iter().copied().fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))))?;
        Some((counts.iter().sum::<f64>() / counts.len() as f64, peak))
    }

    fn push_evidence(&mut self, evidence: &mut Vec<Evidence>, f: FrameId, share: f64) {
        let qualified = self.frame(f).qualified.clone();
        if evidence.iter().any(|e| e.frame == qualified) {
            return;
        }
        let frame = self.profile.frame(f);
        evidence.push(Evidence { frame: qualified, file: frame.file.clone(), line: frame.line, share });
    }
}

/// Folds findings of one knowledge-base entry in one function into one, at its first line: one
/// piece of work spread over lines (a file opened on one line and closed on another, two
/// patterns compiled one after the other) is one thing to change. Findings of the built-in
/// rules (a hot call, self time, a wait) name different work at each line, and stay apart.
fn merge_within_functions(findings: &mut Vec<Finding>, is_entry: impl Fn(&str) -> bool) {
    let mut i = 0;
    while i < findings.len() {
        let same = (0..i).find(|&k| {
            let (a, b) = (&findings[k], &findings[i]);
            a.file == b.file
                && a.function == b.function
                && a.rule == b.rule
                && a.line != b.line
                && b.kind != "serial-io"
                && is_entry(&a.rule)
        });
        let Some(k) = same else {
            i += 1;
            continue;
        };
        let other = findings.remove(i);
        let kept = findings[k].clone();
        let (first, second) = if other.line < kept.line { (other, kept) } else { (kept, other) };
        findings[k] = Finding {
            share: first.share + second.share,
            max_speedup: match (first.max_speedup, second.max_speedup) {
                (Some(a), Some(b)) => speedup((1.0 - 1.0 / a) + (1.0 - 1.0 / b)),
                _ => None,
            },
            bound_weight: first.bound_weight.max(second.bound_weight),
            why: format!("{}; the same work goes on at line {} ({:.0}%)", first.why, second.line, second.share * 100.0),
            evidence: first.evidence.iter().chain(&second.evidence).take(6).cloned().collect(),
            ..first
        };
    }
}

/// Amdahl's bound: what is left if this share went to zero; none for a share of 1.
fn speedup(share: f64) -> Option<f64> {
    (share < 1.0).then(|| 1.0 / (1.0 - share))
}

fn short(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onefix_model::{Frame, Meta, ThreadState};
    use std::path::Path;

    const LIB: &str = "/usr/lib/python3.11";
    const SITE: &str = "/venv/lib/python3.11/site-packages";

    /// Builds profiles from (thread, time in ms, active, stack root first).
    struct Builder {
        p: Profile,
    }

    impl Builder {
        fn new() -> Builder {
            Builder { p: Profile::new(Meta::default()) }
        }
        fn add(&mut self, tid: u64, ms: u64, active: bool, stack: &[(&str, &str, u32)]) {
            let t = self.p.intern_thread(1, tid, None);
            let ids: Vec<FrameId> =
                stack.iter().map(|&(f, file, line)| self.p.intern_frame(Frame::python(f, file, line))).collect();
            let s = self.p.intern_stack(ids);
            self.p.samples.push(Sample {
                time_us: ms * 1000,
                thread: t,
                stack: s,
                state: ThreadState::new(active, active),
                weight: 1,
            });
        }
        fn diagnose(&self, dir: &str) -> Diagnosis {
            let user = UserCode::new([dir], Some(Path::new(dir)));
            diagnose(&self.p, &KnowledgeBase::builtin(), &user, &Options::default())
        }
    }

    fn tls_stack() -> Vec<(&'static str, &'static str, u32)> {
        vec![
            ("<module>", "/app/main.py", 40),
            ("drain", "/app/main.py", 12),
            ("AsyncClient.__init__", "/venv/lib/python3.11/site-packages/httpx/_client.py", 1400),
            ("create_ssl_context", "/venv/lib/python3.11/site-packages/httpx/_config.py", 55),
            ("load_ssl_context_verify", "/venv/lib/python3.11/site-packages/httpx/_config.py", 149),
        ]
    }

    #[test]
    fn charges_library_time_to_the_user_line_and_classifies_it() {
        let mut b = Builder::new();
        for ms in 0..1000 {
            if ms % 10 < 8 {
                b.add(1, ms * 10, true, &tls_stack());
            } else {
                b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 40), ("drain", "/app/main.py", 14)]);
            }
        }
        let d = b.diagnose("/app");
        let f = &d.findings[0];
        assert_eq!((f.file.as_str(), f.line), ("/app/main.py", 12));
        assert_eq!(f.kind, "repeated-setup");
        assert!((f.share - 0.8).abs() < 1e-9);
        assert!((f.max_speedup.unwrap() - 5.0).abs() < 0.05, "{:?}", f.max_speedup);
        assert!(f.evidence.iter().any(|e| e.frame == "httpx._config.create_ssl_context"), "{:?}", f.evidence);
        assert_eq!(d.hot_lines[1].line, 14);
        assert!((d.hot_lines[1].self_share - 0.2).abs() < 1e-9);
    }

    #[test]
    fn self_time_is_charged_to_a_compiled_call_only_when_the_call_has_no_python_frames() {
        let (dir, app) = write_app("c-call", "def stamp(rng, raw):\n    return f\"{rng.randrange(10):04d}-{raw!r}\"\n\ndef pack(rng, raw):\n    return zlib.compress(raw) + rng.randbytes(4)\n");
        let random = format!("{LIB}/random.py");
        let run = |line: u32| {
            let mut b = Builder::new();
            for ms in 0..100u64 {
                if ms % 5 == 0 {
                    b.add(
                        1,
                        ms * 10,
                        true,
                        &[("<module>", &app, 9), ("stamp", &app, line), ("Random.randrange", &random, 301)],
                    );
                } else {
                    b.add(1, ms * 10, true, &[("<module>", &app, 9), ("stamp", &app, line)]);
                }
            }
            b.diagnose(dir.to_str().unwrap()).findings[0].clone()
        };
        // randrange runs Python code (seen under the line): the self time is the line's own.
        let f = run(2);
        assert_eq!((f.kind.as_str(), f.rule.as_str()), ("hot-loop-compute", "self-time"), "{f:?}");
        // zlib.compress has no frame: the self time is inside it.
        let f = run(5);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(f.rule, "c-call", "{f:?}");
        assert!(f.why.contains("zlib.compress()"), "{}", f.why);
    }

    #[test]
    fn one_entry_at_several_lines_of_a_function_is_one_finding_at_its_first_line() {
        let (dir, app) =
            write_app("one-function", "def log(line):\n    f = open_log()\n    f.write(line)\n    close_log(f)\n");
        let yaml = format!("{SITE}/yaml/__init__.py");
        let mut b = Builder::new();
        for ms in 0..100u64 {
            // Config parsed at two lines of one function, 40% and 30%; the rest elsewhere.
            let line = match ms % 10 {
                0..=3 => 2,
                4..=6 => 4,
                _ => 3,
            };
            let stack: Vec<(&str, &str, u32)> =
                if line == 3 { vec![("log", &app, 3)] } else { vec![("log", &app, line), ("safe_load", &yaml, 125)] };
            b.add(1, ms * 10, true, &stack);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!((f.rule.as_str(), f.line), ("config-parse", 2), "{:?}", d.findings);
        assert!((f.share - 0.7).abs() < 1e-9, "{}", f.share);
        assert!(f.why.contains("at line 4 (30%)"), "{}", f.why);
        // Amdahl over both lines' shares of the stretches they recur in (slightly over 70%).
        assert!((3.3..4.1).contains(&f.max_speedup.unwrap()), "{:?}", f.max_speedup);
        assert_eq!(d.findings.iter().filter(|f| f.rule == "config-parse").count(), 1);
    }

    #[test]
    fn evidence_counts_a_function_at_all_of_its_lines() {
        let strptime = format!("{LIB}/_strptime.py");
        let mut b = Builder::new();
        for ms in 0..100u64 {
            // The library function is read at a different line of its own half of the time.
            let at = if ms % 2 == 0 { 500 } else { 530 };
            b.add(
                1,
                ms * 10,
                true,
                &[("<module>", "/app/main.py", 3), ("parse_rows", "/app/main.py", 12), ("_strptime", &strptime, at)],
            );
        }
        let d = b.diagnose("/app");
        let f = &d.findings[0];
        let e =
            f.evidence.iter().find(|e| e.frame.ends_with("_strptime")).unwrap_or_else(|| panic!("{:?}", f.evidence));
        assert!((e.share - 1.0).abs() < 1e-9, "{:?}", f.evidence);
        assert!(f.why.contains("_strptime"), "{}", f.why);
    }

    #[test]
    fn a_torn_read_goes_to_the_one_line_its_innermost_frame_is_seen_under() {
        let gen =
            ("GenerateSchema.walk", "/venv/lib/python3.11/site-packages/pydantic/_internal/_generate_schema.py", 700);
        let dumps = ("encode", "/usr/lib/python3.11/json/encoder.py", 200);
        let mut b = Builder::new();
        for ms in 0..100 {
            let (line, leaf) = match ms % 10 {
                0..=5 => (12, gen),
                // json is called from two lines: its torn reads cannot be placed
                6 | 7 => (20, dumps),
                _ => (21, dumps),
            };
            b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line), leaf]);
        }
        // Torn: the read lost everything above a library frame.
        for ms in 100..130 {
            b.add(1, ms * 10, true, &[("GenerateSchema.generate", gen.1, 650), gen]);
        }
        for ms in 130..140 {
            b.add(1, ms * 10, true, &[("JSONEncoder.iterencode", dumps.1, 250), dumps]);
        }
        let d = b.diagnose("/app");
        let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).unwrap().weight;
        assert_eq!(at(12), 60 + 30, "{:?}", d.hot_lines);
        assert_eq!((at(20), at(21)), (20, 20), "{:?}", d.hot_lines);
        assert_eq!(d.busy_weight, 130);
        assert!(d.notes.iter().any(|n| n.contains("read torn and charged")), "{:?}", d.notes);
        assert!(d.notes.iter().any(|n| n.contains("incomplete stack")), "{:?}", d.notes);
    }

    #[test]
    fn a_torn_read_of_a_frame_seen_too_rarely_is_placed_by_its_function_then_its_file() {
        let schema = "/venv/lib/python3.11/site-packages/pydantic/json_schema.py";
        let encoder = "/usr/lib/python3.11/json/encoder.py";
        let mut b = Builder::new();
        for ms in 0..200u64 {
            // Deep code spread over many lines, each read clean only a few times.
            let (line, leaf) = match ms % 4 {
                0..=2 => (12, ("GenerateJsonSchema.walk", schema, 1000 + (ms % 50) as u32)),
                // The encoder is called from two lines.
                _ => (20 + (ms % 8 == 3) as u32, ("encode", encoder, 200 + (ms % 40) as u32)),
            };
            b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line), leaf]);
        }
        // Torn reads at lines of those files that no clean read has: the function of the first
        // is known (under line 12 only), the second only by its file, the third is split.
        let torn = [
            ("GenerateJsonSchema.walk", schema, 1999),
            ("GenerateJsonSchema.other", schema, 5000),
            ("encode", encoder, 999),
        ];
        for (i, leaf) in torn.iter().enumerate() {
            for k in 0..5u64 {
                b.add(
                    1,
                    10_000 + (i as u64 * 5 + k) * 1000,
                    true,
                    &[("GenerateJsonSchema.generate", schema, 500), *leaf],
                );
            }
        }
        let d = b.diagnose("/app");
        let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).map_or(0, |h| h.weight);
        assert_eq!(at(12), 150 + 10, "{:?}", d.hot_lines);
        assert_eq!(at(20) + at(21), 50, "{:?}", d.hot_lines);
        assert_eq!(d.busy_weight, 210);
    }

    #[test]
    fn an_empty_read_between_two_reads_of_one_line_is_charged_to_that_line() {
        let mut b = Builder::new();
        let empty = |b: &mut Builder, ms: u64| {
            let t = b.p.intern_thread(1, 1, None);
            b.p.samples.push(Sample {
                time_us: ms * 1000,
                thread: t,
                stack: None,
                state: ThreadState::new(true, true),
                weight: 1,
            });
        };
        for ms in 0..100u64 {
            let line = if ms < 50 { 12 } else { 14 };
            b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line)]);
            match ms {
                // Between two reads of line 12, and between two of line 14.
                10 | 60 => empty(&mut b, ms * 10 + 5),
                // Between line 12 and line 14: nothing says which.
                49 => empty(&mut b, ms * 10 + 5),
                _ => {}
            }
        }
        // After the thread's last read: nothing after it.
        empty(&mut b, 2000);
        let d = b.diagnose("/app");
        let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).unwrap().weight;
        assert_eq!((at(12), at(14)), (51, 51), "{:?}", d.hot_lines);
        assert_eq!(d.busy_weight, 102);
        assert!(
            d.notes.iter().any(|n| n.contains("read empty or torn and charged to the line their thread was read in")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn too_few_busy_samples_name_no_line_and_say_why() {
        // A server at 15 requests/s: a handful of busy samples among thousands of idle ones.
        let diagnose = |busy: u64| {
            let mut b = Builder::new();
            for i in 0..busy {
                b.add(1, i * 10, true, &[("<module>", "/app/main.py", 5), ("handle", "/app/main.py", 57)]);
            }
            b.diagnose("/app")
        };
        let few = diagnose(MIN_BUSY_SAMPLES - 1);
        assert!(few.findings.is_empty(), "{few:#?}");
        assert!(
            few.notes.iter().any(|n| n.contains("too few busy samples (39 of 39") && n.contains("--load")),
            "{:?}",
            few.notes
        );
        let enough = diagnose(MIN_BUSY_SAMPLES);
        assert_eq!(enough.findings.first().map(|f| f.line), Some(57), "{enough:#?}");
        assert!(!enough.notes.iter().any(|n| n.contains("too few")));
    }

    #[test]
    fn a_module_top_level_run_by_an_import_is_start_up_however_short_the_run() {
        // A short run spends much of its time importing: a model class built at a module's top
        // level costs schema work, but once per process, whatever the share.
        let schema = |top: &'static str| {
            let mut stack = vec![("<module>", "/app/main.py", 3)];
            if top == "imported" {
                stack.push(("_find_and_load", "<frozen importlib._bootstrap>", 1176));
                stack.push(("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241));
                stack.push(("<module>", "/app/models.py", 23));
            } else {
                stack.push(("build", "/app/main.py", 9));
            }
            stack.push((
                "GenerateSchema.generate_schema",
                "/venv/lib/python3.11/site-packages/pydantic/_internal/_generate_schema.py",
                400,
            ));
            stack
        };
        for (top, finding) in [("imported", false), ("called", true)] {
            let mut b = Builder::new();
            // 60 samples: above the evidence threshold (MIN_BUSY_SAMPLES).
            for ms in 0..60 {
                if ms % 3 == 0 {
                    b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 5), ("ping", "/app/main.py", 14)]);
                } else {
                    b.add(1, ms * 10, true, &schema(top));
                }
            }
            let d = b.diagnose("/app");
            assert_eq!(d.findings.iter().any(|f| f.kind == "repeated-setup"), finding, "{top}: {d:#?}");
            assert_eq!(d.notes.iter().any(|n| n.contains("being imported")), !finding, "{top}: {:?}", d.notes);
        }
    }

    #[test]
    fn a_thread_read_as_runnable_inside_a_wait_is_waiting_not_computing() {
        // On a busy machine a thread just woken from a socket read is runnable but not yet
        // running: its stack is still in the read. That is not CPU time.
        let mut b = Builder::new();
        let read = [
            ("<module>", "/app/main.py", 5),
            ("fetch", "/app/main.py", 9),
            ("SocketIO.readinto", &format!("{LIB}/socket.py") as &str, 707),
        ];
        for ms in 0..100 {
            b.add(1, ms * 10, ms % 10 == 0, &read);
        }
        for ms in 100..110 {
            b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 5), ("crunch", "/app/main.py", 20)]);
        }
        let user = UserCode::new(["/app"], Some(Path::new("/app")));
        let cpu = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options { mode: Mode::Cpu, ..Options::default() });
        assert_eq!(cpu.busy_weight, 10, "{cpu:#?}");
        assert!(cpu.findings.iter().all(|f| f.line != 9), "{:?}", cpu.findings);
        let wall = b.diagnose("/app");
        let wait = wall.hot_lines.iter().find(|h| h.line == 9).unwrap();
        assert!((wait.blocked_share - wait.share).abs() < 1e-9, "all of the read is waiting: {wait:?}");
    }

    #[test]
    fn idle_workers_are_left_out_of_the_shares() {
        let mut b = Builder::new();
        for ms in 0..500 {
            b.add(1, ms * 10, true, &[("work", "/app/w.py", 3)]);
            for tid in 2..6 {
                b.add(
                    tid,
                    ms * 10,
                    false,
                    &[
                        ("_bootstrap", &format!("{LIB}/threading.py"), 995),
                        ("get", &format!("{LIB}/queue.py"), 171),
                        ("wait", &format!("{LIB}/threading.py"), 320),
                    ],
                );
            }
        }
        let d = b.diagnose("/app");
        assert_eq!(d.busy_weight, 500);
        assert_eq!(d.idle_weight, 2000);
        assert_eq!(d.findings.len(), 1);
        assert_eq!(d.findings[0].line, 3);
        assert!((d.findings[0].share - 1.0).abs() < 1e-9);
        assert!(d.notes[0].contains("idle for want of work"), "{:?}", d.notes);
    }

    #[test]
    fn start_up_work_is_not_a_finding() {
        let mut b = Builder::new();
        for ms in 0..1000 {
            let stack: &[(&str, &str, u32)] = if ms < 150 {
                &[("<module>", "/app/m.py", 1), ("_find_and_load", "<frozen importlib._bootstrap>", 1)]
            } else {
                &[("<module>", "/app/m.py", 9)]
            };
            b.add(1, ms * 10, true, stack);
        }
        let d = b.diagnose("/app");
        assert!(d.findings.iter().all(|f| f.line != 1), "{:?}", d.findings);
        assert!(d.notes.iter().any(|n| n.contains("m.py:1") && n.contains("one-off")), "{:?}", d.notes);
    }

    #[test]
    fn an_event_loop_wait_counts_in_a_working_thread_but_no_line_is_charged() {
        let mut b = Builder::new();
        let select = [
            ("<module>", "/app/a.py", 50),
            ("run", &format!("{LIB}/asyncio/runners.py") as &str, 190),
            ("select", &format!("{LIB}/selectors.py"), 468),
        ];
        for ms in 0..1000 {
            if ms % 2 == 0 {
                b.add(1, ms * 10, true, &tls_stack());
            } else {
                b.add(1, ms * 10, false, &select);
            }
        }
        let d = b.diagnose("/app");
        assert_eq!(d.busy_weight, 1000, "the loop's waits are part of the thread's time");
        assert!((d.findings[0].share - 0.5).abs() < 1e-9);
        assert!(d.findings.iter().all(|f| f.line != 50));
    }

    #[test]
    fn serial_network_waits_are_reported_at_the_loop_that_issues_them() {
        let dir = std::env::temp_dir().join(format!("onefix-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let app = dir.join("app.py");
        std::fs::write(&app, "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    out = []\n    for u in urls:\n        out.append(fetch(u))\n    return out\n").unwrap();
        let app_s = app.to_str().unwrap();
        let mut b = Builder::new();
        for ms in 0..300 {
            b.add(
                1,
                ms * 10,
                false,
                &[
                    ("main", app_s, 9),
                    ("fetch", app_s, 4),
                    ("get", &format!("{SITE}/requests/api.py"), 73),
                    ("send", &format!("{SITE}/requests/sessions.py"), 703),
                    ("readinto", &format!("{LIB}/socket.py"), 706),
                ],
            );
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!(f.kind, "serial-io", "{f:?}");
        assert_eq!(f.line, 8, "the for loop in the caller, not the call inside fetch: {f:?}");
        assert_eq!(f.code.as_deref(), Some("for u in urls:"));
        assert!(f.evidence[0].line == 4, "the waiting call is the first evidence: {:?}", f.evidence);
    }

    #[test]
    fn a_wait_no_loop_repeats_is_the_reply_latency_not_serial_io() {
        // A request handler that calls its backend once: the framework's loop is not the user's.
        let (dir, app) =
            write_app("single-wait", "import requests\n\ndef handle(req):\n    return requests.get(BACKEND).json()\n");
        let mut b = Builder::new();
        for ms in 0..300 {
            b.add(
                1,
                ms * 10,
                false,
                &[
                    ("process_request", &format!("{SITE}/werkzeug/serving.py"), 300),
                    ("handle", &app, 4),
                    ("get", &format!("{SITE}/requests/api.py"), 73),
                    ("send", &format!("{SITE}/requests/sessions.py"), 703),
                    ("readinto", &format!("{LIB}/socket.py"), 706),
                ],
            );
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!((f.kind.as_str(), f.line), ("blocking-wait", 4), "{f:?}");
        assert!(f.rule.ends_with("-single"), "{f:?}");
        assert!(!f.advice.contains("concurrently"), "{}", f.advice);
    }

    fn write_app(tag: &str, source: &str) -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("onefix-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let app = dir.join("app.py");
        std::fs::write(&app, source).unwrap();
        let app_s = app.to_str().unwrap().to_owned();
        (dir, app_s)
    }

    /// Four threads on one lock: one renders under it, three wait for it, for a second.
    fn contended_lock(tag: &str) -> (std::path::PathBuf, Builder) {
        let (dir, app) = write_app(
            tag,
            "import threading\nlock = threading.Lock()\n\ndef thumb(key):\n    with lock:\n        if key not in cache:\n            cache[key] = render(key)\n        return cache[key]\n\ndef render(key):\n    return digest(key)\n",
        );
        let mut b = Builder::new();
        for tick in 0..100 {
            b.add(
                1,
                tick * 10,
                true,
                &[("worker", &format!("{LIB}/threading.py"), 975), ("thumb", &app, 7), ("render", &app, 11)],
            );
            for tid in 2..5 {
                b.add(tid, tick * 10, false, &[("worker", &format!("{LIB}/threading.py"), 975), ("thumb", &app, 5)]);
            }
        }
        (dir, b)
    }

    #[test]
    fn a_contended_lock_says_what_its_holder_does_meanwhile() {
        let (dir, b) = contended_lock("held");
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!((f.kind.as_str(), f.line), ("lock-contention", 5), "{f:?}");
        assert!(f.why.contains("the holder spends 25% of the time at app.py:11 `return digest(key)`"), "{}", f.why);
        assert_eq!(f.evidence[0].line, 11, "{:?}", f.evidence);
    }

    #[test]
    fn a_bound_is_capped_by_the_cpus_the_remaining_work_needs() {
        let (dir, b) = contended_lock("cpu-cap");
        let bound = |cpus: Option<u32>| {
            let user = UserCode::new([dir.to_str().unwrap()], Some(dir.as_path()));
            let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options { cpus, ..Options::default() });
            let f = d.findings.iter().find(|f| f.kind == "lock-contention").unwrap().clone();
            (f.max_speedup.unwrap(), f.why)
        };
        // Amdahl alone: the waits are three quarters of the busy time.
        let (amdahl, _) = bound(None);
        assert!((amdahl - 4.0).abs() < 0.05, "{amdahl}");
        assert_eq!(bound(Some(8)).0, amdahl, "eight CPUs run the remaining second of CPU work in time");
        // Two CPUs: the holder's second of computing takes half the stretch at best.
        let (capped, why) = bound(Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!((capped - 1.98).abs() < 0.05, "{capped}");
        assert!(why.contains("on the machine's 2 CPUs"), "{why}");
    }

    #[test]
    fn network_waits_one_at_a_time_are_serial_and_overlapping_ones_are_not() {
        let (dir, app) = write_app("inflight", "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    for u in urls:\n        pool.submit(fetch, u)\n");
        let wait = |b: &mut Builder, tid: u64, ms: u64| {
            b.add(
                tid,
                ms,
                false,
                &[
                    ("main", &app, 8),
                    ("fetch", &app, 4),
                    ("get", &format!("{SITE}/requests/api.py"), 73),
                    ("readinto", &format!("{LIB}/socket.py"), 706),
                ],
            );
        };
        // One thread: a wait at every tick, and a little work between requests.
        let mut serial = Builder::new();
        for tick in 0..300 {
            if tick % 5 == 4 {
                serial.add(1, tick * 10, true, &[("main", &app, 8), ("fetch", &app, 4)]);
            } else {
                wait(&mut serial, 1, tick * 10);
            }
        }
        // Four threads waiting at once, each now and then.
        let mut overlapping = Builder::new();
        for tick in 0..300 {
            for tid in 1..=4 {
                if (tick + tid) % 5 != 0 {
                    wait(&mut overlapping, tid, tick * 10);
                }
            }
        }
        let (s, o) = (serial.diagnose(dir.to_str().unwrap()), overlapping.diagnose(dir.to_str().unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &s.findings[0];
        assert_eq!((f.kind.as_str(), f.rule.as_str(), f.line), ("serial-io", "network-wait", 7), "{f:?}");
        assert!(f.why.contains("one wait in flight at a time (mean 0.8 over 50 ms windows, at most 0.8)"), "{}", f.why);
        assert!(
            f.evidence.iter().any(|e| e.frame == "waits in flight at once: 0.8 (mean), 0.8 (peak)"),
            "{:?}",
            f.evidence
        );
        let f = &o.findings[0];
        assert_eq!(
            (f.kind.as_str(), f.rule.as_str(), f.line),
            ("blocking-wait", "network-wait-concurrent", 4),
            "the waiting call, not the loop: {f:?}"
        );
        assert!(
            f.why.starts_with("3.2 waits are in flight at once here (mean over 50 ms windows, at most 3.2)"),
            "{}",
            f.why
        );
        assert!(o.findings.iter().all(|f| f.kind != "serial-io"), "{:?}", o.findings);
    }

    #[test]
    fn late_ticks_of_one_thread_are_still_one_wait_in_flight() {
        let (dir, app) = write_app("late-ticks", "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    for u in urls:\n        fetch(u)\n");
        let mut b = Builder::new();
        // A loaded machine: the sampler reads every 100 ms instead of every 10, and each read
        // weighs the 10 intervals it stands for, so every other 50 ms window gets two windows'
        // worth of one thread's wait.
        for tick in 0..60u64 {
            b.add(
                1,
                tick * 100,
                false,
                &[
                    ("main", &app, 8),
                    ("fetch", &app, 4),
                    ("get", &format!("{SITE}/requests/api.py"), 73),
                    ("readinto", &format!("{LIB}/socket.py"), 706),
                ],
            );
            b.p.samples.last_mut().unwrap().weight = 10;
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!((f.kind.as_str(), f.line), ("serial-io", 7), "{f:?}");
        assert!(f.why.contains("(mean 1.0 over 50 ms windows, at most 1.0)"), "{}", f.why);
    }

    /// A stack of native frames (outermost first) of the program `/app/server`.
    fn native(p: &mut Profile, stack: &[(&str, &str, u32)]) -> Option<StackId> {
        let ids: Vec<FrameId> = stack
            .iter()
            .map(|&(f, file, line)| {
                p.intern_frame(Frame { file: file.to_owned(), line, ..Frame::native(f, "/app/server") })
            })
            .collect();
        p.intern_stack(ids)
    }

    #[test]
    fn a_bound_called_in_a_loop_condition_is_quadratic_work_to_hoist() {
        let dir = std::env::temp_dir().join(format!("onefix-strlen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let app = dir.join("count.c");
        std::fs::write(&app, "size_t count(const char *s) {\n    size_t n = 0;\n    for (size_t i = 0; i < strlen(s); i++) {\n        n += s[i] == ',';\n    }\n    return n;\n}\n").unwrap();
        let app = app.to_str().unwrap().to_owned();
        let mut b = Builder::new();
        for tick in 0..100u64 {
            let stack =
                native(&mut b.p, &[("_start", "", 0), ("count", &app, 3), ("__strlen_avx2", "strlen-avx2.S", 76)]);
            let thread = b.p.intern_thread(1, 1, None);
            b.p.samples.push(Sample {
                time_us: tick * 10_000,
                thread,
                stack,
                state: ThreadState::new(true, true),
                weight: 1,
            });
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let f = &d.findings[0];
        assert_eq!(
            (f.kind.as_str(), f.rule.as_str(), f.line),
            ("hot-loop-compute", "call-in-loop-condition", 3),
            "{f:?}"
        );
        assert!(f.why.contains("strlen"), "the call is named as people write it: {}", f.why);
        assert!(f.advice.starts_with("compute it once before the loop"), "{}", f.advice);
    }

    #[test]
    fn native_waits_for_others_and_the_go_runtime_are_idle() {
        let (dir, app) = write_app("native-idle", "package main\n\nfunc main() {\n\twg.Wait()\n\twork()\n}\n");
        let mut b = Builder::new();
        for tick in 0..200u64 {
            let joined = native(
                &mut b.p,
                &[
                    ("runtime.main", "/usr/lib/go-1.19/src/runtime/proc.go", 250),
                    ("main.main", &app, 4),
                    ("sync.(*WaitGroup).Wait", "/usr/lib/go-1.19/src/sync/waitgroup.go", 136),
                    ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
                ],
            );
            let parked = native(
                &mut b.p,
                &[
                    ("runtime.goexit", "/usr/lib/go-1.19/src/runtime/asm_amd64.s", 1594),
                    ("runtime.bgsweep", "/usr/lib/go-1.19/src/runtime/mgcsweep.go", 278),
                    ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
                ],
            );
            let working = native(
                &mut b.p,
                &[("runtime.main", "/usr/lib/go-1.19/src/runtime/proc.go", 250), ("main.main", &app, 5)],
            );
            // A kept-alive connection's read loop: parked under a network read nobody waits for.
            let read_loop = native(
                &mut b.p,
                &[
                    ("runtime.goexit", "/usr/lib/go-1.19/src/runtime/asm_amd64.s", 1594),
                    ("net/http.(*persistConn).readLoop", "/usr/lib/go-1.19/src/net/http/transport.go", 2093),
                    ("net.(*conn).Read", "/usr/lib/go-1.19/src/net/net.go", 183),
                    ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
                ],
            );
            for (tid, stack, active) in
                [(1, joined, false), (2, parked, false), (3, working, true), (4, read_loop, false)]
            {
                let thread = b.p.intern_thread(1, tid, None);
                b.p.samples.push(Sample {
                    time_us: tick * 10_000,
                    thread,
                    stack,
                    state: ThreadState::new(active, active),
                    weight: 1,
                });
            }
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((d.busy_weight, d.idle_weight), (200, 600), "{:?}", d.findings);
        assert_eq!(d.findings.len(), 1);
        assert_eq!(d.findings[0].line, 5);
    }

    #[test]
    fn native_servers_waiting_for_connections_and_joins_through_glibc_are_idle() {
        let (dir, app) = write_app("native-server", "int main() {\n  serve();\n  join();\n  work();\n}\n");
        let mut b = Builder::new();
        for tick in 0..200u64 {
            // C: the line calls accept(); a join whose pthread_join frame glibc tail-called away;
            // Rust's standard library as v0 mangling names it; Go's http.Server in a goroutine.
            let accept = native(&mut b.p, &[("_start", "", 0), ("main", &app, 2), ("accept4", "accept4.c", 31)]);
            let join = native(
                &mut b.p,
                &[
                    ("_start", "", 0),
                    ("main", &app, 3),
                    ("__pthread_clockjoin_ex", "pthread_join_common.c", 102),
                    ("__futex_abstimed_wait_common", "futex-internal.c", 87),
                ],
            );
            let rust = native(
                &mut b.p,
                &[
                    ("_start", "", 0),
                    ("main", &app, 2),
                    ("<std::net::tcp::Incoming as core::iter::traits::iterator::Iterator>::next", "tcp.rs", 1041),
                    ("<std::net::tcp::TcpListener>::accept", "tcp.rs", 844),
                    ("accept4", "accept4.c", 31),
                ],
            );
            let go = native(
                &mut b.p,
                &[
                    ("runtime.goexit", "asm_amd64.s", 1594),
                    ("main.main.func2", &app, 2),
                    ("net/http.(*Server).Serve", "server.go", 3070),
                    ("net.(*TCPListener).Accept", "tcpsock.go", 288),
                    ("runtime.gopark", "proc.go", 364),
                ],
            );
            let working = native(&mut b.p, &[("_start", "", 0), ("main", &app, 4)]);
            for (tid, stack, active) in
                [(1, accept, false), (2, join, false), (3, rust, false), (4, go, false), (5, working, true)]
            {
                let thread = b.p.intern_thread(1, tid, None);
                b.p.samples.push(Sample {
                    time_us: tick * 10_000,
                    thread,
                    stack,
                    state: ThreadState::new(active, active),
                    weight: 1,
                });
            }
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((d.busy_weight, d.idle_weight), (200, 800), "{:?}", d.findings);
        assert_eq!(d.findings.iter().map(|f| f.line).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn a_thread_that_only_sleeps_beside_working_ones_is_a_background_timer() {
        let (dir, app) = write_app("timer", "import time\n\ndef work():\n    while True:\n        crunch()\n\ndef watchdog():\n    while True:\n        time.sleep(1)\n");
        // time.sleep is C: no frame of its own, the call is read off the line.
        let mut b = Builder::new();
        for tick in 0..200u64 {
            b.add(1, tick * 10, true, &[("work", &app, 5)]);
            b.add(2, tick * 10, false, &[("watchdog", &app, 9)]);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        assert_eq!((d.busy_weight, d.idle_weight), (200, 200), "{:?}", d.findings);
        assert!(d.findings.iter().all(|f| f.line != 9), "{:?}", d.findings);
        // Alone, a thread that mostly sleeps is the program waiting on the clock: a cost.
        let mut alone = Builder::new();
        for tick in 0..200u64 {
            if tick % 20 == 0 {
                alone.add(1, tick * 10, true, &[("work", &app, 5)]);
            } else {
                alone.add(1, tick * 10, false, &[("watchdog", &app, 9)]);
            }
        }
        let d = alone.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(d.findings[0].line, 9, "{:?}", d.findings);
    }

    #[test]
    fn a_program_that_only_waits_is_told_where_it_waits() {
        let (dir, app) = write_app("all-idle", "def writer(q):\n    while True:\n        item = q.get()\n\ndef producer(done):\n    while not done.wait(0.02):\n        pass\n");
        let mut b = Builder::new();
        for tick in 0..200u64 {
            b.add(1, tick * 10, false, &[("writer", &app, 3), ("Queue.get", &format!("{LIB}/queue.py"), 171)]);
            b.add(2, tick * 10, false, &[("producer", &app, 6), ("Event.wait", &format!("{LIB}/threading.py"), 629)]);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(d.findings.is_empty(), "{:?}", d.findings);
        let note = d
            .notes
            .iter()
            .find(|n| n.contains("waited for work or for each other"))
            .unwrap_or_else(|| panic!("{:?}", d.notes));
        assert!(note.contains("app.py:3") && note.contains("app.py:6 `while not done.wait(0.02):`"), "{note}");
    }

    #[test]
    fn too_few_samples_make_no_finding() {
        let mut b = Builder::new();
        for ms in 0..3 {
            b.add(1, ms * 10, true, &[("f", "/app/x.py", 2)]);
        }
        assert!(b.diagnose("/app").findings.is_empty());
    }
}
