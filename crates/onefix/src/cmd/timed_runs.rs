//! `onefix compare --runs N -- A ::: B`: two commands timed as a benchmark tool times them
//! (hyperfine, pyperf), then one recorded run of each to say which lines' time went away.
//!
//! After `--warmup` untimed runs of each, the timed runs alternate A, B, A, B, so that a drift
//! of the machine (another job starting, the CPU's clock falling) falls on both sides alike
//! rather than on whichever ran second. Each run is timed from its spawn to its reaping, with
//! the CPU time the kernel charged to it (`wait4`'s rusage). The verdict is that of Welch's test
//! on the logarithms of the wall times, with a 95% bootstrap interval of the ratio of their
//! means ([`RunComparison::of_repeated`]).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use onefix_diagnose::compare::{lines_per_run, LineComparison, RunComparison, RunTime};
use onefix_diagnose::gate::runs_slower_beyond;
use onefix_model::recording::read_recording;
use onefix_model::Profile;
use onefix_report::compare::render_runs;
use serde::Serialize;

use crate::cli::{CompareArgs, OutputArgs};
use crate::outputs;
use crate::target::{catch_interrupts, INTERRUPTED};

/// What `--json` writes for two timed commands.
#[derive(Serialize)]
struct TimedComparison<'a> {
    commands: [&'a [String]; 2],
    warmup: u32,
    /// Each timed run's wall and CPU seconds, in the order they ran.
    times: [Vec<TimedRun>; 2],
    runs: &'a RunComparison,
}

#[derive(Serialize)]
struct TimedRun {
    wall_s: f64,
    cpu_s: f64,
}

/// The two commands of `-- A ::: B`.
pub fn split_commands(words: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let seps: Vec<usize> = words.iter().enumerate().filter(|(_, w)| *w == ":::").map(|(i, _)| i).collect();
    let [sep] = seps[..] else {
        bail!("give two commands separated by `:::` after `--`: onefix compare --runs 10 -- ./old ::: ./new");
    };
    let (a, b) = (words[..sep].to_vec(), words[sep + 1..].to_vec());
    if a.is_empty() || b.is_empty() {
        bail!("a command is missing on one side of `:::`: onefix compare --runs 10 -- ./old ::: ./new");
    }
    Ok((a, b))
}

/// A command as given: one argument holding whitespace is a shell command line (as hyperfine
/// takes it), anything else runs as is, without a shell.
fn command_of(argv: &[String]) -> Command {
    match argv {
        [line] if line.contains(char::is_whitespace) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
        _ => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    }
}

/// A command line for the terminal: its control characters shown escaped (`\x1b`), so that a
/// command cannot retitle or rewrite the user's terminal.
fn shown(argv: &[String]) -> String {
    escaped(&argv.join(" "))
}

fn escaped(text: &str) -> String {
    onefix_model::fmt::escape_controls(text).into_owned()
}

/// Runs `argv` once, its output discarded, and times it; a run that fails is an error.
fn time_once(argv: &[String]) -> Result<RunTime> {
    let mut command = command_of(argv);
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let started = Instant::now();
    let child = command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow::anyhow!("command not found: {}", shown(&argv[..1])),
        _ => anyhow::anyhow!("cannot start {}: {e}", shown(argv)),
    })?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for the child just spawned, writing into the two locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("cannot wait for {}: {e}", shown(argv));
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    // The child was reaped by wait4: std must not wait for it again.
    std::mem::forget(child);
    if libc::WIFSIGNALED(status) {
        bail!("{} was killed by {}", shown(argv), onefix_report::signal_name(libc::WTERMSIG(status)));
    }
    let code = libc::WEXITSTATUS(status);
    if code != 0 {
        bail!("{} exited with status {code}: a failing command has no run time worth comparing", shown(argv));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(RunTime { wall_s, cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime) })
}

/// A directory only this user can enter, removed (with the recordings onefix put in it) on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new() -> Result<PrivateDir> {
        let template = std::env::temp_dir().join("onefix-compare-XXXXXX");
        let mut bytes = std::ffi::CString::new(template.as_os_str().as_encoded_bytes())
            .context("the temporary directory's name holds a NUL byte")?
            .into_bytes_with_nul();
        // SAFETY: mkdtemp writes into the NUL-terminated template it is given (mode 0700).
        let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
        if made.is_null() {
            bail!(
                "cannot make a temporary directory in {}: {}",
                std::env::temp_dir().display(),
                std::io::Error::last_os_error()
            );
        }
        bytes.pop();
        Ok(PrivateDir(PathBuf::from(std::ffi::OsString::from_vec(bytes))))
    }
}

