//! The diagnosis: charge every sample to the user's line at its frontier, rank the lines, and
//! explain the top ones with the knowledge base.
//!
//! Work is done per distinct stack, not per sample: a recording of a million samples has a few
//! thousand stacks, so the per-sample loop only adds weights and marks time windows.

use std::collections::HashMap;
use std::path::PathBuf;

use onefix_model::{FrameId, FrameKind, Mode, Profile, Sample, StackId, TargetExit, ThreadId, WeightUnit};

use crate::kb::{KnowledgeBase, Role, When};
use crate::names::{called_names, qualified_name, unqualified_name, SourceCache};
use crate::origin::{Origin, UserCode};
use crate::{Diagnosis, Evidence, Finding, GainBasis, HotLine, Kind, Note};

mod bound;
mod carry;
mod charge;
mod construct;
mod critical;
mod edges;
mod explain;
mod facts;
mod growth;
mod latency;
mod merge;
mod rules;
mod serial;
mod stale;
mod threads;
mod waits;
mod walk;
use bound::{join_bounds, join_evidence, speedup, MAX_EVIDENCE};
use merge::merge_within_functions;
pub use stale::settle_stale_reads;

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
    /// The samples' times are when they were taken. False for a profile that has none (pprof,
    /// folded stacks, a speedscope "sampled" profile): then nothing is said of when or how
    /// regularly a line ran (no recurrence, no one-off check), and nothing is read from which
    /// samples were simultaneous (lock holders, the critical path, waits in flight).
    pub timeline: bool,
    /// Stacks may be partial, as onefix's own samplers read them: a Python stack read torn
    /// from a running target, a native one the unwinder cut short. A stack that does not start
    /// where a thread starts is then incomplete. False for profiles recorded by other tools,
    /// whose stacks are taken as they are.
    pub partial_stacks: bool,
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
            timeline: true,
            partial_stacks: true,
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
/// A thread with this share of the weight in user code (working, or waiting there for others)
/// takes part in the run: with two or more, the gain is read off the critical path.
const SHARES_THE_WORK: f64 = 0.05;
/// An open-loop load served at this share of its rate or more was kept up with.
const KEPT_UP: f64 = 0.95;
/// GIL waits from this share of the busy time up are said in a note: the threads mostly queue.
const GIL_QUEUE_NOTE: f64 = 0.2;
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
    /// Other threads' waits charged here because this line held what they waited for (a lock,
    /// the GIL), by the line they waited at and what they waited for (waits.rs).
    caused: HashMap<(usize, waits::Cause), u64>,
    /// Weight in each third of the run: whether the line's share grows as the run goes on.
    thirds: [u64; 3],
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

/// One definition of CPU time for the diagnosis and every writer: a sample the sampler read as
/// running while the thread was inside a call that waits (a sleep or a read caught just as it
/// entered or left the kernel, or a thread waking in a futex) is waiting time, not CPU time.
/// Marks such samples of `profile` as not running, so that the terminal, JSON, HTML, pprof,
/// speedscope and the Firefox Profiler count the same CPU time; returns how many were marked.
pub fn settle_running(profile: &mut Profile, kb: &KnowledgeBase, user: &UserCode) -> usize {
    let waiting: Vec<usize> = {
        let mut engine = Engine::new(profile, kb, user, &Options::default());
        let samples = &profile.samples;
        (0..samples.len()).filter(|&i| samples[i].state.active() && !engine.running(&samples[i])).collect()
    };
    for &i in &waiting {
        let state = profile.samples[i].state;
        profile.samples[i].state = onefix_model::ThreadState(state.0 & !onefix_model::ThreadState::ACTIVE);
    }
    waiting.len()
}

pub fn diagnose(profile: &Profile, kb: &KnowledgeBase, user: &UserCode, opts: &Options) -> Diagnosis {
    let mut diagnosis = Engine::new(profile, kb, user, opts).run(opts);
    carry::carry_library_patterns(&mut diagnosis, profile, kb, user, opts);
    diagnosis
}

/// What shares are of, in a title.
fn time_words(mode: Mode) -> &'static str {
    match mode {
        Mode::Wall => "time of the threads with work",
        Mode::Cpu => "CPU time",
    }
}

