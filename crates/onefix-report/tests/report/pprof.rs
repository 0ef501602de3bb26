//! The pprof writer: the gzipped protobuf decodes back (with prost and flate2) into a profile
//! whose readable form is a golden file, and its values add up to the recording's weights.

use std::io::Read;

use flate2::read::GzDecoder;
use onefix_model::{Mode, Profile};
use onefix_report::pprof::PprofProfile;
use onefix_report::write_pprof;
use prost::Message;

use crate::fixture::{bytes_profile, updater_profile};
use crate::golden::assert_golden;

pub fn encode(profile: &Profile, mode: Mode) -> Vec<u8> {
    let mut out = Vec::new();
    write_pprof(&mut out, profile, mode).unwrap();
    out
}

pub fn decode(gzipped: &[u8]) -> PprofProfile {
    assert_eq!(&gzipped[..2], &[0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    GzDecoder::new(gzipped).read_to_end(&mut raw).expect("valid gzip");
    PprofProfile::decode(raw.as_slice()).expect("valid profile.proto message")
}

/// One line per table entry, strings resolved: what a reader of the file sees.
fn readable(p: &PprofProfile) -> String {
    let s = |i: i64| p.string_table[i as usize].as_str();
    let mut out = String::new();
    let vt = |v: &onefix_report::pprof::ValueType| format!("{}/{}", s(v.r#type), s(v.unit));
    out += &format!("sample_type: {}\n", p.sample_type.iter().map(vt).collect::<Vec<_>>().join(", "));
    out += &format!("default_sample_type: {}\n", s(p.default_sample_type));
    out += &format!("period: {} {}\n", p.period, p.period_type.as_ref().map(vt).unwrap_or_default());
    out += &format!("time_nanos: {} duration_nanos: {}\n", p.time_nanos, p.duration_nanos);
    for c in &p.comment {
        out += &format!("comment: {}\n", s(*c));
    }
    for m in &p.mapping {
        out += &format!(
            "mapping {}: {} functions={} filenames={} lines={}\n",
            m.id,
            s(m.filename),
            m.has_functions,
            m.has_filenames,
            m.has_line_numbers
        );
    }
    for f in &p.function {
        out += &format!("function {}: {:?} file {:?}\n", f.id, s(f.name), s(f.filename));
    }
    for l in &p.location {
        let lines: Vec<String> = l.line.iter().map(|x| format!("fn {} line {}", x.function_id, x.line)).collect();
        out += &format!("location {}: mapping {} {}\n", l.id, l.mapping_id, lines.join(", "));
    }
    for sample in &p.sample {
        let labels: Vec<String> = sample
            .label
            .iter()
            .map(|l| if l.str != 0 { format!("{}={}", s(l.key), s(l.str)) } else { format!("{}={}", s(l.key), l.num) })
            .collect();
        out += &format!("sample {:?} values {:?} [{}]\n", sample.location_id, sample.value, labels.join(" "));
    }
    out
}

#[test]
fn pprof_wall_decodes_to_the_golden_form() {
    assert_golden("pprof_wall.txt", &readable(&decode(&encode(&updater_profile(), Mode::Wall))));
}

#[test]
fn pprof_bytes_decodes_to_the_golden_form() {
    assert_golden("pprof_bytes.txt", &readable(&decode(&encode(&bytes_profile(), Mode::Wall))));
}

#[test]
fn pprof_values_add_up_to_the_recorded_weight_in_each_mode() {
    let profile = updater_profile();
    for mode in [Mode::Wall, Mode::Cpu] {
        let p = decode(&encode(&profile, mode));
        let weight = profile.total_weight(mode) as i64;
        let counts: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        let nanos: i64 = p.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(counts, weight, "{mode:?}");
        assert_eq!(nanos, weight * 10_000_000, "{mode:?}: 10 ms per sample at 100 Hz");
        assert_eq!(p.string_table[p.sample_type[1].r#type as usize], mode.as_str());
        assert_eq!(p.string_table[0], "", "string 0 is empty");
        // Every id a sample or location refers to exists.
        let locations = p.location.len() as u64;
        assert!(p.sample.iter().flat_map(|s| &s.location_id).all(|&id| (1..=locations).contains(&id)));
        let functions = p.function.len() as u64;
        let mappings = p.mapping.len() as u64;
        for l in &p.location {
            assert!((1..=mappings).contains(&l.mapping_id));
            assert!(l.line.iter().all(|x| (1..=functions).contains(&x.function_id)));
        }
    }
    let bytes = bytes_profile();
    let p = decode(&encode(&bytes, Mode::Wall));
    let total: i64 = p.sample.iter().map(|s| s.value[1]).sum();
    assert_eq!(total, bytes.total_weight(Mode::Wall) as i64);
    assert_eq!(
        p.sample.iter().map(|s| s.value[0]).sum::<i64>(),
        bytes.samples.len() as i64,
        "one count per allocation sample"
    );
}

#[test]
fn pprof_output_is_deterministic() {
    let profile = updater_profile();
    assert_eq!(encode(&profile, Mode::Wall), encode(&profile, Mode::Wall));
}
