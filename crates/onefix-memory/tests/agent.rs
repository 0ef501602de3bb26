//! The agent in real processes: C programs with known allocation sequences, threads, fork, exec,
//! and a target killed mid-run. Assertions are relative facts (which site retains most, what
//! was freed), and estimates within sampling error, never addresses.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use onefix_memory::{monotonic_ns, MemoryOptions, MemoryTracker};
use onefix_model::{MemoryInfo, MemoryView, Meta, Profile, WeightUnit};

const MIB: f64 = 1024.0 * 1024.0;

fn program() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = dir.join("allocs");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/allocs.c");
        let ok = Command::new("cc")
            .args(["-g", "-O0", "-fno-omit-frame-pointer", "-pthread", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("cc runs");
        assert!(ok.success());
        out
    })
}

/// Runs the program in `mode` under the agent, sampling every `rate` bytes on average.
fn record(mode: &str, rate: u64, kill_after: Option<Duration>) -> (Profile, MemoryInfo, u32, std::process::ExitStatus) {
    let mut tracker = MemoryTracker::new(MemoryOptions { rate_bytes: rate, python_malloc: false }).unwrap();
    let mut cmd = Command::new(program());
    cmd.arg(mode);
    tracker.prepare(&mut cmd);
    let start = monotonic_ns();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    tracker.start(Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() }), start);
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    let (profile, info) = tracker.finish();
    (profile, info, pid, status)
}

/// Bytes under each stack whose innermost frame in allocs.c is `function` (in process `pid`
/// when given).
fn bytes_at(profile: &Profile, view: MemoryView, function: &str, pid: Option<u32>) -> f64 {
    let v = profile.memory_view(view);
    v.samples
        .iter()
        .filter(|s| pid.map_or(true, |p| v.thread(s.thread).pid == p))
        .filter(|s| {
            v.stack_frames_leaf_first(s.stack)
                .map(|f| v.frame(f))
                .find(|f| f.file.ends_with("allocs.c"))
                .is_some_and(|f| f.function == function)
        })
        .map(|s| s.weight as f64)
        .sum()
}

#[test]
fn the_retaining_site_and_the_churning_site_are_told_apart() {
    let (p, info, _, status) = record("retain", 16 * 1024, None);
    assert!(status.success());
    assert_eq!(info.processes, 1);
    let kept = bytes_at(&p, MemoryView::Retained, "keep_blocks", None);
    let churn_kept = bytes_at(&p, MemoryView::Retained, "churn_blocks", None);
    let kept_alloc = bytes_at(&p, MemoryView::Allocated, "keep_blocks", None);
    let churn_alloc = bytes_at(&p, MemoryView::Allocated, "churn_blocks", None);
    // 2000 blocks of 4 KiB kept: the estimate is unbiased, within sampling error.
    assert!((6.0..=10.0).contains(&(kept / MIB)), "kept {:.2} MiB", kept / MIB);
    assert!(churn_kept < kept * 0.02, "churn retains {churn_kept} bytes against {kept}");
    let ratio = churn_alloc / kept_alloc;
    assert!((7.0..=13.0).contains(&ratio), "churn allocates {ratio:.1}x what keep does, not ~10x");
    assert!(info.freed > 0 && info.freed <= info.sampled);
}

#[test]
fn threads_are_sampled_each_with_its_own_stack() {
    let (p, _, _, status) = record("threads", 16 * 1024, None);
    assert!(status.success());
    let kept = bytes_at(&p, MemoryView::Retained, "keep_blocks", None);
    assert!((6.0..=10.0).contains(&(kept / MIB)), "4 threads keep 8 MiB, estimated {:.2} MiB", kept / MIB);
    let threads: std::collections::HashSet<u64> = p.samples.iter().map(|s| p.thread(s.thread).tid).collect();
    assert!(threads.len() >= 4, "samples from {} threads", threads.len());
    assert!(bytes_at(&p, MemoryView::Retained, "churn_blocks", None) < kept * 0.02);
}

#[test]
fn a_forked_child_is_tracked_as_its_own_process() {
    let (p, info, pid, status) = record("fork", 16 * 1024, None);
    assert!(status.success());
    assert_eq!(info.processes, 2, "the target and its child say hello");
    let parent = bytes_at(&p, MemoryView::Retained, "keep_blocks", Some(pid));
    let child_pid = p.threads().iter().map(|t| t.pid).find(|&q| q != pid).expect("samples from the child");
    let child = bytes_at(&p, MemoryView::Retained, "keep_blocks", Some(child_pid));
    assert!(child > parent * 1.4 && child < parent * 2.6, "child keeps 16 MiB, parent 8 MiB: {child} vs {parent}");
    assert!(p
        .memory_view(MemoryView::Retained)
        .samples
        .iter()
        .filter(|s| p.thread(s.thread).pid == child_pid)
        .any(|s| { p.stack_frames_leaf_first(s.stack).any(|f| p.frame(f).function == "keep_in_child") }));
}

#[test]
fn exec_starts_a_new_image_whose_heap_is_counted_afresh() {
    let (p, info, _, status) = record("exec", 16 * 1024, None);
    assert!(status.success());
    assert_eq!(info.processes, 2, "a hello before and after exec");
    let kept = bytes_at(&p, MemoryView::Retained, "keep_blocks", None);
    assert!((6.0..=10.0).contains(&(kept / MIB)), "only the new image's 8 MiB is retained: {:.2} MiB", kept / MIB);
}

