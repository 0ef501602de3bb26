//! The speedscope file against the schema's required fields and its conventions (samples root
//! first, as many weights as samples, frame indices into `shared.frames`).

use onefix_model::{FrameId, Mode, Profile};
use onefix_report::write_speedscope;
use serde_json::Value;

use crate::fixture::{bytes_profile, render, updater_profile_with_stacks};

const UNITS: [&str; 6] = ["none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"];

fn speedscope(profile: &Profile, mode: Mode) -> Value {
    let out = render(|w| write_speedscope(w, profile, mode));
    serde_json::from_str(&out).expect("speedscope output is JSON")
}

/// speedscope's own schema, vendored from its npm package (see tests/schema/README.md).
pub fn speedscope_schema() -> jsonschema::Validator {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schema/speedscope-file-format-schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("speedscope's schema compiles")
}

/// Every violation of speedscope's schema, one per line.
pub fn schema_errors(file: &Value) -> Vec<String> {
    speedscope_schema().iter_errors(file).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}

/// Validates against speedscope's published schema, checks the conventions the schema cannot
/// state (indices in range, weights adding up), and returns the profiles.
fn check_schema(file: &Value) -> &Vec<Value> {
    let errors = schema_errors(file);
    assert!(errors.is_empty(), "the file breaks speedscope's schema:\n{}", errors.join("\n"));
    assert_eq!(file["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames = file["shared"]["frames"].as_array().expect("shared.frames is an array");
    for frame in frames {
        assert!(frame["name"].is_string(), "{frame}");
        // Not is_none_or: the workspace promises Rust 1.80.
        #[allow(clippy::unnecessary_map_or)]
        {
            assert!(frame.get("file").map_or(true, Value::is_string), "{frame}");
            assert!(frame.get("line").map_or(true, |l| l.as_u64().is_some_and(|l| l >= 1)), "{frame}");
        }
    }
    let profiles = file["profiles"].as_array().expect("profiles is an array");
    for profile in profiles {
        assert_eq!(profile["type"], "sampled");
        assert!(profile["name"].is_string());
        assert!(UNITS.contains(&profile["unit"].as_str().unwrap()), "{}", profile["unit"]);
        let start = profile["startValue"].as_f64().expect("startValue is a number");
        let end = profile["endValue"].as_f64().expect("endValue is a number");
        assert!(start <= end);
        let samples = profile["samples"].as_array().expect("samples is an array");
        let weights = profile["weights"].as_array().expect("weights is an array");
        assert_eq!(samples.len(), weights.len(), "one weight per sample");
        for sample in samples {
            for index in sample.as_array().expect("a sample is an array of frame indices") {
                let index = index.as_u64().expect("frame indices are integers");
                assert!((index as usize) < frames.len(), "frame index {index} out of range");
            }
        }
        let total: f64 = weights.iter().map(|w| w.as_f64().expect("weights are numbers")).sum();
        assert!((total - (end - start)).abs() < 1e-9, "weights add up to the profile's span");
    }
    if let Some(active) = file.get("activeProfileIndex") {
        assert!((active.as_u64().unwrap() as usize) < profiles.len());
    }
    assert!(file["name"].is_string());
    assert!(file["exporter"].as_str().unwrap().starts_with("onefix "));
    profiles
}

fn profile_named<'a>(profiles: &'a [Value], name: &str) -> &'a Value {
    profiles.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no profile named {name}"))
}

/// A sample's frames as (function, line), through the file's own frame table.
fn frames_of(file: &Value, sample: &Value) -> Vec<(String, u64)> {
    let frames = &file["shared"]["frames"];
    sample
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let frame = &frames[i.as_u64().unwrap() as usize];
            (frame["name"].as_str().unwrap().to_owned(), frame["line"].as_u64().unwrap_or(0))
        })
        .collect()
}

fn expected_frames(profile: &Profile, stack: &[FrameId]) -> Vec<(String, u64)> {
    stack.iter().map(|&f| (profile.frame(f).function.clone(), u64::from(profile.frame(f).line))).collect()
}

