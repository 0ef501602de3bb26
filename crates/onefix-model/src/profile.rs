use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Index into [`Profile::frames`].
pub type FrameId = u32;
/// Index into the stack prefix tree ([`Profile::stack_parent`], [`Profile::stack_frame`]).
pub type StackId = u32;
/// Index into [`Profile::threads`].
pub type ThreadId = u32;

/// Where a frame comes from; decides how it is symbolized and how the diagnosis sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FrameKind {
    Python,
    Native,
    Kernel,
}

/// One frame of a call stack, as the target sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub kind: FrameKind,
    /// Function name (Python `co_name`, demangled native symbol, or `0x…` when unknown).
    pub function: String,
    /// Source file as the target sees it; empty when unknown.
    pub file: String,
    /// 1-based source line; 0 when unknown.
    pub line: u32,
    /// Shared object or executable for native frames; empty for Python frames.
    pub module: String,
}

impl Frame {
    pub fn python(function: impl Into<String>, file: impl Into<String>, line: u32) -> Frame {
        Frame { kind: FrameKind::Python, function: function.into(), file: file.into(), line, module: String::new() }
    }

    pub fn native(function: impl Into<String>, module: impl Into<String>) -> Frame {
        Frame {
            kind: FrameKind::Native,
            function: function.into(),
            file: String::new(),
            line: 0,
            module: module.into(),
        }
    }

    /// Whether a thread's stack may start at this frame. A Python stack starts at a module's top
    /// level or in a thread or process bootstrap; one whose outermost frame is any other Python
    /// function was read while the target changed it (a torn read), so its caller is unknown.
    /// Native frames are always accepted: their roots vary by runtime.
    pub fn can_start_stack(&self) -> bool {
        self.kind != FrameKind::Python || python_frame_can_start_stack(&self.function, &self.file)
    }

    /// Python's import machinery (`importlib._bootstrap`), which runs a module's top level
    /// once per process: a line under it is start-up, however often a short run saw it.
    pub fn is_import_machinery(&self) -> bool {
        self.kind == FrameKind::Python
            && (self.file.starts_with("<frozen importlib._bootstrap")
                || self.file.ends_with("/importlib/_bootstrap.py")
                || self.file.ends_with("/importlib/_bootstrap_external.py"))
    }

    /// `function (file:line)` with the file shortened to its last component, as profilers
    /// print frames.
    pub fn label(&self) -> String {
        if self.file.is_empty() {
            if self.module.is_empty() {
                self.function.clone()
            } else {
                let base = crate::fmt::file_name(&self.module);
                format!("{} ({})", self.function, base)
            }
        } else {
            let base = crate::fmt::file_name(&self.file);
            format!("{} ({}:{})", self.function, base, self.line)
        }
    }
}

/// The leaf the native sampler adds to a thread blocked reading a connection its process
/// accepted: a server waiting for its client's next request (idle in the knowledge base).
pub const INBOUND_WAIT_FRAME: &str = "[waiting for the next request on an accepted connection]";

/// The leaf a sampler adds to a thread blocked only on listening sockets (in `accept`, or in a
/// `select`, `poll` or epoll wait over them): a server's worker waiting for a connection.
pub const CONNECTION_WAIT_FRAME: &str = "[waiting for a connection on a listening socket]";

/// The leaf a sampler adds to a thread in a `select`, `poll` or epoll wait over no socket, only
/// pipes and event or signal descriptors: waiting to be woken by another process or a signal.
/// Idle where no user line waits (a supervisor); a user line's own wait stays its cost.
pub const WAKE_UP_WAIT_FRAME: &str = "[waiting for a wake-up: pipes or signals, no socket]";

