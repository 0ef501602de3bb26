//! `onefix record`: start or attach, sample until the end, save, diagnose, report.

use std::io::{BufReader, BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::asyncio::{AsyncioChannel, AsyncioTasks, TaskMerge};
use onefix_collect::kept::KeptChild;
use onefix_collect::{process, record, CollectError, PythonOptions, PythonSampler, Sampler, Schedule, StopReason};
use onefix_model::recording::{read_recording, RecordingWriter};
use onefix_model::{Language, Meta, Mode, Profile, Target, TargetExit, WeightUnit};
use onefix_native::{NativeOptions, NativeSampler};
use onefix_report::signal_name;

use crate::cli::RecordArgs;
use crate::cmd::outputs;

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

pub fn run(args: RecordArgs) -> Result<ExitCode> {
    if args.pid.is_none() && args.command.is_empty() {
        bail!("nothing to record: give a command after `--` (onefix record -- python3 app.py) or a process with --pid");
    }
    if args.memory {
        return crate::cmd::memory::run(args);
    }
    let mode: Mode = args.mode.into();
    let load = load_plan(&args)?;
    // Every output is checked, and the recording's file made, before anything starts, so an
    // unwritable path costs the target nothing.
    let load_json = args.load.as_ref().and_then(|l| l.0.json.as_deref());
    let plan =
        outputs::plan_record(args.output.as_deref(), args.no_save, || default_output(&args), &args.outputs, load_json)?;
    let outputs::RecordPlan { mut recording, outputs: planned, load_json } = plan;

    catch_interrupts();
    recording.open_stream().map_err(|e| anyhow::anyhow!("cannot write the recording: {e}"))?;
    // On failure the partial recording, which holds nothing yet, goes with `recording`.
    let started_target = start_target(&args, mode)?;
    let StartedTarget { mut sampler, pid, spawned, language, runtime_version, interval_us, tick_hz } = started_target;

    let cwd = process::cwd(pid);
    // A native child is held before its exec here: name it by its command, not /proc.
    let exe = if spawned { args.command[0].clone() } else { process::exe(pid) };
    let argv = if spawned { Some(args.command.clone()) } else { process::cmdline(pid) };
    let user_code = if args.outputs.user_code.is_empty() {
        match language {
            Language::Python => outputs::default_user_dirs(cwd.as_deref(), argv.as_deref().unwrap_or(&[])),
            Language::Native => outputs::default_native_user_dirs(cwd.as_deref(), pid),
        }
    } else {
        args.outputs
            .user_code
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).display().to_string())
            .collect()
    };
    let meta = Meta {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        target: Target { argv: if spawned { argv } else { None }, pid, language: Some(language), cwd, runtime_version },
        mode,
        rate_hz: args.rate,
        weight_unit: WeightUnit::Samples { interval_us },
        start_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        duration_s: 0.0,
        user_code,
        exit: None,
        stats: Default::default(),
        native: args.native || language == Language::Native,
    };
    let mut profile = Profile::new(meta);
    let shown = recording_name(&recording);
    let mut writer = RecordingWriter::new(BufWriter::new(&mut recording), &profile.meta)
        .with_context(|| format!("cannot write the recording to {shown}"))?;
    // The machine's CPUs bound what a fix can gain: the work that remains runs on them.
    let machine = serde_json::to_vec(&outputs::Machine::this()).unwrap_or_default();
    profile.attachments.insert(outputs::MACHINE_ATTACHMENT.to_owned(), machine.clone());
    writer
        .write_attachment(outputs::MACHINE_ATTACHMENT, &machine)
        .with_context(|| format!("cannot write the recording to {shown}"))?;

    let schedule =
        Schedule { rate_hz: tick_hz, duration: args.duration, flush_every: Duration::from_secs(1), seed: args.seed };
    let progress = !args.outputs.quiet && std::io::stderr().is_terminal();
    let mut driven = None;
    if let Some((cfg, addr)) = load {
        if let Err(e) = onefix_load::wait_until_listening(addr, SERVER_START_LIMIT, || !process::is_running(pid)) {
            sampler.stop(&mut profile, 0, !process::is_running(pid), pid);
            bail!("cannot drive the load: {e}");
        }
        driven = Some(DrivenLoad::start(cfg));
    }
    // With a load, sampling lasts exactly as long as the load does.
    let stop = driven.as_ref().map_or(&INTERRUPTED, |d| &*d.finished);
    let started = Instant::now();
    // On a terminal, a sampler wrapper follows what each tick adds for the progress line.
    let watch = progress.then(|| {
        let user = outputs::user_code(&profile, &args.outputs);
        std::rc::Rc::new(std::cell::RefCell::new(crate::cmd::progress::Progress::new(user, mode)))
    });
    let mut watched;
    let sampling: &mut dyn onefix_collect::Sampler = match &watch {
        Some(w) => {
            watched = crate::cmd::progress::Watched { inner: sampler.as_sampler(), progress: w.clone() };
            &mut watched
        }
        None => sampler.as_sampler(),
    };
    let outcome = record(sampling, &mut profile, Some(&mut writer), &schedule, stop, |p| {
        if let Some(w) = &watch {
            let mut w = w.borrow_mut();
            w.flushed = true;
            eprint!("\r{}\x1b[K", w.line(p, started.elapsed()));
        }
    });
    if progress {
        eprintln!();
    }
    let load_result = driven.map(DrivenLoad::finish);
    let elapsed_us = started.elapsed().as_micros() as u64;
    // Only now, with sampling stopped, is a child we started stopped if need be and reaped
    // (see onefix_collect::process).
    profile.meta.exit = Some(sampler.stop(&mut profile, elapsed_us, outcome.reason == StopReason::TargetExited, pid));
    for warning in sampler.warnings() {
        eprintln!("onefix: {warning}");
    }
    let mut asyncio_notes = sampler.sampling_notes();
    asyncio_notes.extend(sampler.asyncio_notes(mode));
    drop(sampler);

    let load_result = match load_result {
        Some(Ok(result)) => {
            if outcome.write_error.is_none() {
                // The load's result travels with the recording, for `report` and `compare`.
                let json = serde_json::to_vec(&result).unwrap_or_default();
                // Also in memory, for the outputs written from this run (the HTML report).
                profile.attachments.insert(LOAD_ATTACHMENT.to_owned(), json.clone());
                if let Err(e) = writer.write_attachment(LOAD_ATTACHMENT, &json) {
                    eprintln!("onefix: could not add the load's result to the recording ({e})");
                }
            }
            Some(result)
        }
        Some(Err(e)) => {
            eprintln!("onefix: the load did not run: {e}");
            None
        }
        None => None,
    };
    // The samples are in the recording's file, batch by batch; read them back for the report.
    // Whatever the file could not take (disk full) is still in memory and is added to what it
    // holds.
    let written = match outcome.write_error {
        Some(e) => {
            drop(writer);
            Err(e)
        }
        None => writer.finish(&mut profile).map(drop),
    };
    let unwritten = match &written {
        Ok(()) => Vec::new(),
        Err(_) => profile.take_samples(),
    };
    let on_disk = read_recording(BufReader::new(recording.reader())).ok();
    // The file's tables are a prefix of the in-memory ones (same interning order), so its
    // samples refer to the same frames, stacks and threads.
    profile.samples = on_disk.map(|l| l.profile.samples).unwrap_or_default();
    profile.samples.extend(unwritten);
    if profile.sample_count() == 0 {
        // The file holds metadata alone: nothing worth keeping (it is removed with `recording`).
        bail!("{}", no_sample_sentence(&profile.meta.exit, elapsed_us));
    }
    // Where the recording ends up: in place when whole, else what fit, under its own name.
    let saved_at = match written {
        Ok(()) => match recording.persist() {
            Ok(at) => Ok(at),
            Err(e) => Err(format!("could not put the recording in place at {shown} ({e})")),
        },
        Err(e) => Err(format!("the recording stopped being written ({e})")),
    };
    let saved_at = saved_at.map_err(|why| {
        let kept = recording.keep();
        match &kept {
            Some(p) => eprintln!(
                "onefix: {why}; what was written until then is kept in {} (render it with `onefix report {}`); {shown} was left as it was",
                p.display(),
                p.display()
            ),
            None => eprintln!("onefix: {why}; the report below is whole, from memory"),
        }
        kept
    });
    // Said only of a recording that holds samples: with none, the one sentence is that.
    if language == Language::Native && executable_has_no_symbols(&profile, &exe) {
        eprintln!(
            "onefix: {exe} has no symbols or line tables (it was stripped): its own frames show as addresses and no line of it can be named; rebuild it with -g, or keep its debug file, to see lines"
        );
    }
    let mut diagnosis = outputs::run_diagnosis(&profile, mode, &args.outputs);
    diagnosis.notes.extend(asyncio_notes);
    let rerender = match &saved_at {
        Ok(Some(p))
            if recording.dest.as_ref().is_some_and(|d| !matches!(d.dest, crate::output::Dest::Stream { .. })) =>
        {
            Some(p.clone())
        }
        Err(Some(p)) => Some(p.clone()),
        _ => None,
    };
    // An output that failed at the end (disk full) is said, with where the recording is to
    // render it again; the run still recorded, so the exit is 1, not 2.
    let outputs_failed = match outputs::write_all(&profile, &diagnosis, mode, planned, true) {
        Ok(()) => false,
        Err(e) => {
            match &rerender {
                Some(p) => eprintln!(
                    "onefix: {e}; the recording is kept in {} (render it again with `onefix report {} ...`)",
                    p.display(),
                    p.display()
                ),
                None => eprintln!("onefix: {e}"),
            }
            true
        }
    };
    if let (Some(result), Some(_)) = (&load_result, &args.load) {
        println!("\nthe load, while the server was profiled:");
        crate::cmd::load::emit(result, load_json)?;
        if let Some(note) = time_outside_the_server(&diagnosis, result) {
            println!("  note: {note}");
        }
    }
    // Ctrl-C in a terminal reaches the target too (same process group): a target ended by the
    // SIGINT that also ended the recording did what was asked.
    let asked_to_stop = INTERRUPTED.load(Ordering::Relaxed);
    let crashed = match profile.meta.exit {
        Some(TargetExit::Signal(sig))
            if outcome.reason == StopReason::TargetExited && !asked_to_stop && sig != libc::SIGINT =>
        {
            Some(sig)
        }
        _ => None,
    };
    // A program that failed before any of its own lines was sampled (a syntax error, an
    // import error, a missing argument) has nothing to profile: say that, not "no finding".
    if let (Some(TargetExit::Code(code)), StopReason::TargetExited) = (&profile.meta.exit, outcome.reason) {
        if *code != 0 && diagnosis.hot_lines.is_empty() {
            let name = argv_name(&args.command);
            eprintln!(
                "onefix: {name} exited with status {code} after {:.2} s, before a sample landed in your code (its own messages are above)",
                elapsed_us as f64 / 1e6
            );
            return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE));
        }
    }
    if let Some(sig) = crashed {
        // The target's crash is not onefix's, but the run did not end as asked: say so, with
        // where what was recorded until then lies, and exit non-zero for scripts.
        let kept = match &rerender {
            Some(p) => format!(
                "; what was recorded until then is saved to {} (render it again with `onefix report {}`)",
                p.display(),
                p.display()
            ),
            None => String::new(),
        };
        eprintln!("onefix: the target was killed by {} after {:.1} s{kept}", signal_name(sig), elapsed_us as f64 / 1e6);
        return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE));
    }
    match saved_at {
        // The sentence about the unwritten recording or output was printed above.
        Err(_) => return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE)),
        _ if outputs_failed => return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE)),
        Ok(Some(p)) if !args.outputs.quiet => match &rerender {
            Some(_) => eprintln!(
                "onefix: recording saved to {} (render it again with `onefix report {}`)",
                p.display(),
                p.display()
            ),
            None => eprintln!("onefix: the recording was written to {}", p.display()),
        },
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// The command as people typed it, for messages: `python3 app.py`, or the pid attached to.
fn argv_name(command: &[String]) -> String {
    if command.is_empty() {
        return "the target".into();
    }
    command.iter().take(2).cloned().collect::<Vec<_>>().join(" ")
}

