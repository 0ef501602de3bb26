//! Live tests: small C and Rust programs with a known hot line and a known blocking line,
//! built here (gcc, rustc), run under the sampler; the tests assert which line wins, never how
//! fast anything is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use onefix_collect::{Sampler, Tick};
use onefix_model::{Frame, Meta, Mode, Profile, TargetExit, WeightUnit};
use onefix_native::{NativeError, NativeOptions, NativeSampler};

/// The live tests burn CPU on purpose: one at a time keeps them from starving each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// 1-based line of the line marked `// MARK` in a test program.
fn marked_line(file: &str, mark: &str) -> u32 {
    let src = std::fs::read_to_string(programs().join(file)).unwrap();
    let tag = format!("// {mark}");
    src.lines().position(|l| l.trim_end().ends_with(&tag)).unwrap_or_else(|| panic!("no {tag} in {file}")) as u32 + 1
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn build_c(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    run(Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg(programs().join("hot_wait.c"))
        .arg("-o")
        .arg(&out));
    out
}

fn build_rust(dir: &Path) -> PathBuf {
    let out = dir.join("hot_rust");
    run(Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["-C", "opt-level=2", "-g", "--edition", "2021"])
        .arg(programs().join("hot_rust.rs"))
        .arg("-o")
        .arg(&out));
    out
}

struct Recorded {
    profile: Profile,
    exit: Option<TargetExit>,
    sampler: NativeSampler,
}

