use super::*;
use onefix_model::{Frame, Meta, ThreadState};
use std::path::Path;

const LIB: &str = "/usr/lib/python3.11";
const SITE: &str = "/venv/lib/python3.11/site-packages";

/// Builds profiles from (thread, time in ms, active, stack root first).
struct Builder {
    p: Profile,
}

impl Builder {
    fn new() -> Builder {
        Builder { p: Profile::new(Meta::default()) }
    }
    fn add(&mut self, tid: u64, ms: u64, active: bool, stack: &[(&str, &str, u32)]) {
        self.add_in(tid, ms, ThreadState::new(active, active), stack);
    }
    fn add_in(&mut self, tid: u64, ms: u64, state: ThreadState, stack: &[(&str, &str, u32)]) {
        let t = self.p.intern_thread(1, tid, None);
        let ids: Vec<FrameId> =
            stack.iter().map(|&(f, file, line)| self.p.intern_frame(Frame::python(f, file, line))).collect();
        let s = self.p.intern_stack(ids);
        self.p.samples.push(Sample { time_us: ms * 1000, thread: t, stack: s, state, weight: 1 });
    }
    fn diagnose(&self, dir: &str) -> Diagnosis {
        let user = UserCode::new([dir], Some(Path::new(dir)));
        diagnose(&self.p, &KnowledgeBase::builtin(), &user, &Options::default())
    }
}

fn tls_stack() -> Vec<(&'static str, &'static str, u32)> {
    vec![
        ("<module>", "/app/main.py", 40),
        ("drain", "/app/main.py", 12),
        ("AsyncClient.__init__", "/venv/lib/python3.11/site-packages/httpx/_client.py", 1400),
        ("create_ssl_context", "/venv/lib/python3.11/site-packages/httpx/_config.py", 55),
        ("load_ssl_context_verify", "/venv/lib/python3.11/site-packages/httpx/_config.py", 149),
    ]
}

#[test]
fn charges_library_time_to_the_user_line_and_classifies_it() {
    let mut b = Builder::new();
    for ms in 0..1000 {
        if ms % 10 < 8 {
            b.add(1, ms * 10, true, &tls_stack());
        } else {
            b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 40), ("drain", "/app/main.py", 14)]);
        }
    }
    let d = b.diagnose("/app");
    let f = &d.findings[0];
    assert_eq!((f.file.as_str(), f.line), ("/app/main.py", 12));
    assert_eq!(f.kind, "repeated-setup");
    assert!((f.share - 0.8).abs() < 1e-9);
    assert!((f.max_speedup.unwrap() - 5.0).abs() < 0.05, "{:?}", f.max_speedup);
    assert!(f.evidence.iter().any(|e| e.frame == "httpx._config.create_ssl_context"), "{:?}", f.evidence);
    assert_eq!(d.hot_lines[1].line, 14);
    assert!((d.hot_lines[1].self_share - 0.2).abs() < 1e-9);
}

#[test]
fn self_time_is_charged_to_a_compiled_call_only_when_the_call_has_no_python_frames() {
    let (dir, app) = write_app("c-call", "def stamp(rng, raw):\n    return f\"{rng.randrange(10):04d}-{raw!r}\"\n\ndef pack(rng, raw):\n    return zlib.compress(raw) + rng.randbytes(4)\n");
    let random = format!("{LIB}/random.py");
    let run = |line: u32| {
        let mut b = Builder::new();
        for ms in 0..100u64 {
            if ms % 5 == 0 {
                b.add(
                    1,
                    ms * 10,
                    true,
                    &[("<module>", &app, 9), ("stamp", &app, line), ("Random.randrange", &random, 301)],
                );
            } else {
                b.add(1, ms * 10, true, &[("<module>", &app, 9), ("stamp", &app, line)]);
            }
        }
        b.diagnose(dir.to_str().unwrap()).findings[0].clone()
    };
    // randrange runs Python code (seen under the line): the self time is the line's own.
    let f = run(2);
    assert_eq!((f.kind.as_str(), f.rule.as_str()), ("hot-loop-compute", "self-time"), "{f:?}");
    // zlib.compress has no frame: the self time is inside it.
    let f = run(5);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(f.rule, "c-call", "{f:?}");
    assert!(f.why.contains("zlib.compress()"), "{}", f.why);
}

