//! What a report says beside its findings, as hyperfine says its warnings: each kind of note a
//! variant with the figures it carries, worded in one place. Collectors and commands add
//! their own sentences as [`Note::Said`].

use std::fmt;

use serde::{Serialize, Serializer};

#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// Threads idle for want of work, left out of the shares.
    Idle {
        percent: f64,
    },
    /// Of the idle time, what the kernel showed waiting for work from outside: servers' workers
    /// waiting for a connection or a client's next request, and supervisors waiting to be woken.
    WaitingForClients {
        clients_percent: f64,
        supervisors_percent: f64,
    },
    /// A program idle nearly all the time, and where its threads wait.
    StalledAt {
        percent: f64,
        places: String,
    },
    /// CPU mode: the program was seldom on a CPU.
    MostlyWaiting {
        cpu_percent: f64,
    },
    /// Too few busy samples to name a line (see `MIN_BUSY_SAMPLES`).
    TooFewSamples {
        busy: u64,
        total: u64,
        idle_percent: Option<f64>,
        needed: u64,
    },
    /// A line that ran while its module was imported: start-up.
    Importing {
        at: String,
        percent: f64,
    },
    /// A line seen in too few time windows: start-up or a one-off.
    OneOff {
        at: String,
        percent: f64,
        recurrence_percent: f64,
    },
    IncompleteStacks {
        percent: f64,
    },
    RecoveredTorn {
        percent: f64,
    },
    Bracketed {
        percent: f64,
    },
    /// Reads that caught a line after its call had returned, charged to the line that made it.
    StaleReads {
        percent: f64,
    },
    ParkedInBusy {
        percent: f64,
    },
    OutsideUser {
        percent: f64,
    },
    CutShort {
        percent: f64,
    },
    NoUserCode {
        dirs: String,
        /// Where most of the time ran instead, and its share of the working threads' time.
        instead: Option<(f64, crate::origin::Exclusion)>,
    },
    /// Python threads waited for the GIL this share of the busy time (charged to its holders).
    GilQueue {
        percent: f64,
    },
    /// The recording was driven by an open-loop load (a fixed rate): what a gain means there.
    OpenLoad {
        target_rps: f64,
        achieved_rps: f64,
        /// Whether the server kept up with the rate (served it, nothing left unsent).
        kept_up: bool,
    },
    /// The program waited this share of the time for child processes the recording did not
    /// sample (a process pool's workers).
    ChildProcesses {
        percent: f64,
    },
    /// A sentence from a collector or a command (asyncio, exec, the memory facts).
    Said(String),
}

impl Note {
    /// Whether the note's text contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.to_string().contains(needle)
    }
}

impl From<String> for Note {
    fn from(s: String) -> Note {
        Note::Said(s)
    }
}

