//! Named results kept with a recording beside its samples, typed: the machine it was made on,
//! the RSS and counters of a memory recording, and the load that drove it. Each is stored as
//! JSON under its name (see [`crate::recording::RecordingWriter::write_attachment`]); the load's
//! own type lives in onefix-load, so it is read there from [`LOAD`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{MemoryInfo, Profile};

/// The machine a recording was made on.
pub const MACHINE: &str = "machine";
/// A memory recording's RSS over time, live heap and counters ([`MemoryInfo`]).
pub const MEMORY: &str = "memory";
/// The result of the load that drove the target (`record --load`), as onefix-load writes it.
pub const LOAD: &str = "load";

/// How long a program onefix started ran before the recording's time zero ([`ProgramStart`]).
pub const PROGRAM_START: &str = "program-start";

/// A program onefix started: the time from starting it to the recording's time zero (the
/// interpreter's start-up, and the sampler finding and attaching to it), which no sample
/// covers. A user timing the program waits for it, and a fix leaves it to pay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramStart {
    pub unsampled_us: u64,
}

/// How long a program onefix started and saw end took, by the clock and on the CPUs
/// ([`RunTimes`]): a batch fix is judged by this first.
pub const RUN_TIMES: &str = "run-times";

/// A program's own run, as a user timing it would see it: from its start to its end, and the
/// CPU time the kernel charged to it and the children it waited for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunTimes {
    /// From starting the command to seeing it end. Its end is seen at a sampler tick, so this
    /// is late by up to `resolution_s`.
    pub wall_s: f64,
    /// User and system time of the program and its reaped children (the kernel's rusage).
    pub user_s: f64,
    pub system_s: f64,
    /// How late the end may have been seen: the longest interval between two ticks.
    pub resolution_s: f64,
}

/// How a recording was asked to be read ([`View`]): what the user named as their code.
pub const VIEW: &str = "view";

/// `--user-code` and `--package` as given to `record`, so that every command reading the
/// recording later sees the same code as the user's unless told otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    /// `--user-code` directories, made absolute; empty when none was given.
    pub user_code: Vec<String>,
    /// `--package` names.
    pub packages: Vec<String>,
}

/// Reads that caught a line of the user's code after its call had returned, charged to the line
/// that made the call ([`StaleReads`]): set by the diagnosis before it reads the samples.
pub const STALE_READS: &str = "stale-reads";

/// The weight of the reads moved to the line that made their call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleReads {
    pub weight: u64,
}

/// Where a profile recorded by another tool came from ([`ImportedFrom`]).
pub const IMPORTED: &str = "imported";

/// A profile onefix did not record: its format and the file or URL it was read from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedFrom {
    /// `pprof profile`, `folded-stacks file`, `speedscope profile`.
    pub format: String,
    pub source: String,
}

/// A fleet's aggregate read back from ClickHouse ([`FleetSummary`]): what the window held,
/// what reading it cost, and each finding's figures across the fleet.
pub const FLEET: &str = "fleet";

/// What `onefix fleet report` read, and each finding's figures across the fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetSummary {
    pub service: String,
    /// The window asked for, in seconds since the Unix epoch: [from, to).
    pub from_unix_s: u64,
    pub to_unix_s: u64,
    pub version: Option<String>,
    pub host: Option<String>,
    /// Seconds the samples span within the window.
    pub span_s: f64,
    pub hosts: u64,
    pub batches: u64,
    /// Aggregate rows and bytes ClickHouse sent back, and the rows and bytes it read to make
    /// them (its own statistics), over every query of the report.
    pub rows_returned: u64,
    pub bytes_returned: u64,
    pub rows_read: u64,
    pub bytes_read: u64,
    /// Each finding's figures, in the diagnosis's order.
    pub lines: Vec<FleetLine>,
}

