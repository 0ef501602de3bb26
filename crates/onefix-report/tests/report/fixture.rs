//! A hand-built recording and diagnosis shaped like seed 000 (an asyncio token updater that
//! builds an HTTP client per token), with the awkward cases every writer must survive: a frame
//! name holding `;`, one holding a line break, a thread without a name, a sample without
//! frames, blocked samples that CPU mode drops, and an idle pool worker.

use onefix_diagnose::{Diagnosis, Evidence, Finding, HotLine};
use onefix_model::{
    Frame, FrameId, Language, Meta, Mode, Profile, Sample, SamplingStats, Target, TargetExit, ThreadState, WeightUnit,
};

pub const UPDATER: &str = "/srv/updater/updater.py";
pub const SEMICOLON_FRAME: &str = "<[u8; 8] as core::fmt::Debug>::fmt";
pub const LINE_BREAK_FRAME: &str = "render\nrow";

pub fn meta() -> Meta {
    Meta {
        tool_version: "0.1.0".into(),
        target: Target {
            argv: Some(vec!["python3".into(), "updater.py".into(), "--batch".into(), "50".into()]),
            pid: 4242,
            language: Some(Language::Python),
            cwd: Some("/srv/updater".into()),
            runtime_version: Some("3.11.7".into()),
        },
        mode: Mode::Wall,
        rate_hz: 100.0,
        weight_unit: WeightUnit::Samples { interval_us: 10_000 },
        start_unix_ms: 1_700_000_000_000,
        duration_s: 12.3456,
        user_code: vec!["/srv/updater".into()],
        exit: Some(TargetExit::Code(0)),
        stats: SamplingStats { ticks: 1240, errors: 3, late: 1 },
        native: true,
    }
}

/// Stacks by name, so tests can state what they expect in the profile's own terms.
pub struct Stacks {
    pub setup: Vec<FrameId>,
    pub setup_partial: Vec<FrameId>,
    pub post_blocked: Vec<FrameId>,
    pub post_decode: Vec<FrameId>,
    pub worker_wait: Vec<FrameId>,
}

pub fn updater_profile() -> Profile {
    updater_profile_with_stacks().0
}