/// Runs `argv` to its end under the sampler, ticking about every 2 ms like the recording loop.
fn record(argv: &[&str], opts: &NativeOptions) -> Recorded {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let (mut sampler, pid) = NativeSampler::spawn(&argv, opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(pid > 0);
    let meta = Meta {
        rate_hz: opts.rate_hz,
        weight_unit: WeightUnit::Samples { interval_us: sampler.interval_us() },
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);
    let start = Instant::now();
    loop {
        let t = start.elapsed().as_micros() as u64;
        if sampler.tick(&mut profile, t) == Tick::TargetGone {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the target never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
    let exit = sampler.reap();
    Recorded { profile, exit, sampler }
}

/// Weight in `mode` of the samples whose leaf frame satisfies `pred`.
fn self_weight(p: &Profile, mode: Mode, pred: impl Fn(&Frame) -> bool) -> u64 {
    p.samples
        .iter()
        .filter(|s| mode.counts(s.state))
        .filter(|s| s.stack.is_some_and(|st| pred(p.frame(p.stack_frame(st)))))
        .map(|s| s.weight as u64)
        .sum()
}

/// Weight in `mode` of the samples with any frame satisfying `pred`.
fn total_weight_under(p: &Profile, mode: Mode, pred: impl Fn(&Frame) -> bool) -> u64 {
    p.samples
        .iter()
        .filter(|s| mode.counts(s.state))
        .filter(|s| p.stack_frames_leaf_first(s.stack).any(|f| pred(p.frame(f))))
        .map(|s| s.weight as u64)
        .sum()
}

/// The leaf function with the most weight in `mode`.
fn top_leaf(p: &Profile, mode: Mode) -> (Frame, u64) {
    let mut by: std::collections::HashMap<(String, String, u32), u64> = Default::default();
    for s in p.samples.iter().filter(|s| mode.counts(s.state)) {
        if let Some(st) = s.stack {
            let f = p.frame(p.stack_frame(st));
            *by.entry((f.function.clone(), f.file.clone(), f.line)).or_default() += s.weight as u64;
        }
    }
    let ((function, file, line), w) = by.into_iter().max_by_key(|(_, w)| *w).expect("some samples");
    (Frame { kind: onefix_model::FrameKind::Native, function, file, line, module: String::new() }, w)
}

/// The deepest frame from `file` (the "frontier") with the most weight in `mode`: inlined
/// library code (core's arithmetic, iterators) sits under it.
fn top_frontier(p: &Profile, mode: Mode, file: &str) -> (Frame, u64) {
    let mut by: std::collections::HashMap<Frame, u64> = Default::default();
    for s in p.samples.iter().filter(|s| mode.counts(s.state)) {
        if let Some(f) = p.stack_frames_leaf_first(s.stack).map(|f| p.frame(f)).find(|f| f.file.ends_with(file)) {
            *by.entry(f.clone()).or_default() += s.weight as u64;
        }
    }
    by.into_iter().max_by_key(|(_, w)| *w).expect("some samples")
}

fn stack_names(p: &Profile, stack: Option<u32>) -> Vec<String> {
    p.stack_frames_root_first(stack).into_iter().map(|f| p.frame(f).function.clone()).collect()
}

fn seconds(p: &Profile, weight: u64) -> f64 {
    weight as f64 * p.seconds_per_weight().unwrap()
}

#[test]
fn c_hot_line_dominates_cpu_and_blocked_time_lands_on_the_waiting_line() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "hot_wait", &[]);
    let r = record(&[exe.to_str().unwrap()], &NativeOptions::default());
    let p = &r.profile;
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    assert!(r.sampler.warnings().is_empty(), "{:?}", r.sampler.warnings());
    let stats = r.sampler.stats();
    assert_eq!((stats.unknown, stats.execs, stats.blocks_without_stack), (0, 1, 0), "{stats:?}");
    // Every mapping came from the kernel's records (the /proc fallback was not needed).
    assert_eq!(stats.maps_reread, 0, "{stats:?}");

    // CPU: the marked line of `hot` dominates.
    let cpu = p.total_weight(Mode::Cpu);
    let (leaf, w) = top_leaf(p, Mode::Cpu);
    assert_eq!(leaf.function, "hot", "{leaf:?}");
    assert!(leaf.file.ends_with("hot_wait.c"), "{leaf:?}");
    let hot_line = marked_line("hot_wait.c", "HOT");
    let in_hot = self_weight(p, Mode::Cpu, |f| f.function == "hot");
    let on_line = self_weight(p, Mode::Cpu, |f| f.function == "hot" && f.line == hot_line);
    assert!(in_hot as f64 > 0.8 * cpu as f64, "hot {in_hot} of {cpu}");
    assert!(on_line as f64 > 0.5 * in_hot as f64, "line {hot_line}: {on_line} of {in_hot} (top {leaf:?} {w})");
    // About 0.6 s of CPU at 999 Hz.
    let cpu_s = seconds(p, cpu);
    assert!((0.3..1.5).contains(&cpu_s), "cpu {cpu_s} s");

    // Whole stacks through glibc without frame pointers: _start ... main -> compute -> hot.
    let hot_sample = p
        .samples
        .iter()
        .filter(|s| s.state.active())
        .find(|s| s.stack.is_some_and(|st| p.frame(p.stack_frame(st)).function == "hot"))
        .unwrap();
    let names = stack_names(p, hot_sample.stack);
    let tail: Vec<&str> = names.iter().rev().take(3).rev().map(String::as_str).collect();
    assert_eq!(tail, ["main", "compute", "hot"], "{names:?}");
    assert_eq!(names[0], "_start", "{names:?}");

    // Wall: the main thread's 0.6 s in recv is charged to the line that waits, not in cpu mode.
    let wait_line = marked_line("hot_wait.c", "WAIT");
    let waiting = total_weight_under(p, Mode::Wall, |f| f.function == "wait_for_reply" && f.line == wait_line);
    let waiting_cpu = total_weight_under(p, Mode::Cpu, |f| f.function == "wait_for_reply");
    let wait_s = seconds(p, waiting);
    assert!((0.45..1.2).contains(&wait_s), "blocked in recv: {wait_s} s");
    assert!(seconds(p, waiting_cpu) < 0.05, "cpu mode ignores blocked time");
    // And the peer thread's nanosleep to its own line.
    let sleep_line = marked_line("hot_wait.c", "SLEEP");
    let sleeping = seconds(p, total_weight_under(p, Mode::Wall, |f| f.function == "slow_peer" && f.line == sleep_line));
    assert!((0.45..1.2).contains(&sleeping), "nanosleep: {sleeping} s");
    // Two threads, both named.
    assert!(p.threads().len() >= 2, "{:?}", p.threads());
    assert!(p.threads().iter().all(|t| t.name.is_some()), "{:?}", p.threads());

    // The wait in recv was ended by the peer's send: the kernel's wake-up names the peer.
    let wakes = r.sampler.wakes().expect("root is given the sched_waking tracepoint");
    let waiting = |f: &Frame| f.function == "wait_for_reply";
    let recv_sample = p
        .samples
        .iter()
        .find(|s| {
            !s.state.active()
                && s.stack.is_some_and(|st| p.stack_frames_leaf_first(Some(st)).any(|f| waiting(p.frame(f))))
        })
        .expect("a blocked sample in recv");
    let edge = wakes
        .edges
        .iter()
        .find(|e| e.thread == recv_sample.thread && e.from_us <= recv_sample.time_us && recv_sample.time_us <= e.to_us)
        .unwrap_or_else(|| panic!("no wake-up for the wait in recv: {:?}", wakes.edges));
    let peer = &p.threads()[edge.waker as usize];
    assert_ne!(edge.waker, recv_sample.thread);
    assert_eq!(peer.pid, p.threads()[recv_sample.thread as usize].pid, "{peer:?}");
    let peer_slept = p.samples.iter().any(|s| {
        s.thread == edge.waker
            && s.stack.is_some_and(|st| p.stack_frames_leaf_first(Some(st)).any(|f| p.frame(f).function == "slow_peer"))
    });
    assert!(peer_slept, "the waker is the thread that ran slow_peer: {peer:?}");
}

#[test]
fn rust_without_frame_pointers_gives_whole_stacks() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_rust(dir.path());
    // The user's code is where the crate's own `main` is, not the compiler's `main` shim.
    assert_eq!(onefix_native::main_source_dir(&exe), Some(programs()), "{exe:?}");
    let r = record(&[exe.to_str().unwrap()], &NativeOptions::default());
    let p = &r.profile;
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    let (frontier, on_line) = top_frontier(p, Mode::Cpu, "hot_rust.rs");
    assert_eq!(
        (frontier.function.as_str(), frontier.line),
        ("hot_rust::hot", marked_line("hot_rust.rs", "HOT")),
        "{frontier:?}"
    );
    let cpu = p.total_weight(Mode::Cpu);
    assert!(on_line as f64 > 0.5 * cpu as f64, "{on_line} of {cpu}");

    // Most samples in `hot` unwind all the way: _start -> ... -> main -> ... ->
    // hot_rust::main -> hot_rust::compute -> hot_rust::hot.
    let mut whole = 0;
    let mut in_hot = 0;
    let mut example = Vec::new();
    for s in p.samples.iter().filter(|s| s.state.active()) {
        let names = stack_names(p, s.stack);
        if !names.iter().any(|n| n == "hot_rust::hot") {
            continue;
        }
        in_hot += 1;
        let pos = |n: &str| names.iter().position(|x| x == n);
        let chain = [pos("main"), pos("hot_rust::main"), pos("hot_rust::compute")];
        if names[0] == "_start" && chain.iter().all(Option::is_some) && chain.windows(2).all(|w| w[0] < w[1]) {
            whole += 1;
        } else {
            example = names;
        }
    }
    assert!(in_hot > 100, "{in_hot}");
    assert!(
        whole as f64 > 0.95 * in_hot as f64,
        "{whole} of {in_hot} whole; e.g. {example:?}; {:?} {:x?}",
        r.sampler.stats(),
        r.sampler.mappings(r.sampler.pid())
    );

    // The sleep is charged to `wait` at its line in wall mode.
    let sleep_line = marked_line("hot_rust.rs", "SLEEP");
    let waiting =
        seconds(p, total_weight_under(p, Mode::Wall, |f| f.function == "hot_rust::wait" && f.line == sleep_line));
    let blocked: Vec<(Vec<String>, u32)> =
        p.samples.iter().filter(|s| !s.state.active()).map(|s| (stack_names(p, s.stack), s.weight)).collect();
    assert!((0.3..1.0).contains(&waiting), "slept {waiting} s; blocked samples {blocked:?} {:?}", r.sampler.stats());
}