/// One finding's line across the fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetLine {
    pub file: String,
    pub line: u32,
    /// Its share of every sample of the service in the window (every thread, waiting or not).
    pub sampled_share: f64,
    /// CPU seconds at the line over the window's seconds: the cores it keeps busy on average,
    /// all hosts together.
    pub cores_busy: f64,
    /// Hosts where the line was sampled, of the window's hosts.
    pub hosts_seen: u64,
    pub hosts_total: u64,
    /// Its share of the service's samples in each equal part of the window, oldest first;
    /// `None` for a part without samples.
    pub trend: Vec<Option<f64>>,
}

/// Which thread ended each blocked interval of a native recording ([`Wakes`]).
pub const WAKES: &str = "wakes";

/// The kernel's wake-ups (`sched:sched_waking`) that ended blocked intervals of a native
/// recording: for each interval that was charged as samples, the thread that woke it. Only
/// those intervals are kept, so the list grows with the samples, not with the wake-ups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wakes {
    pub edges: Vec<WakeEdge>,
}

/// One blocked interval and the thread that ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeEdge {
    /// The thread that waited (an index into the profile's threads).
    pub thread: u32,
    /// The interval, µs since the recording's start: from its first sample's time to the
    /// switch back in.
    pub from_us: u64,
    pub to_us: u64,
    /// The thread that woke it (an index into the profile's threads).
    pub waker: u32,
}

/// What the diagnosis needs to know of the machine a recording was made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs the target could run on: the work a fix leaves still runs on them.
    pub cpus: u32,
}

impl Machine {
    pub fn this() -> Machine {
        Machine { cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32) }
    }
}

impl Profile {
    /// Keeps `value` with the profile under `name`, and gives the bytes stored (for a writer
    /// that streams the recording).
    pub fn attach<T: Serialize>(&mut self, name: &str, value: &T) -> Vec<u8> {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        self.attachments.insert(name.to_owned(), bytes.clone());
        bytes
    }

    /// The attachment `name`, if the recording has it and it reads as a `T`.
    pub fn attachment<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.attachments.get(name).and_then(|b| serde_json::from_slice(b).ok())
    }

    /// The machine the recording was made on; `None` for recordings made before it was kept.
    pub fn machine(&self) -> Option<Machine> {
        self.attachment(MACHINE)
    }

    /// What ran of a program onefix started before its first sample, when it was kept.
    pub fn program_start(&self) -> Option<ProgramStart> {
        self.attachment(PROGRAM_START)
    }

    /// The program's own run time, when onefix started it and saw it end.
    pub fn run_times(&self) -> Option<RunTimes> {
        self.attachment(RUN_TIMES)
    }

    /// `--user-code` and `--package` as given to `record`, when any was.
    pub fn view(&self) -> Option<View> {
        self.attachment(VIEW)
    }

    /// The wake-ups that ended a native recording's blocked intervals, when the kernel gave them.
    pub fn wakes(&self) -> Option<Wakes> {
        self.attachment(WAKES)
    }

    /// Where the profile came from, when another tool recorded it.
    pub fn imported_from(&self) -> Option<ImportedFrom> {
        self.attachment(IMPORTED)
    }

    /// What a fleet report read from ClickHouse, for a profile rebuilt from a fleet's aggregate.
    pub fn fleet(&self) -> Option<FleetSummary> {
        self.attachment(FLEET)
    }

    /// A memory recording's facts beyond its samples.
    pub fn memory_info(&self) -> Option<MemoryInfo> {
        self.attachment(MEMORY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Meta;

    #[test]
    fn attachments_read_back_as_they_were_kept() {
        let mut p = Profile::new(Meta::default());
        assert_eq!(p.machine(), None);
        p.attach(MACHINE, &Machine { cpus: 2 });
        assert_eq!(p.machine(), Some(Machine { cpus: 2 }));
        p.attachments.insert(MEMORY.into(), b"not json".to_vec());
        assert!(p.memory_info().is_none(), "a damaged attachment reads as absent");
    }
}
