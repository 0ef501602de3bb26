//! The gain on the program's critical path. A batch program ends when its last thread does, so
//! what a fix gains is what it takes off the chain of work that ends last, not its share of the
//! summed time of every busy thread: work that other threads overlap gains nothing, and a main
//! thread that the others wait for gains all of its time.
//!
//! The path is walked back from the end of the run, Perfetto's way, over the samples: while the
//! thread on the path runs, or waits for something outside the program (a reply, the clock,
//! the disk), the time is charged to its line; when it waits for another thread (a join, a
//! queue, a lock, the GIL), the path moves to the thread that woke it: in a native recording,
//! the one the kernel saw wake it (`sched:sched_waking`); otherwise the one that was doing work
//! when the wait ended (preferring one that finished or started waiting just then, as a joined
//! thread or a producer does).
//!
//! The bound is critical-path zeroing (Hollingsworth): T' is the path without the line's time,
//! but never less than what must still run once the line is gone, since the path may shift:
//! - any thread's own time (work and outside waits) without the line, for the threads the end
//!   waits for;
//! - a Python process's time holding the GIL without the line (one thread at a time);
//! - the CPU work without the line, over the machine's CPUs.

use super::waits::{Recharge, Timelines};
use super::*;

/// A thread read this many ticks late is still the same thread going on.
const LATE_TICKS: u64 = 3;
/// Ticks looked back to tell which of several working threads woke a waiter.
const LOOKBACK_TICKS: u64 = 5;

/// Client and server threads: a server works this share of its client's waits at a line...
const SERVES: f64 = 0.8;
/// ...and at most this share of the time its client works...
const IDLE_BESIDE: f64 = 0.25;
/// ...over at least this many ticks of waiting.
const MIN_PAIRED_TICKS: u64 = 20;
/// Threads taking turns faster than a tick: together no more than this times one thread's time...
const TURNS_SLACK: f64 = 1.1;
/// ...with the client waiting at the line at least this share of its time.
const TURNS_MIN_WAIT: f64 = 0.3;
/// Past this many threads the pairs are not looked for: the overlap is counted per pair of
/// threads over every sample, too much for a large pool.
const MAX_PAIRED_THREADS: usize = 16;

/// Whether two threads take their items from one queue ([`Engine::queue_pools`]): one never
/// wakes the other from it.
fn same_pool(pool_of: &[Option<usize>], a: usize, b: usize) -> bool {
    matches!((pool_of.get(a), pool_of.get(b)), (Some(Some(x)), Some(Some(y))) if x == y)
}

/// A thread's time in one state, and the time each other thread worked meanwhile.
type Overlap = (u64, HashMap<usize, u64>);

/// Threads that call each other synchronously (see [`Engine::client_server_pairs`]).
#[derive(Default)]
struct ClientServer {
    /// (client thread, the line it waits at) -> the thread that serves those waits.
    server: HashMap<(usize, Option<usize>), usize>,
    /// A server thread -> its client.
    client: HashMap<usize, usize>,
}

/// What a sample on the path does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Runs, or waits for something outside the program: charged to this line (none: code
    /// outside the user's, or an unreadable stack).
    Own(Option<usize>),
    /// Waits for I/O (not the clock): charged to this line like [`Step::Own`], unless a thread
    /// of the same process hands over just as the wait ends (a server thread of the program
    /// answering it), which the path then follows.
    Io(Option<usize>),
    /// Waits for another thread of the program.
    Woken,
    /// Parked for want of work from outside (a server waiting for connections): time passes,
    /// but no work is done that a fix would still need.
    Idle,
}