#[test]
fn a_target_killed_mid_run_ends_the_recording_cleanly() {
    let (p, info, _, status) = record("forever", 64 * 1024, Some(Duration::from_millis(600)));
    assert!(!status.success(), "killed");
    assert!(info.sampled > 0 && !p.samples.is_empty());
}

#[test]
fn without_onefix_the_agent_only_passes_calls_through() {
    let agent = onefix_memory::AgentFile::write().unwrap();
    for mode in ["threads", "fork", "retain"] {
        let status = Command::new(program()).arg(mode).env("LD_PRELOAD", agent.path()).status().unwrap();
        assert!(status.success(), "{mode}");
    }
}

/// Lines of allocs.py holding `marker`.
fn py_line(marker: &str) -> u32 {
    let src =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/allocs.py")).unwrap();
    src.lines().position(|l| l.contains(marker)).unwrap() as u32 + 1
}

fn python_bytes_at(profile: &Profile, view: MemoryView, line: u32) -> f64 {
    let v = profile.memory_view(view);
    v.samples
        .iter()
        .filter(|s| {
            v.stack_frames_leaf_first(s.stack)
                .map(|f| v.frame(f))
                .find(|f| f.file.ends_with("allocs.py"))
                .is_some_and(|f| f.line == line)
        })
        .map(|s| s.weight as f64)
        .sum()
}

#[test]
fn python_allocations_carry_the_users_line_under_pythonmalloc_malloc() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/allocs.py");
    let mut tracker = MemoryTracker::new(MemoryOptions { rate_bytes: 16 * 1024, python_malloc: true }).unwrap();
    let mut cmd = Command::new("python3");
    cmd.arg(&script).env_remove("PYTHONMALLOC");
    tracker.prepare(&mut cmd);
    let start = monotonic_ns();
    let mut child = cmd.spawn().unwrap();
    tracker.start(Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() }), start);
    assert!(child.wait().unwrap().success());
    let (p, info) = tracker.finish();
    assert!(info.python_frames, "CPython 3.11's frames are read");
    let (keep, churn) = (py_line("keep-line"), py_line("churn-line"));
    let kept = python_bytes_at(&p, MemoryView::Retained, keep);
    let churn_kept = python_bytes_at(&p, MemoryView::Retained, churn);
    let churn_alloc = python_bytes_at(&p, MemoryView::Allocated, churn);
    let kept_alloc = python_bytes_at(&p, MemoryView::Allocated, keep);
    assert!(kept / MIB > 5.0 && kept / MIB < 12.0, "8000 lists of 120 pointers kept: {:.2} MiB", kept / MIB);
    assert!(churn_kept < kept * 0.05, "churn retains {churn_kept}, keep {kept}");
    let ratio = churn_alloc / kept_alloc;
    assert!((7.0..=13.0).contains(&ratio), "churn allocates {ratio:.1}x keep, not ~10x");
}

#[test]
fn a_rust_program_s_retaining_and_churning_sites() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("allocs_rs");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/allocs.rs");
    let ok =
        Command::new("rustc").args(["-g", "-C", "opt-level=1", "-o"]).arg(&exe).arg(&src).status().expect("rustc runs");
    assert!(ok.success());
    let mut tracker = MemoryTracker::new(MemoryOptions { rate_bytes: 16 * 1024, python_malloc: false }).unwrap();
    let mut cmd = Command::new(&exe);
    tracker.prepare(&mut cmd);
    let start = monotonic_ns();
    let mut child = cmd.spawn().unwrap();
    tracker.start(Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() }), start);
    assert!(child.wait().unwrap().success());
    let (p, _) = tracker.finish();
    let at = |view, name: &str| -> f64 {
        let v = p.memory_view(view);
        v.samples
            .iter()
            .filter(|s| {
                v.stack_frames_leaf_first(s.stack)
                    .map(|f| v.frame(f))
                    .find(|f| f.file.ends_with("allocs.rs"))
                    .is_some_and(|f| f.function.contains(name))
            })
            .map(|s| s.weight as f64)
            .sum()
    };
    let (kept, churn_kept) = (at(MemoryView::Retained, "keep_blocks"), at(MemoryView::Retained, "churn_blocks"));
    let top: Vec<String> = {
        let v = p.memory_view(MemoryView::Retained);
        let mut s: Vec<_> = v.samples.clone();
        s.sort_by_key(|x| std::cmp::Reverse(x.weight));
        s.iter()
            .take(3)
            .map(|x| {
                format!(
                    "{} {:?}",
                    x.weight,
                    v.stack_frames_leaf_first(x.stack).take(5).map(|f| v.frame(f).label()).collect::<Vec<_>>()
                )
            })
            .collect()
    };
    assert!((6.0..=10.0).contains(&(kept / MIB)), "kept {:.2} MiB; top retained: {top:#?}", kept / MIB);
    assert!(churn_kept < kept * 0.02, "{churn_kept} vs {kept}");
    let ratio = at(MemoryView::Allocated, "churn_blocks") / at(MemoryView::Allocated, "keep_blocks");
    assert!((7.0..=13.0).contains(&ratio), "churn allocates {ratio:.1}x keep");
}
