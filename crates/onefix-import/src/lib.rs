//! Profiles recorded by other tools, read into onefix's one model ([`onefix_model::Profile`]) so
//! that the same diagnosis and every writer run on them unchanged:
//!
//! | format | reader | what it lacks |
//! |---|---|---|
//! | pprof (`profile.proto`, gzipped or not: Go's `runtime/pprof` and `net/http/pprof`, the Rust `pprof` crate, onefix's `--pprof`) | [`pprof`] | sample times; threads and waits unless labelled |
//! | folded stacks (`root;…;leaf count`: `stackcollapse-perf.pl`, inferno, `py-spy record --format raw`, onefix's `--folded`) | [`folded`] | sample times, the sampling interval, thread states |
//! | speedscope JSON (`sampled` and `evented` profiles) | [`speedscope`] | thread states; sample times in `sampled` profiles |
//!
//! The format is told by the content ([`detect`]), not by the file's name. What a format lacks
//! is kept in [`Lacks`], which the diagnosis is told (no recurrence without sample times) and
//! the report says in one note ([`Imported::note`]).

use onefix_model::{Profile, Sample, StackId, ThreadId, ThreadState};

pub mod fetch;
pub mod folded;
pub mod pprof;
pub mod speedscope;

pub use fetch::{fetch, is_url, FetchError};

/// The most of a profile onefix reads whole, from a file or a URL: 512 MiB. (onefix's own
/// recordings are streamed and have no such bound.)
pub const MAX_PROFILE_BYTES: u64 = 512 << 20;

/// Reads `input` to its end, or to `limit` bytes: `Ok(None)` when there was more. The buffer
/// grows with what actually comes and never past `limit`, so a source that never ends
/// (`/dev/zero`, a server that keeps sending) costs at most `limit` of memory.
pub fn read_at_most(mut input: impl std::io::Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut bytes: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let room = (limit - bytes.len()).min(chunk.len());
        if room == 0 {
            // Full: one more byte says whether the input went on.
            let mut probe = [0u8; 1];
            return loop {
                match input.read(&mut probe) {
                    Ok(0) => break Ok(Some(bytes)),
                    Ok(_) => break Ok(None),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => break Err(e),
                }
            };
        }
        let n = match input.read(&mut chunk[..room]) {
            Ok(0) => return Ok(Some(bytes)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if bytes.len() + n > bytes.capacity() {
            // Doubling, but never past the limit.
            let want = (bytes.capacity() * 2).max(bytes.len() + n).min(limit);
            bytes.reserve_exact(want - bytes.len());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// A profile format onefix reads besides its own recordings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pprof,
    Folded,
    Speedscope,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pprof => "pprof profile",
            Format::Folded => "folded-stacks file",
            Format::Speedscope => "speedscope profile",
        }
    }
}

/// What an imported profile does not carry, which onefix's own recordings do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lacks {
    /// No time per sample: no time windows, so no recurrence check and no critical path.
    pub timeline: bool,
    /// No threads: every sample is one program's.
    pub threads: bool,
    /// Only time on a CPU was sampled: waits are not in it.
    pub waits: bool,
    /// No thread states: every sample counts as running.
    pub states: bool,
    /// No sampling interval: times assume [`ASSUMED_INTERVAL_US`].
    pub interval: bool,
}

/// The sampling interval taken for a profile that does not say (py-spy's default, 100 Hz).
pub const ASSUMED_INTERVAL_US: u64 = 10_000;

/// A profile read from another tool's format.
#[derive(Debug)]
pub struct Imported {
    pub profile: Profile,
    pub format: Format,
    pub lacks: Lacks,
    /// The sample type read, for pprof (`cpu/nanoseconds`, `wall/nanoseconds`, ...).
    pub sample_type: Option<String>,
}

