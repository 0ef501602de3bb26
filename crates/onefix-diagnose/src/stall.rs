//! Deadlocks and stalls in one moment of a process ([`Snapshot`], `onefix dump`).
//!
//! A wait-for graph: each thread blocked in a lock points at the thread that holds it.
//! - A pthread mutex records its owner: the edge is exact ([`HolderEvidence::MutexOwner`]).
//! - A Python `threading.Lock` records none: its holder is the thread whose stack is inside the
//!   block that lock guards (the body of `with lock:`, or the lines after `lock.acquire()`),
//!   the lock named by the same expression as the one the waiter takes
//!   ([`HolderEvidence::HeldBlock`]).
//!
//! A cycle in the graph is a deadlock. A process whose every thread waits, none for new work,
//! is stalled; one whose threads all wait for new work (accept, poll, sleep) is idle.

use std::collections::HashMap;
use std::path::Path;

use onefix_model::snapshot::{Blocked, Snapshot, ThreadSnapshot};
use onefix_model::{Frame, FrameKind};
use serde::Serialize;

use crate::names::SourceCache;
use crate::origin::{Origin, UserCode};

/// What one moment of a process says about its threads' waits.
#[derive(Clone, Debug, Serialize)]
pub struct StallReport {
    /// One entry per thread that waits, in the snapshot's order.
    pub waits: Vec<ThreadWait>,
    /// Each deadlock: the threads in the cycle, each waiting for the next one's lock.
    pub deadlocks: Vec<Vec<WaitEdge>>,
    pub state: ProcessState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessState {
    /// Some thread runs.
    Running,
    /// Every thread waits, and some for new work (a connection, an event, a timer).
    Idle,
    /// Every thread waits, none for new work: nothing will move unless something outside does.
    Stalled,
    /// Threads wait on each other in a cycle.
    Deadlocked,
}

/// Where and on what one thread waits.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadWait {
    pub tid: u64,
    pub name: Option<String>,
    /// The line it waits at: its innermost frame in the user's code, else its innermost frame.
    pub at: Option<Frame>,
    /// That line's source text.
    pub code: Option<String>,
    pub blocked: Blocked,
    /// The lock it waits for, as the code names it (`lock_b`, `self._lock`).
    pub lock: Option<String>,
    /// The thread that holds what it waits for, when known.
    pub holder: Option<Holder>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    pub tid: u64,
    pub evidence: HolderEvidence,
    /// Where the holder took the lock (the `with` or `acquire()` line), when known.
    pub since: Option<Frame>,
    pub since_code: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HolderEvidence {
    /// The mutex's own owner field names the thread.
    MutexOwner,
    /// The thread's stack is inside the block the lock guards.
    HeldBlock,
}

/// One step of a deadlock: `waiter` waits at its line for the lock `holder` holds.
#[derive(Clone, Debug, Serialize)]
pub struct WaitEdge {
    pub waiter: u64,
    pub holder: u64,
}

/// Reads the waits of `snapshot`. `user` says which frames are the user's code; `source`
/// reads the lines.
pub fn analyse(snapshot: &Snapshot, user: &UserCode, source: &mut SourceCache) -> StallReport {
    let held: Vec<Vec<HeldLock>> = snapshot.threads.iter().map(|t| locks_held(t, user, source)).collect();
    let mut waits = Vec::new();
    for t in &snapshot.threads {
        let Some(blocked) = t.blocked.clone().filter(|_| !t.running) else { continue };
        let at_frame = wait_frame(t, user);
        let code = at_frame.and_then(|f| line_text(f, user, source));
        let mut wait = ThreadWait {
            tid: t.tid,
            name: t.name.clone(),
            at: at_frame.cloned(),
            code,
            blocked: blocked.clone(),
            lock: None,
            holder: None,
        };
        if let Blocked::Futex { owner: Some(owner), name, .. } = &blocked {
            let owner = *owner;
            wait.lock = name.clone();
            if owner != t.tid {
                wait.holder =
                    Some(Holder { tid: owner, evidence: HolderEvidence::MutexOwner, since: None, since_code: None });
            }
        } else if let Blocked::Futex { .. } = blocked {
            // A Python thread waiting to take a lock: its innermost Python frame is at the
            // line that takes it.
            let taking = t.frames.iter().find(|f| f.frame.kind == FrameKind::Python).map(|f| &f.frame);
            if let Some(lock) = taking.and_then(|f| line_text(f, user, source)).and_then(|c| lock_taken(&c)) {
                let holder = snapshot.threads.iter().zip(&held).find_map(|(other, locks)| {
                    let found = locks.iter().find(|h| h.lock == lock && other.tid != t.tid)?;
                    Some(Holder {
                        tid: other.tid,
                        evidence: HolderEvidence::HeldBlock,
                        since: Some(found.at.clone()),
                        since_code: Some(found.code.clone()),
                    })
                });
                // A lock taken inside a library with no holder in sight is the library's own
                // wait (a join, a queue): said by the user's line, not by the library's name.
                let in_user_code = taking.is_some_and(|f| user.origin(f) == Origin::User);
                if holder.is_some() || in_user_code {
                    wait.lock = Some(lock);
                    wait.holder = holder;
                }
            }
        }
        waits.push(wait);
    }
    let deadlocks = cycles(&waits);
    let everyone_waits = snapshot.threads.iter().all(|t| !t.running && t.blocked.is_some());
    // Waiting for something from outside the process: a connection, an event, a timer.
    let for_work = |w: &ThreadWait| matches!(w.blocked, Blocked::Accept { .. } | Blocked::Poll | Blocked::Sleep);
    let state = if !deadlocks.is_empty() {
        ProcessState::Deadlocked
    } else if !everyone_waits || snapshot.threads.is_empty() {
        ProcessState::Running
    } else if waits.iter().any(for_work) {
        ProcessState::Idle
    } else {
        ProcessState::Stalled
    };
    StallReport { waits, deadlocks, state }
}

/// A lock a thread holds: the expression that names it, and the line that took it.
struct HeldLock {
    lock: String,
    at: Frame,
    code: String,
}

/// The locks a thread's Python frames hold: every `with X:` or `X.acquire()` whose block
/// encloses a frame's line.
fn locks_held(t: &ThreadSnapshot, user: &UserCode, source: &mut SourceCache) -> Vec<HeldLock> {
    let mut held = Vec::new();
    for f in t.frames.iter().map(|f| &f.frame).filter(|f| f.kind == FrameKind::Python && f.line > 0) {
        let Some(path) = user.resolve(&f.file) else { continue };
        for (line, code) in enclosing_lock_lines(source, &path, f.line) {
            if let Some(lock) = lock_taken(&code) {
                held.push(HeldLock { lock, at: Frame::python(f.function.clone(), f.file.clone(), line), code });
            }
        }
    }
    held
}

/// The lines above `line` in its function that take a lock whose block holds `line`: the
/// `with` headers that enclose it, and `acquire()` statements at its own level or an
/// enclosing one (their block ends at the matching `release()`).
fn enclosing_lock_lines(source: &mut SourceCache, path: &Path, line: u32) -> Vec<(u32, String)> {
    let Some(lines) = source.lines(path) else { return Vec::new() };
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let Some(own) = lines.get((line as usize).saturating_sub(1)) else { return Vec::new() };
    let mut indent = indent_of(own);
    let mut candidates = Vec::new();
    for (i, l) in lines.iter().enumerate().take(line.saturating_sub(1) as usize).rev() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') || indent_of(l) > indent {
            continue;
        }
        let header = indent_of(l) < indent;
        if header && (t.starts_with("def ") || t.starts_with("async def ") || t.starts_with("class ")) {
            break;
        }
        if (header || t.contains(".acquire(")) && lock_taken(t).is_some() {
            candidates.push((i as u32 + 1, t.to_owned()));
        }
        indent = indent.min(indent_of(l));
    }
    candidates
        .into_iter()
        .filter(|(at, _)| source.held_block(path, *at).is_some_and(|(first, last)| (first..=last).contains(&line)))
        .collect()
}