#[test]
fn one_entry_at_several_lines_of_a_function_is_one_finding_at_its_first_line() {
    let (dir, app) =
        write_app("one-function", "def log(line):\n    f = open_log()\n    f.write(line)\n    close_log(f)\n");
    let yaml = format!("{SITE}/yaml/__init__.py");
    let mut b = Builder::new();
    for ms in 0..100u64 {
        // Config parsed at two lines of one function, 40% and 30%; the rest elsewhere.
        let line = match ms % 10 {
            0..=3 => 2,
            4..=6 => 4,
            _ => 3,
        };
        let stack: Vec<(&str, &str, u32)> =
            if line == 3 { vec![("log", &app, 3)] } else { vec![("log", &app, line), ("safe_load", &yaml, 125)] };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.rule.as_str(), f.line), ("config-parse", 2), "{:?}", d.findings);
    assert!((f.share - 0.7).abs() < 1e-9, "{}", f.share);
    assert!(f.why.contains("at line 4 (30%)"), "{}", f.why);
    // Amdahl over both lines' shares of the stretches they recur in (slightly over 70%).
    assert!((3.3..4.1).contains(&f.max_speedup.unwrap()), "{:?}", f.max_speedup);
    assert_eq!(d.findings.iter().filter(|f| f.rule == "config-parse").count(), 1);
}

#[test]
fn a_stray_line_of_the_same_work_is_folded_into_the_line_that_does_it() {
    // 90% of the config parsing at line 3, and 5% read torn at the line above it (a busy
    // machine tears reads across the lines of a loop): the finding stays at line 3.
    let (dir, app) =
        write_app("stray-line", "def get(path):\n    with open(path) as f:\n        return yaml.safe_load(f)\n");
    let yaml = format!("{SITE}/yaml/__init__.py");
    let mut b = Builder::new();
    for ms in 0..100u64 {
        let line = match ms % 20 {
            0 => 2,
            1 => 1,
            _ => 3,
        };
        let stack: Vec<(&str, &str, u32)> =
            if line == 1 { vec![("get", &app, 1)] } else { vec![("get", &app, line), ("safe_load", &yaml, 125)] };
        b.add(1, ms * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.rule.as_str(), f.line), ("config-parse", 3), "{:?}", d.findings);
    assert!((f.share - 0.95).abs() < 1e-9, "{}", f.share);
    assert!(f.why.contains("at line 2 (5%)"), "{}", f.why);
}

#[test]
fn evidence_counts_a_function_at_all_of_its_lines() {
    let strptime = format!("{LIB}/_strptime.py");
    let mut b = Builder::new();
    for ms in 0..100u64 {
        // The library function is read at a different line of its own half of the time.
        let at = if ms % 2 == 0 { 500 } else { 530 };
        b.add(
            1,
            ms * 10,
            true,
            &[("<module>", "/app/main.py", 3), ("parse_rows", "/app/main.py", 12), ("_strptime", &strptime, at)],
        );
    }
    let d = b.diagnose("/app");
    let f = &d.findings[0];
    let e = f.evidence.iter().find(|e| e.frame.ends_with("_strptime")).unwrap_or_else(|| panic!("{:?}", f.evidence));
    assert!((e.share - 1.0).abs() < 1e-9, "{:?}", f.evidence);
    assert!(f.why.contains("_strptime"), "{}", f.why);
}

