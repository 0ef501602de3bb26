//! The diagnosis: charge every sample to the user's line at its frontier, rank the lines, and
//! explain the top ones with the knowledge base.
//!
//! Work is done per distinct stack, not per sample: a recording of a million samples has a few
//! thousand stacks, so the per-sample loop only adds weights and marks time windows.

use std::collections::HashMap;
use std::path::PathBuf;

use onefix_model::{FrameId, FrameKind, Mode, Profile, StackId};

use crate::kb::{KnowledgeBase, Role, When};
use crate::names::{called_names, qualified_name, SourceCache};
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
}

impl Default for Options {
    fn default() -> Options {
        Options { mode: Mode::Wall, min_share: 0.05, max_findings: 5, max_hot_lines: 12, min_recurrence: 0.3 }
    }
}

/// A thread counts as busy when at least this fraction of its samples are not parked.
const BUSY_THREAD: f64 = 0.10;
/// A knowledge-base entry explains a line when it is under this fraction of the line's weight.
const ENTRY_EXPLAINS: f64 = 0.3;

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
    /// Cost entries matched beneath the frontier or by the innermost line's calls.
    cost: Vec<u16>,
    line: Option<usize>,
}

#[derive(Default)]
struct LineAcc {
    frame: FrameId,
    weight: u64,
    self_weight: u64,
    blocked: u64,
    windows: Vec<u64>,
    /// Weight by (stack, active): expanded into frames once per stack, at the end.
    by_stack: HashMap<(StackId, bool), u64>,
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
            let mut cost = Vec::new();
            let mut idle = None;
            for (i, e) in self.kb.entries.iter().enumerate() {
                if e.matches_frame(frame.kind, &qualified) {
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
            Some(i) => leaf_first[i + 1..]
                .iter()
                .copied()
                .filter(|&f| self.frame(f).origin == Origin::User)
                .take(3)
                .collect(),
            None => Vec::new(),
        };
        let innermost_python = leaf_first.iter().copied().find(|&f| self.profile.frame(f).kind == FrameKind::Python);
        let idle = innermost_python.and_then(|f| self.frame(f).idle);
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
        let i = self.stack_facts.len();
        self.stack_facts.push(StackFacts { callers, beneath, idle, cost, line });
        self.stacks[id as usize] = Some(i as u32);
        Some(i)
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
        let window_us = if end_us >= 10_000_000 { 1_000_000 } else { (end_us / 10).max(50_000) };
        let nwindows = (end_us / window_us + 1) as usize;

        // Pass 1: which threads are parked, and for how much.
        let nthreads = profile.threads().len();
        let mut thread_total = vec![0u64; nthreads];
        let mut thread_idle = vec![0u64; nthreads];
        for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
            thread_total[s.thread as usize] += s.weight as u64;
            if let Some(i) = self.stack(s.stack) {
                if !s.state.active() && self.stack_facts[i].idle.is_some() {
                    thread_idle[s.thread as usize] += s.weight as u64;
                }
            }
        }
        let busy: Vec<bool> = (0..nthreads)
            .map(|t| thread_total[t] > 0 && (thread_total[t] - thread_idle[t]) as f64 >= BUSY_THREAD * thread_total[t] as f64)
            .collect();
        let total_weight: u64 = thread_total.iter().sum();
        let idle_weight: u64 = (0..nthreads).filter(|&t| !busy[t]).map(|t| thread_total[t]).sum();
        let busy_weight = total_weight - idle_weight;

        // Pass 2: charge the busy threads' samples to their frontier lines.
        let mut active_windows = vec![false; nwindows];
        let mut parked_in_busy = 0u64;
        let mut outside_user = 0u64;
        for s in profile.samples.iter().filter(|s| mode.counts(s.state) && busy[s.thread as usize]) {
            let w = s.weight as u64;
            let Some(i) = self.stack(s.stack) else {
                outside_user += w;
                continue;
            };
            let facts = &self.stack_facts[i];
            if !s.state.active() && facts.idle.is_some() {
                parked_in_busy += w;
                continue;
            }
            let window = (s.time_us / window_us) as usize;
            active_windows[window] = true;
            let Some(line) = facts.line else {
                outside_user += w;
                continue;
            };
            let is_self = facts.beneath.is_empty();
            let acc = &mut self.lines[line];
            acc.weight += w;
            if is_self {
                acc.self_weight += w;
            }
            if !s.state.active() {
                acc.blocked += w;
            }
            if acc.windows.is_empty() {
                acc.windows = vec![0; nwindows.div_ceil(64)];
            }
            acc.windows[window / 64] |= 1 << (window % 64);
            *acc.by_stack.entry((s.stack.unwrap(), s.state.active())).or_default() += w;
        }
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
        for &l in &order {
            if findings.len() >= opts.max_findings || share(self.lines[l].weight) < opts.min_share {
                break;
            }
            let recurrence = {
                let seen: u32 = self.lines[l].windows.iter().map(|w| w.count_ones()).sum();
                seen as f64 / active_window_count as f64
            };
            let frame = profile.frame(self.lines[l].frame).clone();
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
            let finding = self.explain(l, recurrence, &share, mode);
            // Several lines repeated by one loop are one finding at that loop.
            if let Some(prev) = findings.iter_mut().find(|f| f.file == finding.file && f.line == finding.line) {
                prev.share += finding.share;
                prev.max_speedup = speedup(prev.share);
                prev.evidence.extend(finding.evidence);
                prev.evidence.truncate(6);
                continue;
            }
            findings.push(finding);
        }
        findings.sort_by(|a, b| b.share.total_cmp(&a.share));
        for (i, f) in findings.iter_mut().enumerate() {
            f.rank = i + 1;
        }

