//! onefix's own writers (pprof, folded stacks, speedscope) read back by the importers: the
//! diagnosis of what is read names the same lines as the diagnosis of the profile written, and
//! what each format carries (threads, states, inlined frames) survives.

use std::path::{Path, PathBuf};

use onefix_diagnose::{diagnose, Diagnosis, KnowledgeBase, Options, UserCode};
use onefix_import::{import, Format, ImportError};
use onefix_model::{Frame, Meta, Mode, Profile, Sample, ThreadState, WeightUnit};
use onefix_report::pprof::{Function, Line, Location, Mapping, PprofProfile, PprofSample, ValueType};
use onefix_report::{write_folded, write_pprof, write_speedscope, FoldedOptions};
use prost::Message;

const APP: &str = "/srv/shop/app.py";

/// A Python program over 3 s at 100 Hz: its main thread spends 60% at a hot line, 25% in
/// `json.dumps` under another, 15% sleeping; a worker waits on a queue the whole time.
fn program() -> Profile {
    let meta = Meta {
        mode: Mode::Wall,
        rate_hz: 100.0,
        weight_unit: WeightUnit::Samples { interval_us: 10_000 },
        duration_s: 3.0,
        ..Meta::default()
    };
    let mut p = Profile::new(meta);
    let main = p.intern_thread(100, 100, Some("MainThread"));
    let worker = p.intern_thread(100, 101, Some("worker"));
    let module = p.intern_frame(Frame::python("<module>", APP, 40));
    let serve = p.intern_frame(Frame::python("serve", APP, 30));
    let hot = p.intern_frame(Frame::python("price", APP, 12));
    let dump_line = p.intern_frame(Frame::python("render", APP, 21));
    let dumps = p.intern_frame(Frame::python("dumps", "/usr/lib/python3.11/json/__init__.py", 231));
    let encode = p.intern_frame(Frame::python("encode", "/usr/lib/python3.11/json/encoder.py", 200));
    let sleep_line = p.intern_frame(Frame::python("serve", APP, 33));
    let boot = p.intern_frame(Frame::python("_bootstrap", "/usr/lib/python3.11/threading.py", 995));
    let get = p.intern_frame(Frame::python("get", "/usr/lib/python3.11/queue.py", 171));
    let wait = p.intern_frame(Frame::python("wait", "/usr/lib/python3.11/threading.py", 320));
    let hot_stack = p.intern_stack([module, serve, hot]);
    let dump_stack = p.intern_stack([module, serve, dump_line, dumps, encode]);
    let sleep_stack = p.intern_stack([module, sleep_line]);
    let idle_stack = p.intern_stack([boot, get, wait]);
    let running = ThreadState::new(true, true);
    let idle = ThreadState::new(false, false);
    for tick in 0..300u64 {
        let (stack, state) = match tick % 20 {
            0..=11 => (hot_stack, running),
            12..=16 => (dump_stack, running),
            _ => (sleep_stack, idle),
        };
        let time_us = tick * 10_000;
        p.push_sample(Sample { time_us, thread: main, stack, state, weight: 1 });
        p.push_sample(Sample { time_us, thread: worker, stack: idle_stack, state: idle, weight: 1 });
    }
    p
}

/// A checkout of the program's sources, where folded stacks' relative file names are found.
fn checkout() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onefix-import-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("app.py"), "# the program's source\n").unwrap();
    dir
}

fn diagnosis(p: &Profile, timeline: bool) -> Diagnosis {
    // No base directory: a relative file that was not found (json's `encoder.py`) is not the user's.
    let user = UserCode::new([Path::new("/srv/shop"), &checkout()], None);
    let opts = Options { mode: p.meta.mode, timeline, partial_stacks: timeline, ..Options::default() };
    diagnose(p, &KnowledgeBase::builtin(), &user, &opts)
}

fn finding_lines(d: &Diagnosis) -> Vec<(String, u32)> {
    d.findings.iter().map(|f| (onefix_model::fmt::file_name(&f.file).to_owned(), f.line)).collect()
}

fn written(write: impl Fn(&mut Vec<u8>, &Profile) -> std::io::Result<()>) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out, &program()).unwrap();
    out
}