#[test]
fn a_torn_read_goes_to_the_one_line_its_innermost_frame_is_seen_under() {
    let gen = ("GenerateSchema.walk", "/venv/lib/python3.11/site-packages/pydantic/_internal/_generate_schema.py", 700);
    let dumps = ("encode", "/usr/lib/python3.11/json/encoder.py", 200);
    let mut b = Builder::new();
    for ms in 0..100 {
        let (line, leaf) = match ms % 10 {
            0..=5 => (12, gen),
            // json is called from two lines: its torn reads cannot be placed
            6 | 7 => (20, dumps),
            _ => (21, dumps),
        };
        b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line), leaf]);
    }
    // Torn: the read lost everything above a library frame.
    for ms in 100..130 {
        b.add(1, ms * 10, true, &[("GenerateSchema.generate", gen.1, 650), gen]);
    }
    for ms in 130..140 {
        b.add(1, ms * 10, true, &[("JSONEncoder.iterencode", dumps.1, 250), dumps]);
    }
    let d = b.diagnose("/app");
    let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).unwrap().weight;
    assert_eq!(at(12), 60 + 30, "{:?}", d.hot_lines);
    assert_eq!((at(20), at(21)), (20, 20), "{:?}", d.hot_lines);
    assert_eq!(d.busy_weight, 130);
    assert!(d.notes.iter().any(|n| matches!(n, Note::RecoveredTorn { .. })), "{:?}", d.notes);
    assert!(d.notes.iter().any(|n| matches!(n, Note::IncompleteStacks { .. })), "{:?}", d.notes);
}

#[test]
fn a_torn_read_of_a_frame_seen_too_rarely_is_placed_by_its_function_then_its_file() {
    let schema = "/venv/lib/python3.11/site-packages/pydantic/json_schema.py";
    let encoder = "/usr/lib/python3.11/json/encoder.py";
    let mut b = Builder::new();
    for ms in 0..200u64 {
        // Deep code spread over many lines, each read clean only a few times.
        let (line, leaf) = match ms % 4 {
            0..=2 => (12, ("GenerateJsonSchema.walk", schema, 1000 + (ms % 50) as u32)),
            // The encoder is called from two lines.
            _ => (20 + (ms % 8 == 3) as u32, ("encode", encoder, 200 + (ms % 40) as u32)),
        };
        b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line), leaf]);
    }
    // Torn reads at lines of those files that no clean read has: the function of the first
    // is known (under line 12 only), the second only by its file, the third is split.
    let torn = [
        ("GenerateJsonSchema.walk", schema, 1999),
        ("GenerateJsonSchema.other", schema, 5000),
        ("encode", encoder, 999),
    ];
    for (i, leaf) in torn.iter().enumerate() {
        for k in 0..5u64 {
            b.add(1, 10_000 + (i as u64 * 5 + k) * 1000, true, &[("GenerateJsonSchema.generate", schema, 500), *leaf]);
        }
    }
    let d = b.diagnose("/app");
    let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).map_or(0, |h| h.weight);
    assert_eq!(at(12), 150 + 10, "{:?}", d.hot_lines);
    assert_eq!(at(20) + at(21), 50, "{:?}", d.hot_lines);
    assert_eq!(d.busy_weight, 210);
}

#[test]
fn an_empty_read_between_two_reads_of_one_line_is_charged_to_that_line() {
    let mut b = Builder::new();
    let empty = |b: &mut Builder, ms: u64| {
        let t = b.p.intern_thread(1, 1, None);
        b.p.samples.push(Sample {
            time_us: ms * 1000,
            thread: t,
            stack: None,
            state: ThreadState::new(true, true),
            weight: 1,
        });
    };
    for ms in 0..100u64 {
        let line = if ms < 50 { 12 } else { 14 };
        b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 3), ("handle", "/app/main.py", line)]);
        match ms {
            // Between two reads of line 12, and between two of line 14.
            10 | 60 => empty(&mut b, ms * 10 + 5),
            // Between line 12 and line 14: nothing says which.
            49 => empty(&mut b, ms * 10 + 5),
            _ => {}
        }
    }
    // After the thread's last read: nothing after it.
    empty(&mut b, 2000);
    let d = b.diagnose("/app");
    let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).unwrap().weight;
    assert_eq!((at(12), at(14)), (51, 51), "{:?}", d.hot_lines);
    assert_eq!(d.busy_weight, 102);
    assert!(d.notes.iter().any(|n| matches!(n, Note::Bracketed { .. })), "{:?}", d.notes);
}

