//! Starting a command with the agent, and turning what it sends into a memory profile.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use onefix_model::{Frame, FrameId, MemoryInfo, Profile, StackId, ThreadId, ThreadState};
use onefix_native::Symbolizer;

use crate::agent::AgentFile;
use crate::event::{parse, Body, Event};

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot write the allocation agent to a temporary directory: {0}")]
    AgentFile(std::io::Error),
    #[error("cannot open the channel the allocation agent reports on: {0}")]
    Channel(std::io::Error),
}

#[derive(Clone, Copy, Debug)]
pub struct MemoryOptions {
    /// Mean bytes allocated between two samples.
    pub rate_bytes: u64,
    /// Set PYTHONMALLOC=malloc (unless the environment already sets PYTHONMALLOC) so that
    /// CPython's small objects come from malloc, where the agent sees them, instead of pymalloc's
    /// arenas.
    pub python_malloc: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions { rate_bytes: 512 * 1024, python_malloc: true }
    }
}

/// The agent's end of the channel stays open in the target (and its children); onefix reads
/// the other end on a thread of its own.
pub struct MemoryTracker {
    opts: MemoryOptions,
    agent: AgentFile,
    ours: Option<OwnedFd>,
    theirs: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    /// Shared with the draining thread, so that the profile can be written out as it grows.
    collector: Option<Arc<Mutex<Collector>>>,
    drain: Option<JoinHandle<()>>,
}

/// Large enough that the target seldom waits for onefix to read (the agent's send blocks when
/// the channel is full: it never drops a free, which would leave bytes counted as retained).
const CHANNEL_BYTES: libc::c_int = 8 << 20;

impl MemoryTracker {
    pub fn new(opts: MemoryOptions) -> Result<MemoryTracker, MemoryError> {
        let agent = AgentFile::write().map_err(MemoryError::AgentFile)?;
        let mut fds = [0; 2];
        // SAFETY: socketpair fills the two fds on success.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
            return Err(MemoryError::Channel(std::io::Error::last_os_error()));
        }
        // SAFETY: both fds are new and owned here.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        for (fd, force, plain) in
            [(&theirs, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF), (&ours, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)]
        {
            let size = CHANNEL_BYTES;
            let set = |opt| {
                // SAFETY: setsockopt reads an int of the given size.
                unsafe {
                    libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, opt, &size as *const _ as *const libc::c_void, 4)
                }
            };
            if set(force) != 0 {
                set(plain);
            }
        }
        // Reads wake up now and then to see whether to stop.
        let timeout = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
        // SAFETY: as above, with a timeval.
        unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
        }
        Ok(MemoryTracker {
            opts,
            agent,
            ours: Some(ours),
            theirs: Some(theirs),
            stop: Arc::new(AtomicBool::new(false)),
            collector: None,
            drain: None,
        })
    }

    /// The private directory the agent is preloaded from (removed when the tracker is dropped).
    pub fn agent_dir(&self) -> &std::path::Path {
        self.agent.dir()
    }

    /// Makes `cmd` load the agent and report to this tracker.
    pub fn prepare(&self, cmd: &mut Command) {
        let fd = self.theirs.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        let mut preload = self.agent.path().display().to_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload = format!("{preload}:{}", old.to_string_lossy());
        }
        cmd.env("LD_PRELOAD", preload)
            .env("ONEFIX_MEMORY_FD", fd.to_string())
            .env("ONEFIX_MEMORY_RATE", self.opts.rate_bytes.to_string());
        if self.opts.python_malloc && std::env::var_os("PYTHONMALLOC").is_none() {
            cmd.env("PYTHONMALLOC", "malloc");
        }
        // SAFETY: between fork and exec only fcntl, which is async-signal-safe, runs: the
        // agent's end must survive exec (it was opened close-on-exec for every other child).
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Starts reading the agent's events into `profile` (whose weight unit should be bytes).
    /// `start_ns` is the CLOCK_MONOTONIC time the profile's times count from.
    pub fn start(&mut self, profile: Profile, start_ns: u64) {
        // Only the target holds the agent's end now: a datagram to a closed end fails in the
        // agent, which then stops sampling instead of blocking.
        self.theirs = None;
        let Some(sock) = self.ours.take() else { return };
        let stop = self.stop.clone();
        let collector = Arc::new(Mutex::new(Collector::new(profile, start_ns, self.opts.rate_bytes)));
        self.collector = Some(collector.clone());
        self.drain = Some(
            std::thread::Builder::new()
                .name("onefix-memory".into())
                .spawn(move || drain(&collector, &sock, &stop))
                .expect("a thread to read the allocation agent"),
        );
    }

    /// Runs `f` on the profile as it stands (to write out the samples gathered so far: a
    /// recording written as it goes loses at most the last batch when onefix is killed).
    pub fn with_profile<T>(&self, f: impl FnOnce(&mut Profile) -> T) -> Option<T> {
        let c = self.collector.as_ref()?;
        let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut c.profile))
    }

    /// Reads what is still queued, stops, and returns the profile and what it knows.
    pub fn finish(mut self) -> (Profile, MemoryInfo) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.drain.take() {
            let _ = h.join();
        }
        match self.collector.take() {
            Some(c) => {
                let mut c = c.lock().unwrap_or_else(|e| e.into_inner());
                c.finish_children();
                (std::mem::take(&mut c.profile), std::mem::take(&mut c.info))
            }
            None => (Profile::default(), MemoryInfo::default()),
        }
    }
}

