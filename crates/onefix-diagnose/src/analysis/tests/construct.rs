//! An object built again on every call, its construction spread over its class's lines
//! (construct.rs): named at the line that builds it, and only when the samples saw it built
//! again and again.

use super::*;

const ZONES: &str = "import struct\n\nclass Zone:\n    def __init__(self, path):\n        with open(path, 'rb') as f:\n            data = f.read()\n        self.count = struct.unpack('>l', data[:4])\n        self.items = [x for x in data]\n        self.names = data.split(b'\\0')\n        self.index = {n: i for i, n in enumerate(self.names)}\n        self.total = sum(self.items)\n\ndef zone_for(name):\n    path = '/zones/' + name\n    zone = Zone(path)\n    return zone.total\n\ndef render(events):\n    for e in events:\n        print(zone_for(e), e)\n\nrender(EVENTS)\n";

/// 400 samples: `constructing(i)` says whether sample `i` is inside `Zone(path)` (line 15),
/// whose time goes round the constructor's lines 5 to 11; `heavy_line` puts every other sample
/// of it at line 7 instead. Outside it, the caller's other lines run.
fn zones(tag: &str, constructing: impl Fn(u64) -> bool, heavy_line: bool) -> Diagnosis {
    zones_nested(tag, constructing, heavy_line, false)
}

/// [`zones`], with each construction building another inside it when `nested`.
fn zones_nested(tag: &str, constructing: impl Fn(u64) -> bool, heavy_line: bool, nested: bool) -> Diagnosis {
    zones_with(tag, constructing, heavy_line, nested, &Options::default())
}

fn zones_with(
    tag: &str,
    constructing: impl Fn(u64) -> bool,
    heavy_line: bool,
    nested: bool,
    opts: &Options,
) -> Diagnosis {
    let (dir, app) = write_app(tag, ZONES);
    let mut b = Builder::new();
    for i in 0..400u64 {
        let mut stack: Vec<(&str, &str, u32)> = vec![("<module>", &app, 22), ("render", &app, 20)];
        if constructing(i) {
            let line = if heavy_line && i % 2 == 0 { 7 } else { 5 + (i % 7) as u32 };
            stack.push(("zone_for", &app, 15));
            if nested {
                stack.push(("Zone.__init__", &app, 11));
                stack.push(("zone_for", &app, 15));
            }
            stack.push(("Zone.__init__", &app, line));
        } else if i % 2 == 0 {
            stack.push(("zone_for", &app, 14));
        }
        b.add(1, i * 10, true, &stack);
    }
    let user = UserCode::new([dir.to_str().unwrap()], Some(dir.as_path()));
    let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, opts);
    std::fs::remove_dir_all(&dir).unwrap();
    d
}

#[test]
fn an_object_built_on_every_call_is_named_where_it_is_built() {
    // Seven samples in ten inside the construction, entered 40 times.
    let d = zones("object-per-call", |i| i % 10 < 7, false);
    let f = &d.findings[0];
    assert_eq!(
        (f.line, f.kind.as_str(), f.rule.as_str()),
        (15, "repeated-setup", "object-per-call"),
        "{:#?}",
        d.findings
    );
    assert!((f.share - 0.7).abs() < 0.02, "{f:?}");
    assert!(f.title.starts_with("Building a new Zone on every call takes 70%"), "{}", f.title);
    assert!(f.why.contains("at least 40 separate times") && f.why.contains("7 lines"), "{}", f.why);
    assert!(f.advice.contains("build the Zone once"), "{}", f.advice);
    assert!(!f.why.contains("builds others inside it"), "{}", f.why);
    assert_eq!(f.evidence[0].frame, "Zone.__init__", "{:?}", f.evidence);
    // About 1 / (1 - 0.7).
    let bound = f.max_speedup.unwrap();
    assert!((bound - 3.33).abs() < 0.3, "{bound}");
    assert!(
        !d.findings.iter().any(|g| (5..=11).contains(&g.line)),
        "the constructor's lines are part of it: {:#?}",
        d.findings
    );
}

#[test]
fn a_construction_entered_once_is_not_an_object_per_call() {
    // The same share in one stretch: one long construction, which building once does not save.
    let once = zones("object-once", |i| i < 280, false);
    assert!(!once.findings.iter().any(|f| f.rule == "object-per-call"), "{:#?}", once.findings);
    // Without sample times (an imported pprof profile) nothing says how often it was entered.
    let opts = Options { timeline: false, partial_stacks: false, ..Options::default() };
    let untimed = zones_with("object-untimed", |i| i % 10 < 7, false, false, &opts);
    assert!(!untimed.findings.iter().any(|f| f.rule == "object-per-call"), "{:#?}", untimed.findings);
}

/// Most of the construction at one line of it (a table's rows parsed in a loop) is still the
/// construction's cost when it is built on every call: the line is named in the why.
#[test]
fn a_construction_with_one_heavy_line_built_per_call_is_named_with_that_line() {
    let heavy = zones("object-heavy-line", |i| i % 10 < 7, true);
    let f = &heavy.findings[0];
    assert_eq!((f.line, f.rule.as_str()), (15, "object-per-call"), "{:#?}", heavy.findings);
    assert!(f.why.contains("the heaviest app.py:7 at 44% of the time"), "{}", f.why);
    assert!(!heavy.findings.iter().any(|g| g.line == 7), "{:#?}", heavy.findings);
}

