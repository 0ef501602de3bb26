//! `onefix dump` for Python: every thread's stack now, read through py-spy with the target
//! paused for the read (so the stacks are of one moment), with local variables if asked, and
//! what each thread is blocked in (see [`crate::blocked`]).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use onefix_model::snapshot::{LocalVariable, Snapshot, SnapshotFrame, ThreadSnapshot};
use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy};

use crate::{blocked, process, CollectError};

#[derive(Clone, Copy, Debug, Default)]
pub struct DumpOptions {
    /// Read each frame's arguments and local variables.
    pub locals: bool,
    /// Merge native (C extension) frames into the Python stacks.
    pub native: bool,
}

/// Reads every thread of Python process `pid` once, pausing it for the read.
pub fn python_snapshot(pid: u32, opts: DumpOptions) -> Result<Snapshot, CollectError> {
    if !process::exists(pid) {
        return Err(CollectError::NoSuchProcess(pid));
    }
    let mut config = Config {
        blocking: LockingStrategy::Lock,
        native: opts.native,
        dump_locals: u64::from(opts.locals),
        include_idle: true,
        collect_thread_names: true,
        ..Config::default()
    };
    config.pid = Some(pid as py_spy::Pid);
    let mut spy = PythonSpy::new(pid as py_spy::Pid, &config).map_err(|e| open_error(pid, e))?;
    // What each thread is blocked in is read before the paused read: stopping a thread
    // interrupts its system call, which it restarts (running, for a moment) once let go.
    let before = blocked::thread_waits(pid);
    let state_of = |tid: u64| before.iter().find(|b| b.0 == tid).map_or((None, false), |b| (b.1.clone(), b.2));
    let read_started = Instant::now();
    let traces = spy.get_stack_traces().map_err(|e| open_error(pid, e))?;
    let paused_us = read_started.elapsed().as_micros() as u64;
    let taken_at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut threads: Vec<ThreadSnapshot> = traces
        .iter()
        .map(|trace| {
            let tid = trace.os_thread_id.unwrap_or(trace.thread_id);
            let (waits, running) = state_of(tid);
            ThreadSnapshot {
                tid,
                name: trace.thread_name.clone(),
                running,
                gil: trace.owns_gil,
                frames: trace
                    .frames
                    .iter()
                    .map(|f| SnapshotFrame {
                        frame: crate::python::convert_frame(f),
                        locals: f
                            .locals
                            .iter()
                            .flatten()
                            .map(|l| LocalVariable { name: l.name.clone(), arg: l.arg, repr: l.repr.clone() })
                            .collect(),
                    })
                    .collect(),
                blocked: waits,
            }
        })
        .collect();
    // py-spy lists the threads that run Python; the others (a C library's workers) are named
    // so that a stall among them is not missed.
    let mut notes = Vec::new();
    let others: Vec<u64> = before.iter().map(|b| b.0).filter(|t| !threads.iter().any(|s| s.tid == *t)).collect();
    if !others.is_empty() && !opts.native {
        notes.push(format!(
            "{} thread{} without Python frames (native threads of a library or the runtime) {} listed by state only; --native reads their stacks",
            others.len(),
            if others.len() == 1 { "" } else { "s" },
            if others.len() == 1 { "is" } else { "are" }
        ));
    }
    for tid in others {
        let (waits, running) = state_of(tid);
        threads.push(ThreadSnapshot {
            tid,
            name: blocked::thread_name(pid, tid),
            running,
            gil: false,
            frames: Vec::new(),
            blocked: waits,
        });
    }
    Ok(Snapshot {
        pid,
        command: process::cmdline(pid)
            .map(|a| a.join(" "))
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| process::exe(pid)),
        runtime: format!("python {}", spy.version),
        paused_us,
        taken_at_ms,
        threads,
        notes,
    })
}

fn open_error(pid: u32, e: anyhow::Error) -> CollectError {
    if crate::python::permission_denied(&e) {
        return CollectError::PermissionDenied { pid };
    }
    if !process::is_running(pid) {
        return CollectError::ExitedEarly { status: None };
    }
    let detail = format!("{e:#}");
    if detail.contains("Unsupported version") {
        return CollectError::UnsupportedPython { pid, detail };
    }
    if !process::looks_like_python(pid) {
        return CollectError::NotPython { pid, exe: process::exe(pid) };
    }
    CollectError::Unreadable { pid, detail }
}