/// Whether a native frame is where a thread's stack begins (the program's entry, a thread's
/// start routine, a goroutine's base). A native stack whose outermost frame is none of these was
/// cut short by the unwinder: a frame larger than the stack bytes copied, or code without
/// unwind information.
pub fn native_frame_can_start_stack(function: &str) -> bool {
    // Go switches to the system stack (g0) in mcall, systemstack, morestack and asmcgocall: the
    // unwinder rightly stops there.
    const ROOTS: [&str; 14] = [
        "_start",
        "__libc_start_main",
        "__libc_start_call_main",
        "start_thread",
        "clone",
        "__clone",
        "thread_start",
        "runtime.goexit",
        "runtime.rt0_go",
        "runtime.mstart",
        "runtime.mcall",
        "runtime.systemstack",
        "runtime.morestack",
        "runtime.asmcgocall",
    ];
    let base = function.strip_suffix(".abi0").unwrap_or(function);
    // Variants: __libc_start_main_impl, clone3, __clone_internal, runtime.mstart0.
    ROOTS.iter().any(|r| {
        base.strip_prefix(r).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with('_') || rest.starts_with(|c: char| c.is_ascii_digit())
        })
    }) || base.ends_with("::thread_start")
        || base.starts_with("runtime/cgo")
}

/// [`Frame::can_start_stack`] for a Python frame given by its function and file, for callers
/// that hold a collector's frame and should not build a [`Frame`] to ask (the sampling path).
pub fn python_frame_can_start_stack(function: &str, file: &str) -> bool {
    const BOOTSTRAPS: [&str; 5] = ["/threading.py", "<frozen runpy>", "/runpy.py", "/_pytest/", "/multiprocessing/"];
    function == "<module>" || BOOTSTRAPS.iter().any(|b| file.contains(b))
}

/// What the sampled thread was doing at the sample, as bit flags so that states combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ThreadState(pub u8);

impl ThreadState {
    /// On a CPU, or runnable (not blocked in a system call or waiting on a lock).
    pub const ACTIVE: u8 = 1;
    /// Holding the interpreter's global lock (Python).
    pub const GIL: u8 = 2;
    /// Memory profiles: the sample is the free of a sampled allocation (same stack, same
    /// weight), not an allocation; retained bytes are allocations minus frees.
    pub const FREED: u8 = 4;
    /// Blocked in a futex wait, as the kernel said (`/proc/TID/syscall`): a lock, a condition
    /// variable, or the GIL. Read for Python threads that wait while another holds the GIL,
    /// to tell a thread queuing for the GIL from one waiting for I/O at the same line.
    pub const FUTEX: u8 = 8;
    /// The kernel's count of the thread's runs on a CPU
    /// (`/proc/PID/task/TID/schedstat`) was read with this sample and with the thread's sample
    /// before it, so whether it ran in between is known ([`ThreadState::SAME_WAIT`]).
    pub const RUNS_READ: u8 = 16;
    /// With [`ThreadState::RUNS_READ`]: the thread has not run since its previous sample, so
    /// this is the same wait going on, not a new one. Splits back-to-back waits at one line
    /// (ten 100 ms calls in series) into the calls they are, which the stack alone cannot.
    pub const SAME_WAIT: u8 = 32;

    pub fn new(active: bool, gil: bool) -> ThreadState {
        ThreadState((active as u8 * Self::ACTIVE) | (gil as u8 * Self::GIL))
    }
    pub fn active(self) -> bool {
        self.0 & Self::ACTIVE != 0
    }
    pub fn gil(self) -> bool {
        self.0 & Self::GIL != 0
    }
    pub fn freed(self) -> bool {
        self.0 & Self::FREED != 0
    }
    pub fn futex(self) -> bool {
        self.0 & Self::FUTEX != 0
    }
    pub fn with_futex(self, futex: bool) -> ThreadState {
        ThreadState(self.0 | (futex as u8 * Self::FUTEX))
    }
    /// `same_wait`: `None` when the thread's runs were not read (or not at its previous
    /// sample), else whether it has not run since.
    pub fn with_same_wait(self, same_wait: Option<bool>) -> ThreadState {
        match same_wait {
            None => self,
            Some(same) => ThreadState(self.0 | Self::RUNS_READ | (same as u8 * Self::SAME_WAIT)),
        }
    }
    /// Whether this sample continues the wait of the thread's previous one: `None` when not read.
    pub fn same_wait(self) -> Option<bool> {
        (self.0 & Self::RUNS_READ != 0).then_some(self.0 & Self::SAME_WAIT != 0)
    }
    pub fn name(self) -> &'static str {
        match (self.active(), self.gil()) {
            (true, true) => "running+gil",
            (true, false) => "running",
            (false, true) => "idle+gil",
            (false, false) => "idle",
        }
    }
}