/// The recording's destination in words, for messages.
fn recording_name(recording: &crate::output::RecordingFile) -> String {
    match &recording.dest {
        Some(d) => d.shown.display().to_string(),
        None => "memory (--no-save)".to_owned(),
    }
}

/// Exit status when a recording was made but did not end as asked: the target crashed, or the
/// recording file could not be written whole (disk full). 2 is kept for "nothing recorded".
const RECORDED_BUT_INCOMPLETE: u8 = 1;

/// Whether the target's own executable appears in the stacks only as addresses: stripped of its
/// symbol table and debug information, so nothing of it can be named.
fn executable_has_no_symbols(profile: &Profile, exe: &str) -> bool {
    let Some(name) = std::path::Path::new(exe).file_name().and_then(|n| n.to_str()) else { return false };
    let is_exe = |module: &str| std::path::Path::new(module).file_name().and_then(|n| n.to_str()) == Some(name);
    let mut own = profile.frames().iter().filter(|f| is_exe(&f.module)).peekable();
    own.peek().is_some() && own.all(|f| f.file.is_empty() && f.function.starts_with("0x"))
}

/// Why no sample was taken, in one sentence: a target that ended, or one that never ran.
fn no_sample_sentence(exit: &Option<TargetExit>, elapsed_us: u64) -> String {
    match exit {
        Some(TargetExit::StillRunning) => format!(
            "no sample was taken in {:.1} s: the target is running but did not run on a CPU or switch threads while it was watched (it was idle); nothing was saved",
            elapsed_us as f64 / 1e6
        ),
        _ => format!("no sample was taken: the target exited before the first read{}; nothing was saved", exit_note(exit)),
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
    fn asyncio_notes(&self, mode: Mode) -> Vec<String> {
        match self {
            TargetSampler::Python { sampler, .. } if mode == Mode::Wall => sampler.asyncio_notes(),
            _ => Vec::new(),
        }
    }

    /// Processes that exec'd while they were sampled.
    fn sampling_notes(&self) -> Vec<String> {
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
}

/// Starts the command or attaches to the pid, with the sampler its kind of program needs:
/// native programs (ELF, not an interpreter) through perf_event, Python through py-spy.
pub(crate) fn start_target(args: &RecordArgs, mode: Mode) -> Result<StartedTarget> {
    let native = match args.pid {
        Some(pid) => {
            if !process::exists(pid) {
                return Err(CollectError::NoSuchProcess(pid).into());
            }
            onefix_native::is_native_pid(pid)
        }
        None => onefix_native::is_native_command(&args.command[0]),
    };
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
            language: Language::Native,
            runtime_version: None,
            interval_us,
            tick_hz: NATIVE_DRAIN_HZ,
        });
    }

    // In wall mode, a program we start gets the asyncio bootstrap (see onefix_collect::asyncio).
    let asyncio_channel = match (args.pid, mode) {
        (None, Mode::Wall) => AsyncioChannel::create(args.rate)
            .map_err(|e| eprintln!("onefix: asyncio await chains are off: cannot make their channel ({e})"))
            .ok(),
        _ => None,
    };
    let mut child: Option<KeptChild> = None;
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
            child = Some(c);
            if let Some(channel) = &asyncio_channel {
                crate::cmd::janitor::watch(pid, &[channel.dir()]);
            }
            pid
        }
    };
    let opts = PythonOptions { native: args.native, gil_only: args.gil, subprocesses: args.subprocesses };
    let patience = if child.is_some() { Duration::from_secs(10) } else { Duration::from_secs(2) };
    let mut sampler = PythonSampler::attach(pid, opts, patience).map_err(|e| attach_failed(e, child.as_mut()))?;
    if let Some(channel) = asyncio_channel {
        let kb = onefix_diagnose::KnowledgeBase::builtin();
        let merge = TaskMerge::new(channel.snapshot_hz(), Box::new(move |chain| kb.parks_chain(chain)));
        sampler.set_asyncio(AsyncioTasks { channel, merge });
    }
    let runtime_version = Some(sampler.version.clone());
    Ok(StartedTarget {
        spawned: child.is_some(),
        sampler: TargetSampler::Python { sampler, child },
        pid,
        language: Language::Python,
        runtime_version,
        interval_us: (1e6 / args.rate).round() as u64,
        tick_hz: args.rate,
    })
}