impl<'a> Engine<'a> {
    fn new(profile: &'a Profile, kb: &'a KnowledgeBase, user: &'a UserCode, opts: &Options) -> Engine<'a> {
        Engine {
            profile,
            kb,
            user,
            frames: (0..profile.frames().len()).map(|_| None).collect(),
            stacks: vec![None; profile.stack_count()],
            stack_facts: Vec::new(),
            lines: Vec::new(),
            line_of_frame: HashMap::new(),
            source: SourceCache::default(),
            timeline: opts.timeline,
            partial_stacks: opts.partial_stacks,
        }
    }
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
    /// [`Options::timeline`].
    timeline: bool,
    /// [`Options::partial_stacks`].
    partial_stacks: bool,
}

impl Engine<'_> {
    fn run(&mut self, opts: &Options) -> Diagnosis {
        let profile = self.profile;
        let mode = opts.mode;
        let end_us = profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0);
        let window_us = if end_us >= 10_000_000 { 1_000_000 } else { (end_us / 10).max(onefix_model::MERGE_SPAN_US) };
        let nwindows = (end_us / window_us + 1) as usize;

        // Reads at the edges of a wait on another thread are the wait's (edges.rs).
        self.settle_wait_edges();

        // Pass 1: which threads work, and which only sleep beside them (threads.rs).
        let threads::ThreadClasses { works, background } = self.classify_threads(mode);

        // Waits for a lock or the GIL, charged to the holder's line of the same tick (waits.rs).
        let timelines = if self.timeline { waits::Timelines::of(profile) } else { None };
        let recharges = self.wait_for(mode, timelines.as_ref());