#[test]
fn a_construction_that_builds_others_of_its_class_says_how_deep() {
    let d = zones_nested("object-nested", |i| i % 10 < 7, false, true);
    let f = &d.findings[0];
    assert_eq!((f.line, f.rule.as_str()), (15, "object-per-call"), "{:#?}", d.findings);
    assert!(f.why.contains("each Zone builds others inside it (2.0 deep on average here)"), "{}", f.why);
}

/// Built from the loop's own item, the object is the item's work: named, but not as something
/// to build once.
#[test]
fn an_object_built_from_each_item_of_a_loop_is_that_items_work() {
    let source = "class Report:\n    def __init__(self, path):\n        self.rows = open(path).read().split()\n        self.total = sum(len(r) for r in self.rows)\n        self.words = {w: len(w) for w in self.rows}\n        self.top = sorted(self.words)[:10]\n        self.lines = len(self.rows)\n\ndef main(paths):\n    for path in paths:\n        report = Report(path)\n        print(report.total)\n";
    let (dir, app) = write_app("object-per-item", source);
    let run = |heavy_line: bool| {
        let mut b = Builder::new();
        for i in 0..400u64 {
            let mut stack: Vec<(&str, &str, u32)> = vec![("<module>", &app, 14), ("main", &app, 11)];
            if i % 10 < 7 {
                let line = if heavy_line && i % 10 < 5 { 4 } else { 3 + (i % 5) as u32 };
                stack.push(("Report.__init__", &app, line));
            } else {
                stack[1].2 = 12;
            }
            b.add(1, i * 10, true, &stack);
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (d, heavy) = (run(false), run(true));
    std::fs::remove_dir_all(&dir).unwrap();
    // Most of each item's construction at one line: that line is what to make cheaper.
    assert!(!heavy.findings.iter().any(|f| f.rule == "object-per-call"), "{:#?}", heavy.findings);
    assert_eq!(heavy.findings[0].line, 4, "{:#?}", heavy.findings);
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (11, "hot-call", "object-per-call"), "{:#?}", d.findings);
    assert!(f.title.starts_with("Building a Report for each item takes 70%"), "{}", f.title);
    assert!(f.why.contains("from each item of the loop at app.py:10"), "{}", f.why);
    assert!(!f.advice.contains("once and reuse"), "{}", f.advice);
}

/// The same in a Rust program: `Zone::new(&path)` per call, its time spread over `new`'s lines.
#[test]
fn a_native_object_built_on_every_call_is_named_where_it_is_built() {
    let source = "pub struct Zone { names: Vec<String>, total: usize }\n\nimpl Zone {\n    pub fn new(path: &str) -> Zone {\n        let data = std::fs::read(path).unwrap();\n        let names: Vec<String> = data.split(|b| *b == 0).map(|n| String::from_utf8_lossy(n).into_owned()).collect();\n        let index: Vec<(String, usize)> = names.iter().cloned().zip(0..).collect();\n        let total = names.iter().map(|n| n.len()).sum::<usize>() + index.len();\n        let mut sorted = names.clone();\n        sorted.sort();\n        Zone { names, total }\n    }\n}\n\nfn zone_for(name: &str) -> usize {\n    let path = format!(\"/zones/{name}\");\n    let zone = Zone::new(&path);\n    zone.total\n}\n\nfn main() {\n    for e in EVENTS {\n        println!(\"{} {}\", zone_for(e), e);\n    }\n}\n";
    let dir = std::env::temp_dir().join(format!("onefix-native-object-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("main.rs");
    std::fs::write(&src, source).unwrap();
    let src = src.to_str().unwrap().to_owned();
    let module = dir.join("zones").to_str().unwrap().to_owned();
    let mut b = Builder::new();
    let t = b.p.intern_thread(1, 1, None);
    for i in 0..400u64 {
        let mut stack = vec![("zones::main", 23)];
        if i % 10 < 7 {
            stack.push(("zones::zone_for", 17));
            stack.push(("zones::Zone::new", 5 + (i % 7) as u32));
        } else {
            stack.push(("zones::zone_for", 16));
        }
        let ids: Vec<FrameId> = stack
            .iter()
            .map(|&(function, line)| {
                b.p.intern_frame(Frame {
                    kind: onefix_model::FrameKind::Native,
                    function: function.to_owned(),
                    file: src.clone(),
                    line,
                    module: module.clone(),
                })
            })
            .collect();
        let s = b.p.intern_stack(ids);
        b.p.samples.push(Sample {
            time_us: i * 10_000,
            thread: t,
            stack: s,
            state: ThreadState::new(true, false),
            weight: 1,
        });
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!(
        (f.line, f.kind.as_str(), f.rule.as_str()),
        (17, "repeated-setup", "object-per-call"),
        "{:#?}",
        d.findings
    );
    assert!(f.title.starts_with("Building a new Zone on every call takes 70%"), "{}", f.title);
    assert_eq!(f.evidence[0].frame, "zones::Zone::new", "{:?}", f.evidence);
}
