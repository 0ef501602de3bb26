//! pprof's profile format (`profile.proto` of github.com/google/pprof), gzipped, as
//! `go tool pprof` and the continuous-profiling servers that ingest pprof (Pyroscope, Parca)
//! read it.
//!
//! The messages are written by hand with prost's derive rather than generated from the
//! `.proto`: the format is small and stable, and this keeps protoc out of the build.
//!
//! What goes in:
//! - sample types: `samples/count` and `wall/nanoseconds` or `cpu/nanoseconds` for time
//!   profiles (the nanoseconds are the nominal sampling interval times the weight), or
//!   `samples/count` and `space/bytes` for allocation recordings;
//! - one sample per distinct (thread, stack, state), with labels `thread` (name), `thread_id`
//!   and `state`, so that pprof's `-tagfocus` can pick threads and running/idle time;
//! - one location per frame of the recording, with its line; one function per (name, file);
//! - one mapping per module (shared object or executable) of the native frames, and one for
//!   the interpreted frames; no addresses, since frames are symbolized when recorded.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use onefix_model::{FrameKind, Mode, Profile, StackId, ThreadId, ThreadState, WeightUnit};
use prost::Message;

use crate::describe;

/// Stands in for the frames of a sample whose thread had none, as in the folded stacks.
const NO_FRAMES: &str = "[no frames]";

/// `profile.proto`'s `Profile`. Field numbers are the format's; do not renumber.
#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PprofSample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Index 0 must be the empty string.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct PprofSample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
    #[prost(int64, tag = "3")]
    pub column: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Interns strings into pprof's string table, whose entry 0 is the empty string.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.get("");
        s
    }
    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Builds the pprof message for the samples that count in `mode`.
pub fn pprof_profile(profile: &Profile, mode: Mode) -> PprofProfile {
    let mut strings = Strings::new();
    let meta = &profile.meta;
    let (value_name, value_unit, nanos_per_weight) = match meta.weight_unit {
        WeightUnit::Samples { interval_us } => (mode.as_str(), "nanoseconds", Some(interval_us as i64 * 1000)),
        WeightUnit::Bytes => ("space", "bytes", None),
    };
    let sample_type = vec![
        ValueType { r#type: strings.get("samples"), unit: strings.get("count") },
        ValueType { r#type: strings.get(value_name), unit: strings.get(value_unit) },
    ];

    // Mappings: one per module of the native frames, one for interpreted code.
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_of: HashMap<String, u64> = HashMap::new();
    let mut mapping_id = |strings: &mut Strings, name: &str| -> u64 {
        if let Some(&id) = mapping_of.get(name) {
            return id;
        }
        let id = mappings.len() as u64 + 1;
        mappings.push(Mapping {
            id,
            filename: strings.get(name),
            // Frames are symbolized when recorded: tell pprof not to look for binaries.
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..Mapping::default()
        });
        mapping_of.insert(name.to_owned(), id);
        id
    };

    // Functions by (name, file); one location per frame, id = frame id + 1.
    let mut functions: Vec<Function> = Vec::new();
    let mut function_of: HashMap<(&str, &str), u64> = HashMap::new();
    let mut locations: Vec<Location> = Vec::with_capacity(profile.frames().len() + 1);
    for (i, frame) in profile.frames().iter().enumerate() {
        let function_id = *function_of.entry((&frame.function, &frame.file)).or_insert_with(|| {
            let id = functions.len() as u64 + 1;
            functions.push(Function {
                id,
                name: strings.get(&frame.function),
                system_name: strings.get(&frame.function),
                filename: strings.get(&frame.file),
                start_line: 0,
            });
            id
        });
        let module = match frame.kind {
            FrameKind::Python => "python",
            FrameKind::Kernel => "kernel",
            FrameKind::Native if frame.module.is_empty() => "unknown",
            FrameKind::Native => &frame.module,
        };
        locations.push(Location {
            id: i as u64 + 1,
            mapping_id: mapping_id(&mut strings, module),
            address: 0,
            line: vec![Line { function_id, line: i64::from(frame.line), column: 0 }],
            is_folded: false,
        });
    }
    let mut no_frames_location: Option<u64> = None;

    // One sample per (thread, stack, state); sorted so the output is deterministic.
    let mut weights: HashMap<(ThreadId, Option<StackId>, ThreadState), (u64, u64)> = HashMap::new();
    for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
        let entry = weights.entry((s.thread, s.stack, s.state)).or_default();
        // Merged samples stand for one observation per unit of weight in time profiles.
        entry.0 += match meta.weight_unit {
            WeightUnit::Samples { .. } => u64::from(s.weight),
            WeightUnit::Bytes => 1,
        };
        entry.1 += u64::from(s.weight);
    }
    let mut keys: Vec<_> = weights.keys().copied().collect();
    keys.sort_by_key(|&(thread, stack, state)| (thread, stack.map(i64::from).unwrap_or(-1), state.0));

    let thread_key = strings.get("thread");
    let thread_id_key = strings.get("thread_id");
    let state_key = strings.get("state");
    let mut samples = Vec::with_capacity(keys.len());
    for key in keys {
        let (thread, stack, state) = key;
        let (count, weight) = weights[&key];
        if weight == 0 {
            continue;
        }
        let mut location_id: Vec<u64> = profile.stack_frames_leaf_first(stack).map(|f| u64::from(f) + 1).collect();
        if location_id.is_empty() {
            let id = *no_frames_location.get_or_insert_with(|| {
                let id = locations.len() as u64 + 1;
                let function_id = functions.len() as u64 + 1;
                functions.push(Function { id: function_id, name: strings.get(NO_FRAMES), ..Function::default() });
                locations.push(Location {
                    id,
                    mapping_id: mapping_id(&mut strings, "unknown"),
                    line: vec![Line { function_id, ..Line::default() }],
                    ..Location::default()
                });
                id
            });
            location_id.push(id);
        }
        let info = profile.thread(thread);
        let mut label = Vec::with_capacity(3);
        if let Some(name) = &info.name {
            label.push(Label { key: thread_key, str: strings.get(name), ..Label::default() });
        }
        label.push(Label { key: thread_id_key, num: info.tid as i64, ..Label::default() });
        label.push(Label { key: state_key, str: strings.get(state.name()), ..Label::default() });
        let value = match nanos_per_weight {
            Some(nanos) => vec![count as i64, (weight as i64).saturating_mul(nanos)],
            None => vec![count as i64, weight as i64],
        };
        samples.push(PprofSample { location_id, value, label });
    }

    let comment = vec![
        strings.get(&format!("onefix {}", describe::tool_version(meta))),
        strings.get(&describe::command_line(&meta.target)),
    ];
    let period_type = Some(ValueType { r#type: sample_type[1].r#type, unit: sample_type[1].unit });
    PprofProfile {
        default_sample_type: sample_type[1].r#type,
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: (meta.start_unix_ms as i64).saturating_mul(1_000_000),
        duration_nanos: (meta.duration_s * 1e9).round() as i64,
        period_type,
        period: nanos_per_weight.unwrap_or(0),
        comment,
        string_table: strings.table,
    }
}

/// Writes the samples that count in `mode` as a gzipped pprof profile.
pub fn write_pprof<W: Write>(w: W, profile: &Profile, mode: Mode) -> io::Result<()> {
    let encoded = pprof_profile(profile, mode).encode_to_vec();
    // Fixed header (no file name, no time) so the same profile gives the same bytes.
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&encoded)?;
    gz.finish()?.flush()
}
