//! `onefix record --memory`: start the command with the allocation agent, follow its RSS, then
//! diagnose retained and churned bytes by the user's line.

use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::process;
use onefix_diagnose::{diagnose_memory, Diagnosis, MemoryOptions as DiagnoseOptions};
use onefix_memory::{monotonic_ns, read_rss, MemoryOptions, MemoryTracker};
use onefix_model::recording::{read_recording, RecordingWriter};
use onefix_model::{Language, MemoryInfo, MemoryView, Meta, Mode, Profile, RssPoint, Target, TargetExit, WeightUnit};
use onefix_report::{write_json, JsonOptions};

use crate::cli::{MemoryViewArg, OutputArgs, RecordArgs};
use crate::cmd::outputs;
use crate::cmd::record::{
    catch_interrupts, default_output, interrupt_then_kill_after, load_plan, DrivenLoad, INTERRUPTED, LOAD_ATTACHMENT,
    SERVER_START_LIMIT,
};

/// How often what was sampled is written to the recording.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often the target's RSS is read.
const RSS_EVERY: Duration = Duration::from_millis(100);
/// How long a target asked to stop may take before it is killed: a program holding a large heap
/// takes seconds to free it at exit (a Python tracker took 1.5 s with 50,000 peers, and more than
/// 15 s with 250,000 on a loaded machine).
/// Points of the live-heap series kept with a memory recording.
const LIVE_POINTS: usize = 200;

const STOP_GRACE: Duration = Duration::from_secs(30);

