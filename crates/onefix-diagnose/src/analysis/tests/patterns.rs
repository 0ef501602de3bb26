//! The knowledge entries of issue 21's patterns, each recognised from what a recording shows:
//! logging per item, the filesystem asked on every call, and a pattern compiled inside the
//! search that uses it.

use super::*;

/// One item's work with a log call per item: 70% of the time formats and writes the record.
#[test]
fn a_log_record_written_per_item_is_logging() {
    let (dir, app) = write_app(
        "log-per-item",
        "import logging\nlog = logging.getLogger(__name__)\n\ndef ingest(rows):\n    for row in rows:\n        log.info('row %s', row)\n        total = row * 2\n",
    );
    let logging = format!("{LIB}/logging/__init__.py");
    let mut b = Builder::new();
    for ms in 0..200u64 {
        let stack: Vec<(&str, &str, u32)> = if ms % 10 < 7 {
            vec![
                ("<module>", &app, 9),
                ("ingest", &app, 6),
                ("Logger.info", &logging, 1489),
                ("Logger._log", &logging, 1634),
                ("StreamHandler.emit", &logging, 1113),
            ]
        } else {
            vec![("<module>", &app, 9), ("ingest", &app, 7)]
        };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (6, "logging", "logging-per-item"), "{f:?}");
    assert!(f.title.starts_with("Formatting and writing a log record takes 70%"), "{}", f.title);
    assert!(f.advice.contains("once per batch"), "{}", f.advice);
}

/// `os.listdir` has no Python frame: the line that calls it is read for the call.
#[test]
fn a_directory_listed_on_every_call_is_filesystem() {
    let (dir, app) = write_app(
        "listdir-per-call",
        "import os\n\ndef plugin_for(name):\n    names = os.listdir(PLUGINS)\n    return name in names\n",
    );
    let mut b = Builder::new();
    for ms in 0..200u64 {
        let line = if ms % 10 < 8 { 4 } else { 5 };
        b.add(1, ms * 10, true, &[("<module>", &app, 9), ("plugin_for", &app, line)]);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (4, "filesystem", "filesystem-per-call"), "{f:?}");
}

/// A pattern built per call is compiled inside `re.search` (more distinct patterns than the
/// module's cache holds): the compile, inside the search, is what costs, and is named, not the
/// matching around it. With the compile a small part, the matching is named.
#[test]
fn the_specific_cost_inside_a_general_one_names_the_line() {
    let (dir, app) = write_app(
        "regex-in-search",
        "import re\n\ndef mentions(line, names):\n    for n in names:\n        if re.search(rf'user={n}', line):\n            return n\n",
    );
    let re_init = format!("{LIB}/re/__init__.py");
    let compiler = format!("{LIB}/re/_compiler.py");
    let run = |compile_tenths: u64| {
        let mut b = Builder::new();
        for ms in 0..200u64 {
            let mut stack: Vec<(&str, &str, u32)> =
                vec![("<module>", &app, 9), ("mentions", &app, 5), ("search", &re_init, 176)];
            if ms % 10 < compile_tenths {
                stack.push(("_compile", &re_init, 294));
                stack.push(("compile", &compiler, 740));
            }
            b.add(1, ms * 10, true, &stack);
        }
        b.diagnose(dir.to_str().unwrap()).findings[0].clone()
    };
    let compiling = run(7);
    let matching = run(2);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (compiling.kind.as_str(), compiling.rule.as_str()),
        ("repeated-setup", "regex-compile"),
        "{compiling:?}"
    );
    assert_eq!((matching.kind.as_str(), matching.rule.as_str()), ("regex-matching", "regex-matching"), "{matching:?}");
}

