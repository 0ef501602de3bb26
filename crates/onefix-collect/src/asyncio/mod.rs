//! asyncio await chains: what a suspended coroutine waits for, merged into the thread samples.
//!
//! Sampled from outside, an asyncio program shows only its event loop sitting in
//! `selectors.select`: the `await` that keeps a request waiting is in no thread stack. For the
//! programs it starts, onefix puts a bootstrap on `PYTHONPATH` (`sitecustomize.py`, which chains
//! the one it shadows) whose daemon thread writes, at the sampling rate, every live task's await
//! chain into a FIFO. At each tick, a loop thread found waiting in its selector is charged to
//! what it waits for:
//! - one await outstanding (one task waiting on I/O or a timer, the others parked or waiting for
//!   tasks): the loop's sample moves to a virtual thread "task NAME" whose stack is the loop's
//!   own stack up to the loop, then the task's await chain, so the wait lands on the await line
//!   in the user's code and the ordinary per-thread rules (serial-io, sleep, ...) apply;
//! - two or more outstanding: the waits overlap, so none of them is the cost of the wait; the
//!   loop's sample stays as it is (an event-loop wait) and the overlap is counted;
//! - none, or no fresh snapshot: the sample stays as it is.
//!
//! The sample is moved, never copied: the total weight, and with it every share and gain
//! bound, is what the loop thread alone would have had.
//!
//! Tasks of a running process (`--pid`) are not read: that needs CPython's private struct
//! layouts per version from outside, which this module does not do.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use onefix_model::{Frame, FrameKind, Profile, Sample, ThreadState};

/// The bootstrap, written next to the FIFO when recording starts.
pub const BOOTSTRAP: &str = include_str!("sitecustomize.py");

/// The name of the bootstrap's thread.
pub const HELPER_THREAD: &str = "onefix-asyncio";

/// At most this many tasks waiting for one another are followed up from a waiting task.
const MAX_PARENTS: usize = 8;

pub use onefix_model::TASK_TID_BASE;

/// Decides whether a task's await chain (outermost first) parks it for want of work (a queue,
/// an event, an `accept`): knowledge the diagnosis keeps as data, passed in by the caller.
pub type ParksFn = Box<dyn Fn(&[Frame]) -> bool + Send>;

/// One task in a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSnap {
    /// `id()` of the task object and its name: together they name it across snapshots.
    pub id: u64,
    pub name: String,
    pub state: TaskState,
    /// Coroutine frames, outermost first.
    pub chain: Vec<Frame>,
    /// Ids of the tasks it awaits (directly or through gather): their stacks continue its own.
    pub children: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Running when the snapshot was taken: the snapshot does not show a wait.
    Running,
    /// Suspended, waiting for other tasks (gather, TaskGroup, asyncio.wait, a task awaited).
    Joining,
    /// Suspended on something else: I/O, a timer, a lock, a queue.
    Waiting,
}

/// Every task of one process at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC, in microseconds.
    pub mono_us: u64,
    /// Tasks by the native id of the thread running their loop.
    pub loops: HashMap<u64, Vec<TaskSnap>>,
}

/// What the merge did, for the notes of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Loop samples found waiting in the selector.
    pub loop_waits: u64,
    /// ... charged to the one outstanding await.
    pub charged: u64,
    /// ... left to the loop because two or more awaits overlapped.
    pub overlapped: u64,
    /// ... left to the loop because no task was waiting on anything but other tasks or work.
    pub nothing_outstanding: u64,
    /// ... left to the loop because no snapshot of the moment was at hand.
    pub no_snapshot: u64,
    /// Lines of the channel that could not be read (a snapshot lost while onefix was behind).
    pub bad_lines: u64,
}

/// One thread's stack at a tick, as the sampler read it.
#[derive(Clone, Copy, Debug)]
pub struct ThreadSample<'a> {
    pub pid: u32,
    pub tid: u64,
    /// Root first.
    pub frames: &'a [Frame],
    /// On a CPU or runnable.
    pub active: bool,
}