/// The lock a line takes, as the code names it: `with lock_b:` and `with self._lock:` give
/// `lock_b` and `self._lock`; `lock.acquire()` gives `lock`. Other `with` statements (files,
/// clients) take no lock a thread can wait on, but cannot be told apart by their text alone:
/// only lines where a thread was seen blocked in a lock, or that enclose such a line in
/// another thread's stack, are asked.
fn lock_taken(code: &str) -> Option<String> {
    let code = code.split('#').next().unwrap_or(code).trim();
    if let Some(rest) = code.strip_prefix("with ").and_then(|r| r.strip_suffix(':')) {
        let item = rest.split(',').next()?.trim();
        let item = item.split(" as ").next()?.trim();
        // A call makes a new object (a file, a client): no lock shared with another thread.
        return (!item.is_empty() && !item.contains('(')).then(|| item.to_owned());
    }
    let call = code.find(".acquire(")?;
    let expr = code[..call].trim();
    let expr = expr.rsplit(['=', ' ']).next()?.trim();
    (!expr.is_empty()).then(|| expr.to_owned())
}

/// The frame a thread waits at, as a person reads it: its innermost user frame, else its
/// innermost frame with a line, else its innermost frame.
fn wait_frame<'a>(t: &'a ThreadSnapshot, user: &UserCode) -> Option<&'a Frame> {
    let frames = || t.frames.iter().map(|f| &f.frame);
    frames()
        .find(|f| user.origin(f) == Origin::User)
        .or_else(|| frames().find(|f| f.line > 0))
        .or_else(|| frames().next())
}