impl Imported {
    /// One sentence saying what the format lacks and so what the report cannot claim; `None`
    /// when it lacks nothing the diagnosis uses.
    pub fn note(&self) -> Option<String> {
        let l = self.lacks;
        let mut missing: Vec<&str> = Vec::new();
        if l.timeline {
            missing.push("no sample times (so nothing is said of when or how regularly a line ran, and no critical path is read)");
        }
        if l.threads {
            missing.push("no threads (all samples are taken as one program's)");
        }
        if l.waits {
            missing.push("only time on a CPU (time spent waiting is not in it)");
        }
        if l.states {
            missing.push("no thread states (every sample counts as running)");
        }
        if l.interval {
            missing.push("no sampling interval (times assume 100 samples per second)");
        }
        if missing.is_empty() {
            return None;
        }
        let what = match &self.sample_type {
            Some(t) => format!("this {} ({t})", self.format.name()),
            None => format!("this {}", self.format.name()),
        };
        let list = match missing.len() {
            1 => missing[0].to_owned(),
            n => format!("{} and {}", missing[..n - 1].join(", "), missing[n - 1]),
        };
        let sized = if l.waits {
            "shares are of the CPU time it holds and each gain is a bound on that share of CPU time"
        } else {
            "shares are of the samples it holds and each gain is a bound on that share"
        };
        Some(format!("{what} has {list}: {sized}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("the file is empty")]
    Empty,
    #[error("it is not an onefix recording, nor a profile onefix imports (pprof, speedscope JSON, folded stacks)")]
    Unknown,
    #[error("the gzip stream is damaged or cut short ({0})")]
    Gzip(std::io::Error),
    #[error("the pprof profile is damaged or cut short ({0})")]
    PprofDecode(prost::DecodeError),
    #[error("the pprof profile is inconsistent: {0}")]
    PprofInvalid(String),
    #[error("the pprof profile holds {found}, which onefix does not diagnose: it reads CPU and wall-time profiles (cpu/nanoseconds, wall/nanoseconds, samples/count)")]
    PprofSampleType { found: String },
    #[error("the JSON is damaged or cut short ({0})")]
    Json(serde_json::Error),
    #[error("the JSON is not a speedscope profile (it has no speedscope $schema)")]
    NotSpeedscope,
    #[error("the speedscope profile is inconsistent: {0}")]
    SpeedscopeInvalid(String),
    #[error("line {line} is not `frame;frame;… count` (the file is damaged or not folded stacks)")]
    FoldedLine { line: usize },
    #[error("the profile holds no samples")]
    NoSamples,
    #[error("a sample weighs {weight} sampling intervals, more than any profile holds (the file is damaged)")]
    TooHeavy { weight: u64 },
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Tells a profile's format by its content: gzip is opened first (pprof files are gzipped), then
/// JSON, folded text and protobuf are told apart. `None` when it is none of them.
pub fn detect(bytes: &[u8]) -> Option<Format> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first == b'{' {
        return Some(Format::Speedscope);
    }
    if folded::looks_folded(bytes) {
        return Some(Format::Folded);
    }
    pprof::looks_like_pprof(bytes).then_some(Format::Pprof)
}

/// Reads a profile in any format onefix imports, told by its content.
pub fn import(bytes: &[u8]) -> Result<Imported, ImportError> {
    if bytes.is_empty() {
        return Err(ImportError::Empty);
    }
    if bytes.starts_with(&GZIP_MAGIC) {
        let inner = gunzip(bytes)?;
        if inner.starts_with(&GZIP_MAGIC) {
            return Err(ImportError::Unknown);
        }
        return import(&inner);
    }
    match detect(bytes).ok_or(ImportError::Unknown)? {
        Format::Pprof => pprof::read(bytes),
        Format::Folded => folded::read(bytes),
        Format::Speedscope => speedscope::read(bytes),
    }
}

/// No profile is this large once unpacked; more means a damaged or hostile file.
const MAX_UNPACKED: u64 = 1 << 30;

fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, ImportError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes).take(MAX_UNPACKED).read_to_end(&mut out).map_err(ImportError::Gzip)?;
    if out.len() as u64 >= MAX_UNPACKED {
        return Err(ImportError::Gzip(std::io::Error::other("it unpacks to more than 1 GiB")));
    }
    Ok(out)
}

/// Adds a sample of `weight` units. A weight beyond a sample's `u32` (4 billion sampling
/// intervals: years) is no profile's: the file is damaged.
pub(crate) fn push_weight(
    profile: &mut Profile,
    thread: ThreadId,
    stack: Option<StackId>,
    state: ThreadState,
    time_us: u64,
    weight: u64,
) -> Result<(), ImportError> {
    let weight = u32::try_from(weight).map_err(|_| ImportError::TooHeavy { weight })?;
    if weight > 0 {
        profile.samples.push(Sample { time_us, thread, stack, state, weight });
    }
    Ok(())
}

/// Makes the relative source files of frames absolute where they exist under `dir` (folded
/// stacks and py-spy name files by their base name or their path from the program's directory):
/// the diagnosis then reads their lines, and a file that is not there is not taken for the
/// user's code.
pub fn resolve_sources(profile: &mut Profile, dir: &std::path::Path) {
    let mut relative: Vec<String> = profile
        .frames()
        .iter()
        .map(|f| f.file.clone())
        .filter(|f| !f.is_empty() && !f.starts_with('/') && !f.starts_with('<'))
        .collect();
    relative.sort();
    relative.dedup();
    for file in relative {
        let path = dir.join(&file);
        if path.is_file() {
            profile.relocate(&file, &path.display().to_string());
        }
    }
}

/// Directories of the user's code, guessed from the profile: the directories of the files of a
/// program's entry (`main`, Go's package `main`, Rust's `crate::main`), and `cwd` when any
/// frame's file is under it or nothing else is found. `--user-code` overrides them.
pub fn guess_user_code(profile: &Profile, cwd: Option<&std::path::Path>) -> Vec<String> {
    fn add(dirs: &mut Vec<String>, d: String) {
        if !d.is_empty() && !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    let mut dirs: Vec<String> = Vec::new();
    for f in profile.frames() {
        let entry = f.function == "main"
            || f.function.ends_with("::main")
            || (f.function.starts_with("main.") && !f.function.starts_with("main.init"));
        if entry && f.file.starts_with('/') {
            if let Some((dir, _)) = f.file.rsplit_once('/') {
                add(&mut dirs, dir.to_owned());
            }
        }
    }
    if let Some(cwd) = cwd {
        let cwd = cwd.display().to_string();
        // Where the report is made is the user's code when frames are there, or when nothing
        // else says where it is (the report then names it, and --user-code corrects it).
        if dirs.is_empty() || profile.frames().iter().any(|f| f.file.starts_with(&format!("{cwd}/"))) {
            add(&mut dirs, cwd);
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_read_stops_at_its_limit_and_says_there_was_more() {
        let endless = std::io::repeat(0);
        assert_eq!(super::read_at_most(endless, 100_000).unwrap(), None);
        let exact = super::read_at_most(&[7u8; 100][..], 100).unwrap().unwrap();
        assert_eq!(exact, vec![7u8; 100]);
        let bounded = super::read_at_most(std::io::Read::take(std::io::repeat(1), 10), 100).unwrap().unwrap();
        assert_eq!(bounded.capacity(), 10, "the buffer fits what came");
    }

    use super::*;

    #[test]
    fn formats_are_told_by_content() {
        assert_eq!(detect(b"  {\"$schema\": 1}"), Some(Format::Speedscope));
        assert_eq!(detect(b"main;work 12\nmain;idle 3\n"), Some(Format::Folded));
        assert_eq!(detect(b"definitely not a recording"), None);
        assert!(matches!(import(b""), Err(ImportError::Empty)));
        assert!(matches!(import(b"definitely not a recording"), Err(ImportError::Unknown)));
        assert!(matches!(import(&[0x1f, 0x8b, 8, 0, 0]), Err(ImportError::Gzip(_))));
    }

    #[test]
    fn the_note_lists_what_is_missing_in_one_sentence() {
        let imported = Imported {
            profile: Profile::default(),
            format: Format::Pprof,
            lacks: Lacks { timeline: true, threads: true, waits: true, ..Lacks::default() },
            sample_type: Some("cpu/nanoseconds".into()),
        };
        let note = imported.note().unwrap();
        assert!(note.starts_with("this pprof profile (cpu/nanoseconds) has no sample times"), "{note}");
        assert!(note.contains(", no threads") && note.contains(" and only time on a CPU"), "{note}");
        assert_eq!(note.matches(". ").count(), 0, "one sentence: {note}");
        let whole = Imported { lacks: Lacks::default(), ..imported };
        assert_eq!(whole.note(), None);
    }
}
