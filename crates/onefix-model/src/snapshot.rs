//! One moment of a live process: every thread's stack now, and what each thread is blocked in
//! (`onefix dump`). Collectors fill it; the diagnosis reads its waits for deadlocks and stalls;
//! the writers print it or serialize it as the JSON contract.

use serde::{Deserialize, Serialize};

use crate::Frame;

/// Every thread of one process, read at one moment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    /// The command line, or the executable when it cannot be read.
    pub command: String,
    /// "python 3.11.7" or "native".
    pub runtime: String,
    /// How long the target's threads were stopped for the read, in microseconds; 0 when it was
    /// read without stopping it.
    pub paused_us: u64,
    /// Unix time of the read, in milliseconds.
    pub taken_at_ms: u64,
    pub threads: Vec<ThreadSnapshot>,
    /// What the read could not see, one sentence each.
    pub notes: Vec<String>,
}

/// One thread at the moment of the read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadSnapshot {
    /// The OS thread id.
    pub tid: u64,
    pub name: Option<String>,
    /// On a CPU or runnable (kernel state R) at the moment of the read.
    pub running: bool,
    /// Holds the GIL (Python only).
    pub gil: bool,
    /// Innermost first.
    pub frames: Vec<SnapshotFrame>,
    /// The system call the thread is blocked in, when it is blocked in one.
    pub blocked: Option<Blocked>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotFrame {
    #[serde(flatten)]
    pub frame: Frame,
    /// Arguments and local variables (Python, `--locals`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locals: Vec<LocalVariable>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LocalVariable {
    pub name: String,
    /// An argument of the function rather than a local.
    pub arg: bool,
    /// A short rendering of the value; `None` when it could not be read.
    pub repr: Option<String>,
}

/// What a thread that is not running waits in, from the system call it is blocked in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Blocked {
    /// A futex wait: a lock, a condition variable, a semaphore, a GIL. `owner` is the thread
    /// that holds it when the futex is a mutex that records its owner (a pthread mutex).
    Futex {
        address: u64,
        owner: Option<u64>,
        /// The variable the futex is, when a symbol names it (a global `pthread_mutex_t`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Reading or receiving from a descriptor; `what` says what it is ("TCP 127.0.0.1:5312 ->
    /// 127.0.0.1:8080", "pipe", a file path).
    Read {
        fd: i64,
        what: String,
    },
    /// Writing or sending to a descriptor.
    Write {
        fd: i64,
        what: String,
    },
    /// Waiting for a connection on a listening socket.
    Accept {
        fd: i64,
        what: String,
    },
    /// Connecting to a server.
    Connect {
        fd: i64,
        what: String,
    },
    /// Waiting for any of several descriptors (poll, select, epoll).
    Poll,
    Sleep,
    /// Waiting for a child process to end.
    Child,
    /// Another system call, by number.
    Other {
        syscall: u64,
    },
}

impl Blocked {
    /// In words, for a person: "a lock (futex 0x7f..)", "a read on TCP ...".
    pub fn describe(&self) -> String {
        match self {
            Blocked::Futex { name: Some(name), .. } => format!("the lock `{name}`"),
            Blocked::Futex { address, .. } => format!("a lock or condition (futex 0x{address:x})"),
            Blocked::Read { what, .. } => format!("a read on {what}"),
            Blocked::Write { what, .. } => format!("a write to {what}"),
            Blocked::Accept { what, .. } => format!("a connection on {what}"),
            Blocked::Connect { what, .. } => format!("a connection to {what}"),
            Blocked::Poll => "poll/select on several descriptors".to_owned(),
            Blocked::Sleep => "a sleep".to_owned(),
            Blocked::Child => "a child process to end".to_owned(),
            Blocked::Other { syscall } => format!("system call {syscall}"),
        }
    }
}
