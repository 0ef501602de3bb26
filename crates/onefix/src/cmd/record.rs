//! `onefix record`: start or attach, sample until the end, save, diagnose, report.

use onefix_model::fmt::escape_controls_keeping_lines;
use std::io::{BufReader, BufWriter, IsTerminal};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::{process, record, Schedule, StopReason};
use onefix_model::attachments;
use onefix_model::recording::{read_recording, RecordingWriter};
use onefix_model::{Language, Meta, Mode, Profile, Target, TargetExit, WeightUnit};
use onefix_report::signal_name;

use crate::cli::RecordArgs;
use crate::messages::RECORDED_BUT_INCOMPLETE;
use crate::outputs;
use crate::target::{
    catch_interrupts, default_output, describe_exit, load_plan, start_target, DrivenLoad, StartedTarget, TargetSpec,
    INTERRUPTED, SERVER_START_LIMIT,
};

pub fn run(args: RecordArgs) -> Result<ExitCode> {
    if args.pid.is_none() && args.command.is_empty() {
        bail!("nothing to record: give a command after `--` (onefix record -- python3 app.py) or a process with --pid");
    }
    let mode: Mode = args.mode.into();
    let load = load_plan(&args)?;
    if let Some((_, addr)) = &load {
        // Something already answering at the load's address is not the server about to start:
        // the load would hit it, and the server would fail to bind.
        if std::net::TcpStream::connect_timeout(addr, Duration::from_millis(300)).is_ok() {
            bail!(
                "{addr} already answers before your server starts: another process listens there (stop it), or give --load the port your server listens on"
            );
        }
    }
    // Every output is checked, and the recording's file made, before anything starts, so an
    // unwritable path costs the target nothing.
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
    // The CPU time of the children onefix reaped so far: what the program adds to it is its own.
    let children_cpu_before = children_cpu_s();
    // On failure the partial recording, which holds nothing yet, goes with `recording`.
    let started_target = start_target(&TargetSpec::of_record(&args)).map_err(|e| match (&load, exited_early(&e)) {
        // A server that ends before it can even be read has, above all, not listened.
        (Some((_, addr)), Some(status)) => anyhow::anyhow!(
            "cannot drive the load: the server {} before anything listened at {addr}",
            status.as_deref().unwrap_or("exited")
        ),
        _ => e,
    })?;
    let StartedTarget { mut sampler, pid, spawned, started_at, language, runtime_version, interval_us, tick_hz } =
        started_target;

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
    let machine = profile.attach(attachments::MACHINE, &attachments::Machine::this());
    writer
        .write_attachment(attachments::MACHINE, &machine)
        .with_context(|| format!("cannot write the recording to {shown}"))?;

    // What the user named as their code travels with the recording: `report`, `compare` and
    // `top` read it the same way unless told otherwise.
    if !args.outputs.packages.is_empty() || !args.outputs.user_code.is_empty() {
        let view = attachments::View {
            user_code: if args.outputs.user_code.is_empty() { Vec::new() } else { profile.meta.user_code.clone() },
            packages: args.outputs.packages.clone(),
        };
        let json = profile.attach(attachments::VIEW, &view);
        writer
            .write_attachment(attachments::VIEW, &json)
            .with_context(|| format!("cannot write the recording to {shown}"))?;
    }
    let schedule =
        Schedule { rate_hz: tick_hz, duration: args.duration, flush_every: Duration::from_secs(1), seed: args.seed };
    let progress = !args.quiet && std::io::stderr().is_terminal();
    let mut driven = None;
    if let Some((cfg, addr)) = load {
        if let Err(e) = wait_for_server(pid, addr) {
            let exited = !process::is_running(pid);
            let exit = sampler.stop(&mut profile, 0, exited, pid);
            match e {
                ServerWait::Exited => {
                    bail!(
                        "cannot drive the load: the server {} before anything listened at {addr}",
                        describe_exit(&exit)
                    )
                }
                ServerWait::OtherPorts(ports) => {
                    let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
                    bail!(
                        "cannot drive the load: the server listens on port {}, not on {addr}: give --load that port",
                        ports.join(" and ")
                    )
                }
                ServerWait::TimedOut => bail!(
                    "cannot drive the load: nothing listened at {addr} within {:.0} s of starting the server",
                    SERVER_START_LIMIT.as_secs_f64()
                ),
            }
        }
        driven = Some(DrivenLoad::start(cfg, Some(pid)));
    }
    // With a load, sampling lasts exactly as long as the load does.
    let stop = driven.as_ref().map_or(&INTERRUPTED, |d| &*d.finished);
    let started = Instant::now();
    // What ran of a program we started before sampling began: its user waits for it too.
    if let Some(at) = started_at.filter(|_| driven.is_none()) {
        let start = attachments::ProgramStart { unsampled_us: started.duration_since(at).as_micros() as u64 };
        let json = profile.attach(attachments::PROGRAM_START, &start);
        writer
            .write_attachment(attachments::PROGRAM_START, &json)
            .with_context(|| format!("cannot write the recording to {shown}"))?;
    }
    // On a terminal, a sampler wrapper follows what each tick adds for the progress line.
    let watch = progress.then(|| {
        let user = outputs::user_code(&profile, &args.outputs);
        std::rc::Rc::new(std::cell::RefCell::new(crate::progress::Progress::new(user, mode)))
    });
    let mut watched;
    let sampling: &mut dyn onefix_collect::Sampler = match &watch {
        Some(w) => {
            watched = crate::progress::Watched { inner: sampler.as_sampler(), progress: w.clone() };
            &mut watched
        }
        None => sampler.as_sampler(),
    };
    let mut status = progress.then(crate::progress::StatusLine::reserve);
    let outcome = record(sampling, &mut profile, Some(&mut writer), &schedule, stop, |p| {
        if let (Some(w), Some(status)) = (&watch, status.as_mut()) {
            let mut w = w.borrow_mut();
            w.flushed = true;
            status.draw(&w.line(p, started.elapsed()));
        }
    });
    if let Some(status) = status {
        status.release();
    }
    let driven_none = driven.is_none();
    let load_result = driven.map(DrivenLoad::finish);
    let elapsed_us = started.elapsed().as_micros() as u64;
    // Only now, with sampling stopped, is a child we started stopped if need be and reaped
    // (see onefix_collect::process).
    profile.meta.exit = Some(sampler.stop(&mut profile, elapsed_us, outcome.reason == StopReason::TargetExited, pid));
    // A program onefix started and saw end has a run time of its own, as `time` would give it:
    // what a batch fix is judged by first.
    let ended = matches!(profile.meta.exit, Some(TargetExit::Code(_) | TargetExit::Signal(_)));
    if spawned && ended && outcome.reason == StopReason::TargetExited && driven_none {
        let (user_s, system_s) = children_cpu_s();
        let run = attachments::RunTimes {
            wall_s: started.duration_since(started_at.unwrap_or(started)).as_secs_f64() + elapsed_us as f64 / 1e6,
            user_s: (user_s - children_cpu_before.0).max(0.0),
            system_s: (system_s - children_cpu_before.1).max(0.0),
            resolution_s: 1.5 / tick_hz.max(0.1),
        };
        let json = profile.attach(attachments::RUN_TIMES, &run);
        if outcome.write_error.is_none() {
            if let Err(e) = writer.write_attachment(attachments::RUN_TIMES, &json) {
                crate::messages::say(format_args!("could not add the run's time to the recording ({e})"));
            }
        }
    }
    // A native program that turned out to host a runtime onefix cannot read (a .NET app's own
    // host, a launcher that loads the JVM) is said so first: its recording holds the runtime's
    // native frames only, and the advice native findings bring (symbols, --user-code) is not
    // for it.
    let foreign = (language == Language::Native).then(|| runtime_in_profile(&profile, &exe)).flatten();
    if let Some(found) = &foreign {
        crate::messages::say(format_args!("{found}; what follows is its native frames only"));
    }
    for warning in sampler.warnings() {
        crate::messages::say(warning);
    }
    let mut asyncio_notes = sampler.sampling_notes();
    asyncio_notes.extend(sampler.asyncio_notes(mode));
    if let (Some(wakes), None) = (sampler.wakes(), &outcome.write_error) {
        // Which thread ended each wait travels with the recording, for `report`.
        let json = profile.attach(attachments::WAKES, &wakes);
        if let Err(e) = writer.write_attachment(attachments::WAKES, &json) {
            crate::messages::say(format_args!("could not add the wake-ups to the recording ({e})"));
        }
    }
    drop(sampler);

    let load_result = match load_result {
        Some(Ok(result)) => {
            if outcome.write_error.is_none() {
                // The load's result travels with the recording, for `report` and `compare`.
                // Also in memory, for the outputs written from this run (the HTML report).
                let json = profile.attach(attachments::LOAD, &result);
                if let Err(e) = writer.write_attachment(attachments::LOAD, &json) {
                    crate::messages::say(format_args!("could not add the load's result to the recording ({e})"));
                }
            }
            Some(result)
        }
        Some(Err(e)) => {
            crate::messages::say(format_args!("the load did not run: {e}"));
            None
        }
        None => None,
    };
    // A load whose every response was an error profiled the server's error path, not the work:
    // said first, and the run fails. Interrupted (Ctrl-C) before any answer came back, it did
    // not fail (a terminal's Ctrl-C also ends the server, so its requests end in errors): that
    // is said instead, and the report follows as usual.
    let cut_before_any_answer =
        load_result.as_ref().is_some_and(|r| INTERRUPTED.load(Ordering::Relaxed) && r.status_codes.is_empty());
    if let (true, Some(r)) = (cut_before_any_answer, &load_result) {
        crate::messages::say(format_args!(
            "the recording was interrupted before the server answered any of the load's requests ({} sent): the findings are of the server's time until then",
            r.sent
        ));
    }
    let load_failed = !cut_before_any_answer
        && load_result
            .as_ref()
            .is_some_and(|r| r.completed == 0 || !r.status_codes.keys().any(|code| code.starts_with(['1', '2', '3'])));
    if let (true, Some(r)) = (load_failed, &load_result) {
        let codes: Vec<String> = r.status_codes.iter().map(|(code, n)| format!("{n} x {code}")).collect();
        let got = if codes.is_empty() { "no response".to_owned() } else { codes.join(", ") };
        crate::messages::say(format_args!(
            "every request of the load failed ({got} of {} sent): the server did not do the work asked, so what follows profiles its error path; check the URL and the server",
            r.sent
        ));
    }
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
        // A program that ran to its end, well, but faster than one sampling interval still has
        // its run time: what `compare` judges a batch fix by (a 2 s job made 10 ms). That much
        // is kept; anything else holding metadata alone is removed with `recording`.
        let kept_run_time = profile.run_times().filter(|_| matches!(profile.meta.exit, Some(TargetExit::Code(0))));
        if let (Some(run), Ok(())) = (kept_run_time, &written) {
            if let Ok(Some(at)) = recording.persist() {
                crate::messages::say(format_args!(
                    "no sample was taken: the program ran {:.3} s and ended before the first read; its run time is saved to {} for `onefix compare`",
                    run.wall_s,
                    at.display()
                ));
                return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE));
            }
        }
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
            Some(p) => crate::messages::say(format_args!(
                "{why}; what was written until then is kept in {} (render it with `onefix report {}`); {shown} was left as it was",
                p.display(),
                p.display()
            )),
            None => crate::messages::say(format_args!("{why}; the report below is whole, from memory")),
        }
        kept
    });
    // Said only of a recording that holds samples: with none, the one sentence is that.
    if language == Language::Native && foreign.is_none() && executable_has_no_symbols(&profile, &exe) {
        crate::messages::say(format_args!(
            "{exe} has no symbols or line tables (it was stripped): its own frames show as addresses and no line of it can be named; rebuild it with -g, or keep its debug file, to see lines"
        ));
    }
    // The recording is kept and reported with the user code that remains: it cannot be redone.
    outputs::warn_unmatched_packages(&profile, &args.outputs);
    outputs::settle_running(&mut profile, &args.outputs);
    let mut diagnosis = outputs::run_diagnosis(&profile, mode, &args.outputs);
    if foreign.is_some() {
        // Where "your code" is cannot be said of a runtime's native frames: no --user-code advice.
        diagnosis.notes.retain(|n| {
            !matches!(n, onefix_diagnose::Note::NoUserCode { .. } | onefix_diagnose::Note::OutsideUser { .. })
        });
    }
    diagnosis.notes.extend(asyncio_notes.into_iter().map(onefix_diagnose::Note::Said));
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
    let summary_on_stderr = planned.summary_on_stderr;
    let outputs_failed = match outputs::write_all(&profile, &diagnosis, mode, planned, true) {
        Ok(()) => false,
        Err(e) => {
            match &rerender {
                Some(p) => crate::messages::say(format_args!(
                    "{e}; the recording is kept in {} (render it again with `onefix report {} ...`)",
                    p.display(),
                    p.display()
                )),
                None => crate::messages::say(e),
            }
            true
        }
    };
    if let (Some(result), Some(_)) = (&load_result, &args.load) {
        // Beside the summary: on stderr when stdout is not a terminal (the server's own stream).
        let say = |text: String| if summary_on_stderr { eprintln!("{text}") } else { println!("{text}") };
        say("\nthe load, while the server was profiled:".to_owned());
        outputs::emit_load(result, load_json, summary_on_stderr)?;
        if let Some(note) = time_outside_the_server(&diagnosis, result) {
            say(format!("  note: {}", escape_controls_keeping_lines(&note)));
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
            crate::messages::say(format_args!(
                "{name} exited with {code} after {:.2} s, before a sample landed in your code (its own messages are above)",
                elapsed_us as f64 / 1e6
            ));
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
        crate::messages::say(format_args!(
            "the target was killed by {} after {:.1} s{kept}",
            signal_name(sig),
            elapsed_us as f64 / 1e6
        ));
        return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE));
    }
    if load_failed {
        return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE));
    }
    match saved_at {
        // The sentence about the unwritten recording or output was printed above.
        Err(_) => return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE)),
        _ if outputs_failed => return Ok(ExitCode::from(RECORDED_BUT_INCOMPLETE)),
        Ok(Some(p)) if !args.quiet => match &rerender {
            Some(_) => crate::messages::say(format_args!(
                "recording saved to {} (render it again with `onefix report {}`)",
                p.display(),
                p.display()
            )),
            None => crate::messages::say(format_args!("the recording was written to {}", p.display())),
        },
        _ => {}
    }
    // The gate is read last: every output is written and the run went as asked.
    if outputs::fail_on_met(&diagnosis, &args.outputs) {
        return Ok(ExitCode::from(crate::messages::GATE_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The user and system CPU time, in seconds, of the children this process has reaped.
fn children_cpu_s() -> (f64, f64) {
    // SAFETY: an all-zero rusage is valid, and getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN of this process, written into the local.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
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

/// Whether the target's own executable appears in the stacks only as addresses: stripped of its
/// symbol table and debug information, so nothing of it can be named.
fn executable_has_no_symbols(profile: &Profile, exe: &str) -> bool {
    let Some(name) = std::path::Path::new(exe).file_name().and_then(|n| n.to_str()) else { return false };
    let is_exe = |module: &str| std::path::Path::new(module).file_name().and_then(|n| n.to_str()) == Some(name);
    let mut own = profile.frames().iter().filter(|f| is_exe(&f.module)).peekable();
    own.peek().is_some() && own.all(|f| f.file.is_empty() && f.function.starts_with("0x"))
}

/// The runtime onefix cannot read that a native recording shows the target to be, from its
/// executable and the modules its frames are in.
fn runtime_in_profile(profile: &Profile, exe: &str) -> Option<onefix_collect::runtime::Found> {
    let mut modules: Vec<&str> =
        profile.frames().iter().map(|f| f.module.as_str()).filter(|m| m.starts_with('/')).collect();
    modules.sort_unstable();
    modules.dedup();
    onefix_collect::runtime::recognise(std::path::Path::new(exe), modules.into_iter(), std::path::Path::new("/"))
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

fn exit_note(exit: &Option<TargetExit>) -> String {
    exit.as_ref().map(|e| format!(" ({})", describe_exit(e))).unwrap_or_default()
}

/// Why a started server cannot take the load.
enum ServerWait {
    /// It ended first.
    Exited,
    /// It listens, but on these ports, not the load's.
    OtherPorts(Vec<u16>),
    TimedOut,
}

/// How long a server listening on other ports than the load's is given to open the load's too
/// (a server may listen on an admin port first).
const OTHER_PORT_GRACE: Duration = Duration::from_secs(2);

/// Waits until the load's address answers, the server ends, or it is seen listening on other
/// ports only: then it is told at once rather than after the full wait.
fn wait_for_server(pid: u32, addr: std::net::SocketAddr) -> Result<(), ServerWait> {
    let started = Instant::now();
    let mut elsewhere_since: Option<Instant> = None;
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if !process::is_running(pid) {
            return Err(ServerWait::Exited);
        }
        let ports = process::listening_ports(pid);
        if ports.is_empty() || ports.contains(&addr.port()) {
            elsewhere_since = None;
        } else if elsewhere_since.get_or_insert_with(Instant::now).elapsed() >= OTHER_PORT_GRACE {
            return Err(ServerWait::OtherPorts(ports));
        }
        if started.elapsed() >= SERVER_START_LIMIT {
            return Err(ServerWait::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How a target that exited before it could be sampled ended, when that is the error.
fn exited_early(e: &anyhow::Error) -> Option<Option<String>> {
    match e.downcast_ref::<onefix_collect::CollectError>() {
        Some(onefix_collect::CollectError::ExitedEarly { status }) => Some(status.clone()),
        _ => None,
    }
}
