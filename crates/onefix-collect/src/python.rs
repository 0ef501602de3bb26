//! CPython sampling from outside the process, through py-spy used as a library.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use onefix_model::{python_frame_can_start_stack, Frame, FrameKind, Profile, Sample, ThreadState};
use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy, StackTrace};

use crate::asyncio::{monotonic_us, AsyncioTasks, ThreadSample};
use crate::blocked::Syscall;
use crate::sockets::{Sockets, WaitFor};
use crate::{process, CollectError, Sampler, Tick};

#[derive(Clone, Debug)]
pub struct PythonOptions {
    /// Merge native (C extension) frames into the Python stacks. Needs the target stopped while
    /// its native stack is unwound (py-spy's lock mode), so it costs the target more.
    pub native: bool,
    /// Keep only the thread holding the GIL.
    pub gil_only: bool,
    /// Also sample every Python descendant process (workers, pools).
    pub subprocesses: bool,
}

/// Samples one Python process, or a tree of them.
pub struct PythonSampler {
    root: u32,
    opts: PythonOptions,
    config: Config,
    spies: Vec<Spy>,
    /// Descendants that were tried and are not (yet) readable Python, with when they were first
    /// seen.
    tried: HashMap<u32, Instant>,
    last_scan: Instant,
    /// How long until the next look for new descendants: [`SCAN_EVERY`], or longer when a look
    /// costs much (a target with hundreds of threads has as many children lists to read).
    scan_every: Duration,
    /// When threads left attached by a paused read were last let go (`native` only).
    last_release: Instant,
    /// Interpreter version of the first process attached, e.g. "3.11.7".
    pub version: String,
    /// Await chains from the bootstrap of a program onefix started (see [`crate::asyncio`]).
    asyncio: Option<Box<AsyncioTasks>>,
    /// A thread was seen waiting in an asyncio event loop's selector.
    saw_event_loop: bool,
    /// When the sampled processes' images were last compared with those their spies read.
    last_image_check: Instant,
    /// What happened to the processes' images: "pid N exec'd into CMD at T s".
    exec_notes: Vec<String>,
    /// Paused reads (`native`) skipped because a thread was in uninterruptible sleep, and
    /// paused reads that took longer than [`PAUSE_LIMIT`].
    skipped_paused: u64,
    long_pauses: u64,
    /// Paused reads held back so that the target runs [`RUN_PER_PAUSE`] times as long as it was
    /// paused (`native` at a high rate).
    paused_held_for_duty: u64,
    started: Instant,
}

struct Spy {
    pid: u32,
    spy: PythonSpy,
    gone: bool,
    /// The program image the spy reads (see [`process::image`]); an exec replaces it, and the
    /// spy's addresses with it.
    image: Option<String>,
    /// The process exec'd into a new image that is not readable yet (an interpreter still
    /// starting): since when, and the new image.
    exec_since: Option<(Instant, String)>,
    /// After a paused read that took too long, no paused read of this process until then.
    paused_reads_after: Option<Instant>,
    /// After any paused read, none before this: the target is given
    /// [`RUN_PER_PAUSE`] times the last pause's length to run, so that back-to-back pauses at a
    /// high rate do not join into one long stall.
    next_paused_read: Option<Instant>,
    /// After a paused read that was slow, look for threads in uninterruptible sleep before each
    /// read until then (reading every thread's state costs too much to do always).
    watch_sleepers_until: Option<Instant>,
    /// Where the next tick's futex reads start among the threads that may queue for the GIL.
    futex_turn: usize,
    /// What this process's sockets are (listening, accepted), to tell a worker waiting for its
    /// clients; and, by thread, the last wait classified so, to skip classifying it again.
    sockets: Sockets,
    client_waits: HashMap<u64, (Syscall, Option<WaitFor>)>,
    /// Where the next tick's client-wait reads start among the waiting threads.
    client_turn: usize,
    /// Threads whose latest kept stack had Python frames: an empty stack from one of them is
    /// a read that raced the interpreter (a frame being pushed or popped), not a thread that
    /// left Python, and is read again.
    had_frames: std::collections::HashSet<u64>,
    /// Ticks of this process read so far, and for each thread with Python frames the tick its
    /// run count was last read at and the count (see [`process::run_count`]).
    ticks: u64,
    runs: std::collections::HashMap<u64, (u64, u64)>,
}