        // Pass 2: charge the samples to their frontier lines.
        let mut active_windows = vec![false; nwindows];
        // Busy weight over time: the denominator of a line's share over the stretch where it
        // recurs (first to last sighting), which leaves start-up and wind-down out of its gain
        // bound.
        // With each sample's running weight: the CPU work that stays when a line's cost goes.
        let mut busy_timeline: Vec<(u64, u64, u64)> = Vec::new();
        let mut total_weight = 0u64;
        let mut idle_weight = 0u64;
        let mut idle_samples = crate::finding::SampleSet::default();
        let mut incomplete = 0u64;
        let mut parked_in_busy = 0u64;
        let mut outside_user = 0u64;
        // Weight read holding the GIL, wherever: a Python process's one server, busy whatever its
        // holder runs (a thread back from reading a request holds it at the line it parks at).
        let mut gil_weight = 0u64;
        // Outside-user weight by stack: where the time went when none of it ran in user code.
        let mut outside_by_stack: HashMap<Option<StackId>, u64> = HashMap::new();
        // Idle weight by the user line that waits: where a program that does nothing stalls.
        let mut idle_at: HashMap<usize, u64> = HashMap::new();
        // Reads that could not be charged (torn with no user frame, or empty), and the clean
        // stacks charged to a line by innermost frame, to place them afterwards (see below).
        let mut unplaced: Vec<(usize, &Sample)> = Vec::new();
        let mut cut_short = 0u64;
        // Weight in user code, by thread, working or waiting for others there: which threads
        // take part in the run.
        let mut thread_busy = vec![0u64; profile.threads().len()];
        let mut clean = CleanByLeaf::default();
        // Every charged read, by thread and time: the reads around an unplaced one.
        let mut placed: Vec<(ThreadId, u64, usize, StackId)> = Vec::new();
        for (index, s) in profile.samples.iter().enumerate().filter(|(_, s)| mode.counts(s.state)) {
            let running = self.running(s);
            let w = s.weight as u64;
            // Every sample the mode counts is in the total, as every writer counts it; one read
            // as running inside a call that waits is no CPU cost, and is left out as idle.
            total_weight += w;
            if s.state.gil() {
                gil_weight += w;
            }
            if mode == Mode::Cpu && !running {
                idle_weight += w;
                idle_samples.insert(index);
                continue;
            }
            let window = (s.time_us / window_us) as usize;
            if background[s.thread as usize] {
                idle_weight += w;
                idle_samples.insert(index);
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
                    idle_samples.insert(index);
                    if let Some(line) = self.line_of(s.stack) {
                        *idle_at.entry(line).or_default() += w;
                        // A thread waiting in its own code for others takes part in the run.
                        thread_busy[s.thread as usize] += w;
                    }
                    continue;
                }
                None => {}
            }
            let Some(i) = self.stack(s.stack) else {
                // No frames at all: a torn read or a thread outside the interpreter.
                incomplete += w;
                unplaced.push((index, s));
                continue;
            };
            let facts = &self.stack_facts[i];
            if facts.line.is_none() && facts.truncated {
                incomplete += w;
                unplaced.push((index, s));
                continue;
            }
            busy_timeline.push((s.time_us, w, if running { w } else { 0 }));
            active_windows[window] = true;
            let Some(line) = facts.line else {
                outside_user += w;
                *outside_by_stack.entry(s.stack).or_default() += w;
                if facts.cut_short {
                    cut_short += w;
                }
                continue;
            };
            let (truncated, leaf) = (facts.truncated, facts.leaf);
            thread_busy[s.thread as usize] += w;
            if let Some(r) = recharges.get(&index) {
                if let Some(holder_line) = self.line_of(Some(r.stack)) {
                    self.charge(holder_line, r.stack, s, r.running, (window, nwindows), true);
                    *self.lines[holder_line].caused.entry((r.waited_at, r.cause)).or_default() += w;
                    placed.push((s.thread, s.time_us, holder_line, r.stack));
                    continue;
                }
            }
            if let (false, Some(leaf)) = (truncated, leaf) {
                clean.add(profile, leaf, s.stack.unwrap(), w);
            }
            self.charge(line, s.stack.unwrap(), s, running, (window, nwindows), false);
            placed.push((s.thread, s.time_us, line, s.stack.unwrap()));
        }
        // A torn read lost its outer frames, not its innermost one, which is read first. When
        // the clean reads with that innermost frame were (90% at least) charged to one line,
        // the torn read is charged there too: leaving it out would bias the shares against
        // deep, fast-changing code, where reads tear most. With too few clean reads of that
        // very frame, its function's, then its file's say where it belongs.
        let mut recovered = 0u64;
        let mut by_leaf: HashMap<FrameId, Option<StackId>> = HashMap::new();
        let mut still_unplaced: Vec<(usize, &Sample)> = Vec::new();
        // Reads placed this way, by sample index: the critical path charges them there too.
        let mut moved: HashMap<usize, usize> = HashMap::new();
        for (index, s) in unplaced {
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
                still_unplaced.push((index, s));
                continue;
            };
            let w = self.place(s, line, stack, (window_us, nwindows), &mut busy_timeline, &mut active_windows);
            moved.insert(index, line);
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
        for (index, s) in still_unplaced {
            let from = placed.partition_point(|&(thread, t, _, _)| (thread, t) <= (s.thread, s.time_us));
            let (Some(before), Some(after)) = (from.checked_sub(1).map(|i| placed[i]), placed.get(from).copied())
            else {
                continue;
            };
            if before.0 != s.thread || after.0 != s.thread || before.2 != after.2 || after.1 - before.1 > BRACKET_US {
                continue;
            }
            let w = self.place(s, before.2, before.3, (window_us, nwindows), &mut busy_timeline, &mut active_windows);
            moved.insert(index, before.2);
            incomplete -= w;
            bracketed += w;
        }
        let busy_weight = total_weight - idle_weight - incomplete;
        // Several threads taking part in a run that went to its end (working, or waiting in
        // their own code for the others): the gain is read off the critical path, not the
        // summed busy time (critical.rs). A program with one thread keeps Amdahl's bound over
        // its share (see `whole_run` below). (An asyncio task's virtual thread is its loop's OS
        // thread.)
        let threads = profile.threads();
        let busy_in_user: u64 = thread_busy.iter().sum();
        let sharing = (0..threads.len())
            .filter(|&t| !threads[t].is_virtual() && thread_busy[t] as f64 >= SHARES_THE_WORK * busy_in_user as f64)
            .count();
        // A Go program's goroutines run on OS threads and wait apart from them (read from the
        // runtime): one goroutine's time is on two timelines, which no path can follow.
        let goroutines = threads.iter().any(|t| t.is_goroutine());
        let path = if sharing > 1 && !goroutines && self.timeline {
            self.critical_path(timelines.as_ref(), &recharges, &moved, &background, opts)
        } else {
            None
        };
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
        // Off the critical path, a line's share is taken over the stretch of the run that
        // repeats it (its steady state: what a throughput measures), unless the program ran to
        // its end in this recording: then over the whole run, start-up included, which is what
        // its user waits for and what `time` measures (a fix leaves the start-up to pay: over
        // the stretch alone, a fix that made a 12x faster program was promised 146x).
        let whole_run = if self.batch_run() {
            let first = profile.samples.iter().map(|s| s.time_us).min();
            let last = profile.samples.iter().map(|s| s.time_us).max();
            first.zip(last)
        } else {
            None
        };

        let head = self.unsampled_head();
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
            notes.push(Note::MostlyWaiting { cpu_percent: busy_weight as f64 * 100.0 / ticks as f64 });
        }
        let too_few = matches!(profile.meta.weight_unit, WeightUnit::Samples { .. })
            && busy_weight < MIN_BUSY_SAMPLES
            && !mostly_waiting;
        if too_few {
            let idle_percent = (total_weight > 0).then(|| idle_weight as f64 * 100.0 / total_weight as f64);
            notes.push(Note::TooFewSamples {
                busy: busy_weight,
                total: total_weight,
                idle_percent,
                needed: MIN_BUSY_SAMPLES,
            });
        }
        for &l in order.iter().filter(|_| !mostly_waiting && !too_few) {
            if findings.len() >= opts.max_findings || share(self.lines[l].weight) < opts.min_share {
                break;
            }
            if self.lines[l].weight < MIN_FINDING_WEIGHT {
                continue;
            }
            // Without sample times there are no windows to count.
            let recurrence = self.timeline.then(|| {
                let seen: u32 = self.lines[l].windows.iter().map(|w| w.count_ones()).sum();
                seen as f64 / active_window_count as f64
            });
            let frame = profile.frame(self.lines[l].frame).clone();
            if self.lines[l].importing * 2 > self.lines[l].weight {
                notes.push(Note::Importing {
                    at: format!("{}:{}", short(&frame.file), frame.line),
                    percent: share(self.lines[l].weight) * 100.0,
                });
                continue;
            }
            if let Some(recurrence) = recurrence.filter(|&r| active_window_count >= 4 && r < opts.min_recurrence) {
                notes.push(Note::OneOff {
                    at: format!("{}:{}", short(&frame.file), frame.line),
                    percent: share(self.lines[l].weight) * 100.0,
                    recurrence_percent: recurrence * 100.0,
                });
                continue;
            }
            let stretch = match whole_run {
                Some((first, last)) => {
                    // The program's start-up before the first sample ran on a CPU and is
                    // waited for: it stays after any fix.
                    let s = busy_between(first, last);
                    let spw = profile.seconds_per_weight().unwrap_or(0.0);
                    Stretch { busy: s.busy + head, running: s.running + head, seconds: s.seconds + head as f64 * spw }
                }
                None => busy_between(self.lines[l].first_us, self.lines[l].last_us),
            };
            let mut finding = self.explain(l, recurrence, &stretch, &share, opts, path.as_ref());
            self.say_caused_waits(l, &mut finding, &share);
            // A lock whose waits stayed at the line that waits (its holder was not told).
            if finding.kind == Kind::LockContention && self.lines[l].caused.is_empty() {
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
                    finding.evidence.truncate(MAX_EVIDENCE);
                }
            }
            // Several lines repeated by one loop are one finding at that loop.
            if let Some(prev) = findings.iter_mut().find(|f| f.file == finding.file && f.line == finding.line) {
                let explained = if prev.rule == finding.rule { finding.share * finding.explained } else { 0.0 };
                prev.absorb_share(finding.share, explained);
                // Amdahl over the two lines' steady shares, recovered from their bounds; on the
                // critical path (or the calls' span), the bound already removed every frame of
                // this source line. Their stretches overlap: the longer one stands for both.
                let either = prev.max_speedup.or(finding.max_speedup);
                join_bounds(prev, &finding, 1.0);
                if matches!(finding.gain_basis, GainBasis::CriticalPath | GainBasis::WorkSpan)
                    && prev.no_bound.is_none()
                {
                    prev.max_speedup = either;
                }
                join_evidence(&mut prev.evidence, finding.evidence);
                continue;
            }
            findings.push(finding);
        }
        // The gain of removing a part of some lines' weight, on the basis the findings use.
        let part_gain = |lines: &[usize], (first, last): (u64, u64), removed: u64, part: f64| match path.as_ref() {
            Some(p) => p.speedup(lines).and_then(|full| speedup((1.0 - 1.0 / full) * part)),
            None => {
                let (first, last, head) = whole_run.map_or((first, last, 0), |(f, l)| (f, l, head));
                speedup(removed as f64 / (busy_between(first, last).busy + head).max(1) as f64)
            }
        };
        if !mostly_waiting && !too_few {
            // Growth first: a line whose work grows with the input is its own finding, not a
            // step of its loop's iteration.
            let mut busy_thirds = [0u64; 3];
            for &(t, w, _) in &busy_timeline {
                busy_thirds[third(t / window_us, nwindows)] += w;
            }
            self.find_growth(&mut findings, busy_thirds);
            self.fold_walks(&mut findings, &share, &part_gain);
            self.fold_constructions(&mut findings, &share, &part_gain, mode);
        }
        merge_within_functions(&mut findings, |rule| self.kb.entries.iter().any(|e| e.spec.id == rule));
        self.merge_consequences(&mut findings);
        merge::fold_drops_into_copies(&mut findings);
        merge::fold_loop_headers(&mut findings);
        // A server under an open-loop load: each finding's gain in its requests' mean latency.
        let running_weight = busy_cumulative.last().map_or(0, |&(_, _, r)| r);
        if let (Some(load), Some(spw)) =
            (profile.attachments.get(onefix_model::attachments::LOAD), profile.seconds_per_weight())
        {
            // A Python process runs its Python code on one thread at a time: its one server is
            // the GIL, and the work that queues for it is the time it is held (a thread waiting
            // for it can read as running).
            let (servers, work) = match profile.meta.target.language {
                Some(onefix_model::Language::Python) if gil_weight > 0 => (1, gil_weight),
                Some(onefix_model::Language::Python) => (1, running_weight),
                _ => (opts.cpus.unwrap_or(1), running_weight),
            };
            if let Some(model) = latency::LatencyModel::from_load(load, work, spw, servers) {
                for f in findings.iter_mut().filter(|f| f.gain_basis == GainBasis::BusyShare) {
                    self.gain_in_latency(f, &model, busy_weight, work);
                }
            }
        }
        // On a critical path, the line to change first is the one whose removal shortens the
        // run most, whatever share of the summed busy time it holds.
        if path.is_some() {
            let gain = |f: &Finding| f.max_speedup.unwrap_or(1.0);
            findings.sort_by(|a, b| gain(b).total_cmp(&gain(a)).then(b.share.total_cmp(&a.share)));
        } else {
            findings.sort_by(|a, b| b.share.total_cmp(&a.share));
        }
        let time = time_words(mode);
        for (i, f) in findings.iter_mut().enumerate() {
            f.rank = i + 1;
            f.finish_texts(time, MAX_EVIDENCE);
        }

        let share_of = match mode {
            Mode::Wall => "wall-clock time of the threads with work to do (idle waits for work left out)",
            Mode::Cpu => "CPU time",
        };
        if idle_weight > 0 && idle_weight * 100 >= total_weight {
            let (clients, supervisors) = self.waiting_for_outside(&idle_samples);
            let percent = |w: u64| w as f64 * 100.0 / total_weight as f64;
            if (clients + supervisors) * 100 >= total_weight {
                notes.insert(
                    0,
                    Note::WaitingForClients {
                        clients_percent: percent(clients),
                        supervisors_percent: percent(supervisors),
                    },
                );
            }
            notes.insert(0, Note::Idle { percent: percent(idle_weight) });
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
                notes.push(Note::StalledAt {
                    percent: idle_weight as f64 * 100.0 / total_weight as f64,
                    places: named.join(" and "),
                });
            }
        }
        if incomplete > 0 && total_weight > 0 && incomplete * 100 >= total_weight {
            notes.push(Note::IncompleteStacks { percent: incomplete as f64 * 100.0 / total_weight as f64 });
        }
        if recovered > 0 && total_weight > 0 && recovered * 100 >= total_weight {
            notes.push(Note::RecoveredTorn { percent: recovered as f64 * 100.0 / total_weight as f64 });
        }
        if bracketed > 0 && total_weight > 0 && bracketed * 100 >= total_weight {
            notes.push(Note::Bracketed { percent: bracketed as f64 * 100.0 / total_weight as f64 });
        }
        let stale = profile
            .attachments
            .get(onefix_model::attachments::STALE_READS)
            .and_then(|j| serde_json::from_slice::<onefix_model::attachments::StaleReads>(j).ok());
        if let Some(stale) = stale.filter(|s| total_weight > 0 && s.weight * 100 >= total_weight) {
            notes.push(Note::StaleReads { percent: stale.weight as f64 * 100.0 / total_weight as f64 });
        }
        // A process pool's workers run in processes this recording did not sample: say so
        // when waiting for them is most of the time, since no line of theirs can be named.
        let processes: std::collections::HashSet<u32> = profile.threads().iter().map(|t| t.pid).collect();
        if processes.len() == 1 && total_weight > 0 {
            let mut pooled: HashMap<StackId, bool> = HashMap::new();
            let mut waiting = 0u64;
            for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
                let Some(stack) = s.stack else { continue };
                let under = match pooled.get(&stack) {
                    Some(&u) => u,
                    None => {
                        let u = self.under_process_pool(stack);
                        pooled.insert(stack, u);
                        u
                    }
                };
                if under {
                    waiting += s.weight as u64;
                }
            }
            if waiting * 2 >= total_weight {
                notes.push(Note::ChildProcesses { percent: waiting as f64 * 100.0 / total_weight as f64 });
            }
        }
        if parked_in_busy > 0 && share(parked_in_busy) >= 0.01 {
            notes.push(Note::ParkedInBusy { percent: share(parked_in_busy) * 100.0 });
        }
        let elsewhere = outside_user - cut_short;
        if elsewhere > 0 && share(elsewhere) >= 0.01 {
            notes.push(Note::OutsideUser { percent: share(elsewhere) * 100.0 });
        }
        if cut_short > 0 && share(cut_short) >= 0.01 {
            notes.push(Note::CutShort { percent: share(cut_short) * 100.0 });
        }
        let gil_queue: u64 = self
            .lines
            .iter()
            .flat_map(|l| &l.caused)
            .filter(|((_, c), _)| *c == waits::Cause::Gil)
            .map(|(_, w)| w)
            .sum();
        if share(gil_queue) >= GIL_QUEUE_NOTE {
            notes.push(Note::GilQueue { percent: share(gil_queue) * 100.0 });
        }
        if let Some(load) = open_load(profile) {
            notes.push(load);
        }
        if self.lines.iter().all(|l| l.weight == 0) && busy_weight > 0 {
            let dirs: Vec<String> = self.user.dirs().iter().map(|d| d.display().to_string()).collect();
            let instead = excluded_code_with_most_time(profile, &outside_by_stack)
                .map(|(w, exclusion)| (share(w) * 100.0, exclusion))
                .filter(|(percent, _)| *percent >= 10.0);
            notes.push(Note::NoUserCode { dirs: dirs.join(", "), instead });
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
            idle_samples,
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
}

