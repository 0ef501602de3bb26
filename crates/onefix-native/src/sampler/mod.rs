//! The sampler: opens the events, drains the rings at each tick, keeps the processes' address
//! spaces and threads up to date from the side-band records, and turns samples and blocked
//! intervals into the profile's samples.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use framehop::x86_64::CacheX86_64;
use onefix_collect::{process, Sampler, Tick};
use onefix_model::{FrameId, Profile, Sample, StackId, TargetExit, ThreadState};

use crate::error::paranoid_level;
use crate::fixture::Capture;
use crate::goroutines::{GoRuntime, Goroutine};
use crate::perf::{self, AttrSpec, EventKind, Ring};
use crate::record::{self, Record, SampleRecord};
use crate::spawn;
use crate::symbolize::Symbolizer;
use crate::NativeError;

mod events;
mod go;
mod offcpu;
use events::{raise_open_files_limit, threads_of};

#[derive(Clone, Debug)]
pub struct NativeOptions {
    /// Samples per second of CPU time, per thread (the cpu-clock period is `1 / rate_hz`).
    pub rate_hz: f64,
    /// Also record blocked (off-CPU) time with the stack that blocked. Needs root or
    /// `kernel.perf_event_paranoid <= 1`; without it, sampling goes on without and says so.
    pub off_cpu: bool,
    /// Bytes of user stack copied per sample for DWARF unwinding (a multiple of 8, at most
    /// 65528). Deeper stacks are cut where the copy ends.
    pub stack_bytes: u32,
    /// Ring buffer per CPU, in KiB (a power of two of pages is used); 0 picks a size from
    /// the number of CPUs.
    pub ring_kib: usize,
}

impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions { rate_hz: 999.0, off_cpu: true, stack_bytes: 32 * 1024, ring_kib: 0 }
    }
}

/// Counters of what the kernel delivered, so a report can say how complete the recording is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeStats {
    /// On-CPU samples turned into profile samples.
    pub cpu_samples: u64,
    /// Context-switch samples (the stacks of threads going off the CPU).
    pub switch_samples: u64,
    /// Switches out of the CPU that were not preemptions: the thread blocked.
    pub blocks: u64,
    /// Blocked intervals with no stack to charge (their sample was lost or not permitted).
    pub blocks_without_stack: u64,
    /// Records the kernel dropped because the ring buffer was full.
    pub lost: u64,
    /// Times /proc/PID/maps was read for an address that no mapping record had announced.
    pub maps_reread: u64,
    /// Program images replaced by exec.
    pub execs: u64,
    /// Records that could not be parsed or samples of no known event (should stay 0).
    pub unknown: u64,
    /// Samples whose unwinding stopped at the first frame although the thread had callers
    /// (no unwind information and no frame pointer).
    pub shallow: u64,
    /// Samples of Go goroutines that were waiting (parked by the runtime), one per goroutine
    /// per scan of `runtime.allgs`.
    pub goroutine_samples: u64,
    /// Scans of the goroutines of Go programs.
    pub goroutine_scans: u64,
}

/// Blocked intervals are cut into pieces at multiples of this (CLOCK_MONOTONIC), so a long
/// wait spreads over the time windows it spans rather than landing in one.
const CHUNK_NS: u64 = 50_000_000;
/// Records newer than this are held for the next tick: another CPU's ring may still be
/// receiving records that are older.
const HOLDBACK_NS: u64 = 2_000_000;
const LIVE_CHECK: Duration = Duration::from_millis(100);
/// Go programs' goroutines are read at most this often; each waiting goroutine's sample
/// weighs the time since the previous scan.
const GOROUTINE_SCAN_NS: u64 = 10_000_000;
/// Each goroutine read puts the next scan off by this much, so that a program with very many
/// goroutines is read less often rather than at a cost that grows with them.
const GOROUTINE_SCAN_NS_EACH: u64 = 20_000;
/// A scan charges at most this much time (the profiler itself stalled).
const GOROUTINE_MAX_GAP_NS: u64 = 1_000_000_000;
// Goroutines are virtual threads of their process: their ids are offset past any OS tid.
use onefix_model::GOROUTINE_TID_BASE;