/// Reads of a process per tick at most: the first, and retries of a torn or failed one.
const READ_ATTEMPTS: usize = 4;
/// How often new descendants are looked for (`subprocesses`): a child is sampled from within
/// about this long of its interpreter becoming readable.
const SCAN_EVERY: Duration = Duration::from_millis(50);
/// How often the sampled processes' images are compared with those their spies read (and,
/// with paused reads, threads left attached are let go).
const IMAGE_CHECK_EVERY: Duration = Duration::from_millis(250);
/// How long a descendant may take to become readable Python before it is left alone.
const CHILD_PATIENCE: Duration = Duration::from_secs(5);

impl PythonSampler {
    /// Paused reads (`native`): lets go of any thread of the sampled processes that a read left
    /// attached because it was exiting (see [`process::release_traced_threads`]). Call from the
    /// thread that samples.
    pub fn release_traced_threads(&self) -> usize {
        if !self.opts.native {
            return 0;
        }
        self.spies.iter().map(|spy| process::release_traced_threads(spy.pid)).sum()
    }

    /// Attaches to `pid`, retrying for up to `patience` while a just-started interpreter
    /// initialises.
    pub fn attach(pid: u32, opts: PythonOptions, patience: Duration) -> Result<PythonSampler, CollectError> {
        if !process::exists(pid) {
            return Err(CollectError::NoSuchProcess(pid));
        }
        let mut config = Config {
            blocking: if opts.native { LockingStrategy::Lock } else { LockingStrategy::NonBlocking },
            native: opts.native,
            gil_only: opts.gil_only,
            include_idle: true,
            collect_thread_names: true,
            subprocesses: opts.subprocesses,
            ..Config::default()
        };
        config.pid = Some(pid as py_spy::Pid);

        let started = Instant::now();
        let deadline = started + patience;
        let mut sampler = PythonSampler {
            root: pid,
            opts,
            config,
            spies: Vec::new(),
            tried: HashMap::new(),
            last_scan: Instant::now(),
            scan_every: SCAN_EVERY,
            last_release: Instant::now(),
            version: String::new(),
            asyncio: None,
            saw_event_loop: false,
            last_image_check: Instant::now(),
            exec_notes: Vec::new(),
            skipped_paused: 0,
            long_pauses: 0,
            paused_held_for_duty: 0,
            started: Instant::now(),
        };
        let mut last_error: Option<anyhow::Error>;
        let mut tries = 0u32;
        loop {
            match sampler.open(pid) {
                Ok(spy) => {
                    sampler.version = spy.version.to_string();
                    sampler.spies.push(Spy::new(pid, spy));
                    return Ok(sampler);
                }
                Err(e) if permission_denied(&e) => return Err(CollectError::PermissionDenied { pid }),
                Err(e) => last_error = Some(e),
            }
            if !process::is_running(pid) {
                return Err(CollectError::ExitedEarly { status: None });
            }
            if sampler.opts.subprocesses {
                sampler.scan_descendants();
                if let Some(first) = sampler.spies.first() {
                    sampler.version = first.spy.version.to_string();
                    return Ok(sampler);
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            // A launcher that exec'd a runtime onefix cannot read (a script that runs node,
            // pypy): said as soon as it is seen, not after the whole patience.
            tries += 1;
            if tries % 25 == 0 {
                if let Some(found) = crate::runtime::of_process(pid) {
                    return Err(CollectError::ForeignRuntime(found));
                }
            }
            // Once exec is long done, a process that is no interpreter will not become one
            // (launchers such as pyenv's shims are shell scripts that exec Python later).
            if started.elapsed() > Duration::from_secs(3)
                && !process::looks_like_python(pid)
                && !(sampler.opts.subprocesses && process::descendants(pid).into_iter().any(process::looks_like_python))
            {
                return Err(not_python(pid));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(found) = crate::runtime::of_process(pid) {
            return Err(CollectError::ForeignRuntime(found));
        }
        let detail = last_error.map(|e| format!("{e:#}")).unwrap_or_default();
        if detail.contains("Unsupported version") {
            return Err(CollectError::UnsupportedPython { pid, detail });
        }
        // An executable named like an interpreter (or mapping libpython) in which py-spy finds
        // no CPython version it knows: a future or foreign interpreter.
        if detail.contains("Failed to find python version") && process::looks_like_python(pid) {
            let detail = format!("no CPython version onefix knows was found in {}", process::exe(pid));
            return Err(CollectError::UnsupportedPython { pid, detail });
        }
        if !process::looks_like_python(pid) {
            return Err(not_python(pid));
        }
        Err(CollectError::Unreadable { pid, detail })
    }

    /// Charges event-loop waits to the awaits the bootstrap reports through `tasks`.
    pub fn set_asyncio(&mut self, tasks: AsyncioTasks) {
        self.asyncio = Some(Box::new(tasks));
    }

    /// Sentences about what the samples could and could not show of asyncio.
    pub fn asyncio_notes(&self) -> Vec<String> {
        match &self.asyncio {
            Some(a) => {
                let mut notes = a.merge.remarks.clone();
                notes.extend(a.merge.summary());
                if self.saw_event_loop && a.merge.stats.loop_waits == 0 && a.merge.remarks.is_empty() {
                    notes.push("asyncio: no task snapshot arrived from the program (started with python -I, -E or -S?), so the event loop's waits are charged to no await".to_owned());
                }
                notes
            }
            None if self.saw_event_loop => vec![
                "asyncio: the event loop's waits are charged to no await: await chains are read only from programs onefix starts (reading the tasks of a running process needs CPython's private struct layouts, not done yet)".to_owned(),
            ],
            None => Vec::new(),
        }
    }

    /// Sentences about processes that exec'd while sampled, and about paused reads held back.
    pub fn sampling_notes(&self) -> Vec<String> {
        let mut notes = self.exec_notes.clone();
        if self.long_pauses > 0 {
            notes.push(format!(
                "{} paused read{} took longer than {} ms; after each, that process was not read for {} s, so that the pauses stay short",
                self.long_pauses,
                if self.long_pauses == 1 { "" } else { "s" },
                PAUSE_LIMIT.as_millis(),
                PAUSE_BACKOFF.as_secs()
            ));
        }
        if self.paused_held_for_duty > 0 {
            notes.push(format!(
                "{} paused read{} held back so that the target ran at least {}% of the time (each paused read stops every thread; at this rate they would have followed each other at once)",
                self.paused_held_for_duty,
                if self.paused_held_for_duty == 1 { " was" } else { "s were" },
                100 * RUN_PER_PAUSE / (RUN_PER_PAUSE + 1)
            ));
        }
        if self.skipped_paused > 0 {
            notes.push(format!(
                "{} paused read{} skipped (a thread in uninterruptible sleep, e.g. disk I/O, cannot be stopped, and the others would have waited stopped), or held back after a long one",
                self.skipped_paused,
                if self.skipped_paused == 1 { " was" } else { "s were" }
            ));
        }
        notes
    }

    /// An exec replaces a process's image under the same pid, and with it every address its
    /// spy reads: sampling would go on blind. A process whose image changed is read again
    /// from its new image as soon as that is readable Python (a wrapper that execs the real
    /// program, a program that re-execs itself); one that exec'd into something else is said.
    fn follow_execs(&mut self) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut reopen = Vec::new();
        for (i, spy) in self.spies.iter_mut().enumerate().filter(|(_, s)| !s.gone) {
            let now = process::image(spy.pid);
            if now.is_none() {
                continue;
            }
            if spy.exec_since.is_none() && now != spy.image {
                let command = process::cmdline(spy.pid).map(|a| a.join(" ")).unwrap_or_else(|| process::exe(spy.pid));
                spy.exec_since = Some((Instant::now(), command));
            }
            if spy.exec_since.is_some() {
                reopen.push(i);
            }
        }
        for i in reopen {
            let pid = self.spies[i].pid;
            let (since, command) = self.spies[i].exec_since.clone().expect("set above");
            match self.open(pid) {
                Ok(spy) => {
                    self.exec_notes.push(format!(
                        "pid {pid} exec'd into `{command}` at {elapsed:.1} s; sampling went on in the new program"
                    ));
                    self.spies[i] = Spy::new(pid, spy);
                }
                Err(_)
                    if since.elapsed() >= EXEC_PATIENCE
                        || !process::looks_like_python(pid) && since.elapsed() >= Duration::from_secs(1) =>
                {
                    self.exec_notes.push(format!(
                        "pid {pid} exec'd into `{command}` at {elapsed:.1} s, which onefix cannot read as Python; it was not sampled after that (profile it with its own onefix record)"
                    ));
                    self.spies[i].gone = true;
                }
                Err(_) => {}
            }
        }
    }

    fn open(&self, pid: u32) -> anyhow::Result<PythonSpy> {
        let mut spy = PythonSpy::new(pid as py_spy::Pid, &self.config)?;
        // A spy that cannot read one stack yet is not ready (interpreter still starting).
        spy.get_stack_traces()?;
        Ok(spy)
    }

    fn scan_descendants(&mut self) {
        let started = Instant::now();
        let descendants = process::descendants(self.root);
        // Looking costs at most about 2% of a core: the next look waits 50 times this one.
        self.scan_every = SCAN_EVERY.max(started.elapsed() * 50);
        self.last_scan = Instant::now();
        for pid in descendants {
            if self.spies.iter().any(|s| s.pid == pid) {
                continue;
            }
            let first_seen = *self.tried.entry(pid).or_insert_with(Instant::now);
            if first_seen.elapsed() >= CHILD_PATIENCE {
                continue;
            }
            if !process::looks_like_python(pid) {
                continue;
            }
            if let Ok(spy) = self.open(pid) {
                self.spies.push(Spy::new(pid, spy));
            }
        }
    }
}

/// Why a process that is not Python cannot be read: the runtime it is, when it is one of
/// [`crate::runtime::RUNTIMES`], else that it is neither Python nor native.
fn not_python(pid: u32) -> CollectError {
    match crate::runtime::of_process(pid) {
        Some(found) => CollectError::ForeignRuntime(found),
        None => CollectError::NotPython { pid, exe: process::exe(pid) },
    }
}

impl Spy {
    /// The system calls of waiting threads of `traces` read this tick (by index), with what
    /// each waits for when that is only its clients or a wake-up. Asked of waiting threads
    /// without the GIL, at most [`MAX_CLIENT_READS`] per tick taken in turn; a thread whose
    /// system call is the one last classified keeps its verdict. The calls read serve the futex
    /// check of the same tick too, so that no thread's call is read twice.
    fn client_waits(&mut self, traces: &[StackTrace]) -> Vec<(usize, Syscall, Option<WaitFor>)> {
        // The system call numbers compared are x86_64's (crate::blocked::nr).
        if !cfg!(target_arch = "x86_64") {
            return Vec::new();
        }
        let waiting: Vec<usize> = (0..traces.len())
            .filter(|&i| !traces[i].active && !traces[i].owns_gil && !traces[i].frames.is_empty())
            .collect();
        if waiting.is_empty() {
            return Vec::new();
        }
        let from = self.client_turn % waiting.len();
        self.client_turn = self.client_turn.wrapping_add(MAX_CLIENT_READS);
        let mut out = Vec::new();
        for &i in waiting.iter().cycle().skip(from).take(MAX_CLIENT_READS.min(waiting.len())) {
            let tid = thread_key(&traces[i]);
            let Some(call) = crate::blocked::syscall(self.pid, tid) else { continue };
            let verdict = match self.client_waits.get(&tid) {
                Some(&(last, verdict)) if last == call => verdict,
                _ => {
                    let verdict = self.sockets.client_wait(self.pid, call);
                    self.client_waits.insert(tid, (call, verdict));
                    verdict
                }
            };
            out.push((i, call, verdict));
        }
        if self.client_waits.len() > 4 * traces.len().max(64) {
            // Threads that ended leave no entry behind.
            let live: std::collections::HashSet<u64> = traces.iter().map(thread_key).collect();
            self.client_waits.retain(|tid, _| live.contains(tid));
        }
        out
    }

    /// Whether waiting thread `tid` has not run since this process's previous tick: its run
    /// count read now and then is the same. `None` when it was not read then (it was running,
    /// or is new) or cannot be read now.
    fn same_wait(&mut self, tid: u64) -> Option<bool> {
        let now = process::run_count(self.pid, tid)?;
        let before = self.runs.insert(tid, (self.ticks, now));
        before.filter(|&(tick, _)| tick + 1 == self.ticks).map(|(_, count)| count == now)
    }

    fn new(pid: u32, spy: PythonSpy) -> Spy {
        Spy {
            pid,
            spy,
            gone: false,
            image: process::image(pid),
            exec_since: None,
            paused_reads_after: None,
            next_paused_read: None,
            watch_sleepers_until: None,
            futex_turn: 0,
            sockets: Sockets::default(),
            client_waits: HashMap::new(),
            client_turn: 0,
            had_frames: Default::default(),
            ticks: 0,
            runs: Default::default(),
        }
    }
}

/// A paused read (`native`) stops every thread of the target; one that takes longer than this
/// stalls it noticeably, and the process is then left unpaused for [`PAUSE_BACKOFF`].
const PAUSE_LIMIT: Duration = Duration::from_millis(50);
const PAUSE_BACKOFF: Duration = Duration::from_secs(1);
/// A paused read slower than this makes onefix look for threads in uninterruptible sleep before
/// each read of that process, for [`PAUSE_BACKOFF`]: reading every thread's state at every tick
/// would cost more than the reads.
const SLOW_PAUSE: Duration = Duration::from_millis(10);
/// Between two paused reads of a process, it runs at least this many times as long as the last
/// pause lasted: at 1000 Hz a paused read of 1-5 ms would otherwise follow the previous one at
/// once, and the target would be stopped most of the time (a 95 ms stall was seen so). With 4,
/// the target is stopped at most a fifth of the time, and no stall is longer than one read.
const RUN_PER_PAUSE: u32 = 4;

/// Threads asked per tick whether they wait in a futex (a GIL queue or a lock): each read is a
/// few microseconds of onefix's time, so hundreds of threads are asked in turns.
const MAX_FUTEX_READS: usize = 32;

/// Waiting threads asked per tick whether they wait only for their clients (see
/// [`crate::sockets`]): one read of the thread's system call each, and of its descriptors when
/// that call changed. A pre-fork server's workers are a process each, so this is per process.
const MAX_CLIENT_READS: usize = 32;

/// Threads whose run count is read per tick (to tell one long wait from several short ones back
/// to back at the same line): past this many threads with Python frames, none are, so that the
/// threads read are the same from tick to tick. Serial waits worth splitting are a few threads'
/// work; each read is a few microseconds.
const MAX_RUNS_READS: usize = 16;

/// How long a process that exec'd is given to become readable Python again.
const EXEC_PATIENCE: Duration = Duration::from_secs(10);

fn thread_key(trace: &StackTrace) -> u64 {
    trace.os_thread_id.unwrap_or(trace.thread_id)
}

/// A Python stack whose outermost frame cannot start a thread was torn by the target moving on
/// while it was read (see [`Frame::can_start_stack`]).
fn looks_torn(trace: &StackTrace) -> bool {
    trace
        .frames
        .last()
        .is_some_and(|outer| outer.module.is_none() && !python_frame_can_start_stack(&outer.name, &outer.filename))
}

/// Whether a stack is an asyncio event loop waiting in its selector.
fn loop_waiting(trace: &StackTrace) -> bool {
    !trace.active
        && trace.frames.first().is_some_and(|f| f.filename.ends_with("/selectors.py"))
        && trace
            .frames
            .iter()
            .any(|f| crate::asyncio::named(&f.name, "run_forever") && f.filename.ends_with("/asyncio/base_events.py"))
}

/// `futex`: the thread waited in a futex (see [`process::in_futex_wait`]); `same_wait`: it
/// has not run since its previous sample (see [`Spy::same_wait`]).
fn add_trace(
    profile: &mut Profile,
    trace: &StackTrace,
    time_us: u64,
    futex: bool,
    same_wait: Option<bool>,
    waits_for: Option<WaitFor>,
    asyncio: Option<&mut AsyncioTasks>,
) {
    let tid = trace.os_thread_id.unwrap_or(trace.thread_id);
    if let Some(a) = asyncio {
        let pid = trace.pid as u32;
        // By its announced id, or by its name before the announcement is read.
        if a.merge.is_helper(pid, tid) || trace.thread_name.as_deref() == Some(crate::asyncio::HELPER_THREAD) {
            return;
        }
        if loop_waiting(trace) {
            let frames: Vec<Frame> = trace.frames.iter().rev().map(convert_frame).collect();
            let sample = ThreadSample { pid, tid, frames: &frames, active: trace.active };
            if a.merge.charge(profile, &sample, monotonic_us(), time_us) {
                return;
            }
        }
    }
    let thread = profile.intern_thread(trace.pid as u32, tid, trace.thread_name.as_deref());
    let mut stack = None;
    // py-spy lists frames innermost first; the prefix tree is built from the root.
    for f in trace.frames.iter().rev() {
        let frame = profile.intern_frame(convert_frame(f));
        stack = Some(profile.intern_stack_node(stack, frame));
    }
    // What the kernel says the thread waits for, as the leaf its Python frames cannot show (a
    // call into C has no frame): the diagnosis leaves these waits out as idle.
    if let Some(wait) = waits_for {
        let name = match wait {
            WaitFor::Connection => onefix_model::CONNECTION_WAIT_FRAME,
            WaitFor::Request => onefix_model::INBOUND_WAIT_FRAME,
            WaitFor::WakeUp => onefix_model::WAKE_UP_WAIT_FRAME,
        };
        let frame = profile.intern_frame(Frame::native(name, "[kernel]"));
        stack = Some(profile.intern_stack_node(stack, frame));
    }
    profile.push_sample(Sample {
        time_us,
        thread,
        stack,
        state: ThreadState::new(trace.active, trace.owns_gil).with_futex(futex).with_same_wait(same_wait),
        weight: 1,
    });
}

pub(crate) fn convert_frame(f: &py_spy::Frame) -> Frame {
    match &f.module {
        None => Frame::python(f.name.clone(), f.filename.clone(), f.line.max(0) as u32),
        Some(module) => Frame {
            kind: FrameKind::Native,
            function: f.name.clone(),
            // py-spy puts the module in `filename` when it has no source file.
            file: if f.filename == *module || f.filename == "?" { String::new() } else { f.filename.clone() },
            line: f.line.max(0) as u32,
            module: module.clone(),
        },
    }
}

impl Sampler for PythonSampler {
    fn tick(&mut self, profile: &mut Profile, time_us: u64) -> Tick {
        if self.opts.subprocesses && self.last_scan.elapsed() >= self.scan_every {
            self.scan_descendants();
        }
        if let Some(a) = self.asyncio.as_mut() {
            a.channel.drain_into(&mut a.merge);
        }
        if self.last_image_check.elapsed() >= IMAGE_CHECK_EVERY || self.spies.iter().any(|s| s.exec_since.is_some()) {
            self.last_image_check = Instant::now();
            self.follow_execs();
        }
        let mut added = 0;
        let mut failed = false;
        for spy in self.spies.iter_mut().filter(|s| !s.gone && s.exec_since.is_none()) {
            if self.opts.native {
                // A paused read stops every thread and waits for each to stop. A thread in
                // uninterruptible sleep (disk or NFS I/O) cannot stop until it leaves it, and
                // the others would stay stopped meanwhile: once reads of this process turn
                // slow, skip a read while such a thread exists rather than stall.
                let now = Instant::now();
                let watch_sleepers = spy.watch_sleepers_until.is_some_and(|t| now < t);
                if spy.next_paused_read.is_some_and(|t| now < t) {
                    self.paused_held_for_duty += 1;
                    continue;
                }
                if spy.paused_reads_after.is_some_and(|t| now < t)
                    || (watch_sleepers && process::has_uninterruptible_thread(spy.pid))
                {
                    self.skipped_paused += 1;
                    failed = true;
                    continue;
                }
            }
            let read_started = Instant::now();
            // A non-blocking read tears when the target changes its stack mid-read, which is
            // likeliest in deep, fast-changing (hot) code. Dropping torn reads would bias the
            // shares against exactly that code, so a torn or failed read is retried at once, a
            // few times, and a torn stack is kept only when no clean read came.
            let had_frames = &spy.had_frames;
            let torn = |t: &StackTrace| looks_torn(t) || (t.frames.is_empty() && had_frames.contains(&thread_key(t)));
            let mut read = spy.spy.get_stack_traces();
            for _ in 1..READ_ATTEMPTS {
                match &read {
                    Ok(traces) if !traces.iter().any(torn) => break,
                    _ => {}
                }
                match spy.spy.get_stack_traces() {
                    Ok(retry) => {
                        if read.is_err() || !retry.iter().any(torn) {
                            read = Ok(retry);
                        }
                    }
                    Err(e) if read.is_err() => read = Err(e),
                    Err(_) => {}
                }
            }
            if self.opts.native {
                let took = read_started.elapsed();
                spy.next_paused_read = Some(Instant::now() + took * RUN_PER_PAUSE);
                if took > SLOW_PAUSE {
                    spy.watch_sleepers_until = Some(Instant::now() + PAUSE_BACKOFF);
                }
                if took > PAUSE_LIMIT {
                    self.long_pauses += 1;
                    spy.paused_reads_after = Some(Instant::now() + PAUSE_BACKOFF);
                }
            }
            match read {
                Ok(traces) => {
                    // A thread without the GIL while another holds it may be queuing for it
                    // (runnable, or asleep in the GIL's futex), waiting for I/O at the same line,
                    // or running C code that let the GIL go: the kernel tells which (a futex),
                    // read only then, so an idle program costs no extra reads.
                    // At most MAX_FUTEX_READS threads are asked per tick, taken in turn, so a
                    // server of hundreds of threads costs a bounded number of reads.
                    let gil_held = traces.iter().any(|t| t.owns_gil);
                    let asked: Vec<usize> = if gil_held {
                        let candidates: Vec<usize> = (0..traces.len())
                            .filter(|&i| !traces[i].owns_gil && !traces[i].frames.is_empty())
                            .collect();
                        let from = spy.futex_turn % candidates.len().max(1);
                        spy.futex_turn = spy.futex_turn.wrapping_add(MAX_FUTEX_READS);
                        candidates
                            .iter()
                            .cycle()
                            .skip(from)
                            .take(MAX_FUTEX_READS.min(candidates.len()))
                            .copied()
                            .collect()
                    } else {
                        Vec::new()
                    };
                    spy.ticks += 1;
                    if spy.ticks % 1024 == 0 {
                        // Threads that ended (a thread per connection) leave no entry behind.
                        let ticks = spy.ticks;
                        spy.runs.retain(|_, &mut (tick, _)| tick + 1 >= ticks);
                    }
                    // Every thread with frames, not only those read as waiting: a thread the
                    // diagnosis finds inside a waiting call may be read as active (woken, not yet
                    // back in Python), and its next sample must still know whether it ran.
                    let read_runs = traces.iter().filter(|t| !t.frames.is_empty()).count() <= MAX_RUNS_READS;
                    let client_waits = spy.client_waits(&traces);
                    for (index, trace) in traces.iter().enumerate() {
                        let read = client_waits.iter().find(|w| w.0 == index);
                        let futex = asked.contains(&index)
                            && match read {
                                Some(&(_, call, _)) => call.number == crate::blocked::nr::FUTEX,
                                None => process::in_futex_wait(spy.pid, thread_key(trace)),
                            };
                        let same_wait =
                            if read_runs && !trace.frames.is_empty() { spy.same_wait(thread_key(trace)) } else { None };
                        if trace.frames.is_empty() {
                            spy.had_frames.remove(&thread_key(trace));
                        } else {
                            spy.had_frames.insert(thread_key(trace));
                        }
                        self.saw_event_loop |= loop_waiting(trace);
                        let waits_for = read.and_then(|w| w.2);
                        add_trace(profile, trace, time_us, futex, same_wait, waits_for, self.asyncio.as_deref_mut());
                    }
                    added += traces.len();
                }
                Err(_) if !process::is_running(spy.pid) => spy.gone = true,
                Err(_) => failed = true,
            }
        }
        if self.opts.native && self.last_release.elapsed() >= IMAGE_CHECK_EVERY {
            self.release_traced_threads();
            self.last_release = Instant::now();
        }
        if failed {
            // A read that fails may be the first sign of an exec.
            self.follow_execs();
        }
        let all_gone = self.spies.iter().all(|s| s.gone);
        if all_gone && !(self.opts.subprocesses && process::is_running(self.root)) {
            return Tick::TargetGone;
        }
        if failed && added == 0 {
            Tick::Failed
        } else {
            Tick::Sampled(added)
        }
    }
}

pub(crate) fn permission_denied(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            io.kind() == std::io::ErrorKind::PermissionDenied
        } else if let Some(remoteprocess::Error::IOError(io)) = cause.downcast_ref::<remoteprocess::Error>() {
            io.kind() == std::io::ErrorKind::PermissionDenied
        } else {
            false
        }
    })
}