/// One observation of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Microseconds since the start of the recording.
    pub time_us: u64,
    pub thread: ThreadId,
    /// Leaf of the stack in the prefix tree; `None` for a thread with no frames.
    pub stack: Option<StackId>,
    pub state: ThreadState,
    /// In [`Meta::weight_unit`] units: one per sampling interval for time profiles.
    pub weight: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub pid: u32,
    pub tid: u64,
    pub name: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Native,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Native => "native",
        }
    }
}

/// Wall: every thread at every tick, running or waiting. Cpu: only threads on a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Wall,
    Cpu,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Wall => "wall",
            Mode::Cpu => "cpu",
        }
    }
    /// Whether a sample in this state carries weight in this mode.
    pub fn counts(self, state: ThreadState) -> bool {
        match self {
            Mode::Wall => true,
            Mode::Cpu => state.active(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum WeightUnit {
    /// Each unit of weight is one sampling interval of this many microseconds (nominal).
    Samples {
        interval_us: u64,
    },
    Bytes,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The command onefix started, or `None` when it attached to a running process.
    pub argv: Option<Vec<String>>,
    pub pid: u32,
    pub language: Option<Language>,
    /// The target's working directory when recording began.
    pub cwd: Option<String>,
    /// Interpreter or runtime version, when known (e.g. "3.11.7").
    pub runtime_version: Option<String>,
}

/// How the target ended, when onefix saw it end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetExit {
    Code(i32),
    Signal(i32),
    /// The target was still running when recording stopped (attach, duration, Ctrl-C).
    StillRunning,
    /// It ended but its status could not be read (not our child).
    Unknown,
}

/// Counters of the sampling itself, so a report can say how trustworthy it is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingStats {
    /// Ticks at which the sampler tried to read the target.
    pub ticks: u64,
    /// Reads that failed (torn reads of a running process, a thread exiting mid-read).
    pub errors: u64,
    /// Ticks that started late because the previous read overran its interval.
    pub late: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub tool_version: String,
    pub target: Target,
    pub mode: Mode,
    pub rate_hz: f64,
    pub weight_unit: WeightUnit,
    /// Milliseconds since the Unix epoch when recording began.
    pub start_unix_ms: u64,
    pub duration_s: f64,
    /// Directories holding the user's own code; empty means "decide from the target".
    pub user_code: Vec<String>,
    pub exit: Option<TargetExit>,
    pub stats: SamplingStats,
    /// Native frames merged into Python stacks.
    pub native: bool,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            tool_version: String::new(),
            target: Target::default(),
            mode: Mode::Wall,
            rate_hz: 100.0,
            weight_unit: WeightUnit::Samples { interval_us: 10_000 },
            start_unix_ms: 0,
            duration_s: 0.0,
            user_code: Vec::new(),
            exit: None,
            stats: SamplingStats::default(),
            native: false,
        }
    }
}

/// A recording: everything a report or a diagnosis needs, and nothing about how it was taken.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub meta: Meta,
    frames: Vec<Frame>,
    frame_index: HashMap<Frame, FrameId>,
    /// Stack prefix tree: entry `i` is the stack whose leaf is `stack_frame[i]` and whose
    /// caller stack is `stack_parent[i]`.
    stack_parent: Vec<Option<StackId>>,
    stack_frame: Vec<FrameId>,
    stack_index: HashMap<(Option<StackId>, FrameId), StackId>,
    threads: Vec<ThreadInfo>,
    thread_index: HashMap<(u32, u64), ThreadId>,
    pub samples: Vec<Sample>,
    /// Named results recorded with the samples (e.g. `load`: the JSON result of the load that
    /// drove the target), kept as bytes so the model depends on no producer.
    pub attachments: std::collections::BTreeMap<String, Vec<u8>>,
    /// Index in `samples` of each thread's latest sample, for [`Profile::push_sample`].
    latest: HashMap<ThreadId, usize>,
}