use onefix_model::fmt::file_name as short;

/// What the load that drove the recording says of the gains, when it was open-loop (a fixed
/// rate): the server either kept up, so a fix gains latency and not throughput, or fell behind,
/// so its latency was mostly queueing. Read from the load's result as onefix-load writes it.
fn open_load(profile: &Profile) -> Option<Note> {
    #[derive(serde::Deserialize)]
    struct Shape {
        mode: String,
        target_rps: Option<f64>,
        achieved_rps: f64,
        scheduled: u64,
        unsent: u64,
    }
    let load: Shape = profile.attachment(onefix_model::attachments::LOAD)?;
    let target_rps = load.target_rps.filter(|r| *r > 0.0 && load.mode == "open")?;
    // Served the rate: nearly all of it, and next to nothing left unsent for want of a free
    // connection (a slow server holds its connections).
    let kept_up =
        load.achieved_rps >= KEPT_UP * target_rps && (load.unsent as f64) <= (1.0 - KEPT_UP) * load.scheduled as f64;
    Some(Note::OpenLoad { target_rps, achieved_rps: load.achieved_rps, kept_up })
}

/// Which third of the run a window is in.
fn third(window: u64, nwindows: usize) -> usize {
    ((window as usize * 3) / nwindows.max(1)).min(2)
}

