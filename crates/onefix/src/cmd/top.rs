//! `onefix top`: start or attach as `record` does, sample in one-second rounds, and after each
//! round redraw the diagnosis of the last few seconds. `q` or Ctrl-C quits; `--output` keeps
//! everything seen as a recording.

use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use onefix_collect::{process, record, Sampler, Schedule, StopReason, Tick};
use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
use onefix_model::recording::RecordingWriter;
use onefix_model::{Language, Meta, Mode, Profile, Sample, Target, TargetExit, WeightUnit};
use onefix_report::{write_top, TopStatus};

use crate::cli::TopArgs;
use crate::output::RecordingFile;
use crate::outputs;
use crate::target::{catch_interrupts, start_target, StartedTarget, TargetSpec, INTERRUPTED};

/// How often the screen is redrawn.
const ROUND: Duration = Duration::from_secs(1);

pub fn run(args: TopArgs) -> Result<ExitCode> {
    if args.pid.is_none() && args.command.is_empty() {
        bail!("nothing to watch: give a command after `--` (onefix top -- python3 app.py) or a process with --pid");
    }
    let mode: Mode = args.mode.into();
    // Checked, and its partial file made, before anything starts.
    let mut recording = match &args.output {
        Some(path) => Some(RecordingFile::create(Some(crate::output::check(path, "recording", false)?))?),
        None => None,
    };
    catch_interrupts();
    if let Some(r) = recording.as_mut() {
        r.open_stream().map_err(|e| anyhow::anyhow!("cannot write the recording: {e}"))?;
    }
    // A program top starts writes to a pseudo-terminal whose last lines top shows in a pane,
    // since the view's redraws would wipe them from the screen.
    let interactive = io::stdin().is_terminal() && io::stdout().is_terminal();
    let (columns, rows) = terminal_size();
    let captured = if interactive && args.pid.is_none() {
        super::top_output::capture(columns as u16, output_pane_rows(rows).max(1) as u16)
    } else {
        None
    };
    // The same start or attach as `record`, so top sees what a recording would.
    let started_target = start_target(&TargetSpec::of_top(&args));
    let program_output = captured.map(|(output, redirected)| {
        drop(redirected);
        output
    });
    let started_target = started_target?;
    let StartedTarget { mut sampler, pid, spawned, language, runtime_version, interval_us, tick_hz, .. } =
        started_target;

    let cwd = process::cwd(pid);
    let argv = if spawned { Some(args.command.clone()) } else { process::cmdline(pid) };
    let user_code = if args.user_code.is_empty() {
        match language {
            Language::Python => outputs::default_user_dirs(cwd.as_deref(), argv.as_deref().unwrap_or(&[])),
            Language::Native => outputs::default_native_user_dirs(cwd.as_deref(), pid),
        }
    } else {
        args.user_code
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).display().to_string())
            .collect()
    };
    let target_desc = match &argv {
        Some(a) if spawned => format!("{} (pid {pid})", a.join(" ")),
        _ => format!("pid {pid} (attached)"),
    };
    let mut profile = Profile::new(Meta {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        target: Target {
            argv: if spawned { argv } else { None },
            pid,
            language: Some(language),
            cwd: cwd.clone(),
            runtime_version,
        },
        mode,
        rate_hz: args.rate,
        weight_unit: WeightUnit::Samples { interval_us },
        start_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        duration_s: 0.0,
        user_code,
        exit: None,
        stats: Default::default(),
        native: language == Language::Native,
    });
    let mut writer = match recording.as_mut() {
        Some(f) => Some(RecordingWriter::new(BufWriter::new(f), &profile.meta).context("cannot write the recording")?),
        None => None,
    };
    let mut user = UserCode::new(profile.meta.user_code.iter().map(PathBuf::from), cwd.as_deref().map(Path::new));
    // `--package`: the packages' directories are found among the frames seen so far, so the
    // view is settled anew each round; it travels with a saved recording, as `record`'s does.
    let view = crate::cli::OutputArgs {
        user_code: args.user_code.clone(),
        packages: args.packages.clone(),
        ..Default::default()
    };
    if !args.packages.is_empty() {
        let kept = onefix_model::attachments::View {
            user_code: if args.user_code.is_empty() { Vec::new() } else { profile.meta.user_code.clone() },
            packages: args.packages.clone(),
        };
        let json = profile.attach(onefix_model::attachments::VIEW, &kept);
        if let Some(w) = writer.as_mut() {
            w.write_attachment(onefix_model::attachments::VIEW, &json).context("cannot write the recording")?;
        }
    }
    let kb = KnowledgeBase::builtin();

    let screen = Screen::open();
    let started = Instant::now();
    let window_us = args.window.as_micros() as u64;
    let mut window: Vec<Sample> = Vec::new();
    let mut samples_seen = 0u64;
    let mut ended: Option<String> = None;
    let mut write_error: Option<String> = None;
    let mut round = 0u64;
    // How long sampling lasted: to the target's end, not to the key that closed the view.
    let mut sampled_us = 0u64;
    let mut last_frame: Option<Vec<u8>> = None;
    loop {
        let elapsed = started.elapsed();
        if args.duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        if ended.is_none() {
            let offset_us = elapsed.as_micros() as u64;
            let schedule = Schedule {
                rate_hz: tick_hz,
                duration: Some(args.duration.map_or(ROUND, |d| ROUND.min(d.saturating_sub(elapsed)))),
                flush_every: Duration::from_secs(3600),
                seed: 0x0f1f + round,
            };
            round += 1;
            let mut shifted = Shifted { inner: sampler.as_sampler(), offset_us };
            let outcome = record::<_, Vec<u8>>(&mut shifted, &mut profile, None, &schedule, &INTERRUPTED, |_| {});
            let new = profile.take_samples();
            samples_seen += new.iter().map(|s| u64::from(s.weight)).sum::<u64>();
            if let Some(w) = writer.as_mut() {
                profile.samples = new.clone();
                if let Err(e) = w.write_batch(&mut profile) {
                    write_error = Some(e.to_string());
                    writer = None;
                }
                profile.take_samples();
            }
            window.extend(new);
            match outcome.reason {
                StopReason::Interrupted => break,
                StopReason::TargetExited => {
                    ended = Some("has ended".to_owned());
                    sampled_us = started.elapsed().as_micros() as u64;
                }
                StopReason::DurationReached => {}
            }
        } else if screen.interactive {
            // The target is gone: keep the last screen until q.
            std::thread::sleep(Duration::from_millis(100));
            if INTERRUPTED.load(Ordering::Relaxed) {
                break;
            }
            continue;
        } else {
            break;
        }
        // The view covers the last `window` of samples.
        let now_us = started.elapsed().as_micros() as u64;
        window.retain(|s| s.time_us + window_us >= now_us);
        profile.samples = window.clone();
        if !args.packages.is_empty() {
            user = crate::outputs::user_code(&profile, &view);
        }
        let diagnosis = diagnose(
            &profile,
            &kb,
            &user,
            &Options { mode, cpus: Some(onefix_model::attachments::Machine::this().cpus), ..Options::default() },
        );
        profile.take_samples();
        let pane = if program_output.is_some() { output_pane_rows(screen.rows) } else { 0 };
        let status = TopStatus {
            target: target_desc.clone(),
            elapsed_s: started.elapsed().as_secs_f64(),
            samples: samples_seen,
            errors: profile.meta.stats.errors,
            window_s: args.window.as_secs_f64(),
            ended: ended.clone(),
            columns: screen.columns,
            rows: screen.rows.saturating_sub(pane + usize::from(pane > 0)),
        };
        profile.samples = window.clone();
        screen.draw(|w| {
            write_top(&mut *w, &profile, &diagnosis, &status)?;
            match &program_output {
                Some(output) => write_output_pane(w, output, pane, screen.columns),
                None => Ok(()),
            }
        });
        // Kept for the summary printed on quit, once the view is gone.
        let mut frame = Vec::new();
        let plain = TopStatus { columns: screen.columns, rows: usize::MAX / 2, ..status };
        if write_top(&mut frame, &profile, &diagnosis, &plain).is_ok() {
            last_frame = Some(frame);
        }
        profile.take_samples();
    }

    let target_exited = ended.is_some();
    let elapsed_us = if target_exited { sampled_us } else { started.elapsed().as_micros() as u64 };
    profile.meta.exit = Some(sampler.stop(&mut profile, elapsed_us, target_exited, pid));
    profile.meta.duration_s = elapsed_us as f64 / 1e6;
    drop(screen);
    // The view is gone with the alternate screen: what it last showed stays on the terminal,
    // after the last lines the program printed.
    if interactive {
        let mut out = io::stdout().lock();
        if let Some(output) = &program_output {
            let lines = output.last(SUMMARY_OUTPUT_LINES);
            if !lines.is_empty() {
                let shown = lines.len() as u64;
                let more = output.count().saturating_sub(shown);
                let _ = writeln!(
                    out,
                    "the program's last output{}:",
                    if more > 0 { format!(" ({more} lines before these)") } else { String::new() }
                );
                for line in lines {
                    let _ = writeln!(out, "  {line}");
                }
                let _ = writeln!(out);
            }
        }
        if let Some(frame) = &last_frame {
            let _ = out.write_all(frame);
        }
        let _ = out.flush();
    }
    for warning in sampler.warnings() {
        crate::messages::say(warning);
    }
    drop(sampler);
    let finished = match (write_error, writer) {
        (Some(e), _) => Err(std::io::Error::other(e)),
        (None, Some(w)) => w.finish(&mut profile).map(drop),
        (None, None) => Ok(()),
    };
    if let Some(r) = recording.as_mut() {
        match finished.and_then(|()| r.persist()) {
            Ok(Some(p)) => crate::messages::say(format_args!(
                "what top saw is saved in {} (render it with `onefix report {}`)",
                p.display(),
                p.display()
            )),
            Ok(None) => {}
            Err(e) => match r.keep() {
                Some(p) => crate::messages::say(format_args!(
                    "the recording stopped being written ({e}); what came before is kept in {}",
                    p.display()
                )),
                None => crate::messages::say(format_args!("the recording stopped being written ({e})")),
            },
        }
    }
    if let Some(TargetExit::Code(code)) = profile.meta.exit {
        crate::messages::say(format_args!("the target exited with {code}"));
    }
    Ok(ExitCode::SUCCESS)
}

