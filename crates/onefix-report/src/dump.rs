//! `onefix dump`: every thread's stack at one moment, as `py-spy dump` prints it, then what the
//! waits say: each deadlock with every thread's line and the lock it waits for, or a process
//! whose every thread waits.

use std::io::{self, Write};

use onefix_diagnose::stall::{HolderEvidence, ProcessState, StallReport, ThreadWait};
use onefix_model::snapshot::{Blocked, Snapshot, SnapshotFrame, ThreadSnapshot};
use onefix_model::{fmt::file_name, FrameKind};
use serde::Serialize;

/// The JSON of `onefix dump --json` (schema: crates/onefix-report/schema/dump.schema.json).
#[derive(Serialize)]
pub struct DumpJson<'a> {
    pub snapshot: &'a Snapshot,
    pub analysis: &'a StallReport,
}

pub fn write_dump_json<W: Write>(out: W, snapshot: &Snapshot, analysis: &StallReport) -> io::Result<()> {
    serde_json::to_writer_pretty(out, &DumpJson { snapshot, analysis }).map_err(io::Error::other)
}

/// Writes the dump for a terminal: the target's argv, thread names and paths are shown with
/// their control characters escaped.
pub fn write_dump<W: Write>(out: W, snapshot: &Snapshot, analysis: &StallReport) -> io::Result<()> {
    let mut out = onefix_model::fmt::ControlEscapingWriter::new(out);
    writeln!(out, "Process {}: {}", snapshot.pid, snapshot.command)?;
    let paused = if snapshot.paused_us == 0 {
        String::new()
    } else {
        format!(", paused {:.1} ms for the read", snapshot.paused_us as f64 / 1000.0)
    };
    let n = snapshot.threads.len();
    writeln!(out, "{} · {n} thread{}{paused}", snapshot.runtime, if n == 1 { "" } else { "s" })?;
    for note in &snapshot.notes {
        writeln!(out, "note: {note}")?;
    }
    for t in &snapshot.threads {
        writeln!(out)?;
        let wait = analysis.waits.iter().find(|w| w.tid == t.tid);
        write_thread(&mut out, t, wait)?;
    }
    writeln!(out)?;
    write_verdict(&mut out, snapshot, analysis)
}

fn thread_label(t: &ThreadSnapshot) -> String {
    match &t.name {
        Some(name) => format!("thread {} \"{name}\"", t.tid),
        None => format!("thread {}", t.tid),
    }
}

fn write_thread<W: Write>(out: &mut W, t: &ThreadSnapshot, wait: Option<&ThreadWait>) -> io::Result<()> {
    let state = if t.running {
        if t.gil {
            "running, holds the GIL".to_owned()
        } else {
            "running".to_owned()
        }
    } else {
        match (wait, &t.blocked) {
            (Some(w), _) if w.lock.is_some() => {
                let lock = w.lock.as_deref().unwrap_or_default();
                match &w.holder {
                    Some(h) => format!("waiting for the lock `{lock}`, held by thread {}", h.tid),
                    None => format!("waiting for the lock `{lock}`"),
                }
            }
            (Some(w), _) if w.holder.is_some() => {
                format!("waiting for a mutex held by thread {}", w.holder.as_ref().map_or(0, |h| h.tid))
            }
            (_, Some(b)) => format!("waiting: {}", b.describe()),
            (_, None) => "stopped outside a system call".to_owned(),
        }
    };
    let mut header = thread_label(t);
    header[..1].make_ascii_uppercase();
    writeln!(out, "{header} ({state})")?;
    if t.frames.is_empty() {
        writeln!(out, "    (no stack read)")?;
    }
    for f in &t.frames {
        write_frame(out, f)?;
    }
    Ok(())
}

fn write_frame<W: Write>(out: &mut W, f: &SnapshotFrame) -> io::Result<()> {
    let fr = &f.frame;
    let place = match (fr.kind, fr.file.is_empty()) {
        (_, false) if fr.line > 0 => format!("{}:{}", fr.file, fr.line),
        (_, false) => fr.file.clone(),
        (FrameKind::Native, true) if !fr.module.is_empty() => file_name(&fr.module).to_owned(),
        _ => "?".to_owned(),
    };
    writeln!(out, "    {} ({place})", fr.function)?;
    let (args, locals): (Vec<_>, Vec<_>) = f.locals.iter().partition(|l| l.arg);
    for (title, vars) in [("Arguments", args), ("Locals", locals)] {
        if vars.is_empty() {
            continue;
        }
        writeln!(out, "        {title}:")?;
        for v in vars {
            writeln!(out, "            {}: {}", v.name, v.repr.as_deref().unwrap_or("(unreadable)"))?;
        }
    }
    Ok(())
}