/// What the sampler knows of a process's Go runtime.
enum GoState {
    /// Not looked at yet (its executable is not mapped yet).
    Unknown,
    /// Not a Go program, or one whose goroutines cannot be read (said in a warning).
    Absent,
    Go {
        runtime: GoRuntime,
        bias: u64,
    },
}

/// A waiting goroutine's stack, kept while its saved registers do not change.
struct ParkedStack {
    goid: u64,
    regs: [u64; 3],
    stack: Option<StackId>,
    /// The goroutine's virtual thread in the profile.
    thread: u32,
    seen: u64,
}

struct Blocked {
    pid: u32,
    /// Emitted up to here.
    from: u64,
    stack: Option<Option<StackId>>,
    /// The thread (pid, tid) that woke it, from the `sched_waking` record before its switch in.
    waker: Option<(u32, u32)>,
    /// When its first sample was emitted, µs since the start. Once set, the next samples
    /// continue the same wait ([`onefix_model::ThreadState::SAME_WAIT`]), which tells
    /// back-to-back waits at one line apart.
    first_us: Option<u64>,
}

/// Samples a native process tree through perf_event. See the crate docs.
pub struct NativeSampler {
    root: u32,
    spawned: bool,
    reaped: bool,
    period_ns: u64,
    stack_bytes: u32,
    ring_pages: usize,
    exclude_kernel: Option<bool>,
    /// `None` when off-CPU sampling was not asked for or could not be opened.
    switches: Option<bool>,
    setup_warnings: Vec<String>,
    // Kernel side.
    events: Vec<OwnedFd>,
    rings: Vec<Ring>,
    /// Index in `events` of the fd each CPU's ring was mapped from.
    ring_owner: HashMap<i32, usize>,
    cpu_ids: HashSet<u64>,
    switch_ids: HashSet<u64>,
    wake_ids: HashSet<u64>,
    /// The `sched_waking` tracepoint's id: `None` until looked up, `Some(None)` when the kernel
    /// does not give it (then blocked intervals have no waker).
    wake_tracepoint: Option<Option<u64>>,
    /// Which thread ended each blocked interval that was charged as samples.
    wakes: Vec<onefix_model::attachments::WakeEdge>,
    // Records.
    pending: Vec<Record>,
    start_ns: Option<u64>,
    // Targets.
    /// The targets' address spaces and their modules' symbols.
    symbolizer: Symbolizer,
    cache: CacheX86_64,
    names: HashMap<u32, String>,
    exited: HashSet<u32>,
    /// The stack of a thread's last context-switch sample, with its DI register.
    switch_stack: HashMap<u32, (u64, Option<StackId>, Option<u64>)>,
    /// Sockets a server accepted, to tell its wait for a client's next request.
    sockets: onefix_collect::sockets::Sockets,
    /// Stacks with [`onefix_model::INBOUND_WAIT_FRAME`] added as their leaf, by the stack.
    inbound_waits: HashMap<StackId, Option<StackId>>,
    blocked: HashMap<u32, Blocked>,
    carry: HashMap<u32, u64>,
    live: BTreeSet<u32>,
    last_live_check: Instant,
    exit_seen: bool,
    gone: bool,
    stats: NativeStats,
    addrs: Vec<u64>,
    frames: Vec<FrameId>,
    capture: Option<Capture>,
    /// The spawned child until its exec: a context switch inside execve still shows the old
    /// program's user stack.
    awaiting_exec: Option<u32>,
    go: HashMap<u32, GoState>,
    parked: HashMap<(u32, u64), ParkedStack>,
    last_scan_ns: Option<u64>,
    scan_every_ns: u64,
    scan_carry_ns: u64,
}