/// The critical path of a run: its length and the time each line holds on it.
pub(super) struct CriticalPath {
    /// End to end, µs.
    pub length_us: u64,
    on_path: HashMap<usize, u64>,
    /// Per thread that the end waits for: its own time by line, and its total.
    own: Vec<(HashMap<usize, u64>, u64)>,
    /// Threads of [`CriticalPath::own`] that share their items out of one queue (indices into
    /// it), each pool at least two threads: see [`Engine::queue_pools`].
    pools: Vec<Vec<usize>>,
    /// Per Python process: time holding the GIL, by line, and the total.
    gil: Vec<(HashMap<usize, u64>, u64)>,
    /// Running time by line, and the total.
    running: (HashMap<usize, u64>, u64),
    cpus: Option<u32>,
    interval_us: u64,
    /// Each line's source line (file and line number) as a number: the frames of one source
    /// line in two functions (a generator expression and the function around it) are one line
    /// to remove.
    source_of: Vec<usize>,
}

impl CriticalPath {
    /// The predicted speedup if `lines` cost nothing, with the path's length in samples.
    pub fn speedup(&self, lines: &[usize]) -> Option<f64> {
        let t = self.length_us as f64;
        let removed = |l: &usize| lines.iter().any(|&r| self.source_of.get(r) == self.source_of.get(*l));
        let sum =
            |by_line: &HashMap<usize, u64>| by_line.iter().filter(|(l, _)| removed(l)).map(|(_, w)| w).sum::<u64>();
        let without = |(by_line, total): &(HashMap<usize, u64>, u64)| total.saturating_sub(sum(by_line)) as f64;
        let on_path = sum(&self.on_path);
        let mut remaining = t - on_path as f64;
        // A pool's items are shared out anew once the line is gone: its threads' time over
        // their number stays, not its busiest thread's.
        let mut pooled = vec![false; self.own.len()];
        for pool in &self.pools {
            let total: f64 = pool.iter().map(|&k| without(&self.own[k])).sum();
            remaining = remaining.max(total / pool.len() as f64);
            for &k in pool {
                pooled[k] = true;
            }
        }
        for (own, _) in self.own.iter().zip(&pooled).filter(|(_, &p)| !p) {
            remaining = remaining.max(without(own));
        }
        for gil in &self.gil {
            remaining = remaining.max(without(gil));
        }
        if let Some(cpus) = self.cpus {
            remaining = remaining.max(without(&self.running) / cpus as f64);
        }
        // A tick's worth at least: no sampled run is known to a finer grain.
        let remaining = remaining.max(self.interval_us as f64);
        (t > 0.0).then(|| t / remaining)
    }

    /// The path's length in samples: how precisely the bound is known.
    pub fn samples(&self) -> u64 {
        self.length_us / self.interval_us.max(1)
    }
}

