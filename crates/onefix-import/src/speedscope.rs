//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): a shared
//! frame table and profiles of two types, each read as one thread:
//! - `sampled`: stacks (root first) with weights, in time order but without times: the profile
//!   lacks a timeline. Weights in a time unit are counted in their greatest common step (the
//!   sampling interval, for a sampler's output), or in milliseconds when that is finer;
//!   unitless weights are sample counts.
//! - `evented`: open and close events at times: each stretch between two events is charged to
//!   the stack open then, at its time, in units of [`EVENTED_UNIT_US`].
//!
//! A frame whose file is Python source is a Python frame; any other with a line is native at
//! that line; a file without a line is the native frame's module (as onefix writes native code
//! without line information). Memory profiles (unit `bytes`) are refused.

use serde::Deserialize;

use onefix_model::{Frame, FrameId, Meta, Mode, Profile, StackId, ThreadState, WeightUnit};

use crate::{push_weight, Format, ImportError, Imported, Lacks, ASSUMED_INTERVAL_US};

/// An evented profile's time is counted in milliseconds: a stretch shorter than half of one
/// is too short to weigh.
pub const EVENTED_UNIT_US: u64 = 1000;

#[derive(Deserialize)]
struct File {
    shared: Shared,
    profiles: Vec<SpeedscopeProfile>,
}

#[derive(Deserialize)]
struct Shared {
    frames: Vec<SpeedscopeFrame>,
}

#[derive(Deserialize)]
struct SpeedscopeFrame {
    name: String,
    file: Option<String>,
    line: Option<u32>,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum SpeedscopeProfile {
    #[serde(rename = "sampled")]
    Sampled { name: String, unit: String, samples: Vec<Vec<usize>>, weights: Vec<f64> },
    #[serde(rename = "evented")]
    Evented {
        name: String,
        unit: String,
        #[serde(rename = "startValue")]
        start_value: f64,
        events: Vec<Event>,
    },
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    frame: usize,
    at: f64,
}

/// Microseconds per unit, for time units; `None` for `none` (counts); an error for `bytes`.
fn micros_per(unit: &str) -> Result<Option<f64>, ImportError> {
    Ok(Some(match unit {
        "nanoseconds" => 1e-3,
        "microseconds" => 1.0,
        "milliseconds" => 1e3,
        "seconds" => 1e6,
        "none" => return Ok(None),
        "bytes" => {
            return Err(ImportError::SpeedscopeInvalid(
                "it weighs in bytes (a memory profile); onefix reads time profiles from speedscope".into(),
            ))
        }
        other => return Err(ImportError::SpeedscopeInvalid(format!("its unit {other:?} is not speedscope's"))),
    }))
}

pub fn read(bytes: &[u8]) -> Result<Imported, ImportError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(ImportError::Json)?;
    let is_speedscope = value.get("$schema").and_then(|s| s.as_str()).is_some_and(|s| s.contains("speedscope"));
    if !is_speedscope {
        return Err(ImportError::NotSpeedscope);
    }
    let file: File = serde_json::from_value(value).map_err(|e| ImportError::SpeedscopeInvalid(e.to_string()))?;
    let invalid = |what: String| ImportError::SpeedscopeInvalid(what);