/// Lines of the program's output shown again on quit, above the summary.
const SUMMARY_OUTPUT_LINES: usize = 10;

/// Rows of the pane that shows the program's last output: a fifth of the screen, 3 to 8.
fn output_pane_rows(rows: usize) -> usize {
    (rows / 5).clamp(3, 8)
}

/// The terminal's size on stdout, or 100 x 40.
fn terminal_size() -> (usize, usize) {
    crate::outputs::terminal_size(libc::STDOUT_FILENO).unwrap_or((100, 40))
}

/// The pane under the view: a rule, then the program's last `rows` lines, cut to the width.
fn write_output_pane(
    w: &mut dyn Write,
    output: &super::top_output::ProgramOutput,
    rows: usize,
    columns: usize,
) -> io::Result<()> {
    let title = format!("── the program's output ({} lines) ", output.count());
    let rule = "─".repeat(columns.saturating_sub(title.chars().count()));
    writeln!(w, "{title}{rule}")?;
    let lines = output.last(rows);
    for line in &lines {
        writeln!(w, "{}", line.chars().take(columns.saturating_sub(1)).collect::<String>())?;
    }
    Ok(())
}

/// Stamps samples with the time since top started: each round's recording loop counts from 0.
struct Shifted<'a> {
    inner: &'a mut dyn Sampler,
    offset_us: u64,
}

