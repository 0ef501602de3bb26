//! pprof's `profile.proto` (gzipped or not), as Go's `runtime/pprof` and `net/http/pprof`, the
//! Rust `pprof` crate and onefix's own `--pprof` write it. The messages are the pprof writer's
//! ([`onefix_report::pprof`]), decoded with prost.
//!
//! What is read:
//! - one sample type: `cpu/nanoseconds` (CPU mode), else `wall/nanoseconds` (wall mode), else
//!   `samples/count` or `cpu/count` (the Rust `pprof` crate's); the weight is the sample's count
//!   when the profile has one, else its time over the sampling period;
//! - a location's lines innermost first, so inlined functions are frames of their own, with the
//!   file and line of each;
//! - the labels onefix's writer adds, `thread`, `thread_id` and `state`, back into threads and
//!   thread states (a round trip keeps wall-mode waits apart from running time);
//! - the `python` and `kernel` mappings onefix writes back into Python and kernel frames; other
//!   frames are native, in the module their mapping names.
//!
//! pprof has no time per sample: every sample is put at time 0 and the profile lacks a timeline.

use std::collections::HashMap;

use onefix_model::{
    Frame, FrameId, FrameKind, Language, Meta, Mode, Profile, StackId, Target, ThreadId, ThreadState, WeightUnit,
};
use onefix_report::pprof::{Location, PprofProfile};
use prost::Message;

use crate::{push_weight, Format, ImportError, Imported, Lacks};

/// Whether the bytes decode as a pprof profile with at least a sample type and a string table
/// starting with the empty string: arbitrary bytes rarely do.
pub fn looks_like_pprof(bytes: &[u8]) -> bool {
    PprofProfile::decode(bytes)
        .is_ok_and(|p| !p.sample_type.is_empty() && p.string_table.first().is_some_and(|s| s.is_empty()))
}

/// The states onefix's pprof writer names in its `state` label.
fn state_of(name: &str) -> Option<ThreadState> {
    Some(match name {
        "running+gil" => ThreadState::new(true, true),
        "running" => ThreadState::new(true, false),
        "idle+gil" => ThreadState::new(false, true),
        "idle" => ThreadState::new(false, false),
        _ => return None,
    })
}