/// Turns task snapshots into samples; independent of where the snapshots come from.
pub struct TaskMerge {
    parks: ParksFn,
    /// A snapshot older than this at a tick is not used.
    max_age_us: u64,
    latest: HashMap<u32, Snapshot>,
    pending: HashMap<u32, (Snapshot, usize)>,
    /// The bootstrap's own thread, per process: its samples are left out.
    helpers: HashSet<(u32, u64)>,
    task_tids: HashMap<(u32, u64, String), u64>,
    pub stats: MergeStats,
    /// Things the bootstrap said about the target (unsupported version, uvloop).
    pub remarks: Vec<String>,
}

impl TaskMerge {
    pub fn new(rate_hz: f64, parks: ParksFn) -> TaskMerge {
        let interval_us = (1e6 / rate_hz.max(0.1)) as u64;
        TaskMerge {
            parks,
            max_age_us: interval_us + interval_us / 2 + 5_000,
            latest: HashMap::new(),
            pending: HashMap::new(),
            helpers: HashSet::new(),
            task_tids: HashMap::new(),
            stats: MergeStats::default(),
            remarks: Vec::new(),
        }
    }

    /// Reads one line of the bootstrap's channel (see `sitecustomize.py` for the format).
    pub fn ingest_line(&mut self, line: &str) {
        if self.parse_line(line).is_none() {
            self.stats.bad_lines += 1;
        }
    }

    fn parse_line(&mut self, line: &str) -> Option<()> {
        let fields: Vec<&str> = line.split('\t').collect();
        let pid: u32 = fields.get(1)?.parse().ok()?;
        match fields[0] {
            "S" if fields.len() == 5 => {
                let helper: u64 = fields[2].parse().ok()?;
                let secs: f64 = fields[3].parse().ok()?;
                let count: usize = fields[4].parse().ok()?;
                self.helpers.insert((pid, helper));
                let snap = Snapshot { mono_us: (secs * 1e6) as u64, loops: HashMap::new() };
                self.pending.insert(pid, (snap, count));
                self.commit_if_complete(pid);
            }
            "T" if fields.len() == 7 || fields.len() == 8 => {
                let tid: u64 = fields[2].parse().ok()?;
                let id: u64 = fields[3].parse().ok()?;
                let state = match fields[5] {
                    "r" => TaskState::Running,
                    "j" => TaskState::Joining,
                    "w" => TaskState::Waiting,
                    _ => return None,
                };
                let mut chain = Vec::new();
                for f in fields[6].split('\x1e').filter(|f| !f.is_empty()) {
                    let mut parts = f.split('\x1f');
                    let (name, file, line) = (parts.next()?, parts.next()?, parts.next()?);
                    chain.push(Frame::python(unescape(name), unescape(file), line.parse().ok()?));
                }
                let children = match fields.get(7) {
                    Some(list) => list.split(',').filter(|c| !c.is_empty()).map(|c| c.parse().ok()).collect::<Option<Vec<u64>>>()?,
                    None => Vec::new(),
                };
                let (snap, _) = self.pending.get_mut(&pid)?;
                snap.loops.entry(tid).or_default().push(TaskSnap { id, name: unescape(fields[4]), state, chain, children });
                self.commit_if_complete(pid);
            }
            "H" if fields.len() == 3 => {
                self.helpers.insert((pid, fields[2].parse().ok()?));
            }
            "U" if fields.len() == 3 => self.remark(format!(
                "asyncio await chains are not read on Python {}: onefix knows the task registries of CPython 3.11 to 3.13",
                fields[2]
            )),
            "V" => self.remark(
                "the program runs uvloop: its loop waits inside compiled code, so its waits stay charged to the loop, not to the awaits".to_owned(),
            ),
            _ => return None,
        }
        Some(())
    }

    fn remark(&mut self, text: String) {
        if !self.remarks.contains(&text) {
            self.remarks.push(text);
        }
    }

