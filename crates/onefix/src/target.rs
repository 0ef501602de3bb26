//! The target of a recording: starting or attaching to it with the sampler its kind of program
//! needs, the signals that end a recording, stopping and reaping it, the load that drives it,
//! and the recording's default name. Shared by `record`, `record --memory` and `top`.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use onefix_collect::asyncio::{AsyncioChannel, AsyncioTasks, TaskMerge};
use onefix_collect::kept::KeptChild;
use onefix_collect::{process, CollectError, PythonOptions, PythonSampler, Sampler};
use onefix_model::{Language, Mode, Profile, TargetExit};
use onefix_native::{NativeOptions, NativeSampler};

use crate::cli::{LoadArgs, RecordArgs, TopArgs};
use anyhow::Context;
use onefix_load::{LoadConfig, RequestSpec};

pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Stops the load of `record --load`, if there is one.
static LOAD_STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
    crate::output::SIGNALS.fetch_add(1, Ordering::Relaxed);
    if let Some(stop) = LOAD_STOP.get() {
        stop.store(true, Ordering::Relaxed);
    }
}

/// Ctrl-C and SIGTERM end the recording with a full report instead of killing onefix.
pub(crate) fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// The sampler for the kind of program the target is, and what it brings with it. One lives
/// per run, so the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum TargetSampler {
    Python { sampler: PythonSampler, child: Option<KeptChild> },
    Native { sampler: NativeSampler, spawned: bool },
}

pub(crate) struct StartedTarget {
    pub(crate) sampler: TargetSampler,
    pub(crate) pid: u32,
    pub(crate) spawned: bool,
    /// When a Python program onefix started was started: the sampler attaches to it only once
    /// its interpreter is up, so its start-up is before the recording's time zero. (A native
    /// program is held before its exec until sampling starts.)
    pub(crate) started_at: Option<Instant>,
    pub(crate) language: Language,
    pub(crate) runtime_version: Option<String>,
    /// Microseconds one unit of weight stands for.
    pub(crate) interval_us: u64,
    /// How often the recording loop ticks: every sample for Python, a ring-buffer drain for
    /// native sampling (the kernel samples at the rate itself).
    pub(crate) tick_hz: f64,
}

impl TargetSampler {
    pub(crate) fn as_sampler(&mut self) -> &mut dyn Sampler {
        match self {
            TargetSampler::Python { sampler, .. } => sampler,
            TargetSampler::Native { sampler, .. } => sampler,
        }
    }

    /// Ends sampling; stops a child we started when it is still running, and reaps it.
    pub(crate) fn stop(&mut self, profile: &mut Profile, elapsed_us: u64, target_exited: bool, pid: u32) -> TargetExit {
        match self {
            TargetSampler::Python { child, sampler } => {
                // A thread that a paused read left attached would hold the target's exit.
                sampler.release_traced_threads();
                match child.as_mut() {
                    Some(c) => {
                        if !target_exited {
                            stop_child(c, || {
                                sampler.release_traced_threads();
                            });
                        }
                        wait_releasing(c, sampler).map(exit_of).unwrap_or(TargetExit::Unknown)
                    }
                    None if process::is_running(pid) => TargetExit::StillRunning,
                    None => TargetExit::Unknown,
                }
            }
            TargetSampler::Native { sampler, spawned } => {
                if !target_exited {
                    sampler.finish(profile, elapsed_us);
                    if *spawned {
                        interrupt_then_kill(pid, || matches!(process::state(pid), Some('Z') | None));
                    }
                }
                match sampler.reap() {
                    Some(exit) => exit,
                    None if process::is_running(pid) => TargetExit::StillRunning,
                    None => TargetExit::Unknown,
                }
            }
        }
    }

    /// What the recording could and could not show of asyncio tasks (wall mode only: CPU mode
    /// does not count waits).
    pub(crate) fn asyncio_notes(&self, mode: Mode) -> Vec<String> {
        match self {
            TargetSampler::Python { sampler, .. } if mode == Mode::Wall => sampler.asyncio_notes(),
            _ => Vec::new(),
        }
    }

    /// Processes that exec'd while they were sampled.
    pub(crate) fn sampling_notes(&self) -> Vec<String> {
        match self {
            TargetSampler::Python { sampler, .. } => sampler.sampling_notes(),
            TargetSampler::Native { .. } => Vec::new(),
        }
    }