/// Reads an uncompressed pprof profile.
pub fn read(bytes: &[u8]) -> Result<Imported, ImportError> {
    let p = PprofProfile::decode(bytes).map_err(ImportError::PprofDecode)?;
    let invalid = |what: String| ImportError::PprofInvalid(what);
    if p.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(invalid("its string table does not start with the empty string".into()));
    }
    let string = |i: i64| -> Result<&str, ImportError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| invalid(format!("string {i} is past the end of its string table")))
    };
    let types: Vec<(String, String)> = p
        .sample_type
        .iter()
        .map(|t| Ok((string(t.r#type)?.to_owned(), string(t.unit)?.to_owned())))
        .collect::<Result<_, ImportError>>()?;
    if types.is_empty() {
        return Err(invalid("it has no sample type".into()));
    }
    let find = |ty: &str, unit: &str| types.iter().position(|(t, u)| t == ty && u == unit);
    // The Rust `pprof` crate counts its samples as `cpu/count`.
    let count_index = find("samples", "count").or_else(|| find("cpu", "count"));
    let (time_index, mode) = match (find("cpu", "nanoseconds"), find("wall", "nanoseconds")) {
        (Some(i), _) => (Some(i), Mode::Cpu),
        (None, Some(i)) => (Some(i), Mode::Wall),
        // Only counts: what they count is the period's type (Go's CPU profiles say `cpu`).
        (None, None) if count_index.is_some() => {
            let period = p.period_type.as_ref().map(|t| string(t.r#type)).transpose()?;
            (None, if period == Some("wall") { Mode::Wall } else { Mode::Cpu })
        }
        (None, None) => {
            let found: Vec<String> = types.iter().map(|(t, u)| format!("{t}/{u}")).collect();
            return Err(ImportError::PprofSampleType { found: found.join(", ") });
        }
    };
    let period_unit = p.period_type.as_ref().map(|t| string(t.unit)).transpose()?;
    let period_ns = (period_unit == Some("nanoseconds") && p.period > 0).then_some(p.period as u64);
    // Without a period in nanoseconds, a time-only profile is weighed in milliseconds.
    let interval_us = match (period_ns, time_index, count_index) {
        (Some(ns), _, _) => (ns / 1000).max(1),
        (None, Some(_), None) => 1000,
        (None, _, _) => crate::ASSUMED_INTERVAL_US,
    };
    let interval_missing = period_ns.is_none() && time_index.is_none();

    let meta = Meta {
        target: Target { language: None, ..Target::default() },
        mode,
        rate_hz: 1e6 / interval_us as f64,
        weight_unit: WeightUnit::Samples { interval_us },
        start_unix_ms: (p.time_nanos.max(0) / 1_000_000) as u64,
        duration_s: p.duration_nanos.max(0) as f64 / 1e9,
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);

    // Frames of each location, innermost (inlined) first, as pprof lists them.
    let functions: HashMap<u64, (&str, &str)> = p
        .function
        .iter()
        .map(|f| Ok((f.id, (string(f.name)?, string(f.filename)?))))
        .collect::<Result<_, ImportError>>()?;
    let mappings: HashMap<u64, &str> =
        p.mapping.iter().map(|m| Ok((m.id, string(m.filename)?))).collect::<Result<_, ImportError>>()?;
    let mut location_frames: HashMap<u64, Vec<FrameId>> = HashMap::with_capacity(p.location.len());
    for loc in &p.location {
        let frames = location_frames_of(&mut profile, loc, &functions, &mappings)?;
        location_frames.insert(loc.id, frames);
    }

    let key = |name: &str| p.string_table.iter().position(|s| s == name).map(|i| i as i64);
    let (thread_key, thread_id_key, state_key) = (key("thread"), key("thread_id"), key("state"));
    let mut threads_seen = false;
    let mut states_seen = false;
    let mut stack_of: HashMap<&[u64], Option<StackId>> = HashMap::new();
    let mut thread_of: HashMap<(Option<i64>, i64), ThreadId> = HashMap::new();
    for (n, s) in p.sample.iter().enumerate() {
        let value = |i: usize| {
            s.value.get(i).copied().ok_or_else(|| invalid(format!("sample {n} has fewer values than sample types")))
        };
        let weight = match (count_index, time_index) {
            (Some(c), _) => value(c)?.max(0) as u64,
            (None, Some(t)) => {
                let ns = value(t)?.max(0) as u64;
                ns.saturating_add(interval_us.saturating_mul(500)) / interval_us.saturating_mul(1000)
            }
            (None, None) => unreachable!("a profile without counts or times was refused above"),
        };
        if weight == 0 {
            continue;
        }
        let stack = match stack_of.get(s.location_id.as_slice()) {
            Some(&stack) => stack,
            None => {
                let mut root_first: Vec<FrameId> = Vec::new();
                for id in s.location_id.iter().rev() {
                    let frames = location_frames
                        .get(id)
                        .ok_or_else(|| invalid(format!("sample {n} names location {id}, which it does not hold")))?;
                    root_first.extend(frames.iter().rev());
                }
                let stack = profile.intern_stack(root_first);
                stack_of.insert(&s.location_id, stack);
                stack
            }
        };
        let (mut name, mut tid, mut state) = (None, 0i64, ThreadState::new(true, false));
        for label in &s.label {
            if Some(label.key) == thread_key {
                name = Some(label.str);
            } else if Some(label.key) == thread_id_key {
                tid = label.num;
            } else if Some(label.key) == state_key {
                if let Some(st) = state_of(string(label.str)?) {
                    state = st;
                    states_seen = true;
                }
            }
        }
        threads_seen |= name.is_some() || tid != 0;
        let thread = match thread_of.get(&(name, tid)) {
            Some(&t) => t,
            None => {
                let label = name.map(string).transpose()?;
                let t = profile.intern_thread(0, tid.max(0) as u64, label);
                thread_of.insert((name, tid), t);
                t
            }
        };
        push_weight(&mut profile, thread, stack, state, 0, weight)?;
    }
    if profile.samples.is_empty() {
        return Err(ImportError::NoSamples);
    }
    profile.meta.target.language = Some(language_of(&profile));
    let sample_type = time_index.or(count_index).map(|i| format!("{}/{}", types[i].0, types[i].1));
    Ok(Imported {
        profile,
        format: Format::Pprof,
        lacks: Lacks {
            timeline: true,
            threads: !threads_seen,
            // A wall profile with onefix's states holds the waits; Go's CPU profiles do not.
            waits: mode == Mode::Cpu,
            // A wall-time profile without states counts every sample as running.
            states: mode == Mode::Wall && !states_seen,
            interval: interval_missing,
        },
        sample_type,
    })
}

fn location_frames_of(
    profile: &mut Profile,
    loc: &Location,
    functions: &HashMap<u64, (&str, &str)>,
    mappings: &HashMap<u64, &str>,
) -> Result<Vec<FrameId>, ImportError> {
    let module = mappings.get(&loc.mapping_id).copied().unwrap_or("");
    if loc.line.is_empty() {
        // An address pprof was not told the function of.
        let function = if loc.address == 0 { "[unknown]".to_owned() } else { format!("0x{:x}", loc.address) };
        return Ok(vec![profile.intern_frame(Frame::native(function, module))]);
    }
    let mut frames = Vec::with_capacity(loc.line.len());
    for line in &loc.line {
        let &(function, file) = functions.get(&line.function_id).ok_or_else(|| {
            ImportError::PprofInvalid(format!(
                "location {} names function {}, which it does not hold",
                loc.id, line.function_id
            ))
        })?;
        let line_no = u32::try_from(line.line).unwrap_or(0);
        // onefix's writer puts interpreted frames in a `python` mapping and kernel frames in a
        // `kernel` one.
        let python_file = file.ends_with(".py") || file.starts_with('<');
        let frame = match module {
            "python" if python_file => Frame::python(function, file, line_no),
            "kernel" => Frame { kind: FrameKind::Kernel, ..Frame::native(function, "") },
            _ => Frame {
                file: file.to_owned(),
                line: line_no,
                ..Frame::native(function, if module == "unknown" { "" } else { module })
            },
        };
        frames.push(profile.intern_frame(frame));
    }
    Ok(frames)
}

/// Python when any frame is, else native (Go, Rust, C).
pub(crate) fn language_of(profile: &Profile) -> Language {
    if profile.frames().iter().any(|f| f.kind == FrameKind::Python) {
        Language::Python
    } else {
        Language::Native
    }
}
