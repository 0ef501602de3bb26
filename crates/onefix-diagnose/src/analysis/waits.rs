//! Wait-for attribution: a thread that waits for a lock, or for the GIL, that another thread
//! holds is charged to what the holder does meanwhile, not to the line that waits. The line to
//! change is the holder's (the slow work under the lock); the waits it causes are its evidence.
//!
//! The holder is read off the samples taken at the same tick:
//! - the GIL: the thread the interpreter says holds it (py-spy reads it from memory), for a
//!   Python thread that the kernel saw in a futex wait at a line that takes no lock;
//! - a Python lock: the thread whose stack is inside the block the lock guards (`with lock:`'s
//!   body, or the lines up to `lock.release()`);
//! - a native lock: the thread inside the block it guards (read from the source: a pthread
//!   lock and its unlock, a scoped guard); else the thread the kernel saw wake the waiter
//!   (`sched:sched_waking`: it released the lock);
//! - any other lock: the one thread of the process running user code at that tick, when there
//!   is exactly one (otherwise the wait stays where it is: no guess).
//!
//! When the holder itself waits for a lock or the GIL, the charge passes on to its holder, as
//! wPerf's cascade does, a few hops at most. No wait is counted twice: each waiting sample is
//! charged once, to the one holder of that tick.

use super::*;

/// Hops followed from a waiter to its holder's holder.
const MAX_CASCADE: usize = 4;
/// A Python lock's waits at ticks whose holder was not read inside its block are charged like
/// the others when the holder was read at this share of the lock's waiting samples at least...
const MIN_HOLDER_SEEN: f64 = 0.3;
/// ...and at this many of them.
const MIN_HOLDER_SAMPLES: u64 = 20;

/// What a waiting sample waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Cause {
    Lock,
    Gil,
}

/// A waiting sample charged to its holder: through the holder's stack at that tick.
#[derive(Clone, Copy, Debug)]
pub(super) struct Recharge {
    pub stack: StackId,
    /// Whether the holder was running (its work) or itself waiting (I/O under the lock).
    pub running: bool,
    pub cause: Cause,
    /// The line the waiter waited at.
    pub waited_at: usize,
    /// Charged as the lock's other waits were, its holder not read at that tick (see
    /// [`Engine::charge_unseen_holders`]): for a Python lock such ticks are mostly the lock
    /// passing from one holder to the next (the next holder must also get the GIL), a delay
    /// that shrinks with the contention but does not vanish with the holder's line, so the
    /// critical path walks it as the lock wait it is (to whichever thread ended it) rather than
    /// as the holder's line's time. A native lock passes in microseconds (a futex wake), so its
    /// inferred waits are walked as the holders' work (never set for them).
    pub inferred: bool,
}

/// The kernel's wake-ups of a native recording ([`onefix_model::attachments::Wakes`]), by the
/// thread woken: its blocked intervals in time order, each with the thread that ended it.
pub(super) struct WakeIndex {
    by_thread: Vec<Vec<(u64, u64, usize)>>,
}

impl WakeIndex {
    fn of(profile: &Profile, nthreads: usize) -> Option<WakeIndex> {
        let wakes = profile.wakes()?;
        let mut by_thread: Vec<Vec<(u64, u64, usize)>> = vec![Vec::new(); nthreads];
        for e in wakes.edges {
            let (thread, waker) = (e.thread as usize, e.waker as usize);
            if thread < nthreads && waker < nthreads && thread != waker {
                by_thread[thread].push((e.from_us, e.to_us, waker));
            }
        }
        for t in &mut by_thread {
            t.sort_unstable();
        }
        Some(WakeIndex { by_thread })
    }

    /// The thread that ended the blocked interval of `thread` going on at `t`.
    pub(super) fn waker(&self, thread: usize, t: u64) -> Option<usize> {
        let intervals = self.by_thread.get(thread)?;
        let after = intervals.partition_point(|&(from, _, _)| from <= t);
        let &(_, to, waker) = intervals.get(after.checked_sub(1)?)?;
        (t <= to).then_some(waker)
    }
}