#[test]
fn stripped_binaries_still_name_functions_or_give_module_and_address() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let opts = NativeOptions { off_cpu: false, ..NativeOptions::default() };

    // Debug info gone, .symtab kept: names without lines.
    let exe = build_c(dir.path(), "no_debug", &[]);
    run(Command::new("strip").arg("--strip-debug").arg(&exe));
    let p = record(&[exe.to_str().unwrap()], &opts).profile;
    let (leaf, _) = top_leaf(&p, Mode::Cpu);
    assert_eq!((leaf.function.as_str(), leaf.file.as_str(), leaf.line), ("hot", "", 0), "{leaf:?}");

    // Exported with -rdynamic, then everything stripped: names from .dynsym.
    let exe = build_c(dir.path(), "dynsym_only", &["-rdynamic"]);
    run(Command::new("strip").arg("--strip-all").arg(&exe));
    let p = record(&[exe.to_str().unwrap()], &opts).profile;
    assert_eq!(top_leaf(&p, Mode::Cpu).0.function, "hot");

    // No symbols at all: the module and an address in it, stable from run to run.
    let exe = build_c(dir.path(), "bare", &[]);
    run(Command::new("strip").arg("--strip-all").arg(&exe));
    let exe_s = exe.to_str().unwrap();
    let p = record(&[exe_s], &opts).profile;
    let leaf_frame = |p: &Profile| {
        let (leaf, _) = top_leaf(p, Mode::Cpu);
        p.frames().iter().find(|f| f.function == leaf.function).unwrap().clone()
    };
    let first = leaf_frame(&p);
    assert!(first.function.starts_with("0x"), "{first:?}");
    assert_eq!(first.module, exe_s);
    // Unwinding still goes through .eh_frame: libc's __libc_start_main is under it.
    let sample = p
        .samples
        .iter()
        .find(|s| s.stack.is_some_and(|st| p.frame(p.stack_frame(st)).function == first.function))
        .unwrap();
    assert!(
        stack_names(&p, sample.stack).iter().any(|n| n.starts_with("__libc_start")),
        "{:?}",
        stack_names(&p, sample.stack)
    );
    let again = leaf_frame(&record(&[exe_s], &opts).profile);
    assert_eq!(again.function, first.function, "module-relative addresses do not move with ASLR");
}