/// When requests take much longer than the server works on each, the time is not in the
/// server's code, and its profile cannot show where it goes: say so, with the figures.
pub(crate) fn time_outside_the_server(
    d: &onefix_diagnose::Diagnosis,
    load: &onefix_load::LoadResult,
) -> Option<String> {
    let secs_per_weight = d.seconds_per_weight?;
    if load.completed == 0 {
        return None;
    }
    let busy_ms = d.busy_weight as f64 * secs_per_weight * 1e3 / load.completed as f64;
    let service_ms = load.service_time_ms.p50;
    (service_ms >= 5.0 && service_ms >= 5.0 * busy_ms).then(|| {
        format!(
            "the server's threads were busy {busy_ms:.2} ms per request, but the median request took {service_ms:.1} ms from \
             its send: most of the time is outside the server's code (the network stack, e.g. a response written in \
             pieces waiting on Nagle and delayed ACKs; a proxy; or the client)"
        )
    })
}

/// The load of `--load` and the address it goes to. Everything wrong with a load is said here,
/// before a server is started for it.
pub(crate) fn load_plan(args: &RecordArgs) -> Result<Option<(onefix_load::LoadConfig, std::net::SocketAddr)>> {
    let Some(spec) = &args.load else { return Ok(None) };
    let cfg = crate::cmd::load::config(&spec.0)?;
    let addr = onefix_load::target_addr(&cfg).map_err(|e| anyhow::anyhow!("in the load: {e}"))?;
    Ok(Some((cfg, addr)))
}