/// Each thread's samples as time intervals, to find what another thread did at a given tick.
pub(super) struct Timelines {
    /// By thread: (start µs, end µs, sample index), in time order.
    pub by_thread: Vec<Vec<(u64, u64, usize)>>,
    /// By process: its samples holding the GIL, in time order (one holder at a time), so that
    /// a GIL wait finds its holder without asking every thread.
    gil_holders: HashMap<u32, Vec<(u64, u64, usize)>>,
    /// Which thread ended each blocked interval, when the kernel told (native recordings).
    wakes: Option<WakeIndex>,
}

impl Timelines {
    pub fn of(profile: &Profile) -> Option<Timelines> {
        let WeightUnit::Samples { interval_us } = profile.meta.weight_unit else { return None };
        let mut by_thread: Vec<Vec<(u64, u64, usize)>> = vec![Vec::new(); profile.threads().len()];
        let mut gil_holders: HashMap<u32, Vec<(u64, u64, usize)>> = HashMap::new();
        for (i, s) in profile.samples.iter().enumerate() {
            let end = s.time_us + s.weight as u64 * interval_us;
            by_thread[s.thread as usize].push((s.time_us, end, i));
            if s.state.gil() {
                gil_holders.entry(profile.threads()[s.thread as usize].pid).or_default().push((s.time_us, end, i));
            }
        }
        for t in by_thread.iter_mut().chain(gil_holders.values_mut()) {
            t.sort_by_key(|&(start, _, i)| (start, i));
        }
        let wakes = WakeIndex::of(profile, by_thread.len());
        Some(Timelines { by_thread, gil_holders, wakes })
    }

    /// The sample of `thread` taken at `t`: the last one started at or before it, if it still
    /// covers `t`.
    pub fn at(&self, thread: usize, t: u64) -> Option<usize> {
        let line = &self.by_thread[thread];
        let after = line.partition_point(|&(start, _, _)| start <= t);
        let &(_, end, i) = line.get(after.checked_sub(1)?)?;
        (t < end).then_some(i)
    }

    /// The thread that ended the blocked interval of `thread` going on at `t`, as the kernel
    /// recorded it.
    pub fn waker(&self, thread: usize, t: u64) -> Option<usize> {
        self.wakes.as_ref()?.waker(thread, t)
    }

    /// The sample of `pid` that held the GIL at `t`, if one was read holding it then.
    fn gil_holder(&self, pid: u32, t: u64) -> Option<usize> {
        let held = self.gil_holders.get(&pid)?;
        let after = held.partition_point(|&(start, _, _)| start <= t);
        let &(_, end, i) = held.get(after.checked_sub(1)?)?;
        (t < end).then_some(i)
    }

    /// As [`Timelines::at`], but a sample that ended less than `slack` µs before `t` still
    /// counts: the gap a late tick leaves between two samples is the same thread going on.
    pub fn near(&self, thread: usize, t: u64, slack: u64) -> Option<usize> {
        let line = &self.by_thread[thread];
        let after = line.partition_point(|&(start, _, _)| start <= t);
        let &(_, end, i) = line.get(after.checked_sub(1)?)?;
        (t < end + slack).then_some(i)
    }
}