#[test]
fn bad_pid_and_missing_command_say_so_in_one_sentence() {
    let err = NativeSampler::attach(u32::MAX - 1, &NativeOptions::default()).err().unwrap();
    assert!(matches!(err, NativeError::NoSuchProcess(_)));
    assert_eq!(err.to_string(), format!("no process with pid {} exists", u32::MAX - 1));
    let err = NativeSampler::spawn(&["no-such-command-onefix".into()], &NativeOptions::default()).err().unwrap();
    assert_eq!(err.to_string(), "`no-such-command-onefix` was not found: give its path or check that it is on PATH");
    let err = NativeSampler::spawn(&[], &NativeOptions::default()).err().unwrap();
    assert!(matches!(err, NativeError::EmptyCommand));
}

#[test]
fn follows_child_processes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "hot_wait", &[]);
    let r = record(&[exe.to_str().unwrap(), "fork"], &NativeOptions::default());
    let p = &r.profile;
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    let root = r.sampler.pid();
    let in_child: u64 = p
        .samples
        .iter()
        .filter(|s| s.state.active() && p.thread(s.thread).pid != root)
        .filter(|s| stack_names(p, s.stack).ends_with(&["main".into(), "compute".into(), "hot".into()]))
        .map(|s| s.weight as u64)
        .sum();
    assert!(seconds(p, in_child) > 0.2, "{} s in the child's hot", seconds(p, in_child));
    // The parent waits for the child: blocked in waitpid, in wall mode only.
    let waiting = total_weight_under(p, Mode::Wall, |f| f.function == "main")
        - total_weight_under(p, Mode::Cpu, |f| f.function == "main");
    assert!(seconds(p, waiting) > 0.2, "parent waited {} s", seconds(p, waiting));
}