    fn commit_if_complete(&mut self, pid: u32) {
        let complete = self.pending.get(&pid).is_some_and(|(s, n)| s.loops.values().map(Vec::len).sum::<usize>() >= *n);
        if complete {
            let (snap, _) = self.pending.remove(&pid).unwrap();
            self.latest.insert(pid, snap);
        }
    }

    /// True for the bootstrap's own thread, whose samples say nothing about the program.
    pub fn is_helper(&self, pid: u32, tid: u64) -> bool {
        self.helpers.contains(&(pid, tid))
    }

    /// Takes a sample of one thread. When the thread is an
    /// event loop waiting in its selector with exactly one await outstanding, the sample is
    /// pushed onto that task's virtual thread and `true` returned; otherwise nothing is pushed
    /// and the caller adds the sample as usual.
    pub fn charge(&mut self, profile: &mut Profile, sample: &ThreadSample, now_mono_us: u64, time_us: u64) -> bool {
        let ThreadSample { pid, tid, frames, active } = *sample;
        if active || !waits_in_selector(frames) {
            return false;
        }
        let Some(snap) = self.latest.get(&pid) else { return false };
        let Some(tasks) = snap.loops.get(&tid) else { return false };
        self.stats.loop_waits += 1;
        let fresh = now_mono_us.abs_diff(snap.mono_us) <= self.max_age_us;
        if !fresh || tasks.iter().any(|t| t.state == TaskState::Running) {
            self.stats.no_snapshot += 1;
            return false;
        }
        let mut outstanding =
            tasks.iter().filter(|t| t.state == TaskState::Waiting && !t.chain.is_empty() && !(self.parks)(&t.chain));
        let (Some(task), None) = (outstanding.next(), outstanding.next()) else {
            let more = tasks
                .iter()
                .filter(|t| t.state == TaskState::Waiting && !t.chain.is_empty() && !(self.parks)(&t.chain))
                .count();
            if more == 0 {
                self.stats.nothing_outstanding += 1;
            } else {
                self.stats.overlapped += 1;
            }
            return false;
        };
        self.stats.charged += 1;
        let key = (pid, task.id, task.name.clone());
        let next_tid = TASK_TID_BASE + self.task_tids.len() as u64;
        let vtid = *self.task_tids.entry(key).or_insert(next_tid);
        let thread = profile.intern_thread(pid, vtid, Some(&format!("task {}", task.name)));
        // The tasks that wait for this one, outermost first: their chains lead to it.
        let mut parents: Vec<&TaskSnap> = Vec::new();
        let mut child = task.id;
        while parents.len() < MAX_PARENTS {
            let Some(parent) =
                tasks.iter().find(|t| t.children.contains(&child) && !parents.iter().any(|p| p.id == t.id))
            else {
                break;
            };
            parents.push(parent);
            child = parent.id;
        }
        parents.reverse();
        let mut stack = None;
        let chains = parents.iter().flat_map(|p| p.chain.iter()).chain(task.chain.iter());
        for f in loop_prefix(frames).iter().chain(chains) {
            let id = profile.intern_frame(f.clone());
            stack = Some(profile.intern_stack_node(stack, id));
        }
        profile.push_sample(Sample { time_us, thread, stack, state: ThreadState::new(false, false), weight: 1 });
        true
    }

    /// One sentence on what the merge did, when it had anything to do.
    pub fn summary(&self) -> Option<String> {
        let s = &self.stats;
        if s.loop_waits == 0 {
            return None;
        }
        let pct = |n: u64| n as f64 * 100.0 / s.loop_waits as f64;
        Some(format!(
            "asyncio: of the event loop's waits, {:.0}% were charged to the one await outstanding, {:.0}% overlapped two or more awaits (left to the loop), {:.0}% had nothing outstanding, {:.0}% fell between the program's reports of its awaits (none recent enough to charge them to)",
            pct(s.charged),
            pct(s.overlapped),
            pct(s.nothing_outstanding),
            pct(s.no_snapshot)
        ))
    }
}