#[test]
fn each_format_written_by_onefix_reads_back_to_the_same_findings() {
    let original = diagnosis(&program(), true);
    let lines = finding_lines(&original);
    assert_eq!(
        lines,
        vec![("app.py".to_owned(), 12), ("app.py".to_owned(), 21), ("app.py".to_owned(), 33)],
        "{original:#?}"
    );
    let cases: [(Format, Vec<u8>); 3] = [
        (Format::Pprof, written(|w, p| write_pprof(w, p, Mode::Wall))),
        (Format::Folded, written(|w, p| write_folded(w, p, Mode::Wall, &FoldedOptions { thread_prefix: true }))),
        (Format::Speedscope, written(|w, p| write_speedscope(w, p, Mode::Wall))),
    ];
    for (format, bytes) in cases {
        let mut imported = import(&bytes).unwrap_or_else(|e| panic!("{format:?}: {e}"));
        onefix_import::resolve_sources(&mut imported.profile, &checkout());
        assert_eq!(imported.format, format);
        assert!(imported.lacks.timeline, "{format:?} carries no sample times");
        let read = diagnosis(&imported.profile, false);
        assert_eq!(finding_lines(&read), lines, "{format:?}: {read:#?}");
        // The shares are the same: the same samples, charged to the same lines.
        for (a, b) in original.findings.iter().zip(&read.findings) {
            assert!((a.share - b.share).abs() < 0.01, "{format:?}: {} vs {}", a.share, b.share);
            // Kinds need what the format keeps: a line that sleeps is a blocking wait only with
            // thread states (pprof's labels; speedscope and folded stacks have none), and
            // onefix's folded labels name files by base name (`__init__.py`), losing a
            // library's package (`json`) and so the knowledge base's entry.
            if !imported.lacks.states {
                assert_eq!(a.kind, b.kind, "{format:?}");
            }
            assert_eq!(b.recurrence, None, "{format:?}: no sample times, no recurrence");
        }
        assert_eq!(imported.profile.sample_count(), program().sample_count(), "{format:?}");
    }
}

#[test]
fn pprof_keeps_threads_and_states_through_its_labels() {
    let imported = import(&written(|w, p| write_pprof(w, p, Mode::Wall))).unwrap();
    let p = &imported.profile;
    assert!(!imported.lacks.threads && !imported.lacks.states && !imported.lacks.waits);
    let mut names: Vec<_> = p.threads().iter().map(|t| (t.tid, t.name.clone().unwrap())).collect();
    names.sort();
    assert_eq!(names, vec![(100, "MainThread".to_owned()), (101, "worker".to_owned())]);
    let original = program();
    assert_eq!(p.total_weight(Mode::Cpu), original.total_weight(Mode::Cpu), "running samples stay running");
    assert_eq!(p.meta.weight_unit, WeightUnit::Samples { interval_us: 10_000 });
    assert_eq!(p.meta.mode, Mode::Wall);
    let d = diagnosis(p, false);
    assert!(d.idle_weight >= 300, "the worker waiting on its queue is idle: {d:#?}");
    // CPU mode keeps only the running samples.
    let cpu = import(&written(|w, p| write_pprof(w, p, Mode::Cpu))).unwrap();
    assert_eq!(cpu.profile.meta.mode, Mode::Cpu);
    assert_eq!(cpu.profile.sample_count(), original.total_weight(Mode::Cpu));
    assert!(cpu.lacks.waits);
}