/// A walk of a schema document held by the resolver, spread over the lines of its loop, started
/// by two lookups: `source` is the module, `(caller line, share in tenths)` the lookups.
fn walk_app(tag: &str, source: &str, lookups: &[(u32, u64)]) -> Diagnosis {
    let (dir, app) = write_app(tag, source);
    let mut b = Builder::new();
    // The walk's lines: header 9, then 10, 11, 12 with about equal time.
    let walk_lines = [9u32, 10, 11, 12];
    for ms in 0..400u64 {
        let tenth = ms % 10;
        let mut acc = 0;
        let caller = lookups.iter().find(|(_, t)| {
            acc += t;
            tenth < acc
        });
        let stack: Vec<(&str, &str, u32)> = match caller {
            Some(&(line, _)) => vec![
                ("<module>", &app, 30),
                ("Resolver.resolve", &app, line),
                ("Resolver._walk", &app, walk_lines[(ms / 10 % 4) as usize]),
            ],
            None => vec![("<module>", &app, 30), ("Resolver.resolve", &app, 20)],
        };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    d
}

const RESOLVER: &str = "from collections import deque\n\nclass Resolver:\n    def __init__(self, referrer):\n        self.referrer = referrer\n\n    def _walk(self, schema, key):\n        values = deque([schema])\n        while values:\n            each = values.pop()\n            if isinstance(each, dict) and key in each:\n                values.extendleft(each.values())\n\n    def resolve(self, ref):\n        for found in self._walk(self.referrer, '$id'):\n            pass\n        for found in self._walk(self.referrer, ref):\n            pass\n        return ref.split('/')\n\n";

#[test]
fn a_walk_of_long_lived_state_started_per_call_is_named_at_the_line_that_starts_it() {
    // Lines 15 and 17 start the walk over self.referrer: 50% and 30% of the run.
    let d = walk_app("walk-callers", RESOLVER, &[(15, 5), (17, 3)]);
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str()), (15, "repeated-walk"), "{:#?}", d.findings);
    assert!((f.share - 0.5).abs() < 0.03, "{f:?}");
    assert!(f.evidence[0].frame.contains("while values:"), "the walk is the evidence: {:?}", f.evidence);
    assert!(f.advice.contains("cache") && f.advice.contains("index"), "{}", f.advice);
    let second = &d.findings[1];
    assert_eq!((second.line, second.kind.as_str()), (17, "repeated-walk"), "{:#?}", d.findings);
    assert!(!d.findings.iter().any(|f| (9..=12).contains(&f.line)), "the walk's lines are not findings of their own");
}

#[test]
fn a_loop_over_the_calls_own_argument_is_one_finding_at_the_loop() {
    // The same walk over a value the caller builds for the call: per-call work, which no cache
    // saves. Its lines are one finding, at the loop.
    let per_call = RESOLVER
        .replace("self._walk(self.referrer, '$id')", "self._walk(make(ref), '$id')")
        .replace("self._walk(self.referrer, ref)", "self._walk(make(ref), ref)");
    let d = walk_app("walk-per-call", &per_call, &[(15, 8)]);
    let f = &d.findings[0];
    assert_eq!(
        (f.line, f.kind.as_str(), f.rule.as_str()),
        (9, "hot-loop-compute", "loop-iteration"),
        "{:#?}",
        d.findings
    );
    assert!((f.share - 0.8).abs() < 0.03, "{f:?}");
    assert!(!d.findings.iter().any(|f| (10..=12).contains(&f.line)), "{:#?}", d.findings);
}

const DECODER: &str = "class Decoder:\n    def __init__(self):\n        self.buffer = bytearray()\n\n    def receive(self, data):\n        self.buffer.extend(data)\n\n    def parse(self):\n        if self.buffer.find(b'--' + self.boundary) == -1:\n            return None\n        return self.buffer.split(b'\\r\\n')\n\ndef nest(text, depth):\n    at = text.find('(')\n    if at < 0 or depth > 50:\n        return depth\n    return nest(text, depth + 1)\n\ndef render(parts):\n    out = Page()\n    for p in parts:\n        out.text += p\n    return out\n";

/// 80% of the run at one line of the decoder, `stack` around it.
fn decoder_at(tag: &str, stack: impl Fn(&str, u64) -> Vec<(String, u32)>) -> Diagnosis {
    let (dir, app) = write_app(tag, DECODER);
    let mut b = Builder::new();
    for ms in 0..600u64 {
        let frames: Vec<(String, u32)> =
            if ms % 10 < 8 { stack(&app, ms) } else { vec![("<module>".into(), 40), ("other".into(), 41)] };
        let named: Vec<(&str, &str, u32)> = frames.iter().map(|(f, l)| (f.as_str(), app.as_str(), *l)).collect();
        b.add(1, ms * 10, true, &named);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    d
}

#[test]
fn a_buffer_scanned_whole_as_it_grows_is_quadratic() {
    let d = decoder_at("rescan", |_, _| vec![("<module>".into(), 40), ("Decoder.parse".into(), 9)]);
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (9, "quadratic", "rescan-growing"), "{f:?}");
    assert!(f.why.contains("self.buffer") && f.why.contains("app.py:6"), "{}", f.why);
}