/// Reads the agent's datagrams into the collector until asked to stop. A child process's heap
/// is its own and ends with it: the pids that exited are looked for now and then, and once
/// everything they sent has been read (the channel ran empty, or a second passed), their live
/// allocations count as freed at their exit.
fn drain(collector: &Mutex<Collector>, sock: &OwnedFd, stop: &AtomicBool) {
    let mut buf = vec![0u8; 1 << 16];
    let mut last_check = std::time::Instant::now();
    loop {
        // SAFETY: recv writes at most buf.len() bytes into buf.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        let mut c = collector.lock().unwrap_or_else(|e| e.into_inner());
        if n > 0 {
            match parse(&buf[..n as usize]) {
                Some(e) => c.apply(e),
                None => c.malformed += 1,
            }
            if last_check.elapsed() >= EXIT_CHECK {
                last_check = std::time::Instant::now();
                // Those found gone a check ago: everything they sent is read by now.
                c.release_exited();
                c.find_exited();
            }
            continue;
        }
        let err = std::io::Error::last_os_error();
        if n < 0 && err.kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        // The channel is empty: whatever the exited children sent has been read.
        c.release_exited();
        if last_check.elapsed() >= EXIT_CHECK {
            last_check = std::time::Instant::now();
            c.find_exited();
        }
        // Timed out with nothing queued (or the channel failed): stop if asked.
        if stop.load(Ordering::Relaxed) || (n < 0 && err.kind() != std::io::ErrorKind::WouldBlock) {
            return;
        }
    }
}

/// How often child processes are looked for among the living.
const EXIT_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// Current CLOCK_MONOTONIC in nanoseconds (the agent's clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Live {
    thread: ThreadId,
    stack: Option<StackId>,
    weight: u32,
}

struct Collector {
    profile: Profile,
    info: MemoryInfo,
    start_ns: u64,
    symbolizer: Symbolizer,
    live: HashMap<(u32, u64), Live>,
    frames: Vec<Frame>,
    ids: Vec<FrameId>,
    malformed: u64,
    /// The target's pid: the first to say hello.
    root: Option<u32>,
    children: HashMap<u32, Child>,
    /// Children found gone whose heaps are still to be released.
    exited: Vec<u32>,
}

/// A process the target started, and its sampled heap.
#[derive(Default)]
struct Child {
    live_bytes: u64,
    peak_bytes: u64,
    /// When it was last heard from: its heap ends there (an exit is seen only later, when
    /// /proc is looked at, and the process may have been idle before it).
    last_us: u64,
    exited_us: Option<u64>,
}

/// Whether `pid` is running (not gone, not a zombie waiting to be reaped).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may itself hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|st| st != 'Z' && st != 'X'),
        Err(_) => false,
    }
}

impl Collector {
    fn new(profile: Profile, start_ns: u64, rate_bytes: u64) -> Collector {
        Collector {
            profile,
            info: MemoryInfo { rate_bytes, ..MemoryInfo::default() },
            start_ns,
            symbolizer: Symbolizer::new(),
            live: HashMap::new(),
            frames: Vec::new(),
            ids: Vec::new(),
            malformed: 0,
            root: None,
            children: HashMap::new(),
            exited: Vec::new(),
        }
    }

    /// Child processes that have exited since the last look (their pid is gone or a zombie),
    /// with the time they were found gone.
    fn find_exited(&mut self) {
        let now_us = monotonic_ns().saturating_sub(self.start_ns) / 1000;
        for (&pid, child) in self.children.iter_mut() {
            if child.exited_us.is_none() && !process_alive(pid) {
                child.exited_us = Some(child.last_us.min(now_us));
                self.exited.push(pid);
            }
        }
    }

    /// Frees the live allocations of the children found gone: a process's heap ends with it.
    fn release_exited(&mut self) {
        for pid in std::mem::take(&mut self.exited) {
            let time_us = self.children.get(&pid).and_then(|c| c.exited_us).unwrap_or(0);
            self.free_process(pid, time_us);
        }
    }

