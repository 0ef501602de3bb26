//! `onefix record --memory`: start the command with the allocation agent, follow its RSS, then
//! diagnose retained and churned bytes by the user's line.

use std::io::{self, BufWriter};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::process;
use onefix_memory::{monotonic_ns, read_rss, MemoryOptions, MemoryTracker};
use onefix_model::attachments;
use onefix_model::recording::{read_recording, RecordingWriter};
use onefix_model::{Language, Meta, Mode, Profile, RssPoint, Target, TargetExit, WeightUnit};

use crate::cli::RecordArgs;
use crate::memory_report;
use crate::outputs;
use crate::target::{
    catch_interrupts, default_output, interrupt_then_kill_after, load_plan, DrivenLoad, INTERRUPTED, SERVER_START_LIMIT,
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
    let plan = outputs::plan_record(
        args.output.as_deref(),
        args.no_save,
        || default_output(&args),
        &args.outputs,
        load_json,
        args.quiet,
        args.pid.is_none(),
    )?;
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
    crate::target::watch_temporary_dirs(pid, &[tracker.agent_dir()]);
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
        driven = Some(DrivenLoad::start(cfg, None));
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
            crate::messages::say(format_args!("the load did not run: {e}"));
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
    profile.attach(attachments::MEMORY, &info);
    if let Some(result) = &load_result {
        // The load's result travels with the recording, for `report` and `compare`.
        profile.attach(attachments::LOAD, result);
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
            Some(p) => crate::messages::say(format_args!("could not write the recording {shown} ({e}); what was written is kept in {}, and {shown} was left as it was", p.display())),
            None => crate::messages::say(format_args!("could not write the recording {shown} ({e})")),
        }
    });
    let summary_on_stderr = planned.summary_on_stderr;
    let diagnosis =
        memory_report::report(&profile, Some(&info), args.memory_view.memory_view, &args.outputs, planned, true)?;
    if let (Some(result), Some(_)) = (&load_result, &args.load) {
        // Beside the summary: on stderr when stdout is not a terminal (the server's own stream).
        if summary_on_stderr {
            eprintln!("\nthe load, while the server was tracked:");
        } else {
            println!("\nthe load, while the server was tracked:");
        }
        outputs::emit_load(result, load_json, summary_on_stderr)?;
    }
    let streamed = recording.dest.as_ref().is_some_and(|d| matches!(d.dest, crate::output::Dest::Stream { .. }));
    match saved_at {
        Ok(Some(p)) if !args.quiet && !streamed => crate::messages::say(format_args!(
            "recording saved to {} (render it again with `onefix report {}`)",
            p.display(),
            p.display()
        )),
        Ok(Some(p)) if !args.quiet => {
            crate::messages::say(format_args!("the recording was written to {}", p.display()))
        }
        Err(()) => return Ok(ExitCode::from(crate::messages::RECORDED_BUT_INCOMPLETE)),
        _ => {}
    }
    if outputs::fail_on_met(&diagnosis, &args.outputs) {
        return Ok(ExitCode::from(crate::messages::GATE_FAILED));
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

/// How the target ended, when that may explain an empty recording.
fn exit_note(exit: Option<&TargetExit>) -> String {
    match exit {
        Some(e @ (TargetExit::Code(1..) | TargetExit::Code(..=-1) | TargetExit::Signal(_))) => {
            format!(" (it {})", onefix_model::fmt::exit_clause(e))
        }
        _ => String::new(),
    }
}