/// The innermost frame is the selector of an event loop, waiting for events.
fn waits_in_selector(frames: &[Frame]) -> bool {
    frames.last().is_some_and(|f| f.kind == FrameKind::Python && f.file.ends_with("/selectors.py"))
}

/// The loop thread's frames that lead to the loop, without the loop's own iteration and
/// selector: the root of every task's stack, so a task's wait shows under the line that runs
/// the loop (`asyncio.run(main())`).
fn loop_prefix(frames: &[Frame]) -> &[Frame] {
    let end = frames
        .iter()
        .position(|f| named(&f.function, "_run_once") && f.file.ends_with("/base_events.py"))
        .or_else(|| frames.iter().position(|f| f.file.ends_with("/selectors.py")))
        .unwrap_or(frames.len());
    &frames[..end]
}

/// `function` is `name` or a method called `name` (`BaseEventLoop._run_once`): CPython 3.11+
/// reports qualified names.
pub fn named(function: &str, name: &str) -> bool {
    function == name || function.strip_suffix(name).is_some_and(|rest| rest.ends_with('.'))
}

fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The bootstrap takes at most this many snapshots a second, whatever the sampling rate: each
/// one holds the target's GIL while it walks the tasks.
pub const MAX_SNAPSHOT_HZ: f64 = 100.0;

/// The FIFO the bootstrap writes into, and the directory holding both; removed on drop.
pub struct AsyncioChannel {
    dir: PathBuf,
    fifo: std::fs::File,
    buf: Vec<u8>,
    rate_hz: f64,
}

impl AsyncioChannel {
    /// Makes a private directory with the bootstrap and the FIFO, and opens the FIFO's read end
    /// (non-blocking, so that a target that never writes costs nothing).
    pub fn create(rate_hz: f64) -> std::io::Result<AsyncioChannel> {
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("onefix-asyncio-{}-{stamp}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let made = (|| {
            std::fs::write(dir.join("sitecustomize.py"), BOOTSTRAP)?;
            let path = dir.join("tasks.fifo");
            let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
            // SAFETY: mkfifo on a NUL-terminated path in our own fresh directory.
            if unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path)
        })();
        match made {
            Ok(fifo) => Ok(AsyncioChannel { dir, fifo, buf: Vec::new(), rate_hz: rate_hz.min(MAX_SNAPSHOT_HZ) }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Environment for the target: the bootstrap first on `PYTHONPATH`, the FIFO and the rate.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut path = self.dir.display().to_string();
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path = format!("{path}:{}", old.to_string_lossy());
        }
        vec![
            ("PYTHONPATH".to_owned(), path),
            ("ONEFIX_ASYNCIO".to_owned(), self.fifo_path().display().to_string()),
            ("ONEFIX_ASYNCIO_HZ".to_owned(), format!("{}", self.rate_hz)),
        ]
    }

    /// Snapshots a second the bootstrap is asked for.
    pub fn snapshot_hz(&self) -> f64 {
        self.rate_hz
    }

    pub fn fifo_path(&self) -> PathBuf {
        self.dir.join("tasks.fifo")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Feeds every complete line that has arrived to `merge`.
    pub fn drain_into(&mut self, merge: &mut TaskMerge) {
        let mut chunk = [0u8; 65536];
        loop {
            match self.fifo.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let Some(end) = self.buf.iter().rposition(|&b| b == b'\n') else { return };
        let complete: Vec<u8> = self.buf.drain(..=end).collect();
        for line in String::from_utf8_lossy(&complete).lines() {
            merge.ingest_line(line);
        }
    }
}

impl Drop for AsyncioChannel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads task snapshots from the bootstrap and merges them into the samples.
pub struct AsyncioTasks {
    pub channel: AsyncioChannel,
    pub merge: TaskMerge,
}

/// CLOCK_MONOTONIC now, in microseconds: the clock of Python's `time.monotonic()`.
pub fn monotonic_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests;