#[test]
fn too_few_busy_samples_name_no_line_and_say_why() {
    // A server at 15 requests/s: a handful of busy samples among thousands of idle ones.
    let diagnose = |busy: u64| {
        let mut b = Builder::new();
        for i in 0..busy {
            b.add(1, i * 10, true, &[("<module>", "/app/main.py", 5), ("handle", "/app/main.py", 57)]);
        }
        b.diagnose("/app")
    };
    let few = diagnose(MIN_BUSY_SAMPLES - 1);
    assert!(few.findings.is_empty(), "{few:#?}");
    assert!(
        few.notes.iter().any(|n| matches!(n, Note::TooFewSamples { busy: 39, total: 39, needed: 40, .. })),
        "{:?}",
        few.notes
    );
    // Said in words a user acts on.
    assert!(few.notes.iter().any(|n| n.contains("too few busy samples (39 of 39") && n.contains("--load")));
    let enough = diagnose(MIN_BUSY_SAMPLES);
    assert_eq!(enough.findings.first().map(|f| f.line), Some(57), "{enough:#?}");
    assert!(!enough.notes.iter().any(|n| matches!(n, Note::TooFewSamples { .. })));
}

#[test]
fn a_module_top_level_run_by_an_import_is_start_up_however_short_the_run() {
    // A short run spends much of its time importing: a model class built at a module's top
    // level costs schema work, but once per process, whatever the share.
    let schema = |top: &'static str| {
        let mut stack = vec![("<module>", "/app/main.py", 3)];
        if top == "imported" {
            stack.push(("_find_and_load", "<frozen importlib._bootstrap>", 1176));
            stack.push(("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241));
            stack.push(("<module>", "/app/models.py", 23));
        } else {
            stack.push(("build", "/app/main.py", 9));
        }
        stack.push((
            "GenerateSchema.generate_schema",
            "/venv/lib/python3.11/site-packages/pydantic/_internal/_generate_schema.py",
            400,
        ));
        stack
    };
    for (top, finding) in [("imported", false), ("called", true)] {
        let mut b = Builder::new();
        // 60 samples: above the evidence threshold (MIN_BUSY_SAMPLES).
        for ms in 0..60 {
            if ms % 3 == 0 {
                b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 5), ("ping", "/app/main.py", 14)]);
            } else {
                b.add(1, ms * 10, true, &schema(top));
            }
        }
        let d = b.diagnose("/app");
        assert_eq!(d.findings.iter().any(|f| f.kind == "repeated-setup"), finding, "{top}: {d:#?}");
        assert_eq!(d.notes.iter().any(|n| matches!(n, Note::Importing { .. })), !finding, "{top}: {:?}", d.notes);
    }
}

#[test]
fn a_thread_read_as_runnable_inside_a_wait_is_waiting_not_computing() {
    // On a busy machine a thread just woken from a socket read is runnable but not yet
    // running: its stack is still in the read. That is not CPU time.
    let mut b = Builder::new();
    let read = [
        ("<module>", "/app/main.py", 5),
        ("fetch", "/app/main.py", 9),
        ("SocketIO.readinto", &format!("{LIB}/socket.py") as &str, 707),
    ];
    for ms in 0..100 {
        b.add(1, ms * 10, ms % 10 == 0, &read);
    }
    for ms in 100..110 {
        b.add(1, ms * 10, true, &[("<module>", "/app/main.py", 5), ("crunch", "/app/main.py", 20)]);
    }
    let user = UserCode::new(["/app"], Some(Path::new("/app")));
    let cpu = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options { mode: Mode::Cpu, ..Options::default() });
    assert_eq!(cpu.busy_weight, 10, "{cpu:#?}");
    assert!(cpu.findings.iter().all(|f| f.line != 9), "{:?}", cpu.findings);
    let wall = b.diagnose("/app");
    let wait = wall.hot_lines.iter().find(|h| h.line == 9).unwrap();
    assert!((wait.blocked_share - wait.share).abs() < 1e-9, "all of the read is waiting: {wait:?}");
}