impl NativeSampler {
    fn new(root: u32, opts: &NativeOptions, spawned: bool) -> NativeSampler {
        let rate = if opts.rate_hz.is_finite() && opts.rate_hz > 0.0 { opts.rate_hz } else { 999.0 };
        let ncpus = perf::online_cpus().len().max(1);
        let page = perf::page_size();
        // Context-switch samples carry a stack copy each: a busy server switches thousands of
        // times a second, so the rings get room for a good part of a second of them.
        let kib = if opts.ring_kib > 0 { opts.ring_kib } else { (64 * 1024 / ncpus).clamp(512, 16 * 1024) };
        let pages = (kib * 1024 / page).max(1).next_power_of_two();
        NativeSampler {
            root,
            spawned,
            reaped: false,
            period_ns: ((1e9 / rate) as u64).max(10_000),
            stack_bytes: (opts.stack_bytes.clamp(0, 65528) / 8) * 8,
            ring_pages: pages,
            exclude_kernel: None,
            switches: if opts.off_cpu { Some(true) } else { None },
            setup_warnings: Vec::new(),
            events: Vec::new(),
            rings: Vec::new(),
            ring_owner: HashMap::new(),
            cpu_ids: HashSet::new(),
            switch_ids: HashSet::new(),
            wake_ids: HashSet::new(),
            wake_tracepoint: None,
            wakes: Vec::new(),
            pending: Vec::new(),
            start_ns: None,
            symbolizer: Symbolizer::new(),
            cache: CacheX86_64::new(),
            names: HashMap::new(),
            exited: HashSet::new(),
            switch_stack: HashMap::new(),
            sockets: Default::default(),
            inbound_waits: HashMap::new(),
            blocked: HashMap::new(),
            carry: HashMap::new(),
            live: BTreeSet::from([root]),
            last_live_check: Instant::now(),
            exit_seen: false,
            gone: false,
            stats: NativeStats::default(),
            addrs: Vec::new(),
            frames: Vec::new(),
            capture: Capture::from_env(),
            awaiting_exec: spawned.then_some(root),
            go: HashMap::new(),
            parked: HashMap::new(),
            last_scan_ns: None,
            scan_every_ns: GOROUTINE_SCAN_NS,
            scan_carry_ns: 0,
        }
    }

    /// Starts `argv` (found on PATH like a shell would) under sampling: the child is forked,
    /// held until its events are open, then execs with them enabled from its first
    /// instruction. Returns the sampler and the child's pid. The child is this process's
    /// child: call [`NativeSampler::reap`] once sampling is over to get its exit status.
    pub fn spawn(argv: &[String], opts: &NativeOptions) -> Result<(NativeSampler, u32), NativeError> {
        let gate = spawn::fork_gated(argv)?;
        let pid = gate.pid;
        let mut sampler = NativeSampler::new(pid, opts, true);
        if let Err(e) = sampler.open_for(&[pid], true) {
            gate.abort();
            return Err(e);
        }
        gate.release()?;
        Ok((sampler, pid))
    }

    /// Samples the running process `pid`: every thread it has now, and every thread and child
    /// process it creates from now on.
    pub fn attach(pid: u32, opts: &NativeOptions) -> Result<NativeSampler, NativeError> {
        if !process::exists(pid) || !process::is_running(pid) {
            return Err(NativeError::NoSuchProcess(pid));
        }
        // One event per thread and CPU (two with off-CPU): a busy server needs more than the
        // usual soft limit of open files.
        raise_open_files_limit();
        let mut sampler = NativeSampler::new(pid, opts, false);
        sampler.symbolizer.load_maps(pid);
        // Threads may start while the events are being opened: go again until none is new.
        let mut opened: HashSet<u32> = HashSet::new();
        for _ in 0..5 {
            let tids: Vec<u32> = threads_of(pid).into_iter().filter(|t| !opened.contains(t)).collect();
            if tids.is_empty() {
                break;
            }
            match sampler.open_for(&tids, false) {
                Ok(()) => opened.extend(tids),
                // A thread that exited in between is no error, unless it was the last.
                Err(NativeError::NoSuchProcess(_)) if process::is_running(pid) => continue,
                Err(e) => return Err(e),
            }
        }
        if opened.is_empty() {
            return Err(NativeError::NoSuchProcess(pid));
        }
        for fd in &sampler.events {
            perf::enable(fd).map_err(NativeError::Os)?;
        }
        Ok(sampler)
    }