impl Engine<'_> {
    /// `moved`: torn or empty reads the diagnosis placed at a line (by sample index).
    fn step(&mut self, i: usize, recharges: &HashMap<usize, Recharge>, moved: &HashMap<usize, usize>) -> Step {
        let s = &self.profile.samples[i];
        // A wait charged by inference (its holder not read) is walked as the lock wait it is.
        if let Some(r) = recharges.get(&i).filter(|r| !r.inferred) {
            return Step::Own(self.line_of(Some(r.stack)));
        }
        let Some(k) = self.stack(s.stack) else { return Step::Own(moved.get(&i).copied()) };
        let line = moved.get(&i).copied().or(self.stack_facts[k].line);
        let woken = self.stack_facts[k].idle.is_some_and(|e| self.kb.entries[e as usize].spec.woken_by_thread)
            || (!self.running(s) && self.lock_wait(s.stack))
            || (s.state.futex() && !s.state.active() && !s.state.gil());
        if woken {
            Step::Woken
        } else if self.parked(s.stack).is_some_and(|busy| !busy || self.stack_facts[k].line.is_none()) {
            // An event loop's wait counts as its thread's time only where user code waits in it.
            Step::Idle
        } else if !self.running(s) && !self.on_timer(s.stack) {
            Step::Io(line)
        } else {
            Step::Own(line)
        }
    }

    /// The critical path of a batch program (one that ran to its end in this recording), in
    /// wall mode; `None` for a server, a run cut short, or a profile of another unit.
    pub(super) fn critical_path(
        &mut self,
        timelines: Option<&Timelines>,
        recharges: &HashMap<usize, Recharge>,
        moved: &HashMap<usize, usize>,
        background: &[bool],
        opts: &Options,
    ) -> Option<CriticalPath> {
        let profile = self.profile;
        let timelines = timelines?;
        let WeightUnit::Samples { interval_us } = profile.meta.weight_unit else { return None };
        if opts.mode != Mode::Wall || !self.batch_run() {
            return None;
        }
        let nthreads = timelines.by_thread.len();
        let steps: Vec<Step> = (0..profile.samples.len()).map(|i| self.step(i, recharges, moved)).collect();
        let end_of = |t: usize| timelines.by_thread[t].last().map(|&(_, end, _)| end);
        let start_us = profile.samples.iter().map(|s| s.time_us).min()?;
        let end_us = (0..nthreads).filter_map(end_of).max()?;
        // The main thread of the program started: the end of the run waits for it.
        let root = profile.meta.target.pid;
        let main = (0..nthreads)
            .filter(|&t| {
                profile.threads()[t].tid == root as u64 || profile.threads()[t].tid == profile.threads()[t].pid as u64
            })
            .max_by_key(|&t| (profile.threads()[t].pid == root, end_of(t)))
            .or_else(|| (0..nthreads).max_by_key(|&t| end_of(t)))?;

        let pairs = self.client_server_pairs(timelines, &steps, interval_us);
        let pool_of = self.queue_pools(timelines, main);
        let mut on_path: HashMap<usize, u64> = HashMap::new();
        let mut cur = main;
        let mut t = end_of(main)?;
        // Switches since the path last moved back in time: more than the threads is a cycle.
        let mut switches = 0usize;
        let mut gaps_us = 0u64;
        // The user line the thread on the path works for, when it runs no user code itself.
        let mut behalf: Option<usize> = None;
        while t > start_us {
            let Some(i) = timelines.near(cur, t - 1, LATE_TICKS * interval_us) else {
                // The thread did not run then: it had not started, or was not sampled. The path
                // goes on in a thread that did work then; failing that, it skips the gap.
                let next = (0..nthreads)
                    .filter(|&o| o != cur)
                    .filter_map(|o| Some((o, timelines.at(o, t - 1)?)))
                    .max_by_key(|&(o, i)| (matches!(steps[i], Step::Own(Some(_))), o == main, std::cmp::Reverse(o)));
                match next {
                    Some((o, _)) if switches <= nthreads => {
                        cur = o;
                        behalf = None;
                        switches += 1;
                    }
                    _ => {
                        let before = (0..nthreads)
                            .filter_map(|o| {
                                let line = &timelines.by_thread[o];
                                let k = line.partition_point(|&(_, end, _)| end < t);
                                k.checked_sub(1).map(|k| line[k].1)
                            })
                            .filter(|&e| e < t)
                            .max()
                            .unwrap_or(start_us);
                        // No thread was read then (the sampler fell behind): time the path
                        // cannot place, left out of its length rather than charged to what stays.
                        gaps_us += t - before.max(start_us);
                        t = before.max(start_us);
                        switches = 0;
                    }
                }
                continue;
            };
            let sample_start = profile.samples[i].time_us;
            let step = steps[i];
            // At the end of a wait, the path moves to the thread that ended it: one that handed
            // over just then (it answered, or finished), else for a wait on another thread the
            // one that was working.
            if !matches!(step, Step::Own(_)) && switches <= nthreads {
                let ends = match timelines.at(cur, t + interval_us / 2) {
                    None => true,
                    Some(next) => steps[next] != step,
                };
                let working = |x: usize| timelines.at(x, t - 1).is_some_and(|k| matches!(steps[k], Step::Own(_)));
                // A wait another thread of the program serves (found over the whole run), or a
                // server waiting for its one client, goes to that thread while it works.
                let served = match step {
                    Step::Io(line) => pairs.server.get(&(cur, line)).copied(),
                    _ => pairs.client.get(&cur).copied(),
                }
                .filter(|&x| working(x));
                // The kernel's word on who ended a wait on another thread comes first; the
                // rest is inferred from what the threads were read doing.
                let woke = match step {
                    Step::Woken => timelines.waker(cur, t - 1),
                    _ => None,
                };
                let handed_over =
                    if ends { self.handover(cur, t, timelines, &steps, interval_us, &pool_of) } else { None };
                let next = woke.or(served).or(handed_over).or_else(|| match step {
                    Step::Woken => self.waker(cur, t, timelines, &steps, interval_us, &pool_of),
                    _ => None,
                });
                if let Some(next) = next {
                    // Work the waker does outside the user's code (a client library's runtime
                    // thread setting up TLS) is done for the line that waits for it.
                    behalf = self.line_of(profile.samples[i].stack).or(behalf);
                    cur = next;
                    switches += 1;
                    continue;
                }
            }
            let charged = match step {
                Step::Own(None) | Step::Io(None) => behalf,
                Step::Own(line) | Step::Io(line) => {
                    behalf = None;
                    line
                }
                Step::Woken => self.line_of(profile.samples[i].stack),
                Step::Idle => None,
            };
            let from = sample_start.max(start_us).min(t);
            // A wait read as one sample over several ticks (identical reads are merged) ended
            // somewhere inside it, and the thread that ended it may have stopped working just
            // before its end: a joined thread's last reads. The path goes to the thread that
            // worked last within the sample, from where it stopped.
            let last = match step {
                Step::Woken if switches <= nthreads => self.last_worker(cur, (from, t), timelines, &steps, &pool_of),
                _ => None,
            };
            if let Some((next, stopped)) = last {
                if let Some(line) = charged {
                    *on_path.entry(line).or_default() += t - stopped;
                }
                t = stopped;
                cur = next;
                switches = 0;
                continue;
            }
            if let Some(line) = charged {
                *on_path.entry(line).or_default() += t - from;
            }
            t = from;
            switches = 0;
        }

        // I/O waits that a thread of the program answered are waits on that thread, not time
        // their own thread must still spend.
        let mut answered: std::collections::HashSet<usize> = std::collections::HashSet::new();
        for (thread, samples) in timelines.by_thread.iter().enumerate() {
            let mut k = 0;
            while k < samples.len() {
                let step = steps[samples[k].2];
                if !matches!(step, Step::Io(_)) {
                    k += 1;
                    continue;
                }
                let mut j = k;
                while j + 1 < samples.len()
                    && steps[samples[j + 1].2] == step
                    && samples[j + 1].0 <= samples[j].1 + interval_us
                {
                    j += 1;
                }
                if self.handover(thread, samples[j].1, timelines, &steps, interval_us, &pool_of).is_some() {
                    answered.extend(samples[k..=j].iter().map(|&(_, _, i)| i));
                }
                k = j + 1;
            }
        }

        // What must still run once a line is gone: each thread's own time (but a background
        // timer's, which the end does not wait for), each Python process's time holding the
        // GIL, the CPU work.
        let mut runnable: HashMap<u64, u32> = HashMap::new();
        for s in &profile.samples {
            if self.running(s) {
                *runnable.entry(s.time_us / interval_us).or_default() += 1;
            }
        }
        let mut own: Vec<(HashMap<usize, u64>, u64)> = Vec::new();
        let mut own_threads: Vec<usize> = Vec::new();
        let mut gil: HashMap<u32, (HashMap<usize, u64>, u64)> = HashMap::new();
        let mut running: (HashMap<usize, u64>, u64) = (HashMap::new(), 0);
        for (thread, samples) in timelines.by_thread.iter().enumerate() {
            let waited_for = !background[thread];
            let mut mine: (HashMap<usize, u64>, u64) = (HashMap::new(), 0);
            for &(start, end, i) in samples {
                let d = end - start;
                let s = &profile.samples[i];
                let line = moved.get(&i).copied().or(self.line_of(s.stack));
                let served = matches!(steps[i], Step::Io(l) if pairs.server.contains_key(&(thread, l)));
                if let (Step::Own(own_line) | Step::Io(own_line), false) = (steps[i], answered.contains(&i) || served) {
                    // A wait charged to its holder is the holder's line's time.
                    if let Some(l) = own_line {
                        *mine.0.entry(l).or_default() += d;
                    }
                    mine.1 += d;
                }
                if self.running(s) {
                    // Runnable is not on a CPU: with more runnable threads than CPUs at a tick,
                    // each had its share of them.
                    let on_cpu = match (opts.cpus, runnable.get(&(s.time_us / interval_us))) {
                        (Some(cpus), Some(&n)) if n > cpus => d * cpus as u64 / n as u64,
                        _ => d,
                    };
                    if let Some(l) = line {
                        *running.0.entry(l).or_default() += on_cpu;
                    }
                    running.1 += on_cpu;
                    // The GIL held going into or out of a wait on another thread (edges.rs)
                    // is the wait's hand-over, gone once the thread no longer waits.
                    if s.state.gil() && self.parked(s.stack).is_none() {
                        let g = gil.entry(profile.threads()[thread].pid).or_default();
                        if let Some(l) = line {
                            *g.0.entry(l).or_default() += d;
                        }
                        g.1 += d;
                    }
                }
            }
            if waited_for {
                own.push(mine);
                own_threads.push(thread);
            }
        }
        let mut sources: HashMap<(&str, u32), usize> = HashMap::new();
        let source_of = self
            .lines
            .iter()
            .map(|acc| {
                let f = profile.frame(acc.frame);
                let next = sources.len();
                *sources.entry((f.file.as_str(), f.line)).or_insert(next)
            })
            .collect();
        Some(CriticalPath {
            source_of,
            // The program's start-up before the first sample is on the path: its main thread
            // ran it, and every fix leaves it.
            length_us: end_us.saturating_sub(start_us).saturating_sub(gaps_us) + self.unsampled_head() * interval_us,
            on_path,
            own,
            pools: {
                let mut by_pool: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
                for (k, &thread) in own_threads.iter().enumerate() {
                    if let Some(p) = pool_of[thread] {
                        by_pool.entry(p).or_default().push(k);
                    }
                }
                by_pool.into_values().filter(|p| p.len() >= 2).collect()
            },
            gil: gil.into_values().collect(),
            running,
            cpus: opts.cpus,
            interval_us,
        })
    }

    /// Threads that take their items from one queue: they wait for work between items (a
    /// worker parked on an empty queue, an executor's idle worker) and run the same code of the
    /// user's (their root-most user function), in one process. While a slow producer feeds them,
    /// whichever is free takes the next item, so one may have done four times another's share;
    /// once the producer is fast, the items are shared out anew. And one of them never wakes
    /// another from the queue: the producer does. Returned as each thread's pool, for pools of
    /// two threads or more; the main thread is in none. A static partition (each thread given
    /// its slice at start, a fork/join) never waits for work and is left as it is: its busiest
    /// thread stays the bound.
    fn queue_pools(&mut self, timelines: &Timelines, main: usize) -> Vec<Option<usize>> {
        let profile = self.profile;
        let nthreads = timelines.by_thread.len();
        let mut pools: HashMap<(u32, String, String), Vec<usize>> = HashMap::new();
        for (thread, samples) in timelines.by_thread.iter().enumerate() {
            if thread == main {
                continue;
            }
            let waits_for_work = samples.iter().any(|&(_, _, i)| self.takes_from_queue(profile.samples[i].stack));
            if !waits_for_work {
                continue;
            }
            // The user function the thread runs its items in, named by its first line read.
            let entry = samples.iter().find_map(|&(_, _, i)| {
                let frames = profile.stack_frames_root_first(profile.samples[i].stack);
                frames.into_iter().find(|&f| self.frame(f).origin == Origin::User)
            });
            let Some(entry) = entry else { continue };
            let f = profile.frame(entry);
            let key = (profile.threads()[thread].pid, f.file.clone(), f.function.clone());
            pools.entry(key).or_default().push(thread);
        }
        let mut members: Vec<Vec<usize>> = pools.into_values().filter(|p| p.len() >= 2).collect();
        members.sort();
        let mut pool_of = vec![None; nthreads];
        for (id, pool) in members.iter().enumerate() {
            for &thread in pool {
                pool_of[thread] = Some(id);
            }
        }
        pool_of
    }

    /// The thread other than `thread` (and its pool) whose work ended last within `(from, to)`,
    /// and when: a working read (its own time or an outside wait) that ended in the span.
    fn last_worker(
        &self,
        thread: usize,
        (from, to): (u64, u64),
        timelines: &Timelines,
        steps: &[Step],
        pool_of: &[Option<usize>],
    ) -> Option<(usize, u64)> {
        let threads = self.profile.threads();
        let pid = threads[thread].pid;
        (0..timelines.by_thread.len())
            .filter(|&o| o != thread && threads[o].pid == pid && !same_pool(pool_of, o, thread))
            .filter_map(|o| {
                let line = &timelines.by_thread[o];
                let before = line.partition_point(|&(start, _, _)| start < to);
                line[..before]
                    .iter()
                    .rev()
                    .take_while(|&&(_, end, _)| end > from)
                    .find(|&&(_, _, i)| matches!(steps[i], Step::Own(_) | Step::Io(_)))
                    .map(|&(_, end, _)| (o, end.min(to)))
            })
            .filter(|&(_, end)| end > from && end < to)
            .max_by_key(|&(o, end)| (end, std::cmp::Reverse(o)))
    }

    /// Whether the stack waits for its next item from a queue workers share (the kb's
    /// `shared_queue`): any frame of it, since the innermost may be the condition it waits on.
    fn takes_from_queue(&mut self, stack: Option<StackId>) -> bool {
        if self.parked(stack).is_none() {
            return false;
        }
        stack.is_some_and(|st| self.under_work_queue(st))
    }

    /// Threads of one process that call each other synchronously (a client and a server thread
    /// of the program, a caller and the runtime thread it hands work to): over the whole run,
    /// while the client waits at a line for I/O, one other thread works nearly all the time,
    /// and while the client works, that thread mostly does not. Too fast a ping-pong for a
    /// sampler to see each hand-over, but plain in the overlap.
    fn client_server_pairs(&mut self, timelines: &Timelines, steps: &[Step], interval_us: u64) -> ClientServer {
        let profile = self.profile;
        let threads = profile.threads();
        let nthreads = timelines.by_thread.len();
        let mut pairs = ClientServer::default();
        if nthreads > MAX_PAIRED_THREADS {
            return pairs;
        }
        let own = |k: usize| matches!(steps[k], Step::Own(_));
        // (client, line) -> (its waiting time, time each other thread worked meanwhile)
        let mut waits: HashMap<(usize, Option<usize>), Overlap> = HashMap::new();
        // client -> (its working time, time each other thread worked meanwhile)
        let mut works: HashMap<usize, Overlap> = HashMap::new();
        for (c, samples) in timelines.by_thread.iter().enumerate() {
            for &(start, end, i) in samples {
                let d = end - start;
                let entry = match steps[i] {
                    Step::Io(line) => waits.entry((c, line)).or_default(),
                    Step::Own(_) => works.entry(c).or_default(),
                    _ => continue,
                };
                entry.0 += d;
                for x in (0..nthreads).filter(|&x| x != c && threads[x].pid == threads[c].pid) {
                    if timelines.at(x, start).is_some_and(own) {
                        *entry.1.entry(x).or_default() += d;
                    }
                }
            }
        }
        // Each thread's sampled time, and its time waiting (any wait).
        let total = |x: usize, keep: &dyn Fn(usize) -> bool| {
            timelines.by_thread[x].iter().filter(|&&(_, _, i)| keep(i)).map(|&(start, end, _)| end - start).sum::<u64>()
        };
        let span: Vec<u64> = (0..nthreads).map(|x| total(x, &|_| true)).collect();
        let waiting: Vec<u64> = (0..nthreads).map(|x| total(x, &|i| !own(i))).collect();
        let mut found: Vec<((usize, Option<usize>), usize)> = Vec::new();
        for (&(c, line), (waited, during)) in &waits {
            if *waited < MIN_PAIRED_TICKS * interval_us {
                continue;
            }
            let serves = (0..nthreads).filter(|&x| x != c && threads[x].pid == threads[c].pid).find(|&x| {
                let (c_works, x_beside) = works.get(&c).map_or((0, 0), |(w, b)| (*w, b.get(&x).copied().unwrap_or(0)));
                let x_during = during.get(&x).copied().unwrap_or(0);
                // Seen tick by tick: x works while c waits here, and mostly not while c works.
                let by_ticks =
                    x_during as f64 >= SERVES * *waited as f64 && x_beside as f64 <= IDLE_BESIDE * c_works as f64;
                // Turns faster than a tick: the two never use more than one thread's time
                // between them, x works about as long as c waits here, and x waits too (a
                // thread busy all along beside a waiting one is not serving it).
                let x_works = works.get(&x).map_or(0, |(w, _)| *w);
                let by_turns = (c_works + x_works) as f64 <= TURNS_SLACK * span[c] as f64
                    && x_works as f64 >= SERVES * *waited as f64
                    && waiting[x] as f64 >= IDLE_BESIDE * c_works as f64
                    && *waited as f64 >= TURNS_MIN_WAIT * span[c] as f64;
                by_ticks || by_turns
            });
            if let Some(x) = serves {
                found.push(((c, line), x));
            }
        }
        for (key, x) in found {
            pairs.server.insert(key, x);
            pairs.client.insert(x, key.0);
        }
        pairs
    }

    /// The thread of `thread`'s process that ended its wait at `t` by handing over: the only
    /// one that was doing work just before and, just after, was gone or waiting itself (a
    /// server thread that answered, a joined thread, a client that sent its request).
    fn handover(
        &self,
        thread: usize,
        t: u64,
        timelines: &Timelines,
        steps: &[Step],
        interval_us: u64,
        pool_of: &[Option<usize>],
    ) -> Option<usize> {
        let threads = self.profile.threads();
        let pid = threads[thread].pid;
        let mut handed_over = (0..timelines.by_thread.len()).filter(|&o| {
            o != thread
                && !same_pool(pool_of, o, thread)
                && threads[o].pid == pid
                && timelines.at(o, t - 1).is_some_and(|i| matches!(steps[i], Step::Own(Some(_))))
                && match timelines.at(o, t + interval_us / 2) {
                    None => true,
                    Some(i) => !matches!(steps[i], Step::Own(_)),
                }
        });
        let only = handed_over.next()?;
        handed_over.next().is_none().then_some(only)
    }

    /// The thread that woke `thread`, whose wait ended at `t`, when none handed over (see
    /// [`Engine::handover`]): of the other threads doing work just before `t`, the one that
    /// worked the most in the ticks before.
    fn waker(
        &self,
        thread: usize,
        t: u64,
        timelines: &Timelines,
        steps: &[Step],
        interval_us: u64,
        pool_of: &[Option<usize>],
    ) -> Option<usize> {
        let working =
            |o: usize, at: u64| timelines.at(o, at).is_some_and(|i| matches!(steps[i], Step::Own(_) | Step::Io(_)));
        let candidates: Vec<usize> = (0..timelines.by_thread.len())
            .filter(|&o| o != thread && !same_pool(pool_of, o, thread) && working(o, t - 1))
            .collect();
        candidates.into_iter().max_by_key(|&o| {
            (1..=LOOKBACK_TICKS).filter(|k| t > k * interval_us && working(o, t - k * interval_us)).count()
        })
    }
}
