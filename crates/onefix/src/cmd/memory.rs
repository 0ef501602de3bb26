//! `onefix record --memory`: start the command with the allocation agent, follow its RSS, then
//! diagnose retained and churned bytes by the user's line.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::process;
use onefix_diagnose::{diagnose_memory, Diagnosis, MemoryOptions as DiagnoseOptions};
use onefix_memory::{monotonic_ns, read_rss, MemoryOptions, MemoryTracker};
use onefix_model::recording::RecordingWriter;
use onefix_model::{Language, MemoryInfo, MemoryView, Meta, Mode, Profile, RssPoint, Target, TargetExit, WeightUnit};
use onefix_report::{write_json, JsonOptions};

use crate::cli::{MemoryViewArg, OutputArgs, RecordArgs};
use crate::cmd::outputs;
use crate::cmd::record::{
    catch_interrupts, default_output, interrupt_then_kill_after, load_plan, DrivenLoad, INTERRUPTED, LOAD_ATTACHMENT, SERVER_START_LIMIT,
};

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
    let output = args.output.clone().unwrap_or_else(|| default_output(&args));
    let file = File::create(&output).with_context(|| format!("cannot write the recording to {}", output.display()))?;
    catch_interrupts();

    let mut tracker = MemoryTracker::new(MemoryOptions { rate_bytes: args.memory_rate, python_malloc: true })?;
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    tracker.prepare(&mut cmd);
    let start_ns = monotonic_ns();
    let started = Instant::now();
    let start_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let child = cmd.spawn().map_err(|e| {
        let _ = std::fs::remove_file(&output);
        match e.kind() {
            io::ErrorKind::NotFound => anyhow::anyhow!("command not found: {}", args.command[0]),
            io::ErrorKind::PermissionDenied => anyhow::anyhow!("cannot run {}: permission denied", args.command[0]),
            _ => anyhow::anyhow!("cannot start {}: {e}", args.command[0]),
        }
    })?;
    let pid = child.id();
    // The child is reaped below with wait4 (for its peak RSS), not through `child`.
    drop(child);
    let cwd = process::cwd(pid);
    let native = onefix_native::is_native_command(&args.command[0]);
    let user_code: Vec<String> = if !args.outputs.user_code.is_empty() {
        args.outputs.user_code.iter().map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).display().to_string()).collect()
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
    tracker.start(Profile::new(meta), start_ns);

    // With a load, the server is followed until the load ends (the heap it built while starting
    // is part of what it retains, so allocations are tracked from the start).
    let mut driven = None;
    if let Some((cfg, addr)) = load {
        if let Err(e) = onefix_load::wait_until_listening(addr, SERVER_START_LIMIT, || !process::is_running(pid)) {
            interrupt_then_kill_after(pid, STOP_GRACE, || reap(pid, false).is_some());
            let _ = tracker.finish();
            let _ = std::fs::remove_file(&output);
            bail!("cannot drive the load: {e}");
        }
        driven = Some(DrivenLoad::start(cfg));
    }
    let (exit, rss, peak) = follow(pid, args.duration, started, driven.as_ref().map(|d| &*d.finished));
    let load_result = match driven.map(DrivenLoad::finish) {
        Some(Ok(result)) => Some(result),
        Some(Err(e)) => {
            eprintln!("onefix: the load did not run: {e}");
            None
        }
        None => None,
    };
    let (mut profile, mut info) = tracker.finish();
    profile.meta.duration_s = started.elapsed().as_secs_f64();
    profile.meta.exit = Some(exit);
    info.rss = rss;
    info.live = profile.live_bytes_over_time(LIVE_POINTS);
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
    let mut saved = profile.clone();
    let written = RecordingWriter::new(BufWriter::new(file), &saved.meta).and_then(|mut w| {
        w.write_batch(&mut saved)?;
        for (name, data) in &profile.attachments {
            w.write_attachment(name, data)?;
        }
        w.finish(&mut saved).map(|_| ())
    });
    let saved_ok = match written {
        Ok(()) => write_info(&info_path(&output), &info).is_ok(),
        Err(e) => {
            eprintln!("onefix: could not write the recording {} ({e})", output.display());
            false
        }
    };
    if info.sampled == 0 {
        bail!(
            "no allocation was sampled: the program allocated less than about {} bytes, or did not load the agent (a statically linked program, or one that clears LD_PRELOAD){}",
            args.memory_rate,
            exit_note(profile.meta.exit.as_ref())
        );
    }
    report(&profile, Some(&info), args.memory_view.memory_view, &args.outputs, true)?;
    if let (Some(result), Some(spec)) = (&load_result, &args.load) {
        println!("\nthe load, while the server was tracked:");
        crate::cmd::load::emit(result, spec.0.json.as_deref())?;
    }
    if saved_ok && !args.outputs.quiet {
        eprintln!("onefix: recording saved to {} (render it again with `onefix report {}`)", output.display(), output.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits for the target to end (or the duration, or Ctrl-C, then stops it), reading its RSS.
/// Returns how it ended, its RSS over time, and its peak RSS.
/// `stop` (the end of a load) also ends it.
fn follow(pid: u32, duration: Option<Duration>, started: Instant, stop: Option<&AtomicBool>) -> (TargetExit, Vec<RssPoint>, Option<u64>) {
    let mut rss = Vec::new();
    let mut peak = 0u64;
    let mut last_read: Option<Instant> = None;
    let mut ended = None;
    loop {
        if let Some(e) = reap(pid, false) {
            ended = Some(e);
            break;
        }
        if last_read.is_none_or(|t| t.elapsed() >= RSS_EVERY) {
            last_read = Some(Instant::now());
            // A process between fork and exec (or a shell about to exec) reads as 0 kB.
            if let Some(m) = read_rss(pid).filter(|m| m.rss_bytes > 0) {
                rss.push(RssPoint { time_us: started.elapsed().as_micros() as u64, rss_bytes: m.rss_bytes });
                peak = peak.max(m.peak_rss_bytes);
            }
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

/// Where the facts beyond the samples (RSS, counters) are kept beside a recording.
pub fn info_path(recording: &Path) -> PathBuf {
    let mut name = recording.as_os_str().to_owned();
    name.push(".memory.json");
    PathBuf::from(name)
}

fn write_info(path: &Path, info: &MemoryInfo) -> io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    serde_json::to_writer(&mut w, info)?;
    w.flush()
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
pub fn report(profile: &Profile, info: Option<&MemoryInfo>, view: MemoryViewArg, args: &OutputArgs, complete: bool) -> Result<()> {
    let user = outputs::user_code(profile, args);
    let mut diagnosis = diagnose_memory(profile, &user, &DiagnoseOptions::default());
    if let Some(info) = info {
        add_notes(&mut diagnosis, info);
    }
    let shown = profile.memory_view(view_of(view));
    let mut rest = args.clone();
    let json = rest.json.take();
    outputs::write_all(&shown, &diagnosis, Mode::Wall, &rest, complete)?;
    if let Some(path) = json {
        write_memory_json(&path, &shown, &diagnosis, info, view, complete).with_context(|| format!("could not write the JSON report to {}", path.display()))?;
    }
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
    if info.untracked > 0 {
        d.notes.push(format!("{} sampled allocations could not be followed to their free: retained bytes are overestimated", info.untracked));
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn write_memory_json(path: &Path, profile: &Profile, d: &Diagnosis, info: Option<&MemoryInfo>, view: MemoryViewArg, complete: bool) -> Result<()> {
    let mut buf = Vec::new();
    write_json(&mut buf, profile, d, &JsonOptions { complete })?;
    let mut value: serde_json::Value = serde_json::from_slice(&buf)?;
    let mut memory = serde_json::to_value(info.cloned().unwrap_or_default())?;
    memory["view"] = serde_json::Value::String(match view {
        MemoryViewArg::Retained => "retained".into(),
        MemoryViewArg::Allocated => "allocated".into(),
    });
    value["memory"] = memory;
    let mut w = BufWriter::new(File::create(path)?);
    serde_json::to_writer_pretty(&mut w, &value)?;
    w.flush()?;
    Ok(())
}