    // The weight unit: sampled time profiles in the largest unit all their weights are whole
    // multiples of (a sampler's interval: runs of equal stacks are merged into one weight),
    // evented ones in ms.
    let mut common_us: Option<u64> = None;
    let mut any_time = false;
    let mut any_count = false;
    let mut any_evented = false;
    for p in &file.profiles {
        match p {
            SpeedscopeProfile::Sampled { unit, weights, .. } => match micros_per(unit)? {
                Some(us) => {
                    any_time = true;
                    for w in weights.iter().map(|w| (w * us).round() as u64).filter(|w| *w > 0) {
                        common_us = Some(common_us.map_or(w, |c| gcd(c, w)));
                    }
                }
                None => any_count = true,
            },
            SpeedscopeProfile::Evented { unit, .. } => {
                micros_per(unit)?.ok_or_else(|| invalid("an evented profile has no time unit".into()))?;
                any_evented = true;
            }
        }
    }
    let interval_us = match (any_evented, common_us) {
        (true, _) => EVENTED_UNIT_US,
        // Weights with no common step of a millisecond or more (measured, not sampled) are
        // counted in milliseconds.
        (false, Some(us)) if us >= EVENTED_UNIT_US => us,
        (false, Some(_)) => EVENTED_UNIT_US,
        (false, None) => ASSUMED_INTERVAL_US,
    };
    let meta = Meta {
        mode: Mode::Wall,
        rate_hz: 1e6 / interval_us as f64,
        weight_unit: WeightUnit::Samples { interval_us },
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);
    let frames: Vec<FrameId> = file.shared.frames.iter().map(|f| profile.intern_frame(frame_of(f))).collect();
    let frame =
        |i: usize| frames.get(i).copied().ok_or_else(|| invalid(format!("frame {i} is not in its frame table")));
    let running = ThreadState::new(true, false);
    let mut end_us = 0f64;
    for (index, p) in file.profiles.iter().enumerate() {
        match p {
            SpeedscopeProfile::Sampled { name, unit, samples, weights } => {
                if samples.len() != weights.len() {
                    return Err(invalid(format!(
                        "profile {name:?} has {} samples but {} weights",
                        samples.len(),
                        weights.len()
                    )));
                }
                let thread = profile.intern_thread(0, index as u64 + 1, Some(name));
                let us = micros_per(unit)?;
                for (stack, &w) in samples.iter().zip(weights) {
                    let root_first = stack.iter().map(|&i| frame(i)).collect::<Result<Vec<_>, _>>()?;
                    let stack = profile.intern_stack(root_first);
                    let units = match us {
                        Some(us) => (w * us / interval_us as f64).round(),
                        None => w.round(),
                    };
                    if units.is_finite() && units > 0.0 {
                        push_weight(&mut profile, thread, stack, running, 0, units as u64)?;
                    }
                }
            }
            SpeedscopeProfile::Evented { name, unit, start_value, events } => {
                let us = micros_per(unit)?.unwrap_or(1.0);
                let thread = profile.intern_thread(0, index as u64 + 1, Some(name));
                let mut open: Vec<FrameId> = Vec::new();
                let mut since = *start_value;
                for (n, e) in events.iter().enumerate() {
                    if e.at < since {
                        return Err(invalid(format!("event {n} of profile {name:?} goes back in time")));
                    }
                    if !open.is_empty() {
                        let stack: Option<StackId> = profile.intern_stack(open.iter().copied());
                        let start_us = (since - start_value) * us;
                        let units = ((e.at - since) * us / EVENTED_UNIT_US as f64).round() as u64;
                        push_weight(&mut profile, thread, stack, running, start_us as u64, units)?;
                    }
                    since = e.at;
                    end_us = end_us.max((e.at - start_value) * us);
                    let f = frame(e.frame)?;
                    match e.kind.as_str() {
                        "O" => open.push(f),
                        "C" if open.last() == Some(&f) => {
                            open.pop();
                        }
                        "C" => {
                            return Err(invalid(format!(
                                "event {n} of profile {name:?} closes a frame it did not open last"
                            )))
                        }
                        other => return Err(invalid(format!("event {n} of profile {name:?} has type {other:?}"))),
                    }
                }
            }
        }
    }
    if profile.samples.is_empty() {
        return Err(ImportError::NoSamples);
    }
    profile.meta.duration_s = end_us / 1e6;
    profile.meta.target.language = Some(crate::pprof::language_of(&profile));
    // Only an evented-only file has times for every sample.
    let timeline = any_evented && !any_time && !any_count;
    Ok(Imported {
        profile,
        format: Format::Speedscope,
        lacks: Lacks {
            timeline: !timeline,
            threads: file.profiles.len() <= 1,
            waits: false,
            states: true,
            interval: !any_time && !any_evented,
        },
        sample_type: None,
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn frame_of(f: &SpeedscopeFrame) -> Frame {
    let file = f.file.as_deref().unwrap_or("");
    let python = [".py", ".pyw", ".pyx"].iter().any(|e| file.ends_with(e)) || file.starts_with('<');
    match f.line {
        _ if python => Frame::python(&f.name, file, f.line.unwrap_or(0)),
        Some(line) => Frame { file: file.to_owned(), line, ..Frame::native(&f.name, "") },
        None => Frame::native(&f.name, file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evented_profiles_keep_their_times() {
        let json = r#"{"$schema":"https://www.speedscope.app/file-format-schema.json",
            "shared":{"frames":[{"name":"main","file":"/a/m.go","line":3},{"name":"work","file":"/a/m.go","line":9}]},
            "profiles":[{"type":"evented","name":"t","unit":"milliseconds","startValue":0,"endValue":50,
              "events":[{"type":"O","frame":0,"at":0},{"type":"O","frame":1,"at":10},{"type":"C","frame":1,"at":40},{"type":"C","frame":0,"at":50}]}]}"#;
        let imported = read(json.as_bytes()).unwrap();
        let p = &imported.profile;
        assert!(!imported.lacks.timeline);
        let at_work: Vec<(u64, u32)> = p
            .samples
            .iter()
            .filter(|s| p.frame(p.stack_frame(s.stack.unwrap())).function == "work")
            .map(|s| (s.time_us, s.weight))
            .collect();
        assert_eq!(at_work, vec![(10_000, 30)]);
        assert_eq!(p.sample_count(), 50);
        let bad = json.replace(r#""type":"C","frame":1"#, r#""type":"C","frame":0"#);
        assert!(matches!(read(bad.as_bytes()), Err(ImportError::SpeedscopeInvalid(_))));
        assert!(matches!(read(b"{\"shared\":{}}"), Err(ImportError::NotSpeedscope)));
        assert!(matches!(read(&json.as_bytes()[..json.len() / 2]), Err(ImportError::Json(_))));
    }
}