#[test]
fn idle_workers_are_left_out_of_the_shares() {
    let mut b = Builder::new();
    for ms in 0..500 {
        b.add(1, ms * 10, true, &[("work", "/app/w.py", 3)]);
        for tid in 2..6 {
            b.add(
                tid,
                ms * 10,
                false,
                &[
                    ("_bootstrap", &format!("{LIB}/threading.py"), 995),
                    ("get", &format!("{LIB}/queue.py"), 171),
                    ("wait", &format!("{LIB}/threading.py"), 320),
                ],
            );
        }
    }
    let d = b.diagnose("/app");
    assert_eq!(d.busy_weight, 500);
    assert_eq!(d.idle_weight, 2000);
    assert_eq!(d.findings.len(), 1);
    assert_eq!(d.findings[0].line, 3);
    assert!((d.findings[0].share - 1.0).abs() < 1e-9);
    assert!(matches!(d.notes[0], Note::Idle { .. }), "{:?}", d.notes);
}

#[test]
fn start_up_work_is_not_a_finding() {
    let mut b = Builder::new();
    for ms in 0..1000 {
        let stack: &[(&str, &str, u32)] = if ms < 150 {
            &[("<module>", "/app/m.py", 1), ("_find_and_load", "<frozen importlib._bootstrap>", 1)]
        } else {
            &[("<module>", "/app/m.py", 9)]
        };
        b.add(1, ms * 10, true, stack);
    }
    let d = b.diagnose("/app");
    assert!(d.findings.iter().all(|f| f.line != 1), "{:?}", d.findings);
    assert!(d.notes.iter().any(|n| matches!(n, Note::OneOff { at, .. } if at == "m.py:1")), "{:?}", d.notes);
}

#[test]
fn an_event_loop_wait_counts_in_a_working_thread_but_no_line_is_charged() {
    let mut b = Builder::new();
    let select = [
        ("<module>", "/app/a.py", 50),
        ("run", &format!("{LIB}/asyncio/runners.py") as &str, 190),
        ("select", &format!("{LIB}/selectors.py"), 468),
    ];
    for ms in 0..1000 {
        if ms % 2 == 0 {
            b.add(1, ms * 10, true, &tls_stack());
        } else {
            b.add(1, ms * 10, false, &select);
        }
    }
    let d = b.diagnose("/app");
    assert_eq!(d.busy_weight, 1000, "the loop's waits are part of the thread's time");
    assert!((d.findings[0].share - 0.5).abs() < 1e-9);
    assert!(d.findings.iter().all(|f| f.line != 50));
}