#[test]
fn a_recursion_that_scans_its_input_at_every_level_is_quadratic_at_the_scan() {
    let d = decoder_at("recursion", |_, ms| {
        let depth = 3 + ms % 5;
        let mut frames: Vec<(String, u32)> = vec![("<module>".into(), 40)];
        frames.extend((0..depth).map(|_| ("nest".to_owned(), 17)));
        frames.push(("nest".into(), 14));
        frames
    });
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (14, "quadratic", "recursion-rescan"), "{:#?}", d.findings);
}

#[test]
fn an_append_by_copy_is_quadratic_only_when_its_share_grows() {
    // The append's share grows from about a third to nearly all over the run.
    let grows = decoder_at("append-grows", |_, ms| {
        let line = if (ms * 7919) % 600 < 100 + ms * 4 / 5 { 22 } else { 21 };
        vec![("<module>".into(), 40), ("render".into(), line)]
    });
    let f = grows.findings.iter().find(|f| f.line == 22).expect("the append");
    assert_eq!((f.kind.as_str(), f.rule.as_str()), ("quadratic", "append-copy"), "{f:?}");
    assert!(f.why.contains("rose from"), "{}", f.why);
    // A steady share: an ordinary line of the loop.
    let steady = decoder_at("append-steady", |_, _| vec![("<module>".into(), 40), ("render".into(), 22)]);
    let f = steady.findings.iter().find(|f| f.line == 22).expect("the append");
    assert_ne!(f.kind, "quadratic", "{f:?}");
}

/// A schema built by one call at a module's top level is not repeated: the line runs once. The
/// same call inside a loop is the set-up repeated per pass.
#[test]
fn a_set_up_at_a_modules_top_level_outside_loops_is_not_repeated() {
    let pydantic = format!("{SITE}/pydantic/json_schema.py");
    let run = |source: &str, line: u32| {
        let (dir, app) = write_app("setup-once", source);
        let mut b = Builder::new();
        for ms in 0..200u64 {
            b.add(1, ms * 10, true, &[("<module>", &app, line), ("GenerateJsonSchema.generate", &pydantic, 300)]);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        d.findings[0].clone()
    };
    let once = run("import pydantic\nschema = Model.model_json_schema()\n", 2);
    assert_ne!(once.kind, "repeated-setup", "{once:?}");
    let looped = run("import pydantic\nfor m in models:\n    schema = m.model_json_schema()\n", 3);
    assert_eq!(looped.kind, "repeated-setup", "{looped:?}");
}

/// A walk whose loop tests each node in a small function of its own: the test's time is the
/// walk's, and the walk is still named where it is started.
#[test]
fn a_walk_that_calls_a_predicate_per_node_is_one_walk() {
    let source = "from collections import deque\n\ndef matcher(value, key):\n    if key in value:\n        yield value\n\nclass Resolver:\n    def _walk(self, schema, key):\n        values = deque([schema])\n        while values:\n            each = values.pop()\n            yield from matcher(each, key)\n            values.extendleft(each.values())\n\n    def resolve(self, ref):\n        for found in self._walk(self.referrer, ref):\n            pass\n";
    let (dir, app) = write_app("walk-predicate", source);
    let mut b = Builder::new();
    for ms in 0..400u64 {
        let walk = |line: u32| {
            vec![("<module>", app.as_str(), 30), ("Resolver.resolve", &app, 16), ("Resolver._walk", &app, line)]
        };
        let stack = match ms % 10 {
            0..=4 => {
                let mut s = walk(12);
                s.push(("matcher", &app, 4));
                s
            }
            5 | 6 => walk(11),
            7 => walk(13),
            _ => vec![("<module>", app.as_str(), 30), ("Resolver.resolve", &app, 17)],
        };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str()), (16, "repeated-walk"), "{:#?}", d.findings);
    assert!((f.share - 0.8).abs() < 0.03, "the predicate's time is the walk's: {f:?}");
}