/// `profile.proto` as Go writes a CPU profile: `samples/count` and `cpu/nanoseconds`, a period of
/// 10 ms, locations with inlined functions (innermost line first), no labels, not gzipped.
fn go_cpu_profile() -> PprofProfile {
    let strings: Vec<String> = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "main.main",
        "/src/shop/main.go",
        "main.validSKU",
        "regexp.MustCompile",
        "/usr/lib/go-1.19/src/regexp/regexp.go",
        "regexp.Compile",
        "/src/shop/shop",
        "runtime.main",
        "/usr/lib/go-1.19/src/runtime/proc.go",
        "main.price",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let function = |id, name, file| Function { id, name, system_name: name, filename: file, start_line: 0 };
    let line = |function_id, line| Line { function_id, line, column: 0 };
    let location = |id, lines| Location { id, mapping_id: 1, address: 0x1000 + id, line: lines, is_folded: false };
    PprofProfile {
        sample_type: vec![ValueType { r#type: 1, unit: 2 }, ValueType { r#type: 3, unit: 4 }],
        sample: vec![
            // runtime.main → main.main:20 → main.validSKU:9 → regexp.MustCompile (with regexp.Compile inlined)
            PprofSample { location_id: vec![3, 2, 1], value: vec![70, 700_000_000], label: vec![] },
            PprofSample { location_id: vec![4, 1], value: vec![30, 300_000_000], label: vec![] },
        ],
        mapping: vec![Mapping { id: 1, filename: 11, has_functions: true, ..Mapping::default() }],
        location: vec![
            location(1, vec![line(1, 20), line(5, 250)]),
            location(2, vec![line(2, 9)]),
            location(3, vec![line(4, 137), line(3, 317)]),
            location(4, vec![line(6, 14)]),
        ],
        function: vec![
            function(1, 5, 6),
            function(2, 7, 6),
            function(3, 8, 9),
            function(4, 10, 9),
            function(5, 12, 13),
            function(6, 14, 6),
        ],
        string_table: strings,
        period_type: Some(ValueType { r#type: 3, unit: 4 }),
        period: 10_000_000,
        duration_nanos: 1_000_000_000,
        ..PprofProfile::default()
    }
}

#[test]
fn a_go_cpu_profile_keeps_inlined_frames_and_names_the_compile_line() {
    let imported = import(&go_cpu_profile().encode_to_vec()).unwrap();
    let p = &imported.profile;
    assert_eq!(imported.sample_type.as_deref(), Some("cpu/nanoseconds"));
    assert_eq!((p.meta.mode, p.sample_count()), (Mode::Cpu, 100));
    assert!(imported.lacks.threads && imported.lacks.waits && imported.lacks.timeline && !imported.lacks.interval);
    let heaviest = p.samples.iter().max_by_key(|s| s.weight).unwrap();
    let stack: Vec<String> = p
        .stack_frames_root_first(heaviest.stack)
        .into_iter()
        .map(|f| format!("{}:{}", p.frame(f).function, p.frame(f).line))
        .collect();
    assert_eq!(
        stack,
        ["runtime.main:250", "main.main:20", "main.validSKU:9", "regexp.MustCompile:317", "regexp.Compile:137"],
        "inlined callee after its caller"
    );
    assert_eq!(onefix_import::guess_user_code(p, None), vec!["/src/shop".to_owned()], "package main's directory");
    let user = UserCode::new(["/src/shop"], None);
    let opts = Options { mode: Mode::Cpu, timeline: false, partial_stacks: false, ..Options::default() };
    let d = diagnose(p, &KnowledgeBase::builtin(), &user, &opts);
    let first = &d.findings[0];
    assert_eq!((first.line, first.rule.as_str()), (9, "regex-compile"), "{d:#?}");
    assert_eq!(first.recurrence, None);
}

/// The Rust `pprof` crate's `Report::pprof`: one `cpu/count` sample type, no period, a location
/// per function (keyed by its name), no labels.
#[test]
fn a_rust_pprof_crate_profile_is_read_as_cpu_sample_counts() {
    let strings: Vec<String> = ["", "shop::price", "/src/shop/src/main.rs", "shop::main", "cpu", "count"]
        .into_iter()
        .map(String::from)
        .collect();
    let function = |id, name| Function { id, name, system_name: name, filename: 2, start_line: 0 };
    let location =
        |id, line| Location { id, line: vec![Line { function_id: id, line, column: 0 }], ..Location::default() };
    let profile = PprofProfile {
        sample_type: vec![ValueType { r#type: 4, unit: 5 }],
        sample: vec![
            PprofSample { location_id: vec![1, 2], value: vec![90], label: vec![] },
            PprofSample { location_id: vec![2], value: vec![10], label: vec![] },
        ],
        location: vec![location(1, 7), location(2, 20)],
        function: vec![function(1, 1), function(2, 3)],
        string_table: strings,
        ..PprofProfile::default()
    };
    let imported = import(&profile.encode_to_vec()).unwrap();
    assert_eq!(imported.sample_type.as_deref(), Some("cpu/count"));
    assert_eq!((imported.profile.meta.mode, imported.profile.sample_count()), (Mode::Cpu, 100));
    assert!(imported.lacks.interval, "no period: the times assume 100 Hz, and the note says so");
    assert_eq!(onefix_import::guess_user_code(&imported.profile, None), vec!["/src/shop/src".to_owned()]);
    let user = UserCode::new(["/src/shop/src"], None);
    let opts = Options { mode: Mode::Cpu, timeline: false, partial_stacks: false, ..Options::default() };
    let d = diagnose(&imported.profile, &KnowledgeBase::builtin(), &user, &opts);
    assert_eq!(d.findings[0].line, 7, "{d:#?}");
    assert!(imported.note().unwrap().contains("no sampling interval"));
}

#[test]
fn damaged_profiles_are_errors_not_panics() {
    let gz = written(|w, p| write_pprof(w, p, Mode::Wall));
    assert!(matches!(import(&gz[..gz.len() / 2]), Err(ImportError::Gzip(_))));
    let raw = go_cpu_profile().encode_to_vec();
    let cut = import(&raw[..raw.len() - 7]);
    assert!(cut.is_err(), "a cut protobuf is refused");
    let mut missing = go_cpu_profile();
    missing.sample[0].location_id.push(99);
    let err = import(&missing.encode_to_vec()).unwrap_err();
    assert!(matches!(err, ImportError::PprofInvalid(_)), "{err}");
    let mut heap = go_cpu_profile();
    heap.string_table[3] = "alloc_space".into();
    heap.string_table[4] = "bytes".into();
    heap.string_table[1] = "alloc_objects".into();
    let err = import(&heap.encode_to_vec()).unwrap_err();
    assert!(err.to_string().contains("alloc_objects/count, alloc_space/bytes"), "{err}");
    let mut heavy = go_cpu_profile();
    heavy.sample[0].value = vec![i64::MAX, i64::MAX];
    assert!(matches!(import(&heavy.encode_to_vec()), Err(ImportError::TooHeavy { .. })));
    assert!(matches!(
        import(b"a;b 99999999999999999999\n"),
        Err(ImportError::FoldedLine { line: 1 }) | Err(ImportError::Unknown)
    ));
    assert!(matches!(import(b"a;b 9999999999999\n"), Err(ImportError::TooHeavy { .. })));
    let ss = written(|w, p| write_speedscope(w, p, Mode::Wall));
    assert!(matches!(import(&ss[..ss.len() - 10]), Err(ImportError::Json(_))));
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert!(import(&noise).is_err());
}

/// py-spy's raw format names files relative to their import root: a library's package is kept,
/// so its calls are classified as in a recording.
#[test]
fn py_spy_raw_stacks_are_diagnosed_like_a_recording() {
    let raw = "<module> (app.py:40);serve (app.py:30);price (app.py:12) 180\n\
               <module> (app.py:40);serve (app.py:30);render (app.py:21);dumps (json/__init__.py:231);encode (json/encoder.py:200) 75\n\
               <module> (app.py:40);serve (app.py:30);_bootstrap (threading.py:995) 3\n";
    let mut imported = import(raw.as_bytes()).unwrap();
    assert_eq!(imported.format, Format::Folded);
    onefix_import::resolve_sources(&mut imported.profile, &checkout());
    let d = diagnosis(&imported.profile, false);
    let found: Vec<(u32, onefix_diagnose::Kind)> = d.findings.iter().map(|f| (f.line, f.kind)).collect();
    assert_eq!(
        found,
        vec![(12, onefix_diagnose::Kind::HotLoopCompute), (21, onefix_diagnose::Kind::Serialization)],
        "{d:#?}"
    );
    assert!(d.findings[0].file.ends_with("/app.py") && d.findings[0].file.starts_with('/'), "found in the checkout");
}

/// Every cut of every format, and every single flipped byte of the uncompressed pprof, is read
/// or refused, never a panic.
#[test]
fn any_cut_or_flipped_byte_is_read_or_refused_without_a_panic() {
    let formats = [
        written(|w, p| write_pprof(w, p, Mode::Wall)),
        go_cpu_profile().encode_to_vec(),
        written(|w, p| write_folded(w, p, Mode::Wall, &FoldedOptions { thread_prefix: true })),
        written(|w, p| write_speedscope(w, p, Mode::Wall)),
    ];
    for bytes in &formats {
        let step = (bytes.len() / 300).max(1);
        for cut in (0..bytes.len()).step_by(step) {
            let _ = import(&bytes[..cut]);
        }
    }
    let raw = go_cpu_profile().encode_to_vec();
    for i in 0..raw.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut damaged = raw.clone();
            damaged[i] ^= flip;
            let _ = import(&damaged);
        }
    }
}