    /// At the end: the children still alive keep their heaps (they are reported as they are);
    /// each child's peak goes to the facts.
    fn finish_children(&mut self) {
        // The channel has been read to its end: every child gone by now has said all it will.
        self.find_exited();
        self.release_exited();
        let mut peaks: Vec<(u32, u64)> = self.children.iter().map(|(&pid, c)| (pid, c.peak_bytes)).collect();
        peaks.sort_unstable();
        self.info.children = peaks.len() as u64;
        self.info.children_peak_bytes = peaks.iter().map(|p| p.1).collect();
        let mut exited: Vec<u32> =
            self.children.iter().filter(|(_, c)| c.exited_us.is_some()).map(|(&pid, _)| pid).collect();
        exited.sort_unstable();
        self.info.exited_children = exited;
    }

    /// Records that a live sampled allocation was freed at `time_us`.
    fn push_free(&mut self, l: &Live, time_us: u64) {
        let state = ThreadState(ThreadState::FREED);
        let sample = onefix_model::Sample { time_us, thread: l.thread, stack: l.stack, state, weight: l.weight };
        self.profile.push_sample(sample);
    }

    fn free_process(&mut self, pid: u32, time_us: u64) {
        let gone: Vec<(u32, u64)> = self.live.keys().filter(|k| k.0 == pid).copied().collect();
        for key in gone {
            if let Some(l) = self.live.remove(&key) {
                self.push_free(&l, time_us);
            }
        }
        if let Some(c) = self.children.get_mut(&pid) {
            c.live_bytes = 0;
        }
    }

    fn apply(&mut self, e: Event) {
        let time_us = e.time_ns.saturating_sub(self.start_ns) / 1000;
        if let Some(c) = self.children.get_mut(&e.pid) {
            c.last_us = c.last_us.max(time_us);
        }
        match e.body {
            Body::Hello { python, forked, ppid, .. } => {
                // A new image (exec): the old image's heap is gone with it, as if freed now.
                self.free_process(e.pid, time_us);
                // The first process to say hello is the target; every other one is a child.
                match self.root {
                    None => self.root = Some(e.pid),
                    Some(root) if root != e.pid => {
                        self.children.entry(e.pid).or_insert(Child { last_us: time_us, ..Child::default() });
                    }
                    _ => {}
                }
                // A fork's mappings are its parent's (and a short-lived child may be gone
                // before its maps could be read); a new image has its own.
                if !(forked && self.symbolizer.inherit(e.pid, ppid)) {
                    self.symbolizer.load_maps(e.pid);
                }
                self.info.processes += 1;
                self.info.python_frames |= python;
            }
            Body::Alloc { addr, weight, tracked, python, native, .. } => {
                self.info.sampled += 1;
                if !tracked {
                    self.info.untracked += 1;
                }
                self.frames.clear();
                if python.is_empty() {
                    self.symbolizer.frames(e.pid, &native, &mut self.frames);
                } else {
                    self.frames
                        .extend(python.into_iter().map(|f| Frame::python(f.function, f.file, f.line.max(0) as u32)));
                }
                self.ids.clear();
                for f in self.frames.drain(..).rev() {
                    self.ids.push(self.profile.intern_frame(f));
                }
                let stack = self.profile.intern_stack(self.ids.iter().copied());
                let thread = self.profile.intern_thread(e.pid, e.tid as u64, None);
                let weight = weight.min(u32::MAX as u64) as u32;
                if tracked {
                    self.live.insert((e.pid, addr), Live { thread, stack, weight });
                    if let Some(c) = self.children.get_mut(&e.pid) {
                        c.live_bytes += weight as u64;
                        c.peak_bytes = c.peak_bytes.max(c.live_bytes);
                    }
                }
                self.profile.push_sample(onefix_model::Sample {
                    time_us,
                    thread,
                    stack,
                    state: ThreadState::default(),
                    weight,
                });
            }
            Body::Maps { text } => self.symbolizer.load_maps_text(e.pid, &text),
            Body::Free { addr } => {
                if let Some(l) = self.live.remove(&(e.pid, addr)) {
                    self.info.freed += 1;
                    if let Some(c) = self.children.get_mut(&e.pid) {
                        c.live_bytes = c.live_bytes.saturating_sub(l.weight as u64);
                    }
                    self.push_free(&l, time_us);
                }
            }
        }
    }
}

/// Resident memory of a process, from /proc/PID/status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    pub rss_bytes: u64,
    /// The highest RSS so far (VmHWM).
    pub peak_rss_bytes: u64,
}

pub fn read_rss(pid: u32) -> Option<ProcessMemory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some(ProcessMemory { rss_bytes: field("VmRSS:")?, peak_rss_bytes: field("VmHWM:")? })
}