    pub(crate) fn warnings(&self) -> Vec<String> {
        match self {
            TargetSampler::Python { .. } => Vec::new(),
            TargetSampler::Native { sampler, .. } => sampler.warnings(),
        }
    }

    /// Which thread ended each blocked interval, for a native recording whose kernel told.
    pub(crate) fn wakes(&self) -> Option<onefix_model::attachments::Wakes> {
        match self {
            TargetSampler::Python { .. } => None,
            TargetSampler::Native { sampler, .. } => sampler.wakes(),
        }
    }
}

/// Starts the command or attaches to the pid, with the sampler its kind of program needs:
/// native programs (ELF, not an interpreter) through perf_event, Python through py-spy.
/// What to sample and how, resolved once from a command's arguments (`record` or `top`).
pub(crate) struct TargetSpec {
    /// Attach to this process; else start `command`.
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub mode: Mode,
    pub rate: f64,
    /// Python: merge native frames (paused reads).
    pub native: bool,
    /// Python: only the thread holding the GIL.
    pub gil: bool,
    /// Python: sample child processes too (the default).
    pub subprocesses: bool,
    /// Native: bytes of stack copied per sample.
    pub stack_bytes: u32,
}

impl TargetSpec {
    pub(crate) fn of_record(args: &RecordArgs) -> TargetSpec {
        TargetSpec {
            pid: args.pid,
            command: args.command.clone(),
            mode: args.mode.into(),
            rate: args.rate,
            native: args.native,
            gil: args.gil,
            subprocesses: !args.no_subprocesses,
            stack_bytes: args.stack_bytes,
        }
    }

    /// `top` samples as `record` does by default, so that it sees what a recording would.
    pub(crate) fn of_top(args: &TopArgs) -> TargetSpec {
        TargetSpec {
            pid: args.pid,
            command: args.command.clone(),
            mode: args.mode.into(),
            rate: args.rate,
            native: false,
            gil: false,
            subprocesses: true,
            stack_bytes: 32 * 1024,
        }
    }
}