impl Engine<'_> {
    /// Whether the stack waits for a lock (a knowledge-base lock entry, while blocked).
    /// A thread parked for want of work, or joining others, waits in a lock too (a queue's
    /// condition, a thread's end-of-life lock): it is parked, not contending.
    pub(super) fn lock_wait(&mut self, stack: Option<StackId>) -> bool {
        let Some(i) = self.stack(stack) else { return false };
        if self.stack_facts[i].idle.is_some() {
            return false;
        }
        self.stack_facts[i].cost.iter().any(|&e| {
            let spec = &self.kb.entries[e as usize].spec;
            spec.kind == Kind::LockContention && spec.when == When::Blocked
        })
    }

    /// Whether a sample is a Python thread queuing for the GIL: in a futex wait (asleep, or
    /// just woken and runnable), at a line that takes no lock and parks for nothing, while the
    /// GIL is held by another thread.
    fn gil_wait(&mut self, s: &Sample) -> bool {
        if s.state.gil() || !s.state.futex() {
            return false;
        }
        let Some(i) = self.stack(s.stack) else { return false };
        let facts = &self.stack_facts[i];
        let python_leaf = facts.leaf.is_some_and(|f| self.profile.frame(f).kind == FrameKind::Python);
        python_leaf && facts.idle.is_none() && facts.line.is_some() && !self.lock_wait(s.stack)
    }

    /// Waiting samples to charge to their holder's line instead of their own, by sample index.
    pub(super) fn wait_for(&mut self, mode: Mode, timelines: Option<&Timelines>) -> HashMap<usize, Recharge> {
        let mut out = HashMap::new();
        let Some(timelines) = timelines.filter(|_| mode == Mode::Wall) else { return out };
        let profile = self.profile;
        // The block each lock line guards, by the waiter's line: looked up once.
        let mut guarded: HashMap<usize, Option<(FrameId, u32, u32)>> = HashMap::new();
        // Per lock line: what its holders were read doing (stack, running) and how often, and
        // the waits whose holder was not read (between two statements of the block, or back
        // from the lock and queuing for the GIL to go on).
        let mut seen_holding: HashMap<usize, HashMap<(StackId, bool), u64>> = HashMap::new();
        let mut unseen: Vec<(usize, usize)> = Vec::new();
        for (i, s) in profile.samples.iter().enumerate() {
            if self.running(s) {
                continue;
            }
            let cause = if self.gil_wait(s) {
                Cause::Gil
            } else if self.lock_wait(s.stack) {
                Cause::Lock
            } else {
                continue;
            };
            let Some(waited_at) = self.line_of(s.stack) else { continue };
            let mut at = i;
            let mut cause_now = cause;
            let mut charge = None;
            for hop in 0..MAX_CASCADE {
                let Some(holder) = self.holder(at, cause_now, timelines, &mut guarded) else {
                    if hop == 0 && cause == Cause::Lock && guarded.get(&waited_at).is_some_and(|b| b.is_some()) {
                        unseen.push((i, waited_at));
                    }
                    break;
                };
                let h = &profile.samples[holder];
                let running = self.running(h);
                let next = if running {
                    None
                } else if self.gil_wait(h) {
                    Some(Cause::Gil)
                } else if self.lock_wait(h.stack) {
                    Some(Cause::Lock)
                } else {
                    None
                };
                // A GIL holder at the edge of its own wait on another thread (edges.rs) holds it
                // for that wait, not for work of its line: the waiter's time stays its own. (A
                // lock's holder parked inside its block, waiting on a queue while it holds the
                // lock, is still what the lock's waiters wait for.)
                if cause_now == Cause::Gil && self.parked(h.stack).is_some() {
                    break;
                }
                match (self.line_of(h.stack), next) {
                    // Waiting at the same line: no cause found elsewhere.
                    (Some(line), Some(_)) if line == waited_at => break,
                    (Some(_), Some(next)) => {
                        at = holder;
                        cause_now = next;
                    }
                    // Through the holder's stack, even at the waiter's own line: the waiter's
                    // time is then the holder's work there, not a wait of its own.
                    (Some(_), None) => {
                        charge = Some(Recharge { stack: h.stack.unwrap(), running, cause, waited_at, inferred: false });
                        break;
                    }
                    (None, _) => break,
                }
            }
            if let Some(r) = charge {
                if cause == Cause::Lock {
                    *seen_holding.entry(waited_at).or_default().entry((r.stack, r.running)).or_default() +=
                        s.weight as u64;
                }
                out.insert(i, r);
            }
        }
        self.charge_unseen_holders(&mut out, seen_holding, &guarded, unseen);
        out
    }

    /// What every thread does inside the block a lock guards, over the whole run, by stack
    /// and whether it ran: the samples read there, but for waits at the lock itself.
    fn work_in_block(&mut self, lock_line: usize, block: (FrameId, u32, u32)) -> HashMap<(StackId, bool), u64> {
        let profile = self.profile;
        let mut inside: HashMap<StackId, bool> = HashMap::new();
        let mut work: HashMap<(StackId, bool), u64> = HashMap::new();
        for s in &profile.samples {
            let Some(stack) = s.stack else { continue };
            let held = *inside.entry(stack).or_insert_with(|| self.inside_block(stack, block));
            if !held || self.parked(Some(stack)).is_some() || self.line_of(Some(stack)) == Some(lock_line) {
                continue;
            }
            let running = self.running(s);
            if !running && self.lock_wait(Some(stack)) {
                continue;
            }
            *work.entry((stack, running)).or_default() += s.weight as u64;
        }
        work
    }

    /// Waits for a lock at ticks whose holder was not read inside the block the lock guards
    /// are charged as the waits whose holder was: in proportion to what the holders were read
    /// doing (deterministically, each to the stack furthest below its share so far). Left
    /// where they are when the holder was read too seldom to say what it does, except for a
    /// native lock: native threads are not read at the same instants, and a lock passed on
    /// faster than a tick is seldom read with its holder inside the block, so what every
    /// thread does inside the block over the whole run stands for it (many waiters queue
    /// behind one holder, so its work over the run may be fewer samples than their waits:
    /// only a count is asked of it).
    fn charge_unseen_holders(
        &mut self,
        out: &mut HashMap<usize, Recharge>,
        mut seen_holding: HashMap<usize, HashMap<(StackId, bool), u64>>,
        guarded: &HashMap<usize, Option<(FrameId, u32, u32)>>,
        unseen: Vec<(usize, usize)>,
    ) {
        let profile = self.profile;
        let mut unseen_weight: HashMap<usize, u64> = HashMap::new();
        for &(i, line) in &unseen {
            *unseen_weight.entry(line).or_default() += profile.samples[i].weight as u64;
        }
        // Per lock line with such waits: what they are charged by, if anything.
        let mut basis: HashMap<usize, HashMap<(StackId, bool), u64>> = HashMap::new();
        for (&line, &missed) in &unseen_weight {
            let holding = seen_holding.remove(&line).unwrap_or_default();
            let seen: u64 = holding.values().sum();
            if seen >= MIN_HOLDER_SAMPLES && seen as f64 >= MIN_HOLDER_SEEN * (seen + missed) as f64 {
                basis.insert(line, holding);
                continue;
            }
            let native = profile.frame(self.lines[line].frame).kind != FrameKind::Python;
            if let (true, Some(Some(block))) = (native, guarded.get(&line)) {
                let work = self.work_in_block(line, *block);
                if work.values().sum::<u64>() >= MIN_HOLDER_SAMPLES {
                    basis.insert(line, work);
                }
            }
        }
        let mut given: HashMap<(usize, StackId, bool), u64> = HashMap::new();
        for (i, waited_at) in unseen {
            let Some(holding) = basis.get(&waited_at) else { continue };
            let mut options: Vec<(&(StackId, bool), &u64)> = holding.iter().collect();
            options.sort_by_key(|&(&(stack, running), _)| (stack, running));
            let Some((&(stack, running), _)) = options.into_iter().min_by(|a, b| {
                let ratio = |(&(stack, running), &w): (&(StackId, bool), &u64)| {
                    given.get(&(waited_at, stack, running)).copied().unwrap_or(0) as f64 / w as f64
                };
                ratio(*a).total_cmp(&ratio(*b))
            }) else {
                continue;
            };
            *given.entry((waited_at, stack, running)).or_default() += profile.samples[i].weight as u64;
            // A native lock passes in microseconds: its inferred waits are walked as the work.
            let python = profile.frame(self.lines[waited_at].frame).kind == FrameKind::Python;
            out.insert(i, Recharge { stack, running, cause: Cause::Lock, waited_at, inferred: python });
        }
    }

    /// The sample of the thread that held what sample `i` waited for, at the same tick.
    fn holder(
        &mut self,
        i: usize,
        cause: Cause,
        timelines: &Timelines,
        guarded: &mut HashMap<usize, Option<(FrameId, u32, u32)>>,
    ) -> Option<usize> {
        let profile = self.profile;
        let s = &profile.samples[i];
        let pid = profile.threads()[s.thread as usize].pid;
        match cause {
            Cause::Gil => timelines.gil_holder(pid, s.time_us).filter(|&o| profile.samples[o].thread != s.thread),
            Cause::Lock => {
                let others: Vec<usize> = (0..timelines.by_thread.len())
                    .filter(|&t| t != s.thread as usize && profile.threads()[t].pid == pid)
                    .filter_map(|t| timelines.at(t, s.time_us))
                    .collect();
                let line = self.line_of(s.stack)?;
                let block = *guarded.entry(line).or_insert_with(|| {
                    let frame = self.lines[line].frame;
                    let f = profile.frame(frame);
                    let path = self.user.resolve(&f.file)?;
                    let (first, last) = self.source.held_block(&path, f.line)?;
                    Some((frame, first, last))
                });
                match block {
                    Some(block) => {
                        let inside = others
                            .iter()
                            .copied()
                            .find(|&o| profile.samples[o].stack.is_some_and(|st| self.inside_block(st, block)));
                        // Else inside another place of the file that takes the same lock (a
                        // class's `with self._lock:` in `get` and in `put`).
                        inside.or_else(|| {
                            let lock = profile.frame(block.0);
                            let path = self.user.resolve(&lock.file)?;
                            let blocks = self.source.same_lock_blocks(&path, lock.line);
                            others.into_iter().find(|&o| {
                                profile.samples[o].stack.is_some_and(|st| {
                                    blocks.iter().any(|&(first, last)| self.inside_lines(st, &lock.file, first, last))
                                })
                            })
                        })
                    }
                    None => match timelines.waker(s.thread as usize, s.time_us) {
                        // The thread that released the lock ended the wait: it held the lock.
                        Some(w) => {
                            timelines.at(w, s.time_us).filter(|&o| self.line_of(profile.samples[o].stack).is_some())
                        }
                        None => {
                            // A lock taken inside a library call (a queue's mutex, under
                            // `q.get()`) is held inside that library, by whichever thread is in
                            // it at the time: what another thread's line does then is no work
                            // under that lock.
                            let in_library = self.stack(s.stack).is_some_and(|k| {
                                self.stack_facts[k].beneath.iter().any(|&f| profile.frame(f).kind == FrameKind::Python)
                            });
                            if in_library {
                                return None;
                            }
                            let mut working = others.into_iter().filter(|&o| {
                                let h = &profile.samples[o];
                                self.running(h) && self.line_of(h.stack).is_some() && self.parked(h.stack).is_none()
                            });
                            let only = working.next()?;
                            working.next().is_none().then_some(only)
                        }
                    },
                }
            }
        }
    }
}

