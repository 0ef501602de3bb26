//! `onefix agent`: always-on profiling. Each target (by pid, or every process whose command
//! line matches or of a given user, followed as they start and restart) is sampled at a low rate on its own thread with
//! the sampler `record` uses; each interval is aggregated into stack counts and written to
//! the spool; one uploader sends the spool's batches to ClickHouse, oldest first, and backs
//! off while it is away. The spool is bounded: past its bound the oldest batches are dropped
//! and counted. SIGTERM ends the current intervals, spools them, and flushes what it can.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use onefix_collect::{process, record, Schedule, StopReason};
use onefix_fleet::batch::{aggregate, Labels, COMMAND_CHARS};
use onefix_fleet::spool::Spool;
use onefix_fleet::{schema, Client, FleetError};
use onefix_model::recording::RecordingWriter;
use onefix_model::{Language, Meta, Mode, Profile, Target, WeightUnit};

use crate::cli::AgentArgs;
use crate::target::{catch_interrupts, start_target, TargetSpec, INTERRUPTED};

/// How long the uploader keeps trying after SIGTERM before leaving the rest in the spool.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// The longest wait between two attempts while ClickHouse is away.
const MAX_BACKOFF: Duration = Duration::from_secs(16);

fn say(message: impl std::fmt::Display) {
    crate::messages::say(message);
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn run(args: AgentArgs) -> Result<ExitCode> {
    if args.pid.is_empty() && args.pattern.is_none() && args.user.is_none() {
        bail!("nothing to profile: give --pid PID, --match PATTERN or --user USER");
    }
    if let Some(p) = &args.pattern {
        if p.trim().is_empty() {
            bail!("--match needs a non-empty pattern: it would match every process");
        }
    }
    let selection = Selection {
        pattern: args.pattern.clone(),
        uid: args.user.as_deref().map(user_id).transpose()?,
        own_pid: std::process::id(),
        own_exe: std::fs::read_link("/proc/self/exe").ok(),
    };
    // SIGHUP (a log rotation) must not end the agent: it reopens --log, or is ignored when the
    // log is stderr (which journald keeps).
    if let Some(log) = &args.log {
        reopen_log(log)?;
        let handler = on_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(libc::SIGHUP, handler) };
    } else {
        // SAFETY: setting a signal's disposition before any thread starts.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    }

    let client = crate::cmd::fleet::client(&args.store)?;
    crate::output::trust::check_path(&args.spool)
        .map_err(|why| anyhow::anyhow!("the spool directory {}: {why}", args.spool.display()))?;
    let spool = Spool::open(&args.spool, args.spool_max)?;
    // A schema this onefix cannot write, or none, is said now; an unreachable server is not
    // an error (the batches wait in the spool).
    match schema::check(&client) {
        Ok(()) => {}
        Err(e @ (FleetError::Unreachable { .. } | FleetError::TimedOut { .. })) => {
            say(format_args!("{e}: spooling to {} until it answers", args.spool.display()))
        }
        Err(e) => return Err(e.into()),
    }
    let waiting = spool.len();
    if waiting > 0 {
        say(format_args!("{waiting} batches from an earlier run wait in {}: sending them first", args.spool.display()));
    }
    // The spool counts its own drops; it is shared by the target threads (writing) and the
    // uploader (reading and removing).
    let spool = Arc::new(Mutex::new(spool));
    catch_interrupts();
    let started = Instant::now();
    let spooled = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let sampling_stop = Arc::new(AtomicBool::new(false));
    let uploading_stop = Arc::new(AtomicBool::new(false));
    let uploader = {
        let (spool, stop) = (spool.clone(), uploading_stop.clone());
        std::thread::spawn(move || upload_loop(&client, &spool, &stop))
    };
    let host = args.host.clone().unwrap_or_else(hostname);
    let mut targets: HashMap<u32, JoinHandle<()>> = HashMap::new();
    // How many targets were profiled at all: an agent that could read none of its --pid
    // targets (another user's process, a Python it cannot read) failed, and says so.
    let profiled = Arc::new(AtomicU64::new(0));
    // Processes whose profiling ended (exited, or could not be profiled), by pid and start
    // time: not tried again every scan, while a new process that reuses the pid is.
    let mut done: HashSet<(u32, u64)> = HashSet::new();
    let following = selection.pattern.is_some() || selection.uid.is_some();
    loop {
        let interrupted = INTERRUPTED.load(Ordering::Relaxed);
        let timed_out = args.duration.is_some_and(|d| started.elapsed() >= d);
        if interrupted || timed_out {
            break;
        }
        if let Some(log) = &args.log {
            if HANGUP.swap(false, Ordering::Relaxed) {
                if let Err(e) = reopen_log(log) {
                    say(format_args!("{e}: logging on to the file as it was"));
                }
            }
        }
        // Targets whose thread ended are forgotten, but remembered as done: a restart is a
        // new process, with a new pid or start time.
        targets.retain(|pid, t| {
            if t.is_finished() {
                if let Some(start) = process::start_ticks(*pid) {
                    done.insert((*pid, start));
                }
            }
            !t.is_finished()
        });
        done.retain(|(pid, start)| process::start_ticks(*pid) == Some(*start));
        let wanted: Vec<u32> = if following {
            selection.pids(|pid| targets.contains_key(&pid))
        } else {
            args.pid.iter().copied().filter(|p| process::exists(*p) && !targets.contains_key(p)).collect()
        };
        for pid in wanted {
            if process::start_ticks(pid).is_some_and(|start| done.contains(&(pid, start))) {
                continue;
            }
            let ctx = TargetContext {
                pid,
                service: args.service.clone(),
                version: args.version.clone(),
                host: host.clone(),
                rate: args.rate,
                interval: args.interval,
                spool: spool.clone(),
                spooled: spooled.clone(),
                stop: sampling_stop.clone(),
                profiled: profiled.clone(),
            };
            targets.insert(pid, std::thread::spawn(move || profile_target(ctx)));
        }
        if !following && targets.is_empty() {
            if profiled.load(Ordering::Relaxed) == 0 {
                say("no target could be profiled");
            } else {
                say("every target has exited");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // The targets' threads end their current interval and spool it; then the uploader gets
    // a last chance to send what waits.
    sampling_stop.store(true, Ordering::Relaxed);
    for (_, t) in targets {
        let _ = t.join();
    }
    uploading_stop.store(true, Ordering::Relaxed);
    let (sent, sent_bytes) = uploader.join().unwrap_or((0, 0));
    let spool = spool.lock().unwrap_or_else(|e| e.into_inner());
    let left = spool.len();
    say(format_args!(
        "spooled {} batches ({} samples); sent {sent} batches ({sent_bytes} bytes); dropped {} batches ({} samples) to keep the spool within its bound; {left} wait for the next run in {}",
        spooled.0.load(Ordering::Relaxed),
        spooled.1.load(Ordering::Relaxed),
        spool.dropped_batches,
        spool.dropped_samples,
        args.spool.display(),
    ));
    if !following && profiled.load(Ordering::Relaxed) == 0 {
        return Ok(ExitCode::from(crate::messages::NOTHING_RECORDED));
    }
    Ok(ExitCode::SUCCESS)
}

static HANGUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUP.store(true, Ordering::Relaxed);
}

/// Points stderr, where every message goes, at the end of `path` (created if need be, never
/// truncated).
/// In a directory others can write, no link is followed and no file of another user's is
/// appended to (see `output::trust`); a log onefix creates is 0600.
fn reopen_log(path: &std::path::Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: String| anyhow::anyhow!("cannot open the log {}: {why}", path.display());
    crate::output::trust::check_path(path).map_err(refuse)?;
    let nofollow = if crate::output::trust::in_shared_dir(path) { libc::O_NOFOLLOW } else { 0 };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nofollow)
        .open(path)
        .map_err(|e| refuse(e.to_string()))?;
    crate::output::trust::check_opened(path, &file).map_err(refuse)?;
    // SAFETY: dup2 onto stderr of a descriptor we own; the file is closed after, stderr keeps it.
    if unsafe { libc::dup2(file.as_raw_fd(), libc::STDERR_FILENO) } < 0 {
        bail!("cannot log to {}: {}", path.display(), std::io::Error::last_os_error());
    }
    Ok(())
}

/// Which processes `--match` and `--user` follow.
struct Selection {
    /// A substring of the command line, as `pgrep -f`.
    pattern: Option<String>,
    /// Every process of this real user id.
    uid: Option<u32>,
    own_pid: u32,
    own_exe: Option<std::path::PathBuf>,
}

impl Selection {
    /// The selected processes, except those `known` already, onefix itself (this agent, or
    /// another onefix), kernel threads and zombies. A process younger than [`SETTLE`] waits for
    /// the next scan: between fork and exec it still shows its parent's command and program.
    fn pids(&self, known: impl Fn(u32) -> bool) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut pids: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != self.own_pid && !known(pid))
            .filter(|&pid| process::age(pid).is_some_and(|age| age >= SETTLE))
            .filter(|&pid| self.uid.is_none() || process::real_uid(pid) == self.uid)
            .filter(|&pid| {
                let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
                let line = String::from_utf8_lossy(&raw).replace('\0', " ");
                // A zombie or a kernel thread has no command line.
                if line.trim().is_empty() || process::is_kernel_thread(pid) {
                    return false;
                }
                if self.pattern.as_deref().is_some_and(|p| !line.contains(p)) {
                    return false;
                }
                let onefix = line.contains("onefix agent")
                    || self
                        .own_exe
                        .as_ref()
                        .is_some_and(|own| std::fs::read_link(format!("/proc/{pid}/exe")).ok().as_ref() == Some(own));
                !onefix
            })
            .collect();
        pids.sort_unstable();
        pids
    }
}