pub fn updater_profile_with_stacks() -> (Profile, Stacks) {
    let mut p = Profile::new(meta());
    let main_thread = p.intern_thread(4242, 4242, Some("MainThread"));
    let worker = p.intern_thread(4242, 4250, Some("ThreadPoolExecutor-0_0"));
    let unnamed = p.intern_thread(4242, 4251, None);

    let module = p.intern_frame(Frame::python("<module>", UPDATER, 40));
    let main = p.intern_frame(Frame::python("main", UPDATER, 36));
    let per_token = p.intern_frame(Frame::python("update_all", UPDATER, 31));
    let post = p.intern_frame(Frame::python("update_all", UPDATER, 33));
    let client_init =
        p.intern_frame(Frame::python("__init__", "/venv/lib/python3.11/site-packages/httpx/_client.py", 1400));
    let create_ssl =
        p.intern_frame(Frame::python("create_ssl_context", "/venv/lib/python3.11/site-packages/httpx/_config.py", 40));
    let default_context = p.intern_frame(Frame::python("create_default_context", "/usr/lib/python3.11/ssl.py", 770));
    let load_verify =
        p.intern_frame(Frame::native("SSL_CTX_load_verify_locations", "/usr/lib/x86_64-linux-gnu/libssl.so.3"));
    let send = p.intern_frame(Frame::python("send", "/venv/lib/python3.11/site-packages/httpx/_client.py", 1600));
    let render = p.intern_frame(Frame::python(LINE_BREAK_FRAME, "/srv/updater/codec.py", 7));
    let fmt = p.intern_frame(Frame::native(SEMICOLON_FRAME, "/srv/updater/libdecode.so"));
    let pool_worker = p.intern_frame(Frame::python("_worker", "/usr/lib/python3.11/concurrent/futures/thread.py", 81));
    let queue_get = p.intern_frame(Frame::python("get", "/usr/lib/python3.11/queue.py", 171));
    let wait = p.intern_frame(Frame::python("wait", "/usr/lib/python3.11/threading.py", 320));

    let stacks = Stacks {
        setup: vec![module, main, per_token, client_init, create_ssl, default_context, load_verify],
        setup_partial: vec![module, main, per_token, client_init, create_ssl],
        post_blocked: vec![module, main, post, send],
        post_decode: vec![module, main, post, render, fmt],
        worker_wait: vec![module, pool_worker, queue_get, wait],
    };
    let setup = p.intern_stack(stacks.setup.iter().copied());
    let setup_partial = p.intern_stack(stacks.setup_partial.iter().copied());
    let post_blocked = p.intern_stack(stacks.post_blocked.iter().copied());
    let post_decode = p.intern_stack(stacks.post_decode.iter().copied());
    let worker_wait = p.intern_stack(stacks.worker_wait.iter().copied());

    let running = ThreadState::new(true, true);
    let blocked = ThreadState::new(false, false);
    // (tick, thread, stack, state, weight), deliberately not in time order across threads.
    let samples = [
        (0, main_thread, setup, running, 1),
        (1, main_thread, setup, running, 1),
        (2, main_thread, setup, running, 2), // a late tick carries two intervals
        (4, main_thread, setup_partial, running, 1),
        (5, main_thread, post_blocked, blocked, 1),
        (6, main_thread, post_blocked, blocked, 1),
        (7, main_thread, post_decode, running, 1),
        (8, main_thread, setup, running, 1),
        (9, main_thread, setup, running, 1),
        (10, main_thread, post_blocked, blocked, 1),
        (0, worker, worker_wait, blocked, 1),
        (2, worker, worker_wait, blocked, 1),
        (4, worker, worker_wait, blocked, 1),
        (6, worker, worker_wait, blocked, 1),
        (8, worker, worker_wait, blocked, 1),
        (3, unnamed, None, blocked, 1),
    ];
    for (tick, thread, stack, state, weight) in samples {
        p.samples.push(Sample { time_us: tick * 10_000, thread, stack, state, weight });
    }
    (p, stacks)
}

pub fn updater_diagnosis() -> Diagnosis {
    // Busy weight: the main thread's 11 intervals and the unnamed thread's 1; the worker's 5
    // are idle.
    let busy = 12.0;
    Diagnosis {
        share_of: "wall-clock time of the threads with work to do (idle waits for work left out)".into(),
        total_weight: 17,
        busy_weight: 12,
        idle_weight: 5,
        outside_user_weight: 1,
        seconds_per_weight: Some(0.01),
        findings: vec![
            Finding {
                rank: 1,
                kind: onefix_diagnose::Kind::RepeatedSetup,
                file: UPDATER.into(),
                line: 31,
                function: "update_all".into(),
                code: Some("        async with httpx.AsyncClient() as client:".into()),
                share: 7.0 / busy,
                max_speedup: Some(1.0 / (1.0 - 7.0 / busy)),
                bound_weight: 12,
                title: "Creating an HTTP client (and its SSL context) takes 58% of the time of the threads with work under updater.py:31".into(),
                advice: "create the client once, outside the loop, and reuse it (also pools connections)".into(),
                why: "httpx.AsyncClient() creates an SSLContext and reads the system CA bundle every time it is built"
                    .into(),
                evidence: vec![
                    Evidence {
                        frame: "httpx.AsyncClient.__init__".into(),
                        file: "/venv/lib/python3.11/site-packages/httpx/_client.py".into(),
                        line: 1400,
                        share: 1.0,
                    },
                    Evidence {
                        frame: "httpx._config.create_ssl_context".into(),
                        file: "/venv/lib/python3.11/site-packages/httpx/_config.py".into(),
                        line: 40,
                        share: 1.0,
                    },
                    Evidence {
                        frame: "ssl.create_default_context".into(),
                        file: "/usr/lib/python3.11/ssl.py".into(),
                        line: 770,
                        share: 6.0 / 7.0,
                    },
                    Evidence {
                        frame: "SSL_CTX_load_verify_locations".into(),
                        file: String::new(),
                        line: 0,
                        share: 6.0 / 7.0,
                    },
                ],
                recurrence: Some(1.0),
                rule: "python/httpx-client-per-call".into(),
                explained: 0.9,
                enclosing_loop: Some(format!("{UPDATER}:28")),
                gain_basis: onefix_diagnose::GainBasis::BusyShare,
                what: String::new(),
                no_bound: None,
                modelled_range: None,
            },
            Finding {
                rank: 2,
                kind: onefix_diagnose::Kind::SerialIo,
                file: UPDATER.into(),
                line: 33,
                function: "update_all".into(),
                code: Some("            resp = await client.post(url, json=payload)".into()),
                share: 3.0 / busy,
                max_speedup: Some(1.0 / (1.0 - 3.0 / busy)),
                bound_weight: 12,
                title: "Waiting for one HTTP reply at a time takes 25% of the time of the threads with work under updater.py:33".into(),
                advice: "issue the requests concurrently (asyncio.gather under a bounded semaphore) instead of \
                         awaiting each before starting the next; the service can answer several at once"
                    .into(),
                why: "the loop awaits one POST at a time, so the thread idles for every round trip".into(),
                evidence: vec![Evidence {
                    frame: "httpx.AsyncClient.send".into(),
                    file: "/venv/lib/python3.11/site-packages/httpx/_client.py".into(),
                    line: 1600,
                    share: 1.0,
                }],
                recurrence: Some(0.4166),
                rule: "builtin/serial-io".into(),
                explained: 1.0,
                enclosing_loop: None,
                gain_basis: onefix_diagnose::GainBasis::BusyShare,
                what: String::new(),
                no_bound: None,
                modelled_range: None,
            },
        ],
        hot_lines: hot_lines(busy),
        notes: vec!["1 thread idle for want of work (ThreadPoolExecutor-0_0): 29% of wall time".into()],
        idle_samples: Default::default(),
    }
}

