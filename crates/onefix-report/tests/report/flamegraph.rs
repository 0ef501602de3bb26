//! The flame graph SVG: inferno's exact bytes are its business, so these check what onefix
//! promises: an SVG, every frame present, the same bytes every time.

use onefix_model::{CallTree, Mode, Profile};
use onefix_report::{escape_label, write_flamegraph, FlamegraphOptions};

use crate::fixture::{render, updater_profile, LINE_BREAK_FRAME, SEMICOLON_FRAME};

fn svg(profile: &Profile, mode: Mode, opts: &FlamegraphOptions) -> String {
    render(|w| write_flamegraph(w, profile, mode, opts))
}

/// How inferno writes text into the SVG.
fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[test]
fn is_an_svg_document() {
    let out = svg(&updater_profile(), Mode::Wall, &FlamegraphOptions::default());
    assert!(out.starts_with("<?xml"), "{}", &out[..100.min(out.len())]);
    assert!(out.contains("<svg ") && out.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(out.trim_end().ends_with("</svg>"));
    assert_eq!(out.matches("<svg ").count(), out.matches("</svg>").count(), "balanced svg elements");
    assert_eq!(out.matches("<g>").count(), out.matches("</g>").count(), "balanced groups");
}

#[test]
fn one_box_per_call_tree_node() {
    let profile = updater_profile();
    let out = svg(&profile, Mode::Wall, &FlamegraphOptions::default());
    // Every node of the call tree, the root ("all") included, is one group holding its title,
    // rectangle and label; the sample without frames adds one box of its own.
    let tree = CallTree::build(&profile, |s| Mode::Wall.counts(s.state));
    assert_eq!(out.matches("<g><title>").count(), tree.nodes.len() + 1);
}

#[test]
fn every_counted_frame_is_drawn() {
    let profile = updater_profile();
    let out = svg(&profile, Mode::Wall, &FlamegraphOptions::default());
    for frame in profile.frames() {
        let label = xml_escape(&escape_label(&frame.label()));
        assert!(out.contains(&label), "frame {label:?} missing from the flame graph");
    }
    assert!(out.contains("[no frames]"), "the sample without frames still counts");
    assert!(!out.contains(SEMICOLON_FRAME), "a `;` in a name would split the frame");
    assert!(!out.contains(LINE_BREAK_FRAME));
}

#[test]
fn counts_and_title_describe_the_recording() {
    let profile = updater_profile();
    let out = svg(&profile, Mode::Wall, &FlamegraphOptions::default());
    assert!(out.contains("onefix: python3 updater.py --batch 50"));
    assert!(out.contains("wall time, 100 Hz, 12.3 s"));
    // The root spans all 17 intervals of weight recorded in wall mode.
    assert!(out.contains("all (17 samples, 100%)"), "root frame title missing");

    let cpu = svg(&profile, Mode::Cpu, &FlamegraphOptions { title: Some("custom title".into()), thread_prefix: true });
    assert!(cpu.contains("custom title"));
    assert!(cpu.contains("all (8 samples, 100%)"), "CPU mode drops the blocked samples");
    assert!(cpu.contains("thread (4242): MainThread"));
    assert!(!cpu.contains("_worker"), "the worker never ran");
}

#[test]
fn output_is_deterministic() {
    let profile = updater_profile();
    let opts = FlamegraphOptions::default();
    // inferno's random colours come from a thread-local generator that keeps going between
    // calls: two graphs drawn in a row would differ if any colour were random.
    let first = svg(&profile, Mode::Wall, &opts);
    let second = svg(&profile, Mode::Wall, &opts);
    assert_eq!(first, second);
}

#[test]
fn nothing_to_draw_is_an_error_and_writes_nothing() {
    let mut profile = updater_profile();
    profile.samples.retain(|s| !s.state.active());
    let mut out = Vec::new();
    let err = write_flamegraph(&mut out, &profile, Mode::Cpu, &FlamegraphOptions::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(out.is_empty());
}