pub fn run(args: RecordArgs) -> Result<ExitCode> {
    if args.pid.is_some() {
        bail!(
            "--memory cannot attach to a running process: the allocation agent is loaded with LD_PRELOAD when a program starts, so start it under onefix instead (onefix record --memory -- CMD)"
        );
    }
    match onefix_native::heap_kind(&args.command[0]) {
        Some(onefix_native::HeapKind::Go) => bail!(
            "{} is a Go program: the Go runtime maps and manages its own heap, which the allocation agent (it sees malloc) cannot see; use Go's heap profile (runtime/pprof or net/http/pprof), or onefix record without --memory for its time",
            args.command[0]
        ),
        Some(onefix_native::HeapKind::Static) => bail!(
            "{} is statically linked, so it never loads the allocation agent (LD_PRELOAD is read by the dynamic loader); link it dynamically to record its allocations",
            args.command[0]
        ),
        _ => {}
    }
    let load = load_plan(&args)?;
    // Every output is checked before the target starts.
    let load_json = args.load.as_ref().and_then(|l| l.0.json.as_deref());
    let plan =
        outputs::plan_record(args.output.as_deref(), args.no_save, || default_output(&args), &args.outputs, load_json)?;
    let outputs::RecordPlan { mut recording, outputs: planned, load_json } = plan;
    catch_interrupts();
    recording.open_stream().map_err(|e| anyhow::anyhow!("cannot write the recording: {e}"))?;

    let mut tracker = MemoryTracker::new(MemoryOptions { rate_bytes: args.memory_rate, python_malloc: true })?;
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    tracker.prepare(&mut cmd);
    let start_ns = monotonic_ns();
    let started = Instant::now();
    let start_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let child = cmd.spawn().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => anyhow::anyhow!("command not found: {}", args.command[0]),
        io::ErrorKind::PermissionDenied => anyhow::anyhow!("cannot run {}: permission denied", args.command[0]),
        _ => anyhow::anyhow!("cannot start {}: {e}", args.command[0]),
    })?;
    let pid = child.id();
    crate::cmd::janitor::watch(pid, &[tracker.agent_dir()]);
    // The child is reaped below with wait4 (for its peak RSS), not through `child`.
    drop(child);
    let cwd = process::cwd(pid);
    let native = onefix_native::is_native_command(&args.command[0]);
    let user_code: Vec<String> = if !args.outputs.user_code.is_empty() {
        args.outputs
            .user_code
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).display().to_string())
            .collect()
    } else if native {
        outputs::default_native_user_dirs(cwd.as_deref(), pid)
    } else {
        outputs::default_user_dirs(cwd.as_deref(), &args.command)
    };
    let meta = Meta {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        target: Target {
            argv: Some(args.command.clone()),
            pid,
            language: Some(if native { Language::Native } else { Language::Python }),
            cwd,
            runtime_version: None,
        },
        mode: Mode::Wall,
        rate_hz: 0.0,
        weight_unit: WeightUnit::Bytes,
        start_unix_ms,
        duration_s: 0.0,
        user_code,
        exit: None,
        stats: Default::default(),
        native,
    };
    // The recording is written as it goes, a batch a second, so that a killed onefix (an OOM
    // kill, a CI timeout) loses at most the last second; its samples are read back at the end
    // through a second handle on the same file.
    let shown =
        recording.dest.as_ref().map_or_else(|| "memory (--no-save)".to_owned(), |d| d.shown.display().to_string());
    let readback = recording.readback().with_context(|| format!("cannot write the recording to {shown}"))?;
    let mut writer = Some(
        RecordingWriter::new(BufWriter::new(&mut recording), &meta)
            .with_context(|| format!("cannot write the recording to {shown}"))?,
    );
    let mut write_error: Option<io::Error> = None;
    tracker.start(Profile::new(meta), start_ns);

    // With a load, the server is followed until the load ends (the heap it built while starting
    // is part of what it retains, so allocations are tracked from the start).
    let mut driven = None;
    if let Some((cfg, addr)) = load {
        if let Err(e) = onefix_load::wait_until_listening(addr, SERVER_START_LIMIT, || !process::is_running(pid)) {
            interrupt_then_kill_after(pid, STOP_GRACE, || reap(pid, false).is_some());
            let _ = tracker.finish();
            bail!("cannot drive the load: {e}");
        }
        driven = Some(DrivenLoad::start(cfg));
    }
    let (exit, rss, peak) = follow(pid, args.duration, started, driven.as_ref().map(|d| &*d.finished), &mut || {
        if let Some(w) = writer.as_mut() {
            if let Some(Err(e)) = tracker.with_profile(|p| w.write_batch(p)) {
                write_error = Some(e);
                writer = None;
            }
        }
    });
    let load_result = match driven.map(DrivenLoad::finish) {
        Some(Ok(result)) => Some(result),
        Some(Err(e)) => {
            eprintln!("onefix: the load did not run: {e}");
            None
        }
        None => None,
    };
    let (mut profile, mut info) = tracker.finish();
    // What the file took, then what is still in memory (all of it if the file failed).
    if let Some(w) = writer.as_mut() {
        if let Err(e) = w.write_batch(&mut profile) {
            write_error = Some(e);
            writer = None;
        }
    }
    let rest = profile.take_samples();
    profile.samples = read_recording(io::BufReader::new(crate::output::ReadAt::new(&readback)))
        .map(|l| l.profile.samples)
        .unwrap_or_default();
    profile.samples.extend(rest);
    profile.meta.duration_s = started.elapsed().as_secs_f64();
    profile.meta.exit = Some(exit);
    info.rss = rss;
    info.live = profile
        .only_processes(|pid| info.exited_children.binary_search(&pid).is_err())
        .live_bytes_over_time(LIVE_POINTS);
    info.peak_rss_bytes = peak;
    let user_pythonmalloc = std::env::var("PYTHONMALLOC").ok();
    info.python_malloc_by_onefix = user_pythonmalloc.is_none();
    info.python_malloc = user_pythonmalloc.or(Some("malloc".into()));
    if !info.python_frames {
        profile.meta.target.language = Some(Language::Native);
    }

    // What the target's RSS did travels with the recording, for `compare`.
    profile.attachments.insert(MEMORY_ATTACHMENT.to_owned(), serde_json::to_vec(&info).unwrap_or_default());
    if let Some(result) = &load_result {
        // The load's result travels with the recording, for `report` and `compare`.
        profile.attachments.insert(LOAD_ATTACHMENT.to_owned(), serde_json::to_vec(result).unwrap_or_default());
    }
    if info.sampled == 0 {
        // Nothing worth keeping: the partial recording goes with `recording`.
        bail!(
            "no allocation was sampled: the program allocated less than about {} bytes, or did not load the agent (a statically linked program, or one that clears LD_PRELOAD){}",
            args.memory_rate,
            exit_note(profile.meta.exit.as_ref())
        );
    }
    // The facts and the end: the samples are in the file already.
    let written = match (write_error, writer) {
        (Some(e), _) => Err(e),
        (None, Some(mut w)) => (|| {
            for (name, data) in &profile.attachments {
                w.write_attachment(name, data)?;
            }
            let samples = profile.take_samples();
            let end = w.finish(&mut profile).map(drop);
            profile.samples = samples;
            end
        })(),
        (None, None) => Ok(()),
    };
    let saved_at = written.and_then(|()| recording.persist()).map_err(|e| {
        match recording.keep() {
            Some(p) => eprintln!("onefix: could not write the recording {shown} ({e}); what was written is kept in {}, and {shown} was left as it was", p.display()),
            None => eprintln!("onefix: could not write the recording {shown} ({e})"),
        }
    });
    report(&profile, Some(&info), args.memory_view.memory_view, &args.outputs, planned, true)?;
    if let (Some(result), Some(_)) = (&load_result, &args.load) {
        println!("\nthe load, while the server was tracked:");
        crate::cmd::load::emit(result, load_json)?;
    }
    let streamed = recording.dest.as_ref().is_some_and(|d| matches!(d.dest, crate::output::Dest::Stream { .. }));
    match saved_at {
        Ok(Some(p)) if !args.outputs.quiet && !streamed => {
            eprintln!(
                "onefix: recording saved to {} (render it again with `onefix report {}`)",
                p.display(),
                p.display()
            )
        }
        Ok(Some(p)) if !args.outputs.quiet => eprintln!("onefix: the recording was written to {}", p.display()),
        Err(()) => return Ok(ExitCode::from(1)),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits for the target to end (or the duration, or Ctrl-C, then stops it), reading its RSS.
/// Returns how it ended, its RSS over time, and its peak RSS.
/// `stop` (the end of a load) also ends it.
fn follow(
    pid: u32,
    duration: Option<Duration>,
    started: Instant,
    stop: Option<&AtomicBool>,
    every_second: &mut dyn FnMut(),
) -> (TargetExit, Vec<RssPoint>, Option<u64>) {
    let mut rss = Vec::new();
    let mut last_flush = Instant::now();
    let mut peak = 0u64;
    let mut last_read: Option<Instant> = None;
    let mut ended = None;
    loop {
        if let Some(e) = reap(pid, false) {
            ended = Some(e);
            break;
        }
        if !matches!(last_read, Some(t) if t.elapsed() < RSS_EVERY) {
            last_read = Some(Instant::now());
            // A process between fork and exec (or a shell about to exec) reads as 0 kB.
            if let Some(m) = read_rss(pid).filter(|m| m.rss_bytes > 0) {
                rss.push(RssPoint { time_us: started.elapsed().as_micros() as u64, rss_bytes: m.rss_bytes });
                peak = peak.max(m.peak_rss_bytes);
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            last_flush = Instant::now();
            every_second();
        }
        if INTERRUPTED.load(Ordering::Relaxed)
            || duration.is_some_and(|d| started.elapsed() >= d)
            || stop.is_some_and(|s| s.load(Ordering::Relaxed))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (exit, maxrss) = match ended {
        Some(e) => e,
        None => {
            let mut reaped = None;
            interrupt_then_kill_after(pid, STOP_GRACE, || {
                reaped = reaped.take().or_else(|| reap(pid, false));
                reaped.is_some()
            });
            reaped.or_else(|| reap(pid, true)).unwrap_or((TargetExit::Unknown, 0))
        }
    };
    let peak = peak.max(maxrss);
    (exit, rss, (peak > 0).then_some(peak))
}

/// Reaps the child when it has ended (or waits for it): its exit and its peak RSS in bytes.
fn reap(pid: u32, block: bool) -> Option<(TargetExit, u64)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = if block { 0 } else { libc::WNOHANG };
    // SAFETY: wait4 on our own child, writing into the two locals.
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, flags, &mut usage) };
    if r != pid as libc::pid_t {
        return None;
    }
    let exit = if libc::WIFEXITED(status) {
        TargetExit::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        TargetExit::Signal(libc::WTERMSIG(status))
    } else {
        TargetExit::Unknown
    };
    Some((exit, usage.ru_maxrss.max(0) as u64 * 1024))
}