pub(crate) fn start_target(args: &TargetSpec) -> Result<StartedTarget> {
    let mode = args.mode;
    // The Python a launcher command runs (read once: it may read the `#!` lines of its words).
    let launched = if args.pid.is_none() { launched_python(&args.command) } else { None };
    let native = match args.pid {
        Some(pid) => {
            if !process::exists(pid) {
                return Err(CollectError::NoSuchProcess(pid).into());
            }
            match kind_of_process(pid) {
                ProcessKind::Foreign(found) => return Err(CollectError::ForeignRuntime(found).into()),
                ProcessKind::Python => false,
                ProcessKind::Native => true,
            }
        }
        None => {
            refuse_foreign_runtime(&args.command)?;
            // A shell or a wrapper (`sh -c 'cd app && python3 main.py'`, `unshare ... python3`)
            // is native itself, but what it runs is Python: the Python children are sampled.
            onefix_native::is_native_command(&args.command[0]) && launched.is_none()
        }
    };
    let launcher = launched.is_some();
    if native {
        let opts = NativeOptions {
            rate_hz: args.rate,
            off_cpu: mode == Mode::Wall,
            stack_bytes: args.stack_bytes,
            ..NativeOptions::default()
        };
        let (sampler, pid, spawned) = match args.pid {
            Some(pid) => (NativeSampler::attach(pid, &opts)?, pid, false),
            None => {
                let (s, pid) = NativeSampler::spawn(&args.command, &opts)?;
                (s, pid, true)
            }
        };
        let interval_us = sampler.interval_us();
        return Ok(StartedTarget {
            sampler: TargetSampler::Native { sampler, spawned },
            pid,
            spawned,
            started_at: None,
            language: Language::Native,
            runtime_version: None,
            interval_us,
            tick_hz: NATIVE_DRAIN_HZ,
        });
    }

    if args.pid.is_none() {
        refuse_unsupported_python(&args.command, launched.as_deref())?;
    }
    if launcher && !args.subprocesses {
        anyhow::bail!(
            "{} runs Python as its child, which --no-subprocesses leaves out: nothing would be sampled; drop --no-subprocesses, or run the Python command directly",
            args.command[0]
        );
    }
    // In wall mode, a program we start gets the asyncio bootstrap (see onefix_collect::asyncio).
    let asyncio_channel = match (args.pid, mode) {
        (None, Mode::Wall) => AsyncioChannel::create(args.rate)
            .map_err(|e| {
                crate::messages::say(format_args!("asyncio await chains are off: cannot make their channel ({e})"))
            })
            .ok(),
        _ => None,
    };
    let mut child: Option<KeptChild> = None;
    let mut started_at = None;
    let pid = match args.pid {
        Some(pid) => pid,
        None => {
            let mut command = Command::new(&args.command[0]);
            command.args(&args.command[1..]);
            if let Some(channel) = &asyncio_channel {
                command.envs(channel.env());
            }
            // Under a keeper, so that a paused read cannot take the command's exit status.
            let c = KeptChild::spawn(&mut command).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!("command not found: {}", args.command[0]),
                std::io::ErrorKind::PermissionDenied => {
                    anyhow::anyhow!("cannot run {}: permission denied", args.command[0])
                }
                _ => anyhow::anyhow!("cannot start {}: {e}", args.command[0]),
            })?;
            let pid = c.id();
            started_at = Some(Instant::now());
            child = Some(c);
            if let Some(channel) = &asyncio_channel {
                watch_temporary_dirs(pid, &[channel.dir()]);
            }
            pid
        }
    };
    let opts = PythonOptions { native: args.native, gil_only: args.gil, subprocesses: args.subprocesses };
    // An interpreter just started (by onefix, or a process still starting) may take a while
    // before its first stack can be read.
    let starting = child.is_some() || process::age(pid).is_some_and(|age| age < STILL_STARTING);
    let patience = if starting { Duration::from_secs(10) } else { Duration::from_secs(2) };
    let mut sampler = PythonSampler::attach(pid, opts, patience).map_err(|e| attach_failed(e, child.as_mut()))?;
    if let Some(channel) = asyncio_channel {
        let kb = onefix_diagnose::KnowledgeBase::builtin();
        let merge = TaskMerge::new(channel.snapshot_hz(), Box::new(move |chain| kb.parks_chain(chain)));
        sampler.set_asyncio(AsyncioTasks { channel, merge });
    }
    let runtime_version = Some(sampler.version.clone());
    Ok(StartedTarget {
        spawned: child.is_some(),
        started_at,
        sampler: TargetSampler::Python { sampler, child },
        pid,
        language: Language::Python,
        runtime_version,
        interval_us: (1e6 / args.rate).round() as u64,
        tick_hz: args.rate,
    })
}

/// What a running process is to onefix.
enum ProcessKind {
    Python,
    Native,
    /// A runtime onefix cannot read.
    Foreign(onefix_collect::runtime::Found),
}

/// How young a process is taken to be still starting: a launcher (a shell script, `env`, a
/// shim) that execs the interpreter has not done so yet, and what runs now is not what will.
const STILL_STARTING: Duration = Duration::from_secs(3);