impl Engine<'_> {
    /// When line `l` runs under the lock waited for at `lock_line` but taken at another place
    /// of the same file (see [`crate::names::SourceCache::same_lock_blocks`]), that place's line:
    /// judged by the stack `l` was read in most.
    fn held_under(&mut self, l: usize, lock_line: usize) -> Option<u32> {
        let profile = self.profile;
        let lock = profile.frame(self.lines[lock_line].frame);
        let path = self.user.resolve(&lock.file)?;
        let (stack, _) = self.lines[l].by_stack.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?.0.to_owned();
        if let Some((first, last)) = self.source.held_block(&path, lock.line) {
            if self.inside_lines(stack, &lock.file, first, last) {
                return None;
            }
        }
        let blocks = self.source.same_lock_blocks(&path, lock.line);
        // A block starts on the line after the one that takes the lock.
        blocks
            .into_iter()
            .find(|&(first, last)| self.inside_lines(stack, &lock.file, first, last))
            .map(|(first, _)| first - 1)
    }

    /// Says, in a finding at line `l`, the waits of other threads it caused (charged to it by
    /// [`Engine::wait_for`]): as evidence, in why, and in the fix, which becomes the lock's
    /// when the waits are for a lock.
    pub(super) fn say_caused_waits(&mut self, l: usize, finding: &mut Finding, share: &dyn Fn(u64) -> f64) {
        let mut caused: Vec<((usize, Cause), u64)> = self.lines[l].caused.iter().map(|(&k, &w)| (k, w)).collect();
        caused.sort_by(|a, b| b.1.cmp(&a.1).then(a.0 .0.cmp(&b.0 .0)));
        let total: u64 = caused.iter().map(|&(_, w)| w).sum();
        if total == 0 || share(total) < 0.01 {
            return;
        }
        let place = |engine: &mut Engine, line: usize| {
            let f = engine.profile.frame(engine.lines[line].frame).clone();
            let code = engine.code(&f.file, f.line).map(|c| format!(" `{c}`")).unwrap_or_default();
            (format!("{}:{}{code}", short(&f.file), f.line), f)
        };
        // By the place they waited at, as said: two frames of one line (a generator's and its
        // function's) are one place.
        let mut places: Vec<(String, Cause, FrameId, u64)> = Vec::new();
        for &((line, cause), w) in &caused {
            let (at, _) = place(self, line);
            match places.iter_mut().find(|(a, c, _, _)| *a == at && *c == cause) {
                Some(p) => p.3 += w,
                None => places.push((at, cause, self.lines[line].frame, w)),
            }
        }
        places.sort_by_key(|p| std::cmp::Reverse(p.3));
        for (at, cause, frame, w) in places.into_iter().take(2).rev() {
            let f = self.profile.frame(frame);
            let said = match cause {
                Cause::Lock => format!("other threads waiting for the lock at {at}"),
                Cause::Gil => format!("other threads queuing for the GIL at {at}"),
            };
            finding.evidence.insert(0, Evidence { frame: said, file: f.file.clone(), line: f.line, share: share(w) });
        }
        finding.evidence.truncate(MAX_EVIDENCE);
        let of = |cause: Cause| caused.iter().filter(|((_, c), _)| *c == cause).map(|&(_, w)| w).sum::<u64>();
        let (lock, gil) = (of(Cause::Lock), of(Cause::Gil));
        let b = crate::builtin::Builtins::get();
        let waits_percent = format!("{:.0}", share(total) * 100.0);
        let why = std::mem::take(&mut finding.why);
        let fix = std::mem::take(&mut finding.advice);
        if lock >= gil {
            let lock_line = caused.iter().find(|((_, c), _)| *c == Cause::Lock).map(|&((line, _), _)| line).unwrap();
            let (lock_at, _) = place(self, lock_line);
            // The lock this line runs under may be taken at another place than the waiters'
            // (`with self._lock:` in `put`, waited for in `get`): the fix is to that place.
            let held_at = match self.held_under(l, lock_line) {
                Some(at) => {
                    let file = &self.profile.frame(self.lines[lock_line].frame).file;
                    let code = self.code(file, at).map(|c| format!(" `{c}`")).unwrap_or_default();
                    format!("{}:{at}{code}", short(file))
                }
                None => lock_at.clone(),
            };
            finding.why = b.why(
                "holds-lock",
                &[("why", why), ("lock_at", lock_at.clone()), ("waits_percent", waits_percent.clone())],
            );
            finding.advice = b.fix(
                "holds-lock",
                &[("fix", fix), ("lock_at", lock_at), ("held_at", held_at), ("waits_percent", waits_percent)],
            );
            // A line named only by what it calls is, first of all, what the lock serializes.
            if matches!(finding.kind, Kind::HotCall | Kind::HotLoopCompute | Kind::BlockingWait) {
                finding.kind = b.kind("holds-lock");
            }
        } else {
            finding.why = b.why("holds-gil", &[("why", why), ("waits_percent", waits_percent.clone())]);
            finding.advice = b.fix("holds-gil", &[("fix", fix), ("waits_percent", waits_percent)]);
        }
    }
}
