//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): the shared
//! frame table and one "sampled" profile per thread, samples in time order, so speedscope's
//! time-order view replays the recording.

use std::io::{self, BufWriter, Write};

use onefix_model::{FrameId, Mode, Profile, Sample, StackId, WeightUnit};
use serde::Serialize;

use crate::describe;

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct SpeedscopeFile<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<SampledProfile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<SpeedscopeFrame<'a>>,
}

#[derive(Serialize)]
struct SpeedscopeFrame<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: Value,
    #[serde(rename = "endValue")]
    end_value: Value,
    /// Frame indices, root first.
    samples: Vec<Vec<FrameId>>,
    weights: Vec<Value>,
}

/// Seconds for time profiles, whole bytes for allocation profiles (printed without a `.0`).
#[derive(Clone, Copy, Serialize)]
#[serde(untagged)]
enum Value {
    Seconds(f64),
    Bytes(u64),
}

/// Converts weights to the profile's unit.
struct Units {
    seconds_per_weight: Option<f64>,
}

impl Units {
    fn name(&self) -> &'static str {
        if self.seconds_per_weight.is_some() {
            "seconds"
        } else {
            "bytes"
        }
    }

    fn value(&self, weight: u64) -> Value {
        match self.seconds_per_weight {
            // Rounded to the nanosecond so that sums print as `0.03`, not `0.030000000000000002`.
            Some(spw) => Value::Seconds((weight as f64 * spw * 1e9).round() / 1e9),
            None => Value::Bytes(weight),
        }
    }
}

/// Writes the samples that count in `mode` as a speedscope file. Threads without such samples
/// are left out; the busiest thread is the one speedscope opens on.
pub fn write_speedscope<W: Write>(w: W, profile: &Profile, mode: Mode) -> io::Result<()> {
    let units = Units {
        seconds_per_weight: match profile.meta.weight_unit {
            WeightUnit::Samples { .. } => profile.seconds_per_weight(),
            WeightUnit::Bytes => None,
        },
    };

    let frames = profile
        .frames()
        .iter()
        .map(|f| SpeedscopeFrame {
            name: &f.function,
            // Native frames without debug info still say which library they are in.
            file: [f.file.as_str(), f.module.as_str()].into_iter().find(|s| !s.is_empty()),
            line: (f.line > 0).then_some(f.line),
        })
        .collect();

    let mut by_thread: Vec<Vec<&Sample>> = vec![Vec::new(); profile.threads().len()];
    for sample in profile.samples.iter().filter(|s| mode.counts(s.state)) {
        by_thread[sample.thread as usize].push(sample);
    }

    let mut profiles = Vec::new();
    let mut busiest: Option<(u64, usize)> = None;
    for (thread_id, mut samples) in by_thread.into_iter().enumerate() {
        if samples.is_empty() {
            continue;
        }
        samples.sort_by_key(|s| s.time_us); // stable: equal times keep recording order
        let runs = runs_of_equal_stacks(&samples);
        let total: u64 = runs.iter().map(|&(_, weight)| weight).sum();
        // Not is_none_or: the workspace promises Rust 1.80.
        #[allow(clippy::unnecessary_map_or)]
        let busier = busiest.map_or(true, |(most, _)| total > most);
        if busier {
            busiest = Some((total, profiles.len()));
        }
        let thread = &profile.threads()[thread_id];
        profiles.push(SampledProfile {
            kind: "sampled",
            name: match &thread.name {
                Some(name) => format!("{name} (tid {})", thread.tid),
                None => format!("thread {}", thread.tid),
            },
            unit: units.name(),
            start_value: units.value(0),
            end_value: units.value(total),
            samples: runs.iter().map(|&(stack, _)| profile.stack_frames_root_first(stack)).collect(),
            weights: runs.iter().map(|&(_, weight)| units.value(weight)).collect(),
        });
    }

    let file = SpeedscopeFile {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name: describe::command_line(&profile.meta.target),
        active_profile_index: busiest.map_or(0, |(_, index)| index),
        exporter: format!("onefix {}", describe::tool_version(&profile.meta)),
    };
    let mut out = BufWriter::new(w);
    serde_json::to_writer(&mut out, &file)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Merges consecutive samples of the same stack into one weighted sample: speedscope draws
/// them identically, and a thread parked in one place for minutes becomes one entry instead
/// of thousands.
fn runs_of_equal_stacks(samples: &[&Sample]) -> Vec<(Option<StackId>, u64)> {
    let mut runs: Vec<(Option<StackId>, u64)> = Vec::new();
    for sample in samples {
        match runs.last_mut() {
            Some((stack, weight)) if *stack == sample.stack => *weight += u64::from(sample.weight),
            _ => runs.push((sample.stack, u64::from(sample.weight))),
        }
    }
    runs
}