/// What `pid` is. A process still starting that shows no interpreter yet (a native program,
/// so far) is looked at again until it does or is old enough to be sure: attached at once, a
/// service's launcher would be profiled as native for good (issue 35).
fn kind_of_process(pid: u32) -> ProcessKind {
    loop {
        if let Some(found) = onefix_collect::runtime::of_process(pid) {
            return ProcessKind::Foreign(found);
        }
        if !onefix_native::is_native_pid(pid) {
            return ProcessKind::Python;
        }
        let starting = process::age(pid).is_some_and(|age| age < STILL_STARTING);
        if !starting || !process::is_running(pid) || INTERRUPTED.load(Ordering::Relaxed) {
            return ProcessKind::Native;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A runtime onefix cannot read (`node app.js`, `java -jar`, a script whose `#!` names pypy)
/// is refused before it starts, in one sentence naming it and what to use meanwhile: sampled as
/// a native program, its frames would be its interpreter's and JIT's, and the advice that
/// follows native findings (symbols, --user-code) would be wrong.
fn refuse_foreign_runtime(command: &[String]) -> Result<()> {
    let Some(program) = command.first() else { return Ok(()) };
    // By the program's own name first (a wrapper script named `node`), then by what its `#!`
    // line runs.
    let found = [resolve_command(program), program_run(program)]
        .into_iter()
        .flatten()
        .find_map(|path| onefix_collect::runtime::of_executable(&path));
    match found {
        Some(found) => anyhow::bail!("{found}; the program was not started"),
        None => Ok(()),
    }
}

/// The Pythons onefix reads, oldest and newest (as `CollectError::UnsupportedPython` says).
const SUPPORTED_PYTHON: ((u32, u32), (u32, u32)) = ((3, 8), (3, 13));

/// A Python onefix cannot read is refused before it starts, in one sentence naming its version:
/// started, it would run with onefix's bootstrap on its path (in a syntax it may not know,
/// writing an error into the program's own stderr) and no sample could be taken. The version
/// is asked of the interpreter itself, with its site and environment ignored, so that nothing
/// of the program or of onefix runs.
fn refuse_unsupported_python(command: &[String], launched: Option<&Path>) -> Result<()> {
    let Some(interpreter) =
        command.first().and_then(|program| python_interpreter(program)).or_else(|| launched.map(Path::to_path_buf))
    else {
        return Ok(());
    };
    let Some((major, minor)) = python_version(&interpreter) else { return Ok(()) };
    let ((old_major, old_minor), (new_major, new_minor)) = SUPPORTED_PYTHON;
    if (major, minor) < (old_major, old_minor) || (major, minor) > (new_major, new_minor) {
        anyhow::bail!(
            "{} is Python {major}.{minor}, which onefix cannot read (it reads CPython {old_major}.{old_minor} to {new_major}.{new_minor}); the program was not started",
            interpreter.display()
        );
    }
    Ok(())
}

/// The Python interpreter that would run `program`: the program itself when its name says
/// Python (`python2.7`, `python3`), or the one its `#!` line names (`/usr/bin/env python2`).
fn python_interpreter(program: &str) -> Option<PathBuf> {
    let is_python = |path: &Path| path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python"));
    // By its own name first: a wrapper named python2.7 is that Python, whatever its `#!` says.
    resolve_command(program).filter(|p| is_python(p)).or_else(|| program_run(program).filter(|p| is_python(p)))
}

/// The executable that runs when `program` is run: the interpreter its `#!` line names
/// (through `/usr/bin/env`), else the program itself, as the command names it (a link keeps
/// its name).
fn program_run(program: &str) -> Option<PathBuf> {
    let resolved = resolve_command(program)?;
    // The first line only, bounded: a `#!` line is short.
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut std::fs::File::open(&resolved).ok()?, &mut head).ok()?;
    let Some(rest) = head[..n].strip_prefix(b"#!") else { return Some(resolved) };
    let line = String::from_utf8_lossy(rest.split(|&b| b == b'\n').next()?).into_owned();
    let mut words = line.split_whitespace();
    let first = Path::new(words.next()?);
    let interpreter = if first.file_name().is_some_and(|n| n == "env") {
        words.find(|w| !w.starts_with('-'))?.to_owned()
    } else {
        first.display().to_string()
    };
    resolve_command(&interpreter)
}

/// Programs that run another program rather than do the work: shells (which may stay in place
/// as the parent, `sh -c 'cd x && python3 app.py'`) and wrappers that exec their argument.
const LAUNCHERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "ash",
    "busybox",
    "env",
    "unshare",
    "nsenter",
    "nice",
    "nohup",
    "timeout",
    "setsid",
    "stdbuf",
    "taskset",
    "chrt",
    "ionice",
    "runuser",
    "sudo",
    "su",
    "setpriv",
    "time",
    "tini",
    "dumb-init",
    "xvfb-run",
    "prlimit",
    "flock",
    "chroot",
];

/// The Python interpreter a launcher command runs, when it names one: a word of its arguments
/// (of a shell's `-c` script, split as the shell would) that is a Python interpreter or a script
/// whose `#!` line names one. `None` for any other command.
fn launched_python(command: &[String]) -> Option<PathBuf> {
    let program = command.first()?;
    let base = Path::new(program).file_name()?.to_string_lossy().into_owned();
    if !LAUNCHERS.contains(&base.as_str()) {
        return None;
    }
    let mut words: Vec<String> = Vec::new();
    let mut args = command[1..].iter();
    while let Some(a) = args.next() {
        if a == "-c" || (a.starts_with('-') && !a.starts_with("--") && a.ends_with('c') && base.ends_with("sh")) {
            if let Some(script) = args.next() {
                words.extend(
                    shlex::split(script).unwrap_or_else(|| script.split_whitespace().map(str::to_owned).collect()),
                );
            }
        } else {
            words.push(a.clone());
        }
    }
    words.iter().filter(|w| !w.starts_with('-') && !w.contains('=')).take(64).find_map(|w| python_interpreter(w))
}

/// `program` as execvp would find it: a path as given, else the first match on `PATH`.
fn resolve_command(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// `(major, minor)` of a Python interpreter, asked of it with `-E -S` (no environment, no site,
/// so neither the program's nor onefix's code runs), within 10 s; `None` if it does not say.
fn python_version(interpreter: &Path) -> Option<(u32, u32)> {
    let mut child = Command::new(interpreter)
        .args(["-E", "-S", "-c", "import sys; sys.stdout.write('%d.%d' % sys.version_info[:2])"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(child.stdout.take()?, 64), &mut out).ok()?;
    let (major, minor) = out.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The load of `--load` and the address it goes to. Everything wrong with a load is said here,
/// before a server is started for it.
pub(crate) fn load_plan(args: &RecordArgs) -> Result<Option<(onefix_load::LoadConfig, std::net::SocketAddr)>> {
    let Some(spec) = &args.load else { return Ok(None) };
    let cfg = load_config(&spec.0)?;
    let addr = onefix_load::target_addr(&cfg).map_err(|e| anyhow::anyhow!("in the load: {e}"))?;
    Ok(Some((cfg, addr)))
}

/// How long a started server may take before its port answers, under `--load`.
pub(crate) const SERVER_START_LIMIT: Duration = Duration::from_secs(30);

/// The load of `record --load`, running on its own thread while the server is sampled.
pub(crate) struct DrivenLoad {
    /// Raised when the load has ended, by itself or because it was stopped.
    pub(crate) finished: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<onefix_load::LoadResult, onefix_load::LoadError>>,
}

impl DrivenLoad {
    /// Before an open-loop load, its requests' latency with no queue is measured (a few sent one
    /// at a time, before sampling starts): the floor the latency model of a server needs.
    /// `probe_server`: the server's process, whose CPU time per request is read over those
    /// requests; `None` measures nothing first (a memory recording has no use for it, and
    /// would track the requests' allocations).
    pub(crate) fn start(cfg: onefix_load::LoadConfig, probe_server: Option<u32>) -> DrivenLoad {
        let stop = LOAD_STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
        let unloaded = probe_server.filter(|_| cfg.rate.is_some()).and_then(|server| {
            let cpu_before = process::cpu_seconds(server);
            let mut unloaded = onefix_load::probe_unloaded(&cfg, stop.clone())?;
            if let (Some(before), Some(after)) = (cpu_before, process::cpu_seconds(server)) {
                // Fewer ticks than this are too coarse a count to split the latency with.
                const MIN_TICKS_S: f64 = 0.1;
                if after - before >= MIN_TICKS_S {
                    unloaded.server_cpu_ms = Some((after - before) * 1e3 / unloaded.completed as f64);
                }
            }
            Some(unloaded)
        });
        let finished = Arc::new(AtomicBool::new(false));
        let (stop2, finished2) = (stop.clone(), finished.clone());
        let thread = std::thread::spawn(move || {
            let result = onefix_load::run(&cfg, stop2, &mut |_| {}).map(|r| onefix_load::LoadResult { unloaded, ..r });
            finished2.store(true, Ordering::Relaxed);
            result
        });
        DrivenLoad { finished, stop, thread }
    }

    /// Stops the load if sampling ended first (the server exited, Ctrl-C), and gives its result.
    pub(crate) fn finish(self) -> Result<onefix_load::LoadResult, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("the load generator failed".into()),
        }
    }
}

/// Native samples are taken by the kernel; the loop only drains its buffers this often.
pub(crate) const NATIVE_DRAIN_HZ: f64 = 100.0;

pub(crate) fn default_output(args: &RecordArgs) -> PathBuf {
    let name = match args.pid {
        Some(pid) => format!("pid{pid}"),
        None => args
            .command
            .iter()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .or(args.command.first())
            .and_then(|a| std::path::Path::new(a).file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "target".into()),
    };
    let stamp = local_timestamp(SystemTime::now());
    // A name that is taken (two recordings in one second) gets a number: a default name never
    // replaces a file.
    (1..)
        .map(
            |n| {
                if n == 1 {
                    format!("onefix-{name}-{stamp}.onefix")
                } else {
                    format!("onefix-{name}-{stamp}-{n}.onefix")
                }
            },
        )
        .map(PathBuf::from)
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .expect("an unbounded range")
}

/// `2026-12-01T13-05-22` in local time: names that people can read and that sort by time.
fn local_timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm from a valid time_t.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Turns an attach failure into the sentence to print, stopping a child we started.
fn attach_failed(e: CollectError, child: Option<&mut KeptChild>) -> anyhow::Error {
    let Some(child) = child else { return e.into() };
    if let CollectError::ExitedEarly { .. } = e {
        let status = child.wait().ok().map(exit_of);
        return CollectError::ExitedEarly { status: status.map(|s| describe_exit(&s)) }.into();
    }
    stop_child(child, || {});
    let _ = child.wait();
    e.into()
}

/// Waits for a started Python target, letting go of any of its threads a paused read left
/// attached as they reach their exit.
fn wait_releasing(child: &mut KeptChild, sampler: &PythonSampler) -> std::io::Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        sampler.release_traced_threads();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asks a child we started to stop (SIGINT, as Ctrl-C would), then insists; `meanwhile` runs
/// while it is awaited (letting go of threads a paused read left attached).
fn stop_child(child: &mut KeptChild, meanwhile: impl Fn()) {
    let pid = child.id();
    interrupt_then_kill(pid, || {
        meanwhile();
        matches!(child.try_wait(), Ok(Some(_)))
    });
}

/// SIGINT, up to three seconds for `ended` to turn true, then SIGKILL.
pub(crate) fn interrupt_then_kill(pid: u32, ended: impl FnMut() -> bool) {
    interrupt_then_kill_after(pid, Duration::from_secs(3), ended)
}

/// SIGINT, up to `grace` for `ended` to turn true, then SIGKILL.
pub(crate) fn interrupt_then_kill_after(pid: u32, grace: Duration, mut ended: impl FnMut() -> bool) {
    // SAFETY: plain kill(2) on a process we started (or its keeper's child), which has not
    // been waited for by us: its pid is not yet free for reuse, bar the instant between its
    // keeper reaping it and exiting.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if ended() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

pub(crate) fn exit_of(status: ExitStatus) -> TargetExit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => TargetExit::Code(code),
        (None, Some(sig)) => TargetExit::Signal(sig),
        _ => TargetExit::Unknown,
    }
}

pub(crate) use onefix_model::fmt::exit_clause as describe_exit;

/// The load `onefix load` and `record --load` send, from their arguments.
pub fn load_config(args: &LoadArgs) -> Result<LoadConfig> {
    let body = match &args.body {
        Some(b) if b.starts_with('@') => {
            let path = &b[1..];
            Some(std::fs::read_to_string(path).with_context(|| format!("cannot read the body template {path}"))?)
        }
        other => other.clone(),
    };
    let duration = match (args.duration, args.max_requests) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    Ok(LoadConfig {
        request: RequestSpec {
            url: args.url.clone(),
            method: args.method.clone(),
            headers: args.headers.clone(),
            body,
            keep_alive: !args.new_connection_per_request,
            seed: args.seed,
        },
        rate: args.rate.0,
        duration,
        max_requests: args.max_requests,
        connections: args.connections as usize,
        streams: args.streams as usize,
        protocol: if args.http2 {
            Some(onefix_load::Protocol::Http2)
        } else if args.http1 {
            Some(onefix_load::Protocol::Http1)
        } else {
            None
        },
        tls: onefix_load::TlsOptions { cacert: args.cacert.clone(), insecure: args.insecure },
        threads: args.threads.unwrap_or(0) as usize,
        timeout: args.timeout,
        window: Duration::from_secs(1),
    })
}

/// Starts a janitor (`onefix janitor`, cmd/janitor.rs) for `dirs`, which onefix made, to be removed once onefix and `target` have
/// both ended. Best effort: without one, only a killed onefix leaves the directories behind.
pub fn watch_temporary_dirs(target: u32, dirs: &[&Path]) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, owned just below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let Ok(exe) = std::env::current_exe() else { return };
    let mut cmd = Command::new(exe);
    cmd.arg("janitor").arg("--target").arg(target.to_string()).args(dirs);
    // Its own process group: a terminal's Ctrl-C is for onefix and the target, not for it.
    cmd.stdin(Stdio::from(read_end)).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
    if cmd.spawn().is_ok() {
        // The write end stays open as long as onefix lives: its closing, by exit or by kill,
        // is what the janitor waits for.
        std::mem::forget(write_end);
    }
}