/// Virtual thread ids start far above any Linux tid (at most 2^22). A waiting Go goroutine's
/// samples (read from the runtime: no OS thread runs it then) have ids from here...
pub const GOROUTINE_TID_BASE: u64 = 1 << 32;
/// ...and an asyncio task's samples, moved off its event loop's thread (the one OS thread they
/// ran on), from here.
pub const TASK_TID_BASE: u64 = 1 << 40;

impl ThreadInfo {
    /// Whether the thread is a virtual one (an asyncio task, a waiting goroutine) rather than
    /// an OS thread.
    pub fn is_virtual(&self) -> bool {
        self.tid >= GOROUTINE_TID_BASE
    }

    /// Whether the thread is a goroutine seen waiting: its running time is on OS threads.
    pub fn is_goroutine(&self) -> bool {
        (GOROUTINE_TID_BASE..TASK_TID_BASE).contains(&self.tid)
    }
}

/// Consecutive samples of a thread with the same stack and state within this span are kept
/// as one, with their weights added: a steady thread costs memory per span, not per tick.
pub const MERGE_SPAN_US: u64 = 100_000;

impl Profile {
    pub fn new(meta: Meta) -> Profile {
        Profile { meta, ..Profile::default() }
    }

    /// Moves every path under `from` to the same place under `to` (frames' files, the user's
    /// code, the working directory): a recording read on another machine or checkout, whose
    /// sources lie elsewhere.
    pub fn relocate(&mut self, from: &str, to: &str) {
        let moved = |p: &str| match p.strip_prefix(from) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => Some(format!("{to}{rest}")),
            _ => None,
        };
        for frame in &mut self.frames {
            if let Some(p) = moved(&frame.file) {
                frame.file = p;
            }
        }
        self.frame_index = self.frames.iter().enumerate().map(|(i, f)| (f.clone(), i as FrameId)).collect();
        for dir in &mut self.meta.user_code {
            if let Some(p) = moved(dir) {
                *dir = p;
            }
        }
        if let Some(p) = self.meta.target.cwd.as_deref().and_then(moved) {
            self.meta.target.cwd = Some(p);
        }
    }

    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        if let Some(&id) = self.frame_index.get(&frame) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(frame.clone());
        self.frame_index.insert(frame, id);
        id
    }

    /// Interns a stack given root first and returns its leaf, or `None` for an empty stack.
    pub fn intern_stack<I: IntoIterator<Item = FrameId>>(&mut self, root_first: I) -> Option<StackId> {
        let mut parent = None;
        for frame in root_first {
            parent = Some(self.intern_stack_node(parent, frame));
        }
        parent
    }

    pub fn intern_stack_node(&mut self, parent: Option<StackId>, frame: FrameId) -> StackId {
        if let Some(&id) = self.stack_index.get(&(parent, frame)) {
            return id;
        }
        let id = self.stack_frame.len() as StackId;
        self.stack_parent.push(parent);
        self.stack_frame.push(frame);
        self.stack_index.insert((parent, frame), id);
        id
    }

    /// Appends a sample, folding it into the thread's previous one when the stack and state are
    /// the same and both fall in the same [`MERGE_SPAN_US`] span.
    pub fn push_sample(&mut self, sample: Sample) {
        if let Some(&i) = self.latest.get(&sample.thread) {
            let prev = &mut self.samples[i];
            if prev.stack == sample.stack
                && prev.state == sample.state
                && prev.time_us / MERGE_SPAN_US == sample.time_us / MERGE_SPAN_US
            {
                prev.weight = prev.weight.saturating_add(sample.weight);
                return;
            }
        }
        self.latest.insert(sample.thread, self.samples.len());
        self.samples.push(sample);
    }

    /// Removes and returns the samples held, keeping the tables: what a recording does once a
    /// batch is on disk, so that memory does not grow with the length of the recording.
    pub fn take_samples(&mut self) -> Vec<Sample> {
        self.latest.clear();
        std::mem::take(&mut self.samples)
    }

    /// Observations taken: for time profiles the sum of the weights (merged samples count
    /// once per tick), otherwise the number of samples.
    pub fn sample_count(&self) -> u64 {
        match self.meta.weight_unit {
            WeightUnit::Samples { .. } => self.samples.iter().map(|s| s.weight as u64).sum(),
            WeightUnit::Bytes => self.samples.len() as u64,
        }
    }

    /// Finds or adds a thread; a name seen later fills in a missing one.
    pub fn intern_thread(&mut self, pid: u32, tid: u64, name: Option<&str>) -> ThreadId {
        if let Some(&id) = self.thread_index.get(&(pid, tid)) {
            let info = &mut self.threads[id as usize];
            if info.name.is_none() {
                info.name = name.map(str::to_owned);
            }
            return id;
        }
        let id = self.threads.len() as ThreadId;
        self.threads.push(ThreadInfo { pid, tid, name: name.map(str::to_owned) });
        self.thread_index.insert((pid, tid), id);
        id
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }
    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }
    pub fn threads(&self) -> &[ThreadInfo] {
        &self.threads
    }
    pub fn thread(&self, id: ThreadId) -> &ThreadInfo {
        &self.threads[id as usize]
    }
    pub fn stack_count(&self) -> usize {
        self.stack_frame.len()
    }
    pub fn stack_frame(&self, stack: StackId) -> FrameId {
        self.stack_frame[stack as usize]
    }
    pub fn stack_parent(&self, stack: StackId) -> Option<StackId> {
        self.stack_parent[stack as usize]
    }

    /// Frames of a stack from the leaf (innermost) to the root.
    pub fn stack_frames_leaf_first(&self, stack: Option<StackId>) -> StackWalk<'_> {
        StackWalk { profile: self, next: stack }
    }

    /// Frames of a stack from the root to the leaf.
    pub fn stack_frames_root_first(&self, stack: Option<StackId>) -> Vec<FrameId> {
        let mut frames: Vec<FrameId> = self.stack_frames_leaf_first(stack).collect();
        frames.reverse();
        frames
    }

    /// Total weight of the samples that count in `mode`.
    pub fn total_weight(&self, mode: Mode) -> u64 {
        self.samples.iter().filter(|s| mode.counts(s.state)).map(|s| s.weight as u64).sum()
    }

    /// Seconds that one unit of weight stands for, for time profiles.
    pub fn seconds_per_weight(&self) -> Option<f64> {
        match self.meta.weight_unit {
            WeightUnit::Samples { interval_us } => Some(interval_us as f64 / 1e6),
            WeightUnit::Bytes => None,
        }
    }

    /// Lengths of the tables, used by the recording writer to emit only what is new.
    pub(crate) fn table_lens(&self) -> (usize, usize, usize) {
        (self.frames.len(), self.stack_frame.len(), self.threads.len())
    }
    pub(crate) fn stacks_from(&self, start: usize) -> Vec<(Option<StackId>, FrameId)> {
        self.stack_parent[start..].iter().copied().zip(self.stack_frame[start..].iter().copied()).collect()
    }
    pub(crate) fn replace_thread_name(&mut self, id: ThreadId, name: Option<String>) {
        if let Some(info) = self.threads.get_mut(id as usize) {
            info.name = name;
        }
    }
}