fn line_text(f: &Frame, user: &UserCode, source: &mut SourceCache) -> Option<String> {
    let path = user.resolve(&f.file)?;
    source.line(&path, f.line).filter(|l| !l.is_empty())
}

/// The cycles of the wait-for graph (each waiter has at most one holder), each listed once,
/// from its smallest thread id.
fn cycles(waits: &[ThreadWait]) -> Vec<Vec<WaitEdge>> {
    let next: HashMap<u64, u64> = waits.iter().filter_map(|w| Some((w.tid, w.holder.as_ref()?.tid))).collect();
    let mut found: Vec<Vec<WaitEdge>> = Vec::new();
    for &start in next.keys() {
        let mut path = vec![start];
        let mut at = start;
        while let Some(&h) = next.get(&at) {
            if h == start {
                let min = *path.iter().min().unwrap();
                if min == start {
                    let edges = path.iter().map(|&w| WaitEdge { waiter: w, holder: next[&w] }).collect();
                    found.push(edges);
                }
                break;
            }
            if path.contains(&h) {
                break;
            }
            path.push(h);
            at = h;
        }
    }
    found.sort_by_key(|c| c[0].waiter);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use onefix_model::snapshot::SnapshotFrame;

    fn py(function: &str, file: &str, line: u32) -> SnapshotFrame {
        SnapshotFrame { frame: Frame::python(function, file, line), locals: Vec::new() }
    }

    fn thread(tid: u64, frames: Vec<SnapshotFrame>, blocked: Option<Blocked>) -> ThreadSnapshot {
        ThreadSnapshot { tid, name: None, running: blocked.is_none(), gil: false, frames, blocked }
    }

    fn snapshot(threads: Vec<ThreadSnapshot>) -> Snapshot {
        Snapshot {
            pid: 1,
            command: "python3 app.py".into(),
            runtime: "python 3.11.7".into(),
            paused_us: 0,
            taken_at_ms: 0,
            threads,
            notes: Vec::new(),
        }
    }

    fn futex(address: u64) -> Option<Blocked> {
        Some(Blocked::Futex { address, owner: None, name: None })
    }

    /// Writes `text` as app.py in a fresh directory: the user's code.
    fn program(text: &str, name: &str) -> (std::path::PathBuf, UserCode) {
        let dir = std::env::temp_dir().join(format!("onefix-stall-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("app.py"), text).unwrap();
        let user = UserCode::new([&dir], Some(&dir));
        (dir, user)
    }

    const TWO_LOCKS: &str = "\
import threading
lock_a = threading.Lock()
lock_b = threading.Lock()

def one():
    with lock_a:
        step()
        with lock_b:
            pass

def two():
    with lock_b:
        step()
        with lock_a:
            pass
";

    #[test]
    fn two_threads_taking_two_locks_in_opposite_orders_are_a_deadlock() {
        let (dir, user) = program(TWO_LOCKS, "cycle");
        let snap = snapshot(vec![
            thread(10, vec![py("<module>", "app.py", 20)], Some(Blocked::Child)),
            thread(11, vec![py("one", "app.py", 8), py("run", "/usr/lib/python3.11/threading.py", 975)], futex(0xa)),
            thread(12, vec![py("two", "app.py", 14), py("run", "/usr/lib/python3.11/threading.py", 975)], futex(0xb)),
        ]);
        let report = analyse(&snap, &user, &mut SourceCache::default());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(report.state, ProcessState::Deadlocked);
        assert_eq!(report.deadlocks.len(), 1);
        let cycle: Vec<(u64, u64)> = report.deadlocks[0].iter().map(|e| (e.waiter, e.holder)).collect();
        assert_eq!(cycle, [(11, 12), (12, 11)]);
        let w11 = report.waits.iter().find(|w| w.tid == 11).unwrap();
        assert_eq!(w11.lock.as_deref(), Some("lock_b"));
        let h = w11.holder.as_ref().unwrap();
        assert_eq!((h.tid, h.evidence, h.since.as_ref().map(|f| f.line)), (12, HolderEvidence::HeldBlock, Some(12)));
        assert_eq!(h.since_code.as_deref(), Some("with lock_b:"));
    }

    #[test]
    fn a_lock_waiter_whose_holder_runs_is_no_deadlock() {
        let (dir, user) = program(TWO_LOCKS, "running");
        let snap = snapshot(vec![
            thread(11, vec![py("one", "app.py", 8)], futex(0xa)),
            // Holds lock_b (inside its block at line 13) and runs.
            thread(12, vec![py("step", "app.py", 30), py("two", "app.py", 13)], None),
        ]);
        let report = analyse(&snap, &user, &mut SourceCache::default());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(report.state, ProcessState::Running);
        assert!(report.deadlocks.is_empty());
        assert_eq!(report.waits[0].holder.as_ref().map(|h| h.tid), Some(12));
    }

    #[test]
    fn mutex_owners_make_a_cycle_without_any_source() {
        let user = UserCode::new::<&str>([], None);
        let owned = |address, owner| Some(Blocked::Futex { address, owner: Some(owner), name: None });
        let native = |f: &str| SnapshotFrame { frame: Frame::native(f, "/srv/app"), locals: Vec::new() };
        let snap = snapshot(vec![
            thread(1, vec![native("main")], Some(Blocked::Child)),
            thread(2, vec![native("__lll_lock_wait"), native("worker_a")], owned(0x10, 3)),
            thread(3, vec![native("__lll_lock_wait"), native("worker_b")], owned(0x20, 2)),
            thread(4, vec![native("__lll_lock_wait"), native("worker_c")], owned(0x10, 3)),
        ]);
        let report = analyse(&snap, &user, &mut SourceCache::default());
        assert_eq!(report.state, ProcessState::Deadlocked);
        let cycle: Vec<(u64, u64)> = report.deadlocks[0].iter().map(|e| (e.waiter, e.holder)).collect();
        assert_eq!(cycle, [(2, 3), (3, 2)], "thread 4 waits on the cycle but is not in it");
    }

    #[test]
    fn every_thread_in_a_read_is_stalled_and_every_thread_in_accept_is_idle() {
        let user = UserCode::new::<&str>([], None);
        let read = Some(Blocked::Read { fd: 3, what: "TCP 127.0.0.1:5000 -> 127.0.0.1:9".into() });
        let stalled = analyse(
            &snapshot(vec![thread(1, vec![py("fetch", "/x/app.py", 3)], read.clone())]),
            &user,
            &mut SourceCache::default(),
        );
        assert_eq!(stalled.state, ProcessState::Stalled);
        let accept = Some(Blocked::Accept { fd: 4, what: "TCP 127.0.0.1:8000 (listening)".into() });
        let idle = analyse(
            &snapshot(vec![thread(1, vec![], accept), thread(2, vec![], read)]),
            &user,
            &mut SourceCache::default(),
        );
        assert_eq!(idle.state, ProcessState::Idle);
    }

    #[test]
    fn the_lock_a_line_takes() {
        assert_eq!(lock_taken("with lock_b:").as_deref(), Some("lock_b"));
        assert_eq!(lock_taken("with self._lock:  # guards cache").as_deref(), Some("self._lock"));
        assert_eq!(lock_taken("with self.cond as c:").as_deref(), Some("self.cond"));
        assert_eq!(lock_taken("got = registry.lock.acquire(timeout=5)").as_deref(), Some("registry.lock"));
        assert_eq!(lock_taken("with open(path) as f:"), None);
        assert_eq!(lock_taken("total += 1"), None);
    }
}