use std::os::unix::ffi::OsStringExt;

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Only the files onefix wrote, then the directory: nothing else was put there.
        for name in ["a.onefix", "b.onefix"] {
            let _ = std::fs::remove_file(self.0.join(name));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// One recorded run of `argv` with `onefix record`, to `path`; `None` (said why) when it could
/// not be recorded: the timing stands without it.
fn record_once(argv: &[String], path: &Path, view: &OutputArgs) -> Option<Profile> {
    let exe = std::env::current_exe().ok()?;
    let mut command = Command::new(exe);
    command.args(["record", "--quiet", "-o"]).arg(path);
    for dir in &view.user_code {
        command.arg("--user-code").arg(dir);
    }
    for package in &view.packages {
        command.arg("--package").arg(package);
    }
    if matches!(argv, [line] if line.contains(char::is_whitespace)) {
        // A shell line: its programs are the shell's children.
        command.args(["--subprocesses", "--", "sh", "-c"]).arg(&argv[0]);
    } else {
        command.arg("--").args(argv);
    }
    let out = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).output().ok()?;
    let loaded = std::fs::File::open(path)
        .ok()
        .and_then(|f| read_recording(std::io::BufReader::new(f)).ok())
        .filter(|l| l.profile.sample_count() > 0);
    if loaded.is_none() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no sample was taken");
        crate::messages::say(format_args!(
            "the recorded run of {} gave no profile ({}); the timing stands without it",
            shown(argv),
            escaped(why.trim_start_matches("onefix: "))
        ));
    }
    loaded.map(|l| l.profile)
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    if args.a.is_some() || args.b.is_some() {
        bail!("give two recordings or load results, or two commands after `--`, not both");
    }
    let (a, b) = split_commands(&args.commands)?;
    let json = args.json.as_deref().map(|p| crate::output::check(p, "comparison's JSON", true)).transpose()?;
    let html = args.html.as_deref().map(|p| crate::output::check(p, "HTML comparison", false)).transpose()?;
    if args.no_profile && html.is_some() {
        bail!("--html shows the two recorded runs side by side, and --no-profile records none: keep one of the two");
    }
    catch_interrupts();
    let sides = [&a, &b];
    let interrupted = || INTERRUPTED.load(Ordering::Relaxed);
    for round in 0..args.warmup {
        for side in sides {
            time_once(side).with_context(|| format!("in warm-up run {}", round + 1))?;
        }
    }
    let mut times: [Vec<RunTime>; 2] = [Vec::new(), Vec::new()];
    for round in 0..args.runs {
        if interrupted() {
            break;
        }
        // Which side goes first alternates too: a side that always ran right after the other
        // would inherit its caches, or its heat.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let t = time_once(sides[i]).with_context(|| format!("in timed run {}", round + 1))?;
            times[i].push(t);
        }
    }
    if times[0].len() < 2 {
        bail!("interrupted before two timed runs of each: nothing to compare");
    }
    if interrupted() {
        crate::messages::say(format_args!("interrupted: comparing the {} timed runs of each so far", times[0].len()));
    }
    let view =
        OutputArgs { user_code: args.user_code.clone(), packages: args.packages.clone(), ..OutputArgs::default() };
    let private = if args.no_profile || interrupted() { None } else { Some(PrivateDir::new()?) };
    let profiles = private
        .as_ref()
        .map(|dir| (record_once(&a, &dir.0.join("a.onefix"), &view), record_once(&b, &dir.0.join("b.onefix"), &view)));
    let lines = match &profiles {
        Some((Some(pa), Some(pb))) => {
            let (ua, ub) = (outputs::user_code(pa, &view), outputs::user_code(pb, &view));
            lines_per_run(pa, pb, outputs::knowledge_base(), (&ua, &ub))
        }
        _ => Vec::new(),
    };
    let runs = RunComparison::of_repeated(&times[0], &times[1], lines);
    let (name_a, name_b) = (shown(&a), shown(&b));
    println!("{}", render_runs(&runs, &name_a, &name_b));
    if !args.no_profile && runs.lines.is_empty() && profiles.is_some() {
        println!("  (no line could be compared: a run was not recorded)");
    } else if !runs.lines.is_empty() {
        println!("  the lines are from one more run of each, recorded at the default rate (not timed)");
    }
    if let Some(out) = json {
        let doc = TimedComparison {
            commands: [&a, &b],
            warmup: args.warmup,
            times: [0, 1].map(|i| times[i].iter().map(|t| TimedRun { wall_s: t.wall_s, cpu_s: t.cpu_s }).collect()),
            runs: &runs,
        };
        let shown = out.shown.display().to_string();
        out.write_with(|w| {
            serde_json::to_writer_pretty(&mut *w, &doc)?;
            writeln!(w)
        })
        .with_context(|| format!("cannot write the comparison's JSON to {shown}"))?;
    }
    if let (Some(out), Some((Some(pa), Some(pb)))) = (html, &profiles) {
        let none = LineComparison::none("the runs were timed as whole runs".to_owned());
        let verdicts = onefix_report::compare::verdicts(Some(&runs), None, &none);
        let comparison = serde_json::json!({ "runs": &runs, "verdicts": verdicts, "window_s": 0.0 });
        super::compare::write_html_pair(out, (pa, &name_a), (pb, &name_b), &comparison)?;
    }
    if let Some(limit) = args.fail_if_slower {
        let v = runs_slower_beyond(&runs, limit);
        println!("\ngate (--fail-if-slower {}%): {}", (limit * 1000.0).round() / 10.0, v.sentence);
        if v.fails {
            return Ok(ExitCode::from(crate::messages::GATE_FAILED));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn the_two_commands_are_split_at_the_one_separator() {
        let (a, b) = split_commands(&words("python3 old.py ::: python3 new.py")).unwrap();
        assert_eq!((a, b), (words("python3 old.py"), words("python3 new.py")));
        assert!(split_commands(&words("python3 old.py")).is_err());
        assert!(split_commands(&words("a ::: b ::: c")).is_err());
        assert!(split_commands(&words("::: b")).is_err());
    }

    #[test]
    fn a_run_is_timed_and_a_failing_one_is_refused() {
        let t = time_once(&words("sleep 0.05")).unwrap();
        assert!(t.wall_s >= 0.05, "{t:?}");
        let cpu = time_once(&["python3 -c 'sum(range(3_000_000))'".to_owned()]).unwrap();
        assert!(cpu.cpu_s > 0.01, "the child's CPU time is counted: {cpu:?}");
        let e = time_once(&words("false")).unwrap_err();
        assert!(e.to_string().contains("exited with status 1"), "{e}");
    }
}