impl From<&str> for Note {
    fn from(s: &str) -> Note {
        Note::Said(s.to_owned())
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Idle { percent } => write!(
                f,
                "threads idle for want of work (waiting on a queue, for connections, for other threads, or sleeping beside threads that work): {percent:.0}% of the sampled time, not counted as cost"
            ),
            Note::WaitingForClients { clients_percent, supervisors_percent } => {
                let mut parts = Vec::new();
                if *clients_percent >= 0.5 {
                    parts.push(format!(
                        "{clients_percent:.0}% was workers waiting for a connection or a client's next request"
                    ));
                }
                if *supervisors_percent >= 0.5 {
                    parts.push(format!(
                        "{supervisors_percent:.0}% a supervisor (a pre-fork server's master, a pool's manager) waiting to be woken"
                    ));
                }
                write!(
                    f,
                    "of the sampled time, {}: left out, as the kernel showed them blocked on listening sockets, accepted connections or pipes only",
                    parts.join(", and ")
                )
            }
            Note::StalledAt { percent, places } => write!(
                f,
                "the threads waited for work or for each other {percent:.0}% of the time, mostly at {places}: if the program should have been busy, that is where it stalls"
            ),
            Note::MostlyWaiting { cpu_percent } => write!(
                f,
                "the program was on a CPU in only {cpu_percent:.0}% of the samples: its time goes to waiting, so record in wall mode to see where"
            ),
            Note::TooFewSamples { busy, total, idle_percent, needed } => {
                let idle = idle_percent.map(|p| format!(", idle {p:.1}% of the time")).unwrap_or_default();
                write!(
                    f,
                    "too few busy samples ({busy} of {total}{idle}) to name a line: at least {needed} are needed; drive it with --load, or record longer or at a higher --rate"
                )
            }
            Note::Importing { at, percent } => write!(
                f,
                "{at} took {percent:.0}% while its module was being imported (start-up, once per process), so it is not a finding"
            ),
            Note::OneOff { at, percent, recurrence_percent } => write!(
                f,
                "{at} took {percent:.0}% but only in {recurrence_percent:.0}% of the time windows (start-up or a one-off), so it is not a finding"
            ),
            Note::IncompleteStacks { percent } => write!(
                f,
                "{percent:.0}% of the samples had an incomplete stack (read while the target changed it) and were left out"
            ),
            Note::RecoveredTorn { percent } => write!(
                f,
                "{percent:.0}% of the samples were read torn and charged to the one line that complete reads with the same innermost frame were charged to"
            ),
            Note::Bracketed { percent } => write!(
                f,
                "{percent:.0}% of the samples were read empty or torn and charged to the line their thread was read in just before and after"
            ),
            Note::ChildProcesses { percent } => write!(
                f,
                "the program waited for its worker processes (a process pool) {percent:.0}% of the time, and this recording did not sample them (recorded with --no-subprocesses, or they could not be read): record without --no-subprocesses to see what they do"
            ),
            Note::StaleReads { percent } => write!(
                f,
                "{percent:.0}% of the samples caught a line after the call it made had returned (a running thread is read innermost frame first) and were charged to the line that made the call"
            ),
            Note::ParkedInBusy { percent } => write!(
                f,
                "{percent:.0}% of the working threads' time was spent waiting in an event loop or on other threads, charged to no line"
            ),
            Note::OutsideUser { percent } => write!(
                f,
                "{percent:.0}% of the working threads' time ran outside your code (start-up, imports, the interpreter or runtime)"
            ),
            Note::CutShort { percent } => write!(
                f,
                "{percent:.0}% of the working threads' time is in native stacks cut short before they reached your code (a frame larger than the stack bytes copied per sample, see --stack-bytes, or code without unwind information), so it is charged to no line"
            ),
            Note::NoUserCode { dirs, instead } => {
                write!(f, "no sample ran in your code (taken to be under {dirs})")?;
                match instead {
                    Some((percent, crate::origin::Exclusion::Package { dir, name })) => write!(
                        f,
                        "; {percent:.0}% of the time ran in the installed package `{name}` ({dir}), which is never taken as your code unless you name it: --package {name} or --user-code {dir}"
                    ),
                    Some((percent, crate::origin::Exclusion::Stdlib { dir })) => write!(
                        f,
                        "; {percent:.0}% of the time ran in the standard library ({dir}), which is never taken as your code unless you name a directory of it with --user-code"
                    ),
                    None => f.write_str("; pass --user-code DIR to say where it is"),
                }
            }
            Note::GilQueue { percent } => write!(
                f,
                "Python threads queued for the GIL {percent:.0}% of the working threads' time (charged to the lines that held it): only one thread of a process runs Python code at a time, so more threads do not add speed; for CPU-bound work use processes, or native code that releases the GIL"
            ),
            Note::OpenLoad { target_rps, achieved_rps, kept_up: true } => write!(
                f,
                "the load asked {target_rps:.0} requests/s and the server served them all ({achieved_rps:.0}/s): a fix shortens each request's time, which is what the findings' gains are of; the throughput stays at the rate asked (a closed-loop load, --load without --rate, shows what the server could serve)"
            ),
            Note::OpenLoad { target_rps, achieved_rps, kept_up: false } => write!(
                f,
                "the load asked {target_rps:.0} requests/s and the server fell behind ({achieved_rps:.0}/s served): requests queued over the run, so its latency was mostly queueing, which a fix that lets it keep up removes too; the findings' gains are of the work per request, and the latency may gain more"
            ),
            Note::Said(s) => f.write_str(s),
        }
    }
}

/// In the JSON report a note is its sentence.
impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