fn exit_note(exit: Option<&TargetExit>) -> String {
    match exit {
        Some(TargetExit::Code(c)) if *c != 0 => format!(" (it exited with status {c})"),
        Some(TargetExit::Signal(s)) => format!(" (it was killed by signal {s})"),
        _ => String::new(),
    }
}

/// Where recordings made before the facts were attached kept them: beside the file.
pub fn info_path(recording: &Path) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(".memory.json");
    PathBuf::from(name)
}

/// The name of the RSS and sampling facts among a memory recording's attachments.
pub const MEMORY_ATTACHMENT: &str = "memory";

/// The memory facts a recording carries (recordings made before they were attached have them
/// beside the file; see [`read_info`]).
pub fn info_of(profile: &Profile) -> Option<MemoryInfo> {
    profile.attachments.get(MEMORY_ATTACHMENT).and_then(|b| serde_json::from_slice(b).ok())
}

pub fn read_info(recording: &Path) -> Option<MemoryInfo> {
    let text = std::fs::read_to_string(info_path(recording)).ok()?;
    serde_json::from_str(&text).ok()
}

fn view_of(arg: MemoryViewArg) -> MemoryView {
    match arg {
        MemoryViewArg::Retained => MemoryView::Retained,
        MemoryViewArg::Allocated => MemoryView::Allocated,
    }
}