impl Sampler for Shifted<'_> {
    fn tick(&mut self, profile: &mut Profile, time_us: u64) -> Tick {
        self.inner.tick(profile, time_us + self.offset_us)
    }
}

/// The terminal while top runs: the alternate screen (the user's scrollback is left alone), keys
/// read one at a time without echo, and all of it put back on drop, whatever ends top.
struct Screen {
    interactive: bool,
    saved: Option<libc::termios>,
    columns: usize,
    rows: usize,
}

impl Screen {
    fn open() -> Screen {
        let interactive = io::stdin().is_terminal() && io::stdout().is_terminal();
        let (mut columns, mut rows) = (100, 40);
        let mut saved = None;
        if interactive {
            // SAFETY: plain ioctl/tcgetattr/tcsetattr on our own standard streams, with
            // structures that live on this stack frame.
            unsafe {
                let mut size: libc::winsize = std::mem::zeroed();
                if libc::ioctl(1, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_col > 0 {
                    columns = size.ws_col as usize;
                    rows = size.ws_row as usize;
                }
                let mut term: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(0, &mut term) == 0 {
                    saved = Some(term);
                    // No line buffering and no echo; ISIG stays, so Ctrl-C still interrupts.
                    term.c_lflag &= !(libc::ICANON | libc::ECHO);
                    term.c_cc[libc::VMIN] = 1;
                    term.c_cc[libc::VTIME] = 0;
                    libc::tcsetattr(0, libc::TCSANOW, &term);
                }
            }
            print!("\x1b[?1049h\x1b[?25l");
            let _ = io::stdout().flush();
            // Keys: `q` quits as Ctrl-C does. The thread ends with the process.
            std::thread::spawn(|| {
                let mut byte = [0u8; 1];
                while let Ok(1) = io::stdin().read(&mut byte) {
                    if byte[0] == b'q' || byte[0] == b'Q' {
                        INTERRUPTED.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            });
        }
        Screen { interactive, saved, columns, rows }
    }

    fn draw(&self, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) {
        let mut frame: Vec<u8> = Vec::new();
        if self.interactive {
            frame.extend_from_slice(b"\x1b[H\x1b[2J");
        }
        if f(&mut frame).is_ok() {
            // In a terminal in raw mode a bare \n does not return the carriage.
            let text = if self.interactive {
                String::from_utf8_lossy(&frame).replace('\n', "\r\n")
            } else {
                String::from_utf8_lossy(&frame).into_owned()
            };
            let mut out = io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.interactive {
            print!("\x1b[?25h\x1b[?1049l");
            let _ = io::stdout().flush();
        }
        if let Some(term) = self.saved {
            // SAFETY: restores the settings read in `open`.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &term) };
        }
    }
}