pub struct StackWalk<'a> {
    profile: &'a Profile,
    next: Option<StackId>,
}

impl Iterator for StackWalk<'_> {
    type Item = FrameId;
    fn next(&mut self) -> Option<FrameId> {
        let id = self.next?;
        self.next = self.profile.stack_parent(id);
        Some(self.profile.stack_frame(id))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn native_stack_roots_are_known_and_a_cut_short_stack_is_not_one() {
        for root in [
            "_start",
            "__libc_start_main_impl",
            "start_thread",
            "runtime.systemstack",
            "runtime/cgo(.text)",
            "clone3",
            "__clone_internal",
            "runtime.goexit.abi0",
            "runtime.mstart0",
            "std::sys::pal::unix::thread::Thread::new::thread_start",
        ] {
            assert!(native_frame_can_start_stack(root), "{root}");
        }
        for inner in ["build_trtable", "main", "0x7f00aa", "runtime.mallocgc", "restart_syscall"] {
            assert!(!native_frame_can_start_stack(inner), "{inner}");
        }
    }
    use super::*;

    #[test]
    fn a_python_stack_starts_at_a_module_or_a_bootstrap_only() {
        assert!(Frame::python("<module>", "/srv/app.py", 3).can_start_stack());
        assert!(Frame::python("_bootstrap", "/usr/lib/python3.11/threading.py", 995).can_start_stack());
        assert!(Frame::python("_run_module_as_main", "<frozen runpy>", 198).can_start_stack());
        assert!(Frame::native("_start", "/usr/bin/python3.11").can_start_stack());
        assert!(!Frame::python("handle", "/srv/app.py", 40).can_start_stack());
        assert!(!Frame::python("model_json_schema", "/x/site-packages/pydantic/main.py", 3).can_start_stack());
    }

    #[test]
    fn stacks_share_prefixes_and_walk_both_ways() {
        let mut p = Profile::new(Meta::default());
        let a = p.intern_frame(Frame::python("main", "app.py", 1));
        let b = p.intern_frame(Frame::python("work", "app.py", 5));
        let c = p.intern_frame(Frame::python("idle", "app.py", 9));
        let ab = p.intern_stack([a, b]);
        let ac = p.intern_stack([a, c]);
        assert_ne!(ab, ac);
        assert_eq!(p.stack_count(), 3, "the root frame is shared");
        assert_eq!(p.intern_stack([a, b]), ab);
        assert_eq!(p.stack_frames_root_first(ab), vec![a, b]);
        assert_eq!(p.stack_frames_leaf_first(ac).collect::<Vec<_>>(), vec![c, a]);
        assert_eq!(p.intern_stack([]), None);
    }

    #[test]
    fn thread_names_fill_in_once() {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(1, 7, None);
        assert_eq!(p.intern_thread(1, 7, Some("worker")), t);
        assert_eq!(p.thread(t).name.as_deref(), Some("worker"));
        assert_eq!(p.intern_thread(1, 7, Some("other")), t);
        assert_eq!(p.thread(t).name.as_deref(), Some("worker"));
    }

    #[test]
    fn steady_samples_merge_within_a_span_only() {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(1, 1, None);
        let u = p.intern_thread(1, 2, None);
        let f = p.intern_frame(Frame::python("f", "a.py", 1));
        let s = p.intern_stack([f]);
        let at =
            |time_us, thread| Sample { time_us, thread, stack: s, state: ThreadState::new(true, false), weight: 1 };
        p.push_sample(at(0, t));
        p.push_sample(at(10_000, u));
        p.push_sample(at(20_000, t));
        p.push_sample(at(MERGE_SPAN_US + 1, t));
        p.push_sample(Sample { state: ThreadState::new(false, false), ..at(MERGE_SPAN_US + 2, t) });
        assert_eq!(p.samples.len(), 4, "{:?}", p.samples);
        assert_eq!(p.samples[0].weight, 2, "other threads' samples in between do not break a run");
        assert_eq!(p.sample_count(), 5);
        assert_eq!(p.take_samples().len(), 4);
        p.push_sample(at(MERGE_SPAN_US + 3, t));
        assert_eq!(p.samples.len(), 1, "nothing merges into samples already taken");
    }

    #[test]
    fn cpu_mode_counts_only_active_samples() {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(1, 1, None);
        for active in [true, false, false] {
            p.samples.push(Sample {
                time_us: 0,
                thread: t,
                stack: None,
                state: ThreadState::new(active, false),
                weight: 2,
            });
        }
        assert_eq!(p.total_weight(Mode::Wall), 6);
        assert_eq!(p.total_weight(Mode::Cpu), 2);
    }
}