#[test]
fn wall_profile_follows_the_schema_with_one_profile_per_thread() {
    let (profile, _) = updater_profile_with_stacks();
    let file = speedscope(&profile, Mode::Wall);
    let profiles = check_schema(&file);
    let names: Vec<&str> = profiles.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["MainThread (tid 4242)", "ThreadPoolExecutor-0_0 (tid 4250)", "thread 4251"]);
    assert_eq!(file["activeProfileIndex"], 0, "the busiest thread opens first");
    assert_eq!(file["name"], "python3 updater.py --batch 50");
    assert_eq!(file["exporter"], "onefix 0.1.0");
    assert!(profiles.iter().all(|p| p["unit"] == "seconds"));
    assert_eq!(profile_named(profiles, "thread 4251")["samples"], serde_json::json!([[]]));
}

#[test]
fn samples_are_root_first_in_time_order_with_runs_merged() {
    let (profile, stacks) = updater_profile_with_stacks();
    let file = speedscope(&profile, Mode::Wall);
    let main = profile_named(check_schema(&file), "MainThread (tid 4242)");
    let samples: Vec<Vec<(String, u64)>> =
        main["samples"].as_array().unwrap().iter().map(|s| frames_of(&file, s)).collect();
    let expected: Vec<Vec<(String, u64)>> = [
        &stacks.setup,
        &stacks.setup_partial,
        &stacks.post_blocked,
        &stacks.post_decode,
        &stacks.setup,
        &stacks.post_blocked,
    ]
    .iter()
    .map(|stack| expected_frames(&profile, stack))
    .collect();
    assert_eq!(samples, expected);
    assert_eq!(samples[0][0].0, "<module>", "root first");
    assert_eq!(samples[0].last().unwrap().0, "SSL_CTX_load_verify_locations", "leaf last");
    assert_eq!(main["weights"], serde_json::json!([0.04, 0.01, 0.02, 0.01, 0.02, 0.01]));
    assert_eq!(main["startValue"], 0.0);
    assert_eq!(main["endValue"], 0.11);
}

#[test]
fn cpu_mode_keeps_only_running_samples() {
    let (profile, _) = updater_profile_with_stacks();
    let file = speedscope(&profile, Mode::Cpu);
    let profiles = check_schema(&file);
    assert_eq!(profiles.len(), 1, "only the main thread ever ran");
    assert_eq!(profiles[0]["endValue"], 0.08);
}

#[test]
fn allocation_profiles_weigh_in_whole_bytes() {
    let file = speedscope(&bytes_profile(), Mode::Wall);
    let profiles = check_schema(&file);
    assert_eq!(profiles[0]["unit"], "bytes");
    assert_eq!(profiles[0]["weights"], serde_json::json!([1_572_864]));
    assert!(profiles[0]["weights"][0].is_u64(), "bytes print as integers");
    assert_eq!(profiles[0]["endValue"], 1_572_864);
}

#[test]
fn native_frames_name_their_library() {
    let (profile, _) = updater_profile_with_stacks();
    let file = speedscope(&profile, Mode::Wall);
    let frames = file["shared"]["frames"].as_array().unwrap();
    let ssl = frames.iter().find(|f| f["name"] == "SSL_CTX_load_verify_locations").unwrap();
    assert_eq!(ssl["file"], "/usr/lib/x86_64-linux-gnu/libssl.so.3");
    assert!(ssl.get("line").is_none(), "no line is better than line 0");
}

#[test]
fn the_schema_check_rejects_what_speedscope_would_reject() {
    let (profile, _) = updater_profile_with_stacks();
    let good = speedscope(&profile, Mode::Wall);
    assert!(schema_errors(&good).is_empty());
    type Breakage = (&'static str, fn(&mut Value));
    let breakages: [Breakage; 4] = [
        ("no weights", |f| {
            f["profiles"][0].as_object_mut().unwrap().remove("weights");
        }),
        ("unknown unit", |f| f["profiles"][0]["unit"] = "parsecs".into()),
        ("wrong $schema", |f| f["$schema"] = "https://example.invalid/schema.json".into()),
        ("frame without a name", |f| {
            f["shared"]["frames"][0].as_object_mut().unwrap().remove("name");
        }),
    ];
    for (what, breakage) in breakages {
        let mut bad = good.clone();
        breakage(&mut bad);
        assert!(!schema_errors(&bad).is_empty(), "{what}: the schema check must fail");
    }
}