        let share_of = match mode {
            Mode::Wall => "wall time of the busy threads",
            Mode::Cpu => "CPU time",
        };
        let idle_threads = (0..nthreads).filter(|&t| !busy[t] && thread_total[t] > 0).count();
        if idle_weight > 0 && total_weight > 0 {
            notes.insert(0, format!(
                "{idle_threads} thread(s) idle for want of work (waiting on a queue, for connections, or for other threads): {:.0}% of the sampled time, not counted as cost",
                idle_weight as f64 * 100.0 / total_weight as f64
            ));
        }
        if parked_in_busy > 0 && share(parked_in_busy) >= 0.01 {
            notes.push(format!(
                "{:.0}% of the busy threads' time was spent waiting in an event loop or on other threads, charged to no line",
                share(parked_in_busy) * 100.0
            ));
        }
        if outside_user > 0 && share(outside_user) >= 0.01 {
            notes.push(format!(
                "{:.0}% of the busy threads' time ran outside your code (start-up, imports, interpreter)",
                share(outside_user) * 100.0
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
    fn explain(&mut self, l: usize, recurrence: f64, share: &dyn Fn(u64) -> f64, mode: Mode) -> Finding {
        let profile = self.profile;
        let by_stack: Vec<((StackId, bool), u64)> = self.lines[l].by_stack.iter().map(|(k, v)| (*k, *v)).collect();
        let mut entry_weight: HashMap<u16, u64> = HashMap::new();
        let mut frame_incl: HashMap<FrameId, u64> = HashMap::new();
        let mut leaf_self: HashMap<FrameId, u64> = HashMap::new();
        let mut caller_weight: HashMap<FrameId, u64> = HashMap::new();
        for &((stack, active), w) in &by_stack {
            let i = self.stacks[stack as usize].unwrap() as usize;
            let facts = &self.stack_facts[i];
            for &e in &facts.cost {
                if self.kb.entries[e as usize].spec.when == When::Any || !active {
                    *entry_weight.entry(e).or_default() += w;
                }
            }
            let mut seen = Vec::with_capacity(facts.beneath.len());
            for &f in &facts.beneath {
                if !seen.contains(&f) {
                    seen.push(f);
                    *frame_incl.entry(f).or_default() += w;
                }
            }
            if let Some(&leaf) = facts.beneath.first() {
                *leaf_self.entry(leaf).or_default() += w;
            }
            if let Some(&c) = facts.callers.first() {
                *caller_weight.entry(c).or_default() += w;
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
            if let Some((&f, &w)) = top {
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
        let mut callers: Vec<(FrameId, u64)> = caller_weight.into_iter().collect();
        callers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let loop_in_caller = callers.first().and_then(|&(c, _)| self.loop_of(c));

        let (kind, rule, what, why, fix) = match best {
            Some((e, _)) => {
                let spec = &self.kb.entries[e as usize].spec;
                (spec.kind.clone(), spec.id.clone(), spec.what.clone(), spec.why.clone(), spec.fix.clone())
            }
            None if mode == Mode::Wall && blocked * 2 >= weight => (
                "blocking-wait".to_owned(),
                "blocked".to_owned(),
                "waiting".to_owned(),
                format!("the thread is blocked here {:.0}% of the time, not running", blocked as f64 * 100.0 / weight as f64),
                "find what the line waits for (a lock, a reply, a child process) and overlap or remove the wait".to_owned(),
            ),
            None if self_weight * 2 >= weight => (
                "hot-loop-compute".to_owned(),
                "self-time".to_owned(),
                "running its own code".to_owned(),
                "the time is spent executing this line's own code, not in a library it calls".to_owned(),
                "do less work per pass: move invariant work out of the loop, use a better algorithm or data structure, or a vectorised or compiled library".to_owned(),
            ),
            None => {
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
        let (mut file, mut line, mut function, mut code) = (frame.file.clone(), frame.line, frame.function.clone(), self.code(&frame.file, frame.line));
        let enclosing = loop_here.or(loop_in_caller);
        if kind == "serial-io" {
            if let Some((owner, loop_line)) = enclosing {
                let owner = profile.frame(owner).clone();
                evidence.insert(0, Evidence {
                    frame: format!("{} (the call that waits)", code.clone().unwrap_or_else(|| frame.function.clone())),
                    file: file.clone(),
                    line,
                    share: line_share,
                });
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
        Finding {
            rank: 0,
            kind,
            file,
            line,
            function,
            code,
            share: line_share,
            max_speedup: speedup(line_share),
            title,
            advice,
            why,
            evidence,
            recurrence,
            rule,
            enclosing_loop,
        }
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

/// Amdahl's bound: what is left if this share went to zero. Undefined when it is all the time.
fn speedup(share: f64) -> Option<f64> {
    (share < 0.99).then(|| 1.0 / (1.0 - share))
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
