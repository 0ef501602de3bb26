//! Starting a command with the agent, and turning what it sends into a memory profile.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    drain: Option<JoinHandle<Collector>>,
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
        for (fd, force, plain) in [(&theirs, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF), (&ours, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)] {
            let size = CHANNEL_BYTES;
            let set = |opt| {
                // SAFETY: setsockopt reads an int of the given size.
                unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, opt, &size as *const _ as *const libc::c_void, 4) }
            };
            if set(force) != 0 {
                set(plain);
            }
        }
        // Reads wake up now and then to see whether to stop.
        let timeout = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
        // SAFETY: as above, with a timeval.
        unsafe {
            libc::setsockopt(ours.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as u32);
        }
        Ok(MemoryTracker { opts, agent, ours: Some(ours), theirs: Some(theirs), stop: Arc::new(AtomicBool::new(false)), drain: None })
    }

    /// Makes `cmd` load the agent and report to this tracker.
    pub fn prepare(&self, cmd: &mut Command) {
        let fd = self.theirs.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        let mut preload = self.agent.path().display().to_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload = format!("{preload}:{}", old.to_string_lossy());
        }
        cmd.env("LD_PRELOAD", preload).env("ONEFIX_MEMORY_FD", fd.to_string()).env("ONEFIX_MEMORY_RATE", self.opts.rate_bytes.to_string());
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
        let mut collector = Collector::new(profile, start_ns, self.opts.rate_bytes);
        self.drain = Some(
            std::thread::Builder::new()
                .name("onefix-memory".into())
                .spawn(move || {
                    collector.drain(&sock, &stop);
                    collector
                })
                .expect("a thread to read the allocation agent"),
        );
    }

    /// Reads what is still queued, stops, and returns the profile and what it knows.
    pub fn finish(mut self) -> (Profile, MemoryInfo) {
        self.stop.store(true, Ordering::Relaxed);
        match self.drain.take().map(|h| h.join()) {
            Some(Ok(c)) => (c.profile, c.info),
            _ => (Profile::default(), MemoryInfo::default()),
        }
    }
}

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
        }
    }

    fn drain(&mut self, sock: &OwnedFd, stop: &AtomicBool) {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: recv writes at most buf.len() bytes into buf.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n > 0 {
                match parse(&buf[..n as usize]) {
                    Some(e) => self.apply(e),
                    None => self.malformed += 1,
                }
                continue;
            }
            let err = std::io::Error::last_os_error();
            if n < 0 && err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Timed out with nothing queued (or the channel failed): stop if asked.
            if stop.load(Ordering::Relaxed) || (n < 0 && err.kind() != std::io::ErrorKind::WouldBlock) {
                return;
            }
        }
    }

    fn apply(&mut self, e: Event) {
        let time_us = e.time_ns.saturating_sub(self.start_ns) / 1000;
        match e.body {
            Body::Hello { python, forked, ppid, .. } => {
                // A new image (exec): the old image's heap is gone with it, as if freed now.
                let gone: Vec<(u32, u64)> = self.live.keys().filter(|k| k.0 == e.pid).copied().collect();
                for key in gone {
                    if let Some(l) = self.live.remove(&key) {
                        let state = ThreadState(ThreadState::FREED);
                        self.profile.push_sample(onefix_model::Sample { time_us, thread: l.thread, stack: l.stack, state, weight: l.weight });
                    }
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
                    self.frames.extend(python.into_iter().map(|f| Frame::python(f.function, f.file, f.line.max(0) as u32)));
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
                }
                self.profile.push_sample(onefix_model::Sample { time_us, thread, stack, state: ThreadState::default(), weight });
            }
            Body::Maps { text } => self.symbolizer.load_maps_text(e.pid, &text),
            Body::Free { addr } => {
                if let Some(l) = self.live.remove(&(e.pid, addr)) {
                    self.info.freed += 1;
                    let state = ThreadState(ThreadState::FREED);
                    self.profile.push_sample(onefix_model::Sample { time_us, thread: l.thread, stack: l.stack, state, weight: l.weight });
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
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).map(|kb| kb * 1024)
    };
    Some(ProcessMemory { rss_bytes: field("VmRSS:")?, peak_rss_bytes: field("VmHWM:")? })
}