#[test]
fn attaches_to_a_running_process_and_sees_it_end() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c(dir.path(), "hot_wait", &[]);
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Reaped(Command::new(&exe).arg("forever").spawn().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let mut sampler = NativeSampler::attach(child.0.id(), &NativeOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sampler.pid(), child.0.id());
    let mut profile = Profile::new(Meta::default());
    let start = Instant::now();
    let mut killed = false;
    loop {
        if !killed && start.elapsed() > Duration::from_millis(800) {
            child.0.kill().unwrap();
            child.0.wait().unwrap();
            killed = true;
        }
        if sampler.tick(&mut profile, start.elapsed().as_micros() as u64) == Tick::TargetGone {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the end of the target was not seen");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(killed);
    assert_eq!(sampler.reap(), None, "an attached process is not ours to reap");
    let (leaf, _) = top_leaf(&profile, Mode::Cpu);
    assert_eq!(leaf.function, "hot");
    let s = profile
        .samples
        .iter()
        .find(|s| s.state.active() && profile.frame(profile.stack_frame(s.stack.unwrap())).function == "hot")
        .unwrap();
    let names = stack_names(&profile, s.stack);
    assert_eq!(names[0], "_start", "mappings read from /proc at attach: {names:?}");
}

/// Run as an unprivileged user by `unprivileged_sampling_works_without_off_cpu_and_says_so`.
#[test]
#[ignore = "run by another test as an unprivileged user"]
fn unprivileged_child() {
    let Ok(exe) = std::env::var("ONEFIX_TEST_EXE") else { return };
    let r = record(&[&exe], &NativeOptions::default());
    assert_eq!(top_leaf(&r.profile, Mode::Cpu).0.function, "hot");
    let warnings = r.sampler.warnings();
    println!("WARNINGS {warnings:?}");
    assert!(
        warnings.iter().any(|w| w.starts_with("off-CPU (blocked) time is not recorded")
            && w.contains("sysctl kernel.perf_event_paranoid=1")),
        "{warnings:?}"
    );
    assert_eq!(r.profile.total_weight(Mode::Wall), r.profile.total_weight(Mode::Cpu), "no blocked samples");
}

#[test]
fn unprivileged_sampling_works_without_off_cpu_and_says_so() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if unsafe { libc::geteuid() } != 0 || onefix_native::paranoid_level() != 2 {
        eprintln!("skipped: needs root (to drop to nobody) and kernel.perf_event_paranoid = 2");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = build_c(dir.path(), "hot_wait", &[]);
    // A copy of this test binary that the unprivileged user can reach wherever the checkout is.
    let me = dir.path().join("live-tests");
    std::fs::copy(std::env::current_exe().unwrap(), &me).unwrap();
    let out = Command::new(&me)
        .current_dir(dir.path())
        .args(["--exact", "unprivileged_child", "--ignored", "--nocapture"])
        .env("ONEFIX_TEST_EXE", &exe)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn go_unwinds_through_its_debug_frame_and_names_lines() {
    if Command::new("go").arg("version").output().is_err() {
        eprintln!("skipped: no go toolchain (apt-get install golang-go)");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("hot_go");
    run(Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(programs().join("hot_go.go"))
        .env("GOFLAGS", "-buildvcs=false"));
    let r = record(&[exe.to_str().unwrap()], &NativeOptions::default());
    let p = &r.profile;
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    let (frontier, _) = top_frontier(p, Mode::Cpu, "hot_go.go");
    assert_eq!(frontier.function, "main.hot", "{frontier:?}");
    let hot_line = marked_line("hot_go.go", "HOT");
    let in_hot = total_weight_under(p, Mode::Cpu, |f| f.function == "main.hot");
    // The loop's compare-and-branch belongs to the `for` line just above.
    let on_lines = total_weight_under(p, Mode::Cpu, |f| {
        f.function == "main.hot" && (f.line == hot_line || f.line + 1 == hot_line)
    });
    assert!(on_lines as f64 > 0.9 * in_hot as f64, "{on_lines} of {in_hot}");
    // Whole stacks: runtime.main -> main.main -> main.compute -> main.hot.
    let mut whole = 0;
    let mut total = 0;
    for s in p.samples.iter().filter(|s| s.state.active()) {
        let names = stack_names(p, s.stack);
        if names.last().map(String::as_str) == Some("main.hot") {
            total += 1;
            if names.ends_with(&["runtime.main".into(), "main.main".into(), "main.compute".into(), "main.hot".into()]) {
                whole += 1;
            }
        }
    }
    assert!(total > 100 && whole as f64 > 0.95 * total as f64, "{whole} of {total}");
}

fn build_go(dir: &Path, name: &str, extra: &[&str]) -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        eprintln!("skipped: no go toolchain (apt-get install golang-go)");
        return None;
    }
    let exe = dir.join(name);
    run(Command::new("go")
        .arg("build")
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(programs().join(format!("{name}.go")))
        .env("GOFLAGS", "-buildvcs=false")
        .env("GO111MODULE", "off"));
    Some(exe)
}

/// Weight in `mode` of the samples with a frame of `file` at `line`, and of those on threads
/// named like goroutines.
fn weight_at_line(p: &Profile, mode: Mode, file: &str, line: u32) -> (u64, u64) {
    let mut all = 0;
    let mut on_goroutines = 0;
    for s in p.samples.iter().filter(|s| mode.counts(s.state)) {
        if p.stack_frames_leaf_first(s.stack).any(|f| p.frame(f).file.ends_with(file) && p.frame(f).line == line) {
            all += s.weight as u64;
            if p.threads()[s.thread as usize].name.as_deref().is_some_and(|n| n.starts_with("goroutine ")) {
                on_goroutines += s.weight as u64;
            }
        }
    }
    (all, on_goroutines)
}

#[test]
fn go_goroutines_that_wait_are_charged_to_the_lines_that_wait() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_go(dir.path(), "wait_go", &[]) else { return };
    let r = record(&[exe.to_str().unwrap()], &NativeOptions::default());
    let p = &r.profile;
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    assert!(r.sampler.stats().goroutine_scans > 10, "{:?}", r.sampler.stats());
    assert!(r.sampler.warnings().iter().all(|w| !w.contains("goroutines")), "{:?}", r.sampler.warnings());
    // 600 ms of waiting, in cpu-clock periods of about 1 ms: no thread shows it, the
    // goroutine does, on its own virtual thread.
    let period_ms = r.sampler.interval_us() as f64 / 1000.0;
    for (mark, what) in [
        ("NETWAIT", "the read that waits for a reply"),
        ("JOIN", "the WaitGroup wait"),
        ("ACCEPT", "the server's Accept"),
    ] {
        let line = marked_line("wait_go.go", mark);
        let (wall, on_goroutines) = weight_at_line(p, Mode::Wall, "wait_go.go", line);
        let waited_ms = wall as f64 * period_ms;
        assert!((400.0..=900.0).contains(&waited_ms), "{what} at line {line}: {waited_ms:.0} ms in wall mode");
        assert!(on_goroutines as f64 >= 0.95 * wall as f64, "{what}: {on_goroutines} of {wall} on goroutines");
        let (cpu, _) = weight_at_line(p, Mode::Cpu, "wait_go.go", line);
        assert!((cpu as f64) < 0.1 * wall as f64, "{what}: {cpu} in cpu mode against {wall} in wall mode");
    }
    // The parked goroutine's whole stack, down to the netpoller.
    let netwait = marked_line("wait_go.go", "NETWAIT");
    let stack = p
        .samples
        .iter()
        .find(|s| {
            !s.state.active()
                && p.stack_frames_leaf_first(s.stack)
                    .any(|f| p.frame(f).line == netwait && p.frame(f).file.ends_with("wait_go.go"))
        })
        .map(|s| stack_names(p, s.stack))
        .expect("a sample at the read");
    assert_eq!(stack.first().map(String::as_str), Some("runtime.goexit"), "{stack:?}");
    assert!(
        stack.iter().any(|f| f == "main.waitForReply")
            && stack.iter().any(|f| f == "internal/poll.(*FD).Read")
            && stack.last().is_some_and(|f| f.starts_with("runtime.gopark")),
        "{stack:?}"
    );
}

#[test]
fn a_go_binary_without_dwarf_is_sampled_and_says_why_goroutines_are_missing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_go(dir.path(), "wait_go", &["-ldflags=-w"]) else { return };
    let r = record(&[exe.to_str().unwrap()], &NativeOptions::default());
    assert_eq!(r.exit, Some(TargetExit::Code(0)));
    let warnings = r.sampler.warnings();
    assert!(
        warnings.iter().any(
            |w| w.starts_with("goroutines that wait are not shown:") && w.contains("has no DWARF type information")
        ),
        "{warnings:?}"
    );
    assert_eq!(r.sampler.stats().goroutine_samples, 0);
}

#[test]
fn cpp_methods_are_demangled() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("hot_cpp");
    run(Command::new("g++").args(["-O2", "-g"]).arg(programs().join("hot_cpp.cpp")).arg("-o").arg(&exe));
    let r = record(&[exe.to_str().unwrap()], &NativeOptions { off_cpu: false, ..NativeOptions::default() });
    let (frontier, _) = top_frontier(&r.profile, Mode::Cpu, "hot_cpp.cpp");
    assert_eq!(
        (frontier.function.as_str(), frontier.line),
        ("shop::Basket::add_all", marked_line("hot_cpp.cpp", "HOT")),
        "{frontier:?}"
    );
}