#[test]
fn serial_network_waits_are_reported_at_the_loop_that_issues_them() {
    let dir = std::env::temp_dir().join(format!("onefix-serial-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("app.py");
    std::fs::write(&app, "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    out = []\n    for u in urls:\n        out.append(fetch(u))\n    return out\n").unwrap();
    let app_s = app.to_str().unwrap();
    let mut b = Builder::new();
    for ms in 0..300 {
        b.add(
            1,
            ms * 10,
            false,
            &[
                ("main", app_s, 9),
                ("fetch", app_s, 4),
                ("get", &format!("{SITE}/requests/api.py"), 73),
                ("send", &format!("{SITE}/requests/sessions.py"), 703),
                ("readinto", &format!("{LIB}/socket.py"), 706),
            ],
        );
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!(f.kind, "serial-io", "{f:?}");
    assert_eq!(f.line, 8, "the for loop in the caller, not the call inside fetch: {f:?}");
    assert_eq!(f.code.as_deref(), Some("for u in urls:"));
    assert!(f.evidence[0].line == 4, "the waiting call is the first evidence: {:?}", f.evidence);
}

#[test]
fn a_wait_no_loop_repeats_is_the_reply_latency_not_serial_io() {
    // A request handler that calls its backend once: the framework's loop is not the user's.
    let (dir, app) =
        write_app("single-wait", "import requests\n\ndef handle(req):\n    return requests.get(BACKEND).json()\n");
    let mut b = Builder::new();
    for ms in 0..300 {
        b.add(
            1,
            ms * 10,
            false,
            &[
                ("process_request", &format!("{SITE}/werkzeug/serving.py"), 300),
                ("handle", &app, 4),
                ("get", &format!("{SITE}/requests/api.py"), 73),
                ("send", &format!("{SITE}/requests/sessions.py"), 703),
                ("readinto", &format!("{LIB}/socket.py"), 706),
            ],
        );
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("blocking-wait", 4), "{f:?}");
    assert!(f.rule.ends_with("-single"), "{f:?}");
    assert!(!f.advice.contains("concurrently"), "{}", f.advice);
}

fn write_app(tag: &str, source: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("onefix-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("app.py");
    std::fs::write(&app, source).unwrap();
    let app_s = app.to_str().unwrap().to_owned();
    (dir, app_s)
}

mod construct;
mod patterns;
mod rules;
mod waits;

/// A profile imported from a format without sample times (pprof, folded stacks): every sample is
/// at time 0. Told so, the diagnosis claims no recurrence, reads no critical path from samples
/// that only look simultaneous, and takes stacks whole (none is torn or cut short).
#[test]
fn a_profile_without_sample_times_claims_no_recurrence_and_no_critical_path() {
    let mut b = Builder::new();
    for i in 0..300 {
        b.add(1, 0, true, &[("<module>", "/app/main.py", 40), ("price", "/app/main.py", 12)]);
        if i % 3 == 0 {
            b.add(2, 0, true, &[("<module>", "/app/main.py", 40), ("total", "/app/main.py", 20)]);
        }
        if i % 10 == 0 {
            // Not a start of a thread: torn, for onefix's own samplers.
            b.add(1, 0, true, &[("encode", &format!("{LIB}/json/encoder.py"), 200)]);
        }
    }
    let user = UserCode::new(["/app"], Some(Path::new("/app")));
    let opts = Options { timeline: false, partial_stacks: false, ..Options::default() };
    let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &opts);
    let lines: Vec<u32> = d.findings.iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![12, 20], "{d:#?}");
    for f in &d.findings {
        assert_eq!(f.recurrence, None, "no windows to count");
        assert_eq!(f.gain_basis, GainBasis::BusyShare, "no critical path without times");
    }
    assert!(!d.notes.iter().any(|n| matches!(n, Note::IncompleteStacks { .. })), "{:?}", d.notes);
    assert_eq!(d.busy_weight, 430, "the stack that would be torn counts, outside the user's code");
    assert_eq!(d.outside_user_weight, 30);
    // Taken as onefix's own recording, the same samples read differently.
    let own = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options::default());
    assert_eq!(own.findings[0].recurrence, Some(1.0), "one window, every line in it");
    assert!(own.notes.iter().any(|n| matches!(n, Note::IncompleteStacks { .. })), "{:?}", own.notes);
    assert_eq!(own.busy_weight, 400);
}

/// Reads that caught the loop's cheap line after `deepcopy` returned are charged, once settled,
/// to the line that copies: its share and bound are those of the copy, and a note says so.
#[test]
fn reads_caught_after_a_call_returned_count_for_the_line_that_made_it() {
    let (dir, app) =
        write_app("stale", "import copy\nfor step in range(100):\n    snapshot = copy.deepcopy(state)\n    n += 1\n");
    let copy = format!("{LIB}/copy.py");
    let mut b = Builder::new();
    for ms in 0..200u64 {
        let stack: &[(&str, &str, u32)] = match ms % 20 {
            0 => &[("<module>", &app, 4)],
            1 => &[("<module>", &app, 4), ("deepcopy", &copy, 128)],
            _ => &[("<module>", &app, 3), ("deepcopy", &copy, 128)],
        };
        b.add(1, ms * 10, true, stack);
    }
    let user = UserCode::new([&dir], Some(dir.as_path()));
    let before = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options::default());
    assert_eq!(crate::settle_stale_reads(&mut b.p, &user), 10);
    let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options::default());
    let at = |d: &Diagnosis| d.hot_lines.iter().find(|h| h.line == 3).map(|h| h.share).unwrap();
    assert!((at(&before) - 0.90).abs() < 1e-9 && (at(&d) - 0.95).abs() < 1e-9, "{} {}", at(&before), at(&d));
    assert_eq!(d.findings[0].line, 3);
    assert!(
        d.notes.iter().any(|n| matches!(n, Note::StaleReads { percent } if (percent - 5.0).abs() < 1e-9)),
        "{:?}",
        d.notes
    );
    assert!(!before.notes.iter().any(|n| matches!(n, Note::StaleReads { .. })));
}
