//! The sampler: opens the events, drains the rings at each tick, keeps the processes' address
//! spaces and threads up to date from the side-band records, and turns samples and blocked
//! intervals into the profile's samples.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::CacheX86_64;
use onefix_collect::{process, Sampler, Tick};
use onefix_model::{Frame, FrameId, Profile, Sample, StackId, TargetExit, ThreadState};

use crate::error::paranoid_level;
use crate::fixture::Capture;
use crate::goroutines::{GoRuntime, Goroutine};
use crate::module::ModuleCache;
use crate::perf::{self, AttrSpec, EventKind, Ring};
use crate::record::{self, Record, SampleRecord};
use crate::space::AddressSpace;
use crate::spawn;
use crate::NativeError;

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
const MAPS_REREAD: Duration = Duration::from_millis(200);
/// Go programs' goroutines are read at most this often; each waiting goroutine's sample
/// weighs the time since the previous scan.
const GOROUTINE_SCAN_NS: u64 = 10_000_000;
/// Each goroutine read puts the next scan off by this much, so that a program with very many
/// goroutines is read less often rather than at a cost that grows with them.
const GOROUTINE_SCAN_NS_EACH: u64 = 20_000;
/// A scan charges at most this much time (the profiler itself stalled).
const GOROUTINE_MAX_GAP_NS: u64 = 1_000_000_000;
/// Goroutines are virtual threads of their process: their ids are offset past any OS tid.
const GOROUTINE_TID_BASE: u64 = 1 << 32;

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
    // Records.
    pending: Vec<Record>,
    start_ns: Option<u64>,
    // Targets.
    spaces: HashMap<u32, AddressSpace>,
    modules: ModuleCache,
    cache: CacheX86_64,
    symbols: HashMap<(usize, u64), Arc<[Frame]>>,
    names: HashMap<u32, String>,
    exited: HashSet<u32>,
    /// The stack of a thread's last context-switch sample, with its DI register.
    switch_stack: HashMap<u32, (u64, Option<StackId>, Option<u64>)>,
    /// Sockets a server accepted, to tell its wait for a client's next request.
    sockets: crate::sockets::Sockets,
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
            pending: Vec::new(),
            start_ns: None,
            spaces: HashMap::new(),
            modules: ModuleCache::default(),
            cache: CacheX86_64::new(),
            symbols: HashMap::new(),
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
        let mut space = AddressSpace::default();
        space.load_proc_maps(pid, &mut sampler.modules);
        sampler.spaces.insert(pid, space);
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
        self.spaces
            .get(&pid)
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

    fn spec(&self, kind: EventKind, exclude_kernel: bool, enable_on_exec: bool) -> AttrSpec {
        AttrSpec {
            kind,
            period_ns: self.period_ns,
            stack_bytes: self.stack_bytes,
            exclude_kernel,
            enable_on_exec,
            switch_records: kind == EventKind::CpuClock && self.switches == Some(true),
        }
    }

    /// Opens the events of `tids` on every CPU, redirecting them into one ring per CPU.
    fn open_for(&mut self, tids: &[u32], enable_on_exec: bool) -> Result<(), NativeError> {
        for cpu in perf::online_cpus() {
            for &tid in tids {
                // The context-switch event first: whether the kernel allows it decides whether
                // the cpu-clock event also asks for switch records.
                let mut switches = None;
                if self.switches == Some(true) {
                    // Off-CPU needs kernel-mode samples: refused unprivileged at paranoid >= 2.
                    let attr = perf::attr(&self.spec(EventKind::Switches, false, enable_on_exec));
                    match perf::open(&attr, tid as i32, cpu) {
                        Ok(fd) => switches = Some(fd),
                        Err(e) if is_permission(&e) => {
                            self.switches = None;
                            self.setup_warnings.push(format!(
                                "off-CPU (blocked) time is not recorded: the kernel shows context switches with their stacks only to root at kernel.perf_event_paranoid = {}; run onefix as root or allow it with `sysctl kernel.perf_event_paranoid=1`",
                                paranoid_level()
                            ));
                        }
                        Err(e) => return Err(map_open_error(e, tid)),
                    }
                }
                let fd = self.open_cpu_clock(tid, cpu, enable_on_exec)?;
                self.add_event(fd, cpu, EventKind::CpuClock)?;
                if let Some(fd) = switches {
                    self.add_event(fd, cpu, EventKind::Switches)?;
                }
            }
        }
        Ok(())
    }

    fn open_cpu_clock(&mut self, tid: u32, cpu: i32, enable_on_exec: bool) -> Result<OwnedFd, NativeError> {
        let tries: &[bool] = match self.exclude_kernel {
            Some(x) => {
                if x {
                    &[true]
                } else {
                    &[false]
                }
            }
            // Sampling in the kernel too sees the time spent in system calls; unprivileged at
            // paranoid 2 only user mode is allowed.
            None => &[false, true],
        };
        let mut last = None;
        for &exclude in tries {
            let attr = perf::attr(&self.spec(EventKind::CpuClock, exclude, enable_on_exec));
            match perf::open(&attr, tid as i32, cpu) {
                Ok(fd) => {
                    if self.exclude_kernel.is_none() && exclude {
                        self.setup_warnings.push(format!(
                            "CPU time inside system calls is not sampled (kernel.perf_event_paranoid = {}): run onefix as root or allow it with `sysctl kernel.perf_event_paranoid=1`",
                            paranoid_level()
                        ));
                    }
                    self.exclude_kernel = Some(exclude);
                    return Ok(fd);
                }
                Err(e) if is_permission(&e) => last = Some(e),
                Err(e) => return Err(map_open_error(e, tid)),
            }
        }
        Err(map_open_error(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EACCES)), tid))
    }

    fn add_event(&mut self, fd: OwnedFd, cpu: i32, kind: EventKind) -> Result<(), NativeError> {
        let id = perf::event_id(&fd).map_err(NativeError::Os)?;
        match kind {
            EventKind::CpuClock => self.cpu_ids.insert(id),
            EventKind::Switches => self.switch_ids.insert(id),
        };
        match self.ring_owner.get(&cpu) {
            Some(&owner) => perf::set_output(&fd, &self.events[owner]).map_err(NativeError::Os)?,
            None => {
                let mut pages = self.ring_pages;
                let ring = loop {
                    match Ring::map(&fd, pages) {
                        Ok(r) => break r,
                        // Unprivileged users may lock only so much (perf_event_mlock_kb).
                        Err(e) if pages > 8 && matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOMEM)) => {
                            pages /= 2
                        }
                        Err(e) => return Err(NativeError::Os(e)),
                    }
                };
                self.rings.push(ring);
                self.ring_owner.insert(cpu, self.events.len());
            }
        }
        self.events.push(fd);
        Ok(())
    }

    // ----- records -----

    fn drain(&mut self) {
        let pending = &mut self.pending;
        let unknown = &mut self.stats.unknown;
        for ring in &mut self.rings {
            ring.drain(|bytes| match record::parse(bytes) {
                Some(r) => pending.push(r),
                // Kinds this sampler does not use (THROTTLE, ...) are not unknown.
                None if record::is_used_kind(bytes) => *unknown += 1,
                None => {}
            });
        }
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
                            let maps = self.spaces.get(&s.pid).map(|sp| sp.mappings()).unwrap_or_default();
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
                    let module = self.modules.get(pid, &path, ino);
                    self.spaces.entry(pid).or_default().map(start, start + len, pgoff, module);
                }
            }
            Record::Comm { pid, tid, name, exec, .. } => {
                if exec {
                    if self.awaiting_exec == Some(pid) {
                        self.awaiting_exec = None;
                    }
                    self.stats.execs += 1;
                    self.spaces.entry(pid).or_default().clear();
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
                    let space = self.spaces.get(&ppid).cloned().unwrap_or_default();
                    self.spaces.insert(pid, space);
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
                    self.blocked.insert(tid, Blocked { pid, from: time, stack });
                } else {
                    return self.close_block(profile, tid, time);
                }
            }
            Record::Lost { count, .. } => self.stats.lost += count,
        }
        0
    }

    /// A stack blocked in a read of a connection the process accepted gets
    /// [`onefix_model::INBOUND_WAIT_FRAME`] as its leaf: the server waits for its client's next
    /// request, which is no cost of its own.
    fn marked_if_inbound_wait(
        &mut self,
        profile: &mut Profile,
        pid: u32,
        stack: Option<StackId>,
        fd: Option<u64>,
    ) -> Option<StackId> {
        let (Some(st), Some(fd)) = (stack, fd) else { return stack };
        let reads = profile
            .stack_frames_leaf_first(Some(st))
            .next()
            .is_some_and(|leaf| crate::sockets::reads_a_descriptor(&profile.frame(leaf).function));
        // A descriptor is a small number; a pointer or a futex address is not.
        if !reads || fd > i32::MAX as u64 || !self.sockets.is_inbound(pid, fd) {
            return stack;
        }
        *self.inbound_waits.entry(st).or_insert_with(|| {
            let mut frames: Vec<_> = profile.stack_frames_leaf_first(Some(st)).collect();
            frames.reverse();
            frames
                .push(profile.intern_frame(onefix_model::Frame::native(onefix_model::INBOUND_WAIT_FRAME, "[kernel]")));
            profile.intern_stack(frames)
        })
    }

    /// Charges the blocked interval of `tid` up to `to` and forgets it.
    fn close_block(&mut self, profile: &mut Profile, tid: u32, to: u64) -> usize {
        match self.blocked.remove(&tid) {
            Some(mut b) => self.emit_blocked(profile, tid, &mut b, to),
            None => 0,
        }
    }

    /// Turns the blocked time of `tid` from `b.from` to `to` into samples, one per chunk of
    /// [`CHUNK_NS`], each weighing whole sampling intervals. The remainder carries over to the
    /// thread's next blocked time, so short waits add up to their true total instead of each
    /// counting as a whole interval.
    fn emit_blocked(&mut self, profile: &mut Profile, tid: u32, b: &mut Blocked, to: u64) -> usize {
        let mut n = 0;
        while b.from < to {
            let end = ((b.from / CHUNK_NS + 1) * CHUNK_NS).min(to);
            let Some(stack) = b.stack else {
                b.from = end;
                continue;
            };
            let carry = self.carry.entry(tid).or_default();
            *carry += end - b.from;
            let weight = *carry / self.period_ns;
            *carry -= weight * self.period_ns;
            if weight > 0 {
                let thread = self.thread(profile, b.pid, tid);
                profile.samples.push(Sample {
                    time_us: self.time_us(b.from),
                    thread,
                    stack,
                    state: ThreadState::new(false, false),
                    weight: weight.min(u32::MAX as u64) as u32,
                });
                n += 1;
            }
            b.from = end;
        }
        n
    }

    /// Charges every thread still blocked up to the last chunk boundary before `horizon`.
    fn emit_ongoing(&mut self, profile: &mut Profile, horizon: u64) -> usize {
        let upto = horizon / CHUNK_NS * CHUNK_NS;
        let tids: Vec<u32> = self.blocked.iter().filter(|(_, b)| b.from < upto).map(|(t, _)| *t).collect();
        let mut n = 0;
        for tid in tids {
            let mut b = self.blocked.remove(&tid).expect("listed");
            n += self.emit_blocked(profile, tid, &mut b, upto);
            self.blocked.insert(tid, b);
        }
        n
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
        let space = self.spaces.entry(pid).or_default();
        self.addrs.clear();
        space.unwind(&mut self.cache, regs, stack, &mut self.addrs);
        // An address in no known mapping: a mapping made before sampling began, or one whose
        // record has not been read. /proc has it while the process lives (read at most every
        // MAPS_REREAD per process); unwind again with it.
        if self.addrs.iter().any(|&a| space.find(a).is_none())
            && space.maps_read.filter(|t| t.elapsed() < MAPS_REREAD).is_none()
            && process::exists(pid)
        {
            space.load_proc_maps(pid, &mut self.modules);
            self.stats.maps_reread += 1;
            self.addrs.clear();
            space.unwind(&mut self.cache, regs, stack, &mut self.addrs);
        }
        if self.addrs.len() == 1 {
            self.stats.shallow += 1;
        }
        self.frames.clear();
        for &addr in &self.addrs {
            let frames = match space.find(addr) {
                Some(m) => {
                    let svma = addr.wrapping_sub(m.bias);
                    self.symbols.entry((m.module.id, svma)).or_insert_with(|| m.module.symbolize(svma).into()).clone()
                }
                None => Arc::from(vec![Frame::native(format!("0x{addr:x}"), "")]),
            };
            for f in frames.iter() {
                self.frames.push(profile.intern_frame(f.clone()));
            }
        }
        profile.intern_stack(self.frames.iter().rev().copied())
    }

    // ----- goroutines -----

    /// Reads the goroutines of every traced Go process and adds a sample for each one that
    /// waits, weighing the time since the previous scan: its stack is where it was parked
    /// (a network read, a channel, a lock), which no OS thread shows.
    fn scan_goroutines(&mut self, profile: &mut Profile, now: u64) -> usize {
        if self.last_scan_ns.is_some_and(|t| now.saturating_sub(t) < self.scan_every_ns) {
            return 0;
        }
        let gap = self.last_scan_ns.map(|t| now.saturating_sub(t).min(GOROUTINE_MAX_GAP_NS)).unwrap_or(0);
        self.last_scan_ns = Some(now);
        self.scan_carry_ns += gap;
        let weight = self.scan_carry_ns / self.period_ns;
        self.scan_carry_ns -= weight * self.period_ns;
        let pids: Vec<u32> = self.live.iter().copied().filter(|p| self.awaiting_exec != Some(*p)).collect();
        let mut n = 0;
        let mut read = 0u64;
        for pid in pids {
            if matches!(self.go.get(&pid), None | Some(GoState::Unknown)) {
                let state = self.go_state(pid);
                self.go.insert(pid, state);
            }
            let Some(GoState::Go { runtime, bias }) = self.go.get(&pid) else { continue };
            let all = runtime.goroutines(pid, *bias);
            read += all.len() as u64;
            let goroutines: Vec<Goroutine> =
                all.into_iter().filter(|g| g.is_waiting() && !runtime.is_runtime_wait(g.waitreason)).collect();
            self.stats.goroutine_scans += 1;
            for g in &goroutines {
                let (thread, stack) = self.goroutine_stack(profile, pid, g);
                if weight == 0 {
                    continue;
                }
                // Merged with the goroutine's previous sample while it stays parked at the
                // same place: memory per span of time, not per scan.
                profile.push_sample(Sample {
                    time_us: self.time_us(now),
                    thread,
                    stack,
                    state: ThreadState::new(false, false),
                    weight: weight.min(u32::MAX as u64) as u32,
                });
                self.stats.goroutine_samples += 1;
                n += 1;
            }
            let scan = self.stats.goroutine_scans;
            self.parked.retain(|(p, _), s| *p != pid || s.seen == scan);
        }
        self.scan_every_ns = GOROUTINE_SCAN_NS.max(read * GOROUTINE_SCAN_NS_EACH);
        n
    }

    /// The stack of a waiting goroutine: unwound from its saved registers, or the one found
    /// before if it has not moved since.
    fn goroutine_stack(&mut self, profile: &mut Profile, pid: u32, g: &Goroutine) -> (u32, Option<StackId>) {
        let scan = self.stats.goroutine_scans;
        if let Some(p) = self.parked.get_mut(&(pid, g.addr)).filter(|p| p.goid == g.goid && p.regs == g.regs) {
            p.seen = scan;
            return (p.thread, p.stack);
        }
        let bytes = g.read_stack(pid);
        if let (Some(c), Some(bytes)) = (self.capture.as_mut().filter(|c| c.goroutines), &bytes) {
            if c.offer(pid, g.regs, bytes) {
                let maps = self.spaces.get(&pid).map(|sp| sp.mappings()).unwrap_or_default();
                c.fixture.modules = maps.iter().map(|m| (m.start, m.end, m.pgoff, m.module.name.clone())).collect();
            }
        }
        let stack = bytes.and_then(|bytes| self.unwound(profile, pid, g.regs, &bytes));
        let thread = profile.intern_thread(pid, GOROUTINE_TID_BASE + g.goid, Some(&format!("goroutine {}", g.goid)));
        self.parked.insert((pid, g.addr), ParkedStack { goid: g.goid, regs: g.regs, stack, thread, seen: scan });
        (thread, stack)
    }

    /// Whether `pid` runs Go, and where its runtime is loaded. `Unknown` until its executable
    /// is mapped.
    fn go_state(&mut self, pid: u32) -> GoState {
        let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
        let Ok(name) = std::fs::read_link(&exe) else { return GoState::Absent };
        let name = name.display().to_string();
        let Some(bias) =
            self.spaces.get(&pid).and_then(|s| s.mappings().iter().find(|m| m.module.name == name).map(|m| m.bias))
        else {
            return GoState::Unknown;
        };
        match GoRuntime::from_file(&exe) {
            Ok(Some(runtime)) => GoState::Go { runtime, bias },
            Ok(None) => GoState::Absent,
            Err(e) => {
                let w = e.to_string();
                if !self.setup_warnings.contains(&w) {
                    self.setup_warnings.push(w);
                }
                GoState::Absent
            }
        }
    }

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

fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn threads_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

fn map_open_error(e: io::Error, pid: u32) -> NativeError {
    match e.raw_os_error() {
        Some(libc::ESRCH) => NativeError::NoSuchProcess(pid),
        Some(libc::EMFILE) | Some(libc::ENFILE) => NativeError::TooManyFiles,
        Some(libc::ENOENT) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            NativeError::Unsupported { detail: e.to_string() }
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let euid = unsafe { libc::geteuid() };
            let owner = std::fs::metadata(format!("/proc/{pid}")).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok();
            if euid == 0 {
                // Root refused: a container without CAP_PERFMON / with a seccomp filter.
                NativeError::Unsupported { detail: e.to_string() }
            } else if owner.is_some_and(|o| o != euid) {
                NativeError::PermissionDenied { pid }
            } else {
                NativeError::Paranoid { level: paranoid_level() }
            }
        }
        _ => NativeError::Os(e),
    }
}
