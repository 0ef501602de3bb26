use super::*;

#[test]
fn the_texts_use_only_placeholders_onefix_fills() {
    texts().check_placeholders().unwrap();
    let mut t = texts();
    t.churn.title = "allocates {alocated} per {pass}".into();
    let err = t.check_placeholders().unwrap_err();
    assert!(err.contains("churn.title") && err.contains("{alocated}, {pass}"), "{err}");
}
use onefix_model::{Frame, Meta, Sample, ThreadState, WeightUnit};

/// A fresh directory for one test's source files.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn the_knowledge_base_parses() {
    let t = texts();
    assert_eq!(t.retention.kind, "memory-retention");
    assert_eq!(t.churn.kind, "allocation-churn");
}

/// A server whose handler parses a mapping and stores it per client (growing), and builds
/// a temporary per request (churn).
#[test]
fn names_the_line_that_stores_a_growing_mapping_and_the_churning_line() {
    let dir = scratch("onefix-memdiag");
    let file = write(
        &dir,
        "server.py",
        "clients = {}\n\ndef handle(req):\n    params = parse(req.query)\n    tmp = render(params)\n    clients[req.client] = params\n    return tmp\n",
    );
    let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
    let t = p.intern_thread(1, 1, None);
    let parse = p.intern_frame(Frame::python("parse_qs", "/usr/lib/python3.11/urllib/parse.py", 700));
    let alloc_line = p.intern_frame(Frame::python("handle", file.clone(), 4));
    let tmp_line = p.intern_frame(Frame::python("handle", file.clone(), 5));
    let kept = p.intern_stack([alloc_line, parse]);
    let temp = p.intern_stack([tmp_line]);
    for i in 0..100u64 {
        let at = i * 100_000;
        p.samples.push(Sample { time_us: at, thread: t, stack: kept, state: ThreadState::default(), weight: 1000 });
        p.samples.push(Sample { time_us: at, thread: t, stack: temp, state: ThreadState::default(), weight: 5000 });
        p.samples.push(Sample {
            time_us: at + 10,
            thread: t,
            stack: temp,
            state: ThreadState(ThreadState::FREED),
            weight: 5000,
        });
    }
    let user = UserCode::new([&dir], None);
    let d = diagnose_memory(&p, &user, &MemoryOptions::default());
    let first = &d.findings[0];
    assert_eq!((first.kind.as_str(), first.line), ("memory-retention", 6), "{d:#?}");
    assert!(first.why.contains("line 4") && first.why.contains("parse_qs"), "{}", first.why);
    assert!(first.share > 0.9, "{}", first.share);
    let churn = d.findings.iter().find(|f| f.kind == "allocation-churn").expect("a churn finding");
    assert_eq!(churn.line, 5);
    // Flat retention (allocated once at start) is not growth.
    let mut flat = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
    let t = flat.intern_thread(1, 1, None);
    let line = flat.intern_frame(Frame::python("handle", file.clone(), 4));
    let s = flat.intern_stack([line]);
    flat.samples.push(Sample { time_us: 0, thread: t, stack: s, state: ThreadState::default(), weight: 100_000 });
    for i in 1..100u64 {
        flat.samples.push(Sample {
            time_us: i * 100_000,
            thread: t,
            stack: s,
            state: ThreadState::default(),
            weight: 10,
        });
        flat.samples.push(Sample {
            time_us: i * 100_000 + 1,
            thread: t,
            stack: s,
            state: ThreadState(ThreadState::FREED),
            weight: 10,
        });
    }
    let d = diagnose_memory(&flat, &user, &MemoryOptions::default());
    assert!(d.findings.iter().all(|f| f.kind != "memory-retention"), "{:?}", d.findings);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A helper builds the value and returns it; its caller stores it, on the call's line or
/// a later one.
#[test]
fn the_storing_line_is_looked_for_in_the_callers_of_a_helper() {
    let dir = scratch("onefix-memdiag-callers");
    let file = write(
        &dir,
        "app.py",
        "CACHE = {}\n\ndef build(req):\n    return [req] * 1000\n\ndef handle(req):\n    view = build(req)\n    log(req)\n    CACHE[req] = view\n\ndef remember(req):\n    SEEN[req] = build(req)\n",
    );
    let user = UserCode::new([&dir], None);
    let via_name = growing(&[("handle", &file, 7), ("build", &file, 4)]);
    let d = diagnose_memory(&via_name, &user, &MemoryOptions::default());
    assert_eq!((d.findings[0].kind.as_str(), d.findings[0].line), ("memory-retention", 9), "{:#?}", d.findings);
    assert_eq!(d.findings[0].function, "handle");
    assert!(d.findings[0].why.contains("line 4"), "{}", d.findings[0].why);
    let stored_on_the_call = growing(&[("remember", &file, 12), ("build", &file, 4)]);
    let d = diagnose_memory(&stored_on_the_call, &user, &MemoryOptions::default());
    assert_eq!(d.findings[0].line, 12, "{:#?}", d.findings);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A heap that grows by 1000 bytes every 100 ms for 10 s, all allocated under `frames`
/// (outermost first).
fn growing(frames: &[(&str, &str, u32)]) -> Profile {
    let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
    let t = p.intern_thread(1, 1, None);
    let ids: Vec<FrameId> =
        frames.iter().map(|&(f, file, line)| p.intern_frame(Frame::python(f, file, line))).collect();
    let stack = p.intern_stack(ids);
    for i in 0..100u64 {
        p.samples.push(Sample { time_us: i * 100_000, thread: t, stack, state: ThreadState::default(), weight: 1000 });
    }
    p
}

#[test]
fn data_held_whole_and_freed_afterwards_is_the_peak_not_a_leak() {
    let dir = scratch("onefix-memdiag-peak");
    let file = write(
        &dir,
        "etl.py",
        "def run(path):\n    lines = open(path).read().splitlines()\n    return sum(len(l) for l in lines)\n",
    );
    // Read in one burst, held while it is summed, then dropped: 100 pieces of `piece` bytes.
    let held_whole = |piece: u32| {
        let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
        let t = p.intern_thread(1, 1, None);
        let whole = p.intern_frame(Frame::python("run", file.clone(), 2));
        let stack = p.intern_stack([whole]);
        for (at, state) in [(1_000_000, ThreadState::default()), (6_000_000, ThreadState(ThreadState::FREED))] {
            for i in 0..100u64 {
                p.samples.push(Sample { time_us: at + i, thread: t, stack, state, weight: piece });
            }
        }
        p
    };
    let user = UserCode::new([&dir], None);
    let d = diagnose_memory(&held_whole(200_000), &user, &MemoryOptions::default());
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("memory-peak", 2), "{:#?}", d.findings);
    assert!(f.advice.contains("in pieces"), "{}", f.advice);
    assert!(
        d.findings.iter().all(|f| f.kind != "memory-retention" && f.kind != "allocation-churn"),
        "{:#?}",
        d.findings
    );
    // A couple of megabytes at once is no peak worth a finding.
    let d = diagnose_memory(&held_whole(20_000), &user, &MemoryOptions::default());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(d.findings.iter().all(|f| f.kind != "memory-peak"), "{:#?}", d.findings);
}

#[test]
fn storing_into_a_field_of_the_value_is_not_storing_the_value() {
    let dir = scratch("onefix-memdiag-field");
    let file = write(&dir, "req.c", "void take(int n) {\n    struct req *r = malloc(sizeof *r);\n    r->body = malloc(r->body_len);\n    r->next = head;\n    list[n] = r;\n}\n");
    let mut sources = SourceCache::default();
    assert_eq!(
        holder_of(&mut sources, Path::new(&file), 2, "    struct req *r = malloc(sizeof *r);").map(|h| h.0),
        Some(5)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn finds_the_storing_line_in_c_too() {
    let dir = scratch("onefix-memdiag-c");
    let file = write(
        &dir,
        "t.c",
        "void add(int k) {\n    char *copy = strdup(name);\n    int n = 3;\n    table[k] = copy;\n}\n",
    );
    let mut sources = SourceCache::default();
    assert_eq!(holder_of(&mut sources, Path::new(&file), 2, "    char *copy = strdup(name);").map(|h| h.0), Some(4));
    assert_eq!(holder_of(&mut sources, Path::new(&file), 3, "    int n = 3;"), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
