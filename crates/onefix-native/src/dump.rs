//! `onefix dump` for native programs: every thread stopped at once (ptrace, without signals
//! the program could see), its registers and a copy of its stack taken, every thread let go,
//! and only then unwound and symbolized, so the target is paused only for the copies.

use std::io;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use framehop::x86_64::CacheX86_64;
use onefix_collect::{blocked, process};
use onefix_model::snapshot::{Blocked, Snapshot, SnapshotFrame, ThreadSnapshot};

use crate::{NativeError, Symbolizer};

/// Bytes of each thread's stack copied, from its stack pointer: deep enough for hundreds of
/// frames, small enough that copying every thread keeps the pause short.
const STACK_COPY: usize = 256 << 10;

/// One stopped thread's state, copied while it was stopped.
struct Copied {
    tid: u64,
    regs: [u64; 3],
    stack: Vec<u8>,
}

/// Threads seized by this process: each is let go when this is dropped, whatever happened, so
/// that no thread of the target is ever left stopped.
struct Seized {
    tids: Vec<u64>,
}

impl Drop for Seized {
    fn drop(&mut self) {
        for &tid in &self.tids {
            // SAFETY: PTRACE_DETACH of a thread this thread seized; it fails harmlessly for a
            // thread that exited meanwhile.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, tid as libc::pid_t, 0usize, 0usize) };
        }
    }
}

/// Reads every thread of native process `pid` once.
pub fn native_snapshot(pid: u32) -> Result<Snapshot, NativeError> {
    if !process::is_running(pid) {
        return Err(NativeError::NoSuchProcess(pid));
    }
    // What each thread is blocked in is read before it is stopped: the system call it sits in
    // does not change while it waits, and /proc reads it without a stop.
    let before = blocked::thread_waits(pid);
    let paused = Instant::now();
    let copies = copy_threads(pid, &before.iter().map(|b| b.0).collect::<Vec<_>>())?;
    let paused_us = paused.elapsed().as_micros() as u64;
    let taken_at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);

    let mut symbolizer = Symbolizer::new();
    symbolizer.load_maps(pid);
    let mut cache = CacheX86_64::new();
    let mut addrs = Vec::new();
    let mut threads = Vec::new();
    let mut notes = Vec::new();
    for (tid, waits, running) in before {
        let mut frames = Vec::new();
        match copies.iter().find(|c| c.tid == tid) {
            Some(c) => {
                symbolizer.unwind(pid, &mut cache, c.regs, &c.stack, &mut addrs);
                for &addr in &addrs {
                    frames.extend(
                        symbolizer
                            .frames_at(pid, addr)
                            .iter()
                            .map(|f| SnapshotFrame { frame: f.clone(), locals: Vec::new() }),
                    );
                }
            }
            None => notes.push(format!("thread {tid} ended while the others were read")),
        }
        // A mutex that is a global variable is named by its symbol (`journal`).
        let waits = waits.map(|w| match w {
            Blocked::Futex { address, owner, .. } => {
                Blocked::Futex { address, owner, name: symbolizer.variable_at(pid, address) }
            }
            other => other,
        });
        threads.push(ThreadSnapshot {
            tid,
            name: blocked::thread_name(pid, tid),
            running,
            gil: false,
            frames,
            blocked: waits,
        });
    }
    if crate::heap_kind(&process::exe(pid)) == Some(crate::HeapKind::Go) {
        notes.push("a Go program: these are its OS threads; its goroutines are scheduled on them and are not listed (send it SIGQUIT for their stacks)".to_owned());
    }
    Ok(Snapshot {
        pid,
        command: process::cmdline(pid)
            .map(|a| a.join(" "))
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| process::exe(pid)),
        runtime: "native".to_owned(),
        paused_us,
        taken_at_ms,
        threads,
        notes,
    })
}

/// Stops every thread in `tids`, copies its registers and stack, and lets them all go.
fn copy_threads(pid: u32, tids: &[u64]) -> Result<Vec<Copied>, NativeError> {
    // Read before the stop: the stacks' mappings are where they were a moment before.
    let ranges = mapped_ranges(pid);
    let mut seized = Seized { tids: Vec::new() };
    for &tid in tids {
        // SAFETY: PTRACE_SEIZE attaches without stopping or signalling the thread.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid as libc::pid_t, 0usize, 0usize) } != 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // It exited since it was listed.
                Some(libc::ESRCH) => continue,
                Some(libc::EPERM) if !process::is_running(pid) => return Err(NativeError::NoSuchProcess(pid)),
                Some(libc::EPERM) => return Err(NativeError::Attach { pid, tid, source: err }),
                _ => return Err(NativeError::Attach { pid, tid, source: err }),
            }
        }
        seized.tids.push(tid);
        // SAFETY: PTRACE_INTERRUPT of a seized thread: a group-stop-like stop, no signal.
        unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid as libc::pid_t, 0usize, 0usize) };
    }
    let mut copies = Vec::new();
    for &tid in &seized.tids {
        let mut status = 0;
        // SAFETY: waiting for the stop of a thread this thread traces.
        let waited = unsafe { libc::waitpid(tid as libc::pid_t, &mut status, libc::__WALL) };
        if waited != tid as libc::pid_t || !libc::WIFSTOPPED(status) {
            continue;
        }
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS fills a user_regs_struct of a stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid as libc::pid_t, 0usize, &mut regs as *mut _) } != 0 {
            continue;
        }
        let stack = copy_stack(pid, regs.rsp, &ranges);
        copies.push(Copied { tid, regs: [regs.rbp, regs.rsp, regs.rip], stack });
    }
    drop(seized);
    Ok(copies)
}

/// Up to [`STACK_COPY`] bytes from `sp` up, stopping at the end of the mapping that holds it.
fn copy_stack(pid: u32, sp: u64, ranges: &[(u64, u64)]) -> Vec<u8> {
    let end = ranges.iter().find(|r| (r.0..r.1).contains(&sp)).map_or(sp + STACK_COPY as u64, |r| r.1);
    let len = ((end - sp) as usize).min(STACK_COPY);
    let mut stack = vec![0u8; len];
    if blocked::read_memory(pid, sp, &mut stack).is_none() {
        stack.clear();
    }
    stack
}

/// Every mapping of `pid`, as (start, end).
fn mapped_ranges(pid: u32) -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
        })
        .collect()
}