#[cfg(test)]
mod tests;

/// The package (or, failing any, the standard library) that the time outside user code ran
/// in, by each stack's outermost frame in one: the code a maintainer would name with
/// `--user-code` to see its lines.
fn excluded_code_with_most_time(
    profile: &Profile,
    by_stack: &HashMap<Option<StackId>, u64>,
) -> Option<(u64, crate::origin::Exclusion)> {
    use crate::origin::Exclusion;
    let mut weight: HashMap<Exclusion, u64> = HashMap::new();
    for (&stack, &w) in by_stack {
        let frames = profile.stack_frames_root_first(stack);
        let exclusions = frames.iter().filter_map(|&f| Exclusion::of_path(&profile.frame(f).file));
        let mut stdlib = None;
        let mut package = None;
        for e in exclusions {
            match e {
                Exclusion::Package { .. } => {
                    package = Some(e);
                    break;
                }
                Exclusion::Stdlib { .. } if stdlib.is_none() => stdlib = Some(e),
                Exclusion::Stdlib { .. } => {}
            }
        }
        if let Some(e) = package.or(stdlib) {
            *weight.entry(e).or_default() += w;
        }
    }
    weight.into_iter().map(|(e, w)| (w, e)).max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.dir().cmp(a.1.dir())))
}

impl Engine<'_> {
    /// A finding's gain in the mean latency of the load's requests, with its interval from the
    /// sampling error of the share (Wilson's, over the busy samples) and of the utilisation.
    fn gain_in_latency(&self, f: &mut Finding, model: &latency::LatencyModel, busy_weight: u64, work_weight: u64) {
        // The parts of the finding's time its thread ran and waited (a reply, the disk), from
        // its line. A wait shortens the request but builds no queue. Other threads' waits
        // charged here (for the GIL, a lock) are neither: they are the queue this line's work
        // builds, which the model shrinks itself, and counting them as work would remove more
        // work per request than there is.
        let (running_part, waiting_part) = self
            .line_index(&f.file, f.line, &f.function)
            .map(|l| &self.lines[l])
            .filter(|acc| acc.weight > 0)
            .map_or((1.0, 0.0), |acc| {
                let caused: u64 = acc.caused.values().sum();
                let own_running = acc.weight.saturating_sub(acc.blocked).saturating_sub(caused);
                (own_running as f64 / acc.weight as f64, acc.blocked as f64 / acc.weight as f64)
            });
        let gain = |model: &latency::LatencyModel, share: f64| {
            let weight = share * busy_weight as f64;
            let fraction = (weight * running_part / work_weight.max(1) as f64).min(1.0);
            model.speedup(fraction, model.per_request(weight * waiting_part))
        };
        let Some(bound) = gain(model, f.share) else { return };
        // The interval carries the sampling error of both the share and the utilisation.
        let (lo, hi) = crate::finding::wilson(f.share, busy_weight as f64);
        let (least_busy, most_busy) = model.at_utilisation_bounds();
        let low = least_busy.and_then(|m| gain(&m, lo)).unwrap_or(bound).min(bound);
        let high = most_busy.and_then(|m| gain(&m, hi)).map(|h| h.max(bound));
        f.max_speedup = Some(bound);
        f.modelled_range = Some((low, high));
        f.gain_basis = GainBasis::LatencyModel;
        let (alone, cpu) = model.alone();
        f.why = format!(
            "{}; under this load ({:.0} requests/s, the server {:.0}% busy) a request's latency is its work plus the queue that work builds, and both shrink with it (sent alone, a request took {}, {} of it the server's CPU)",
            f.why,
            model.rps(),
            model.utilisation() * 100.0,
            onefix_model::fmt::millis(alone * 1e3),
            onefix_model::fmt::millis(cpu * 1e3),
        );
    }
}