/// A loop whose body calls two functions that each do their own work, with no caller starting
/// it again: those functions' lines stay findings of their own, in their own file and function.
#[test]
fn the_functions_a_loop_calls_keep_their_own_findings() {
    let source = "def run(parts):\n    for p in parts:\n        head(p)\n        tail(p)\n\ndef head(p):\n    return p.split(',')[0]\n\ndef tail(p):\n    return p.split(',')[-1]\n";
    let (dir, app) = write_app("loop-callees", source);
    let mut b = Builder::new();
    for ms in 0..400u64 {
        let stack = if ms % 2 == 0 {
            vec![("<module>", app.as_str(), 20), ("run", &app, 3), ("head", &app, 7)]
        } else {
            vec![("<module>", app.as_str(), 20), ("run", &app, 4), ("tail", &app, 10)]
        };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let places: Vec<(&str, u32)> = d.findings.iter().map(|f| (f.function.as_str(), f.line)).collect();
    assert!(places.contains(&("head", 7)) && places.contains(&("tail", 10)), "{:#?}", d.findings);
    assert!(d.findings.iter().all(|f| f.rule != "loop-iteration"), "{:#?}", d.findings);
}

/// A tokeniser that calls each pattern through a name its loop unpacks from a table of
/// `(re.compile(rx).match, action)` pairs: the line's self time is the regex engine's (no
/// Python frame under it), and the line is regex matching, not the line's own code. With the
/// table built from plain functions, the same line stays the line's own work.
#[test]
fn a_pattern_called_through_a_name_unpacked_from_a_table_is_regex_matching() {
    let run = |table: &str| {
        let source = format!(
            "import re\n{table}\n\ndef tokens(text):\n    for pos in range(len(text)):\n        for rexmatch, action in TABLE:\n            m = rexmatch(text, pos)\n            if m:\n                yield action\n"
        );
        let (dir, app) = write_app("regex-alias", &source);
        let mut b = Builder::new();
        for ms in 0..200u64 {
            let line = if ms % 10 < 8 { 7 } else { 8 };
            b.add(1, ms * 10, true, &[("<module>", &app, 20), ("tokens", &app, line)]);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        d.findings[0].clone()
    };
    let f = run("TABLE = [(re.compile(rx).match, tt) for rx, tt in RULES]");
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (7, "regex-matching", "regex-matching"), "{f:?}");
    let f = run("TABLE = [(match_rule, tt) for rx, tt in RULES]");
    assert_eq!(f.line, 7);
    assert_ne!(f.kind.as_str(), "regex-matching", "{f:?}");
}

/// The user's view of a call into an installed package: the package's own view finds a walk
/// started on every call under most of the call's time, and the user's line says so (the kind,
/// the package's line as evidence, the advice for code the user does not own). With the
/// package's time spread over plain calls, the line stays a hot call.
#[test]
fn a_call_into_a_package_carries_the_pattern_the_packages_own_view_finds() {
    let run = |tag: &str, walk: bool| {
        let dir = std::env::temp_dir().join(format!("onefix-carry-{tag}-{}", std::process::id()));
        let app_dir = dir.join("app");
        let lib_dir = dir.join("venv/lib/python3.11/site-packages/resolverlib");
        std::fs::create_dir_all(&app_dir).unwrap();
        std::fs::create_dir_all(&lib_dir).unwrap();
        let driver = app_dir.join("driver.py");
        std::fs::write(
            &driver,
            "from resolverlib.core import Resolver\nr = Resolver({})\nfor ref in refs:\n    r.resolve(ref)\n",
        )
        .unwrap();
        let lib = lib_dir.join("core.py");
        std::fs::write(&lib, RESOLVER).unwrap();
        let (driver, lib) = (driver.to_str().unwrap().to_owned(), lib.to_str().unwrap().to_owned());
        let mut b = Builder::new();
        for ms in 0..400u64 {
            let mut stack: Vec<(&str, &str, u32)> = vec![("<module>", &driver, 4)];
            if walk && ms % 10 < 8 {
                stack.push(("Resolver.resolve", &lib, 15));
                stack.push(("Resolver._walk", &lib, [9u32, 10, 11, 12][(ms / 10 % 4) as usize]));
            } else {
                stack.push(("Resolver.resolve", &lib, 19));
            }
            b.add(1, ms * 10, true, &stack);
        }
        let user = UserCode::new([&app_dir], Some(&app_dir));
        let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options::default());
        std::fs::remove_dir_all(&dir).unwrap();
        d.findings[0].clone()
    };
    let f = run("walk", true);
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (4, "repeated-walk", "in-package:repeated-walk"), "{f:#?}");
    assert!(f.why.contains("inside resolverlib") && f.why.contains("core.py:15"), "{}", f.why);
    let at = f.evidence.iter().find(|e| e.frame == "resolverlib.core.Resolver.resolve").unwrap();
    assert_eq!(at.line, 15, "{:?}", f.evidence);
    assert!(f.advice.contains("resolverlib's code"), "{}", f.advice);
    let f = run("plain", false);
    assert_eq!((f.line, f.kind.as_str()), (4, "hot-call"), "{f:#?}");
}