    /// The pid sampled (the spawned child, or the attached process).
    pub fn pid(&self) -> u32 {
        self.root
    }

    /// Microseconds one unit of sample weight stands for (the cpu-clock period).
    pub fn interval_us(&self) -> u64 {
        (self.period_ns / 1000).max(1)
    }

    pub fn stats(&self) -> &NativeStats {
        &self.stats
    }

    /// What this recording lacks and how to get it, one sentence each: off-CPU time that the
    /// kernel would not give, time in the kernel not sampled, records lost.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.setup_warnings.clone();
        if self.switches == Some(true) && self.stats.blocks >= 20 && self.stats.switch_samples == 0 {
            w.push(format!(
                "off-CPU (blocked) time was not charged to any line: the kernel reported {} context switches but no stack with them; run onefix as root or allow it with `sysctl kernel.perf_event_paranoid=1`",
                self.stats.blocks
            ));
        }
        if self.stats.lost > 0 {
            w.push(format!(
                "{} records were lost because the kernel's buffers filled faster than onefix read them: lower --rate or --stack-bytes (each sample carries that much stack)",
                self.stats.lost
            ));
        }
        w
    }

    /// The executable mappings known for `pid` (start, end, path): for diagnosing tests.
    #[doc(hidden)]
    pub fn mappings(&self, pid: u32) -> Vec<(u64, u64, String)> {
        self.symbolizer
            .space(pid)
            .map(|s| s.mappings().iter().map(|m| (m.start, m.end, m.module.name.clone())).collect())
            .unwrap_or_default()
    }

    /// Ends sampling: stops the events, then turns every record still buffered into samples,
    /// and charges threads still blocked up to now. Call once when recording stops for any
    /// reason other than the target's exit (duration, Ctrl-C); returns the samples added.
    pub fn finish(&mut self, profile: &mut Profile, time_us: u64) -> usize {
        for fd in &self.events {
            perf::disable(fd);
        }
        let now = perf::monotonic_ns();
        self.start_ns.get_or_insert(now.saturating_sub(time_us * 1000));
        self.drain();
        let mut n = self.process_until(profile, u64::MAX);
        let tids: Vec<u32> = self.blocked.keys().copied().collect();
        for tid in tids {
            n += self.close_block(profile, tid, now);
        }
        if let Some(c) = &self.capture {
            c.write();
        }
        n
    }

    /// Waits for the spawned child to end and returns how it ended; `None` when this sampler
    /// attached (the target is not its child) or already reaped it. Call only once sampling is
    /// over.
    pub fn reap(&mut self) -> Option<TargetExit> {
        if !self.spawned || self.reaped {
            return None;
        }
        let mut status = 0;
        let r = loop {
            let r = unsafe { libc::waitpid(self.root as i32, &mut status, 0) };
            if r >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break r;
            }
        };
        self.reaped = true;
        if r <= 0 {
            return Some(TargetExit::Unknown);
        }
        Some(if libc::WIFEXITED(status) {
            TargetExit::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            TargetExit::Signal(libc::WTERMSIG(status))
        } else {
            TargetExit::Unknown
        })
    }

    // ----- setup -----

    // ----- records -----

    fn drain(&mut self) {
        let pending = &mut self.pending;
        let unknown = &mut self.stats.unknown;
        let wake_ids = &self.wake_ids;
        for ring in &mut self.rings {
            ring.drain(|bytes| {
                let wake =
                    !wake_ids.is_empty() && record::sample_event_id(bytes).is_some_and(|id| wake_ids.contains(&id));
                let parsed = if wake { record::parse_wake(bytes) } else { record::parse(bytes) };
                match parsed {
                    Some(r) => pending.push(r),
                    // Kinds this sampler does not use (THROTTLE, ...) are not unknown.
                    None if wake || record::is_used_kind(bytes) => *unknown += 1,
                    None => {}
                }
            });
        }
    }

    /// Which thread ended each blocked interval charged as samples, when the kernel told.
    pub fn wakes(&self) -> Option<onefix_model::attachments::Wakes> {
        (!self.wake_ids.is_empty()).then(|| onefix_model::attachments::Wakes { edges: self.wakes.clone() })
    }

    fn time_us(&self, t: u64) -> u64 {
        t.saturating_sub(self.start_ns.unwrap_or(0)) / 1000
    }

    /// Handles every pending record older than `horizon`, in time order.
    fn process_until(&mut self, profile: &mut Profile, horizon: u64) -> usize {
        self.pending.sort_by_key(Record::time);
        let k = self.pending.partition_point(|r| r.time() < horizon);
        let ready: Vec<Record> = self.pending.drain(..k).collect();
        let mut n = 0;
        for r in ready {
            n += self.handle(profile, r);
        }
        n
    }

    fn handle(&mut self, profile: &mut Profile, rec: Record) -> usize {
        match rec {
            Record::Sample(s) => {
                if self.awaiting_exec == Some(s.pid) {
                    return 0;
                }
                if self.cpu_ids.contains(&s.id) {
                    if let (Some(c), Some(regs)) = (self.capture.as_mut().filter(|c| !c.goroutines), s.regs) {
                        if c.offer(s.pid, regs, &s.stack) {
                            let maps = self.symbolizer.space(s.pid).map(|sp| sp.mappings()).unwrap_or_default();
                            c.fixture.modules =
                                maps.iter().map(|m| (m.start, m.end, m.pgoff, m.module.name.clone())).collect();
                        }
                    }
                    let stack = self.stack_of(profile, &s);
                    let thread = self.thread(profile, s.pid, s.tid);
                    profile.samples.push(Sample {
                        time_us: self.time_us(s.time),
                        thread,
                        stack,
                        state: ThreadState::new(true, false),
                        weight: 1,
                    });
                    self.stats.cpu_samples += 1;
                    return 1;
                }
                if self.switch_ids.contains(&s.id) {
                    if self.switches.is_some() {
                        self.stats.switch_samples += 1;
                        let stack = self.stack_of(profile, &s);
                        self.switch_stack.insert(s.tid, (s.time, stack, s.arg0));
                    }
                } else {
                    self.stats.unknown += 1;
                }
            }
            Record::Mmap2 { pid, start, len, pgoff, ino, prot, path, .. } => {
                if self.awaiting_exec == Some(pid) {
                    self.awaiting_exec = None;
                }
                if prot & libc::PROT_EXEC as u32 != 0
                    && !path.is_empty()
                    && !path.starts_with("//anon")
                    && path != "[vsyscall]"
                {
                    self.symbolizer.map(pid, start, start + len, pgoff, &path, ino);
                }
            }
            Record::Comm { pid, tid, name, exec, .. } => {
                if exec {
                    if self.awaiting_exec == Some(pid) {
                        self.awaiting_exec = None;
                    }
                    self.stats.execs += 1;
                    self.symbolizer.clear(pid);
                    self.go.remove(&pid);
                    self.parked.retain(|(p, _), _| *p != pid);
                }
                self.names.insert(tid, name);
            }
            Record::Fork { pid, ppid, tid, ptid, .. } => {
                self.exited.remove(&tid);
                // A new thread or process starts with its parent's name (no COMM record says
                // so), and may be gone before its first sample is read.
                if let Some(name) = self.names.get(&ptid).cloned() {
                    self.names.entry(tid).or_insert(name);
                }
                if pid != ppid {
                    if !self.symbolizer.inherit(pid, ppid) {
                        self.symbolizer.clear(pid);
                    }
                    self.live.insert(pid);
                }
            }
            Record::Exit { pid, tid, .. } => {
                self.exited.insert(tid);
                self.blocked.remove(&tid);
                self.switch_stack.remove(&tid);
                self.carry.remove(&tid);
                if pid == tid {
                    self.exit_seen = true;
                    self.sockets.forget(pid);
                }
            }
            Record::Switch { pid, tid, time, out, preempt } => {
                if self.switches.is_none() || self.awaiting_exec == Some(pid) {
                    return 0;
                }
                if out {
                    let sample = self.switch_stack.remove(&tid);
                    // A preempted thread is still runnable: not blocked.
                    if preempt || self.exited.contains(&tid) {
                        return 0;
                    }
                    self.stats.blocks += 1;
                    // The context-switch sample comes just before its switch record.
                    let stack = sample
                        .filter(|(t, _, _)| time.saturating_sub(*t) < 1_000_000)
                        .map(|(_, s, fd)| self.marked_if_inbound_wait(profile, pid, s, fd));
                    if stack.is_none() {
                        self.stats.blocks_without_stack += 1;
                    }
                    self.blocked.insert(tid, Blocked { pid, from: time, stack, waker: None, first_us: None });
                } else {
                    return self.close_block(profile, tid, time);
                }
            }
            Record::Lost { count, .. } => self.stats.lost += count,
            Record::Wake { pid, tid, wakee, .. } => {
                // The last wake-up before the switch back in is the one that ended the wait.
                if let Some(b) = self.blocked.get_mut(&wakee) {
                    if wakee != tid {
                        b.waker = Some((pid, tid));
                    }
                }
            }
        }
        0
    }

    fn thread(&mut self, profile: &mut Profile, pid: u32, tid: u32) -> u32 {
        if !self.names.contains_key(&tid) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim().to_owned())
                .ok()
                .or_else(|| self.names.get(&pid).cloned())
                .unwrap_or_default();
            self.names.insert(tid, name);
        }
        let name = &self.names[&tid];
        profile.intern_thread(pid, tid as u64, (!name.is_empty()).then_some(name.as_str()))
    }

    /// Unwinds and symbolizes one sample into the profile's stack tree.
    fn stack_of(&mut self, profile: &mut Profile, s: &SampleRecord) -> Option<StackId> {
        self.unwound(profile, s.pid, s.regs?, &s.stack)
    }

    /// Unwinds a stack copy from its registers (bp, sp, ip) in `pid`'s address space and
    /// symbolizes it into the profile's stack tree.
    fn unwound(&mut self, profile: &mut Profile, pid: u32, regs: [u64; 3], stack: &[u8]) -> Option<StackId> {
        if self.symbolizer.unwind(pid, &mut self.cache, regs, stack, &mut self.addrs) {
            self.stats.maps_reread += 1;
        }
        if self.addrs.len() == 1 {
            self.stats.shallow += 1;
        }
        self.frames.clear();
        for &addr in &self.addrs {
            let frames = self.symbolizer.frames_at(pid, addr);
            for f in frames.iter() {
                self.frames.push(profile.intern_frame(f.clone()));
            }
        }
        profile.intern_stack(self.frames.iter().rev().copied())
    }

    // ----- goroutines -----

    fn refresh_live(&mut self) {
        self.last_live_check = Instant::now();
        self.exit_seen = false;
        self.live.retain(|&pid| process::is_running(pid));
    }
}

impl Sampler for NativeSampler {
    /// Drains the rings and appends every sample that arrived, each stamped with its own
    /// time; returns [`Tick::TargetGone`] once every traced process has exited (after the
    /// last of its records are in).
    fn tick(&mut self, profile: &mut Profile, time_us: u64) -> Tick {
        if self.gone {
            return Tick::TargetGone;
        }
        let now = perf::monotonic_ns();
        self.start_ns.get_or_insert(now.saturating_sub(time_us * 1000));
        self.drain();
        if self.exit_seen || self.last_live_check.elapsed() >= LIVE_CHECK {
            self.refresh_live();
            if self.live.is_empty() {
                // Everything the target did is in the rings by now.
                self.drain();
                self.process_until(profile, u64::MAX);
                self.blocked.clear();
                self.gone = true;
                if let Some(c) = &self.capture {
                    c.write();
                }
                return Tick::TargetGone;
            }
        }
        let horizon = now.saturating_sub(HOLDBACK_NS);
        let mut n = self.process_until(profile, horizon);
        n += self.emit_ongoing(profile, horizon);
        n += self.scan_goroutines(profile, now);
        Tick::Sampled(n)
    }
}