/// How long a started server may take before its port answers, under `--load`.
pub(crate) const SERVER_START_LIMIT: Duration = Duration::from_secs(30);
/// The name of the load's JSON result among a recording's attachments.
pub const LOAD_ATTACHMENT: &str = "load";

/// The load of `record --load`, running on its own thread while the server is sampled.
pub(crate) struct DrivenLoad {
    /// Raised when the load has ended, by itself or because it was stopped.
    pub(crate) finished: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<onefix_load::LoadResult, onefix_load::LoadError>>,
}

impl DrivenLoad {
    pub(crate) fn start(cfg: onefix_load::LoadConfig) -> DrivenLoad {
        let stop = LOAD_STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
        let finished = Arc::new(AtomicBool::new(false));
        let (stop2, finished2) = (stop.clone(), finished.clone());
        let thread = std::thread::spawn(move || {
            let result = onefix_load::run(&cfg, stop2, &mut |_| {});
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
const NATIVE_DRAIN_HZ: f64 = 100.0;

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

fn exit_of(status: ExitStatus) -> TargetExit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => TargetExit::Code(code),
        (None, Some(sig)) => TargetExit::Signal(sig),
        _ => TargetExit::Unknown,
    }
}

fn describe_exit(exit: &TargetExit) -> String {
    match exit {
        TargetExit::Code(c) => format!("exit status {c}"),
        TargetExit::Signal(s) => format!("killed by {}", signal_name(*s)),
        TargetExit::StillRunning => "still running".into(),
        TargetExit::Unknown => "status unknown".into(),
    }
}

fn exit_note(exit: &Option<TargetExit>) -> String {
    exit.as_ref().map(|e| format!(" ({})", describe_exit(e))).unwrap_or_default()
}