fn hot_lines(busy: f64) -> Vec<HotLine> {
    vec![
        HotLine {
            file: UPDATER.into(),
            line: 31,
            function: "update_all".into(),
            code: Some("        async with httpx.AsyncClient() as client:".into()),
            weight: 7,
            share: 7.0 / busy,
            self_share: 0.0,
            blocked_share: 0.0,
        },
        HotLine {
            file: UPDATER.into(),
            line: 33,
            function: "update_all".into(),
            code: Some("            resp = await client.post(url, json=payload)".into()),
            weight: 3,
            share: 3.0 / busy,
            self_share: 0.0,
            blocked_share: 3.0 / busy,
        },
        HotLine {
            file: "/srv/updater/codec.py".into(),
            line: 7,
            function: LINE_BREAK_FRAME.into(),
            code: None,
            weight: 1,
            share: 1.0 / busy,
            self_share: 1.0 / busy,
            blocked_share: 0.0,
        },
    ]
}

/// The same recording taken by attaching (no command line, no exit status, clean sampling),
/// diagnosed with no finding.
pub fn attached_profile() -> Profile {
    let mut p = updater_profile();
    p.meta.target.argv = None;
    p.meta.exit = None;
    p.meta.stats = SamplingStats { ticks: 1240, errors: 0, late: 0 };
    p
}

pub fn no_findings_diagnosis() -> Diagnosis {
    Diagnosis { findings: Vec::new(), notes: Vec::new(), ..updater_diagnosis() }
}

/// A small allocation profile: weights are bytes.
pub fn bytes_profile() -> Profile {
    let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..meta() });
    let thread = p.intern_thread(4242, 4242, Some("MainThread"));
    let module = p.intern_frame(Frame::python("<module>", UPDATER, 40));
    let load = p.intern_frame(Frame::python("load", UPDATER, 12));
    let stack = p.intern_stack([module, load]);
    for (tick, weight) in [(0, 524_288), (1, 1_048_576)] {
        p.samples.push(Sample { time_us: tick * 10_000, thread, stack, state: ThreadState::new(true, true), weight });
    }
    p
}

/// Runs a writer into a string.
pub fn render(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    write(&mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("writers emit UTF-8")
}