/// Each pass of a Rust loop clones a context holding a JSON value tree, and frees the copy at
/// the loop body's closing brace: the drop is the copy's cost, one finding at the clone. A drop
/// in a loop that copies nothing stays its own finding.
#[test]
fn the_drop_of_a_copy_made_per_pass_is_part_of_the_copy() {
    let source = "fn each(rc: &Ctx, n: usize) {\n    for i in 0..n {\n        let local = rc.derive();\n        render(&local, i);\n    }\n}\n\nimpl Ctx {\n    fn derive(&self) -> Ctx {\n        Ctx { data: self.data.clone() }\n    }\n}\n";
    let run = |copies: bool| {
        let dir = std::env::temp_dir().join(format!("onefix-drop-copy-{copies}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let app = dir.join("each.rs");
        std::fs::write(&app, source).unwrap();
        let app = app.to_str().unwrap().to_owned();
        let serde = "/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/serde_json-1.0.100/src/value/mod.rs";
        let ptr = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ptr/mod.rs";
        let mut b = Builder::new();
        for tick in 0..200u64 {
            let mut stack: Vec<(&str, &str, u32)> = vec![("_start", "", 0), ("each", &app, 3)];
            match tick % 20 {
                0..=10 if copies => {
                    stack.push(("Ctx::derive", &app, 10));
                    stack.push(("<serde_json::value::Value as core::clone::Clone>::clone", serde, 120));
                }
                0..=10 => stack[1].2 = 4,
                11..=17 => {
                    stack[1].2 = 5;
                    stack.push(("core::ptr::drop_in_place<app::Ctx>", ptr, 523));
                    stack.push(("core::ptr::drop_in_place<serde_json::value::Value>", ptr, 523));
                }
                _ => stack[1].2 = 4,
            }
            let ids: Vec<FrameId> = stack
                .iter()
                .map(|&(f, file, line)| {
                    b.p.intern_frame(Frame { file: file.to_owned(), line, ..Frame::native(f, "/app/each") })
                })
                .collect();
            let stack = b.p.intern_stack(ids);
            let thread = b.p.intern_thread(1, 1, None);
            b.p.samples.push(Sample {
                time_us: tick * 10_000,
                thread,
                stack,
                state: ThreadState::new(true, true),
                weight: 1,
            });
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        d
    };
    let d = run(true);
    let f = &d.findings[0];
    assert_eq!((f.line, f.kind.as_str()), (10, "deep-copy"), "{:#?}", d.findings);
    assert!((f.share - 0.9).abs() < 0.03, "the clone's 55% and the drop's 35%: {f:?}");
    assert!(f.why.contains("freed again at each.rs:5"), "{}", f.why);
    assert!(!f.why.contains("encoding"), "a value tree's clone encodes nothing: {}", f.why);
    assert!(
        f.title.starts_with("Cloning a parsed document's value tree takes 90%"),
        "the drop is the copy's: {}",
        f.title
    );
    assert!(!d.findings.iter().any(|f| f.line == 5), "{:#?}", d.findings);
    let d = run(false);
    assert!(
        d.findings.iter().any(|f| f.line == 5),
        "no copy in the loop: the drop is its own finding {:#?}",
        d.findings
    );
}

/// An unquoting loop searches for the next escape from a position it advances, over the same
/// text: each pass scans the rest of the text (all of it when there is no escape left), so the
/// loop is quadratic in the text's length. The same search from a fixed start is not.
#[test]
fn a_search_from_the_position_its_loop_advances_is_quadratic() {
    let run = |advance: &str| {
        let source = format!(
            "import re\n_Esc = re.compile(r'\\\\[0-7]{{3}}')\n\ndef unquote(s):\n    i = 0\n    while i < len(s):\n        m = _Esc.search(s, i)\n        if not m:\n            break\n        {advance}\n"
        );
        let (dir, app) = write_app("advancing-search", &source);
        let mut b = Builder::new();
        for ms in 0..200u64 {
            let line = if ms % 10 < 8 { 7 } else { 10 };
            b.add(1, ms * 10, true, &[("<module>", &app, 20), ("unquote", &app, line)]);
        }
        let d = b.diagnose(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        d.findings[0].clone()
    };
    let f = run("i = m.end()");
    assert_eq!((f.line, f.kind.as_str(), f.rule.as_str()), (7, "quadratic", "search-from-advancing-position"), "{f:?}");
    assert!(f.why.contains("_Esc.search() scans s from i"), "{}", f.why);
    assert!(f.title.starts_with("Searching the rest of s from each position"), "{}", f.title);
    let f = run("n = m.end()");
    assert_eq!((f.line, f.kind.as_str()), (7, "regex-matching"), "the start does not move: {f:?}");
}