/// "app.py:14 `with lock_b:`", or the function where no line is known.
fn place(w: &ThreadWait) -> String {
    let at = match &w.at {
        Some(f) if f.line > 0 && !f.file.is_empty() => format!("{}:{}", file_name(&f.file), f.line),
        Some(f) => f.function.clone(),
        None => "an unknown line".to_owned(),
    };
    match &w.code {
        Some(code) => format!("{at} `{code}`"),
        None => at,
    }
}

fn name_of(snapshot: &Snapshot, tid: u64) -> String {
    snapshot.threads.iter().find(|t| t.tid == tid).map(thread_label).unwrap_or_else(|| format!("thread {tid}"))
}

fn write_verdict<W: Write>(out: &mut W, snapshot: &Snapshot, analysis: &StallReport) -> io::Result<()> {
    for (i, cycle) in analysis.deadlocks.iter().enumerate() {
        let n = cycle.len();
        let title = if analysis.deadlocks.len() > 1 { format!("Deadlock {}", i + 1) } else { "Deadlock".to_owned() };
        writeln!(out, "{title}: {n} threads wait for each other, and none can go on")?;
        for edge in cycle {
            let Some(w) = analysis.waits.iter().find(|w| w.tid == edge.waiter) else { continue };
            let Some(h) = &w.holder else { continue };
            let what = match (&w.lock, h.evidence) {
                (Some(lock), _) => format!("the lock `{lock}`"),
                (None, HolderEvidence::MutexOwner) => match &w.blocked {
                    Blocked::Futex { address, .. } => format!("the mutex at 0x{address:x}"),
                    _ => "the mutex".to_owned(),
                },
                (None, HolderEvidence::HeldBlock) => "the lock".to_owned(),
            };
            let since = match (&h.since, &h.since_code) {
                (Some(f), Some(code)) => format!(" since {}:{} `{code}`", file_name(&f.file), f.line),
                (Some(f), None) => format!(" since {}:{}", file_name(&f.file), f.line),
                _ => {
                    // A mutex's owner field says who, not where: say where the owner is now.
                    match analysis.waits.iter().find(|o| o.tid == h.tid) {
                        Some(o) => format!(" (it is at {})", place(o)),
                        None => String::new(),
                    }
                }
            };
            writeln!(
                out,
                "  {} waits at {} for {what}, which {} holds{since}",
                name_of(snapshot, w.tid),
                place(w),
                name_of(snapshot, h.tid)
            )?;
        }
        let locks: Vec<&str> =
            cycle.iter().filter_map(|e| analysis.waits.iter().find(|w| w.tid == e.waiter)?.lock.as_deref()).collect();
        if locks.len() == n {
            writeln!(
                out,
                "  fix: take these locks in one order in every thread (e.g. always `{}` before `{}`), or hold one at a time",
                locks[n - 1],
                locks[0]
            )?;
        } else {
            writeln!(out, "  fix: take these locks in one order in every thread, or hold one at a time")?;
        }
    }
    let waiting: Vec<&ThreadWait> = analysis.waits.iter().collect();
    match analysis.state {
        ProcessState::Deadlocked | ProcessState::Running => {
            if analysis.state == ProcessState::Running {
                let running = snapshot.threads.iter().filter(|t| t.running).count();
                writeln!(out, "{running} of {} threads running; no deadlock among the others", snapshot.threads.len())?;
            }
        }
        ProcessState::Stalled => {
            writeln!(
                out,
                "Stalled: every thread waits, and none for new work; nothing moves until something outside does"
            )?;
            for w in waiting {
                writeln!(out, "  {} waits at {} for {}", name_of(snapshot, w.tid), place(w), w.blocked.describe())?;
            }
        }
        ProcessState::Idle => {
            writeln!(out, "Idle: every thread waits, some for new work (a connection, an event, a timer)")?;
            for w in waiting {
                writeln!(out, "  {} waits at {} for {}", name_of(snapshot, w.tid), place(w), w.blocked.describe())?;
            }
        }
    }
    Ok(())
}