/// Diagnoses a memory recording and writes every output: the flame graph, speedscope and
/// folded stacks weigh the chosen view; the JSON report adds a `memory` object.
pub fn report(
    profile: &Profile,
    info: Option<&MemoryInfo>,
    view: MemoryViewArg,
    args: &OutputArgs,
    mut planned: outputs::Planned,
    complete: bool,
) -> Result<()> {
    let user = outputs::user_code(profile, args);
    // A child that exited took its heap with it: the target's heap is that of the processes
    // that lasted; the children are told apart in a note.
    let lasting;
    let profile = match info.filter(|i| !i.exited_children.is_empty()) {
        Some(i) => {
            lasting = profile.only_processes(|pid| i.exited_children.binary_search(&pid).is_err());
            &lasting
        }
        None => profile,
    };
    let mut diagnosis = diagnose_memory(profile, &user, &DiagnoseOptions::default());
    if let Some(info) = info {
        add_notes(&mut diagnosis, info);
    }
    let shown = profile.memory_view(view_of(view));
    if let Some(out) = planned.json.take() {
        let shown_at = out.shown.display().to_string();
        write_memory_json(out, &shown, &diagnosis, info, view, complete)
            .with_context(|| format!("could not write the JSON report to {shown_at}"))?;
    }
    outputs::write_all(&shown, &diagnosis, Mode::Wall, planned, complete)?;
    Ok(())
}

fn add_notes(d: &mut Diagnosis, info: &MemoryInfo) {
    if let Some(peak) = info.peak_rss_bytes {
        let (first, last) = (info.rss.first(), info.rss.last());
        let over = match (first, last) {
            (Some(a), Some(b)) if info.rss.len() > 1 => format!(
                "; RSS went from {} to {} over {:.1} s",
                mb(a.rss_bytes),
                mb(b.rss_bytes),
                (b.time_us - a.time_us) as f64 / 1e6
            ),
            _ => String::new(),
        };
        d.notes.insert(0, format!("peak RSS of the target: {}{over}", mb(peak)));
    }
    match (info.python_frames, info.python_malloc.as_deref()) {
        (true, Some("malloc")) if info.python_malloc_by_onefix => d.notes.push(
            "Python objects were tracked through PYTHONMALLOC=malloc, set by onefix (pymalloc's arenas hide small objects from the allocator; this costs the target about a third more CPU)"
                .into(),
        ),
        (true, Some(v)) if !v.starts_with("malloc") => d.notes.push(format!(
            "PYTHONMALLOC={v} was kept as you set it: objects of 512 bytes or less come from pymalloc's 1 MiB arenas, which are sampled as mmaps and charged to the line that needed a new arena; unset PYTHONMALLOC to see every object"
        )),
        _ => {}
    }
    if !info.exited_children.is_empty() {
        let n = info.exited_children.len();
        let largest = info.children_peak_bytes.iter().max().copied().unwrap_or(0);
        d.notes.push(format!(
            "{n} child process{} exited during the recording: each one's heap was its own and ended with it, so it is not counted above (the largest child heap peaked at {} sampled)",
            if n == 1 { "" } else { "es" },
            mb(largest)
        ));
    }
    if info.untracked > 0 {
        d.notes.push(format!(
            "{} sampled allocations could not be followed to their free: retained bytes are overestimated",
            info.untracked
        ));
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn write_memory_json(
    out: crate::output::Output,
    profile: &Profile,
    d: &Diagnosis,
    info: Option<&MemoryInfo>,
    view: MemoryViewArg,
    complete: bool,
) -> Result<()> {
    let mut buf = Vec::new();
    write_json(&mut buf, profile, d, &JsonOptions { complete })?;
    let mut value: serde_json::Value = serde_json::from_slice(&buf)?;
    let mut memory = serde_json::to_value(info.cloned().unwrap_or_default())?;
    memory["view"] = serde_json::Value::String(match view {
        MemoryViewArg::Retained => "retained".into(),
        MemoryViewArg::Allocated => "allocated".into(),
    });
    value["memory"] = memory;
    out.write_with(|w| serde_json::to_writer_pretty(w, &value).map_err(io::Error::from))?;
    Ok(())
}