/// How old a process must be to become a target (see [`Selection::pids`]).
const SETTLE: Duration = Duration::from_millis(200);

/// The uid of a user given by name or number; one sentence for a name this machine does not
/// know.
fn user_id(user: &str) -> Result<u32> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    let Ok(name) = std::ffi::CString::new(user) else { bail!("no user `{user}` on this machine") };
    // SAFETY: getpwnam_r writes only into `entry` and `buf`, which outlive the call; the
    // result points into them.
    let uid = unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found);
        (rc == 0 && !found.is_null()).then_some(entry.pw_uid)
    };
    uid.ok_or_else(|| anyhow::anyhow!("no user `{user}` on this machine (give a name from /etc/passwd or a uid)"))
}

struct TargetContext {
    pid: u32,
    service: String,
    version: String,
    host: String,
    rate: f64,
    interval: Duration,
    spool: Arc<Mutex<Spool>>,
    /// Batches and samples this run spooled, for the closing summary.
    spooled: Arc<(AtomicU64, AtomicU64)>,
    stop: Arc<AtomicBool>,
    /// Counts the targets that could be profiled.
    profiled: Arc<AtomicU64>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Samples one process interval by interval until it exits or the agent stops.
fn profile_target(ctx: TargetContext) {
    let spec = TargetSpec {
        pid: Some(ctx.pid),
        command: Vec::new(),
        mode: Mode::Wall,
        rate: ctx.rate,
        native: false,
        gil: false,
        subprocesses: false,
        stack_bytes: 32 * 1024,
    };
    let started = match start_target(&spec) {
        Ok(s) => s,
        Err(e) => {
            say(format_args!("cannot profile process {}: {}", ctx.pid, crate::messages::one_sentence(&e)));
            return;
        }
    };
    ctx.profiled.fetch_add(1, Ordering::Relaxed);
    let crate::target::StartedTarget { mut sampler, pid, language, runtime_version, interval_us, tick_hz, .. } =
        started;
    let cwd = process::cwd(pid);
    let argv = process::cmdline(pid).unwrap_or_default();
    let user_code = match language {
        Language::Python => crate::outputs::default_user_dirs(cwd.as_deref(), &argv),
        Language::Native => crate::outputs::default_native_user_dirs(cwd.as_deref(), pid),
    };
    let runtime = match &runtime_version {
        Some(v) => format!("{} {v}", language.as_str()),
        None => language.as_str().to_owned(),
    };
    say(format_args!("profiling process {pid} ({runtime}) at {} samples per second", ctx.rate));
    let labels = Labels {
        service: ctx.service.clone(),
        version: ctx.version.clone(),
        host: ctx.host.clone(),
        pid,
        runtime,
        user_code: user_code.clone(),
        command: argv.join(" ").chars().take(COMMAND_CHARS).collect(),
    };
    let meta = Meta {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        target: Target { argv: Some(argv), pid, language: Some(language), cwd, runtime_version },
        mode: Mode::Wall,
        rate_hz: ctx.rate,
        weight_unit: WeightUnit::Samples { interval_us },
        user_code,
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);
    let interval_s = ctx.interval.as_secs().max(1) as u32;
    let mut seed = pid as u64;
    loop {
        let ts = unix_now();
        seed += 1;
        let schedule = Schedule { rate_hz: tick_hz, duration: Some(ctx.interval), flush_every: ctx.interval * 2, seed };
        let outcome = record::<_, std::io::Sink>(
            sampler.as_sampler(),
            &mut profile,
            None::<&mut RecordingWriter<std::io::Sink>>,
            &schedule,
            &ctx.stop,
            |_| {},
        );
        let batch = aggregate(&profile, &labels, ts, interval_s);
        profile.take_samples();
        if !batch.counts.is_empty() {
            let mut spool = ctx.spool.lock().unwrap_or_else(|e| e.into_inner());
            let dropped = spool.dropped_batches;
            match spool.push(&batch) {
                Ok(()) => {
                    ctx.spooled.0.fetch_add(1, Ordering::Relaxed);
                    ctx.spooled.1.fetch_add(batch.weight(), Ordering::Relaxed);
                }
                Err(e) => say(format_args!("lost an interval of process {pid}: {e}")),
            }
            if spool.dropped_batches > dropped {
                say(format_args!(
                    "the spool is full: dropped its {} oldest batches ({} samples) so far",
                    spool.dropped_batches, spool.dropped_samples
                ));
            }
        }
        if outcome.reason != StopReason::DurationReached {
            if outcome.reason == StopReason::TargetExited {
                say(format_args!("process {pid} exited"));
            }
            break;
        }
    }
    // An attached target is left running: stop() only lets go of it.
    sampler.stop(&mut profile, 0, !process::is_running(pid), pid);
}

/// Sends the spool's batches oldest first; while ClickHouse is away, waits longer between
/// attempts (1 s doubling to 16 s). After `stop`, keeps trying for [`FLUSH_LIMIT`]. Returns the
/// batches sent and their bytes.
fn upload_loop(client: &Client, spool: &Mutex<Spool>, stop: &AtomicBool) -> (u64, u64) {
    let (mut sent, mut bytes) = (0u64, 0u64);
    let mut backoff = Duration::ZERO;
    let mut failing: Option<String> = None;
    let mut flush_deadline: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) && flush_deadline.is_none() {
            flush_deadline = Some(Instant::now() + FLUSH_LIMIT);
        }
        if flush_deadline.is_some_and(|d| Instant::now() >= d) {
            return (sent, bytes);
        }
        let next = spool.lock().unwrap_or_else(|e| e.into_inner()).oldest();
        let Some(spooled) = next else {
            if flush_deadline.is_some() {
                return (sent, bytes);
            }
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        match spooled.batch.upload(client) {
            Ok(size) => {
                bytes += size;
                if let Err(e) = spool.lock().unwrap_or_else(|e| e.into_inner()).remove(&spooled) {
                    say(e);
                }
                sent += 1;
                backoff = Duration::ZERO;
                if failing.take().is_some() {
                    say("ClickHouse answers again: sending the spooled batches");
                }
            }
            Err(e) => {
                let sentence = e.to_string();
                backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                if failing.as_deref() != Some(sentence.as_str()) {
                    say(format_args!("{sentence}: keeping batches in the spool and retrying"));
                    failing = Some(sentence);
                }
                let until = Instant::now() + backoff;
                let stopping = flush_deadline.is_some();
                while Instant::now() < until {
                    if flush_deadline.is_some_and(|d| Instant::now() >= d) {
                        return (sent, bytes);
                    }
                    // On SIGTERM, one more attempt at once rather than at the end of a long wait.
                    if !stopping && stop.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}
