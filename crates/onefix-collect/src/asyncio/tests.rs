use super::*;
use onefix_model::Meta;

const LIB: &str = "/usr/lib/python3.11";

fn loop_stack() -> Vec<Frame> {
    vec![
        Frame::python("<module>", "/app/main.py", 40),
        Frame::python("run", format!("{LIB}/asyncio/runners.py"), 190),
        Frame::python("run_forever", format!("{LIB}/asyncio/base_events.py"), 607),
        Frame::python("BaseEventLoop._run_once", format!("{LIB}/asyncio/base_events.py"), 1884),
        Frame::python("EpollSelector.select", format!("{LIB}/selectors.py"), 468),
    ]
}

fn chain(frames: &[(&str, &str, u32)]) -> String {
    frames.iter().map(|(n, f, l)| format!("{n}\x1f{f}\x1f{l}")).collect::<Vec<_>>().join("\x1e")
}

fn fetch_chain(line: u32) -> String {
    chain(&[
        ("main", "/app/main.py", 30),
        ("fetch", "/app/main.py", line),
        ("read", &format!("{LIB}/asyncio/streams.py"), 711),
    ])
}

fn queue_chain() -> String {
    chain(&[("worker", "/app/main.py", 12), ("get", &format!("{LIB}/asyncio/queues.py"), 158)])
}

/// Parks on queue.get only, as the knowledge base would say.
fn merge() -> TaskMerge {
    TaskMerge::new(
        100.0,
        Box::new(|c: &[Frame]| c.last().is_some_and(|f| f.function == "get" && f.file.ends_with("/queues.py"))),
    )
}

fn snapshot(m: &mut TaskMerge, secs: f64, tasks: &[(u64, &str, &str, String)]) {
    m.ingest_line(&format!("S\t7\t99\t{secs:.6}\t{}", tasks.len()));
    for (id, name, state, chain) in tasks {
        m.ingest_line(&format!("T\t7\t7\t{id}\t{name}\t{state}\t{chain}"));
    }
}

#[test]
fn one_outstanding_await_takes_the_loop_sample_with_the_loop_stack_as_root() {
    let mut m = merge();
    snapshot(&mut m, 10.0, &[(1, "Task-1", "w", fetch_chain(18)), (2, "Task-2", "w", queue_chain())]);
    let mut p = Profile::new(Meta::default());
    assert!(m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_004_000, 500));
    assert_eq!(p.samples.len(), 1);
    let s = p.samples[0];
    assert_eq!(s.time_us, 500);
    assert!(!s.state.active(), "a wait, not work");
    let thread = p.thread(s.thread);
    assert_eq!((thread.pid, thread.tid, thread.name.as_deref()), (7, TASK_TID_BASE, Some("task Task-1")));
    let names: Vec<String> = p.stack_frames_root_first(s.stack).iter().map(|&f| p.frame(f).function.clone()).collect();
    assert_eq!(
        names,
        ["<module>", "run", "run_forever", "main", "fetch", "read"],
        "the loop's own iteration is cut off"
    );
    // The same task keeps its virtual thread; the merge counted what it did.
    assert!(m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_006_000, 510));
    assert_eq!(p.threads().len(), 1);
    assert_eq!((m.stats.loop_waits, m.stats.charged), (2, 2));
}

#[test]
fn overlapping_awaits_leave_the_wait_to_the_loop() {
    let mut m = merge();
    snapshot(
        &mut m,
        10.0,
        &[
            (1, "Task-1", "j", chain(&[("main", "/app/main.py", 33)])),
            (2, "Task-2", "w", fetch_chain(18)),
            (3, "Task-3", "w", fetch_chain(18)),
        ],
    );
    let mut p = Profile::new(Meta::default());
    assert!(!m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_001_000, 0));
    assert!(p.samples.is_empty());
    assert_eq!((m.stats.overlapped, m.stats.charged), (1, 0));
}

#[test]
fn tasks_joining_others_or_parked_are_not_outstanding() {
    let mut m = merge();
    snapshot(
        &mut m,
        10.0,
        &[(1, "Task-1", "j", chain(&[("main", "/app/main.py", 33)])), (2, "Task-2", "w", queue_chain())],
    );
    let mut p = Profile::new(Meta::default());
    assert!(!m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_001_000, 0));
    assert_eq!(m.stats.nothing_outstanding, 1);
}

#[test]
fn only_a_loop_waiting_in_its_selector_with_a_fresh_snapshot_is_charged() {
    let mut m = merge();
    snapshot(&mut m, 10.0, &[(1, "Task-1", "w", fetch_chain(18))]);
    let mut p = Profile::new(Meta::default());
    assert!(
        !m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: true }, 10_001_000, 0),
        "a running loop is not waiting"
    );
    let working = &loop_stack()[..3];
    assert!(
        !m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: working, active: false }, 10_001_000, 0),
        "not in the selector"
    );
    assert!(
        !m.charge(&mut p, &ThreadSample { pid: 7, tid: 8, frames: &loop_stack(), active: false }, 10_001_000, 0),
        "another thread runs no loop of the snapshot"
    );
    assert!(
        !m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_500_000, 0),
        "half a second later the snapshot says nothing"
    );
    assert_eq!(m.stats.no_snapshot, 1);
    snapshot(&mut m, 11.0, &[(1, "Task-1", "r", fetch_chain(18))]);
    assert!(
        !m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 11_001_000, 0),
        "a snapshot taken mid-step shows no wait"
    );
    assert!(p.samples.is_empty());
}

#[test]
fn the_channel_format_is_read_strictly_and_its_helper_thread_known() {
    let mut m = merge();
    m.ingest_line("garbage");
    m.ingest_line("T\t7\t7\t1\tTask-1\tw\tx"); // no snapshot pending
    assert_eq!(m.stats.bad_lines, 2);
    snapshot(&mut m, 1.0, &[(1, "odd\\tname", "w", chain(&[("f", "/app/a\\\\b.py", 3)]))]);
    assert!(m.is_helper(7, 99) && !m.is_helper(7, 7));
    let task = &m.latest[&7].loops[&7][0];
    assert_eq!(task.name, "odd\tname");
    assert_eq!(task.chain[0].file, "/app/a\\b.py");
    m.ingest_line("H\t8\t42");
    assert!(m.is_helper(8, 42), "announced before any snapshot");
    m.ingest_line("U\t7\t3.14.0");
    m.ingest_line("V\t7\tuvloop");
    m.ingest_line("V\t7\tuvloop");
    assert_eq!(m.remarks.len(), 2, "{:?}", m.remarks);
    // A snapshot cut short by a newer one is dropped, not mixed with it.
    m.ingest_line("S\t7\t99\t2.000000\t2");
    m.ingest_line(&format!("T\t7\t7\t1\tTask-1\tw\t{}", fetch_chain(18)));
    snapshot(&mut m, 3.0, &[]);
    assert_eq!(m.latest[&7].mono_us, 3_000_000);
    assert!(m.latest[&7].loops.is_empty());
}

#[test]
fn the_channel_delivers_whole_lines_through_the_fifo() {
    let mut ch = AsyncioChannel::create(1000.0).unwrap();
    assert_eq!(ch.snapshot_hz(), MAX_SNAPSHOT_HZ, "snapshots are capped, whatever the sampling rate");
    let env = ch.env();
    assert!(env[0].1.starts_with(&ch.dir().display().to_string()));
    assert!(ch.dir().join("sitecustomize.py").exists());
    let mut w = std::fs::OpenOptions::new().write(true).open(ch.fifo_path()).unwrap();
    use std::io::Write;
    write!(w, "S\t7\t99\t1.000000\t1\nT\t7\t7\t1\tTask-1\tw\t{}\nS\t7\t99\t2.0", fetch_chain(18)).unwrap();
    let mut m = merge();
    ch.drain_into(&mut m);
    assert_eq!(m.latest[&7].loops[&7].len(), 1);
    assert_eq!(m.stats.bad_lines, 0, "the half line waits for its end");
    let dir = ch.dir().to_owned();
    drop(ch);
    assert!(!dir.exists());
}

#[test]
fn a_task_awaited_by_another_continues_its_stack() {
    let mut m = merge();
    m.ingest_line("S\t7\t99\t10.000000\t2");
    m.ingest_line(&format!(
        "T\t7\t7\t1\tTask-1\tj\t{}\t2",
        chain(&[("main", "/app/main.py", 33), ("wait_for", &format!("{LIB}/asyncio/tasks.py"), 479)])
    ));
    m.ingest_line(&format!(
        "T\t7\t7\t2\tTask-2\tw\t{}\t",
        chain(&[("fetch", "/app/main.py", 18), ("read", &format!("{LIB}/asyncio/streams.py"), 711)])
    ));
    let mut p = Profile::new(Meta::default());
    assert!(m.charge(&mut p, &ThreadSample { pid: 7, tid: 7, frames: &loop_stack(), active: false }, 10_001_000, 0));
    let s = p.samples[0];
    assert_eq!(p.thread(s.thread).name.as_deref(), Some("task Task-2"), "charged to the task that waits");
    let names: Vec<String> = p.stack_frames_root_first(s.stack).iter().map(|&f| p.frame(f).function.clone()).collect();
    assert_eq!(
        names,
        ["<module>", "run", "run_forever", "main", "wait_for", "fetch", "read"],
        "under the task that awaits it"
    );
    m.ingest_line("T\t7\t7\t1\tTask-1\tj\tmain\x1f/app/main.py\x1f3\tnot-a-number");
    assert_eq!(m.stats.bad_lines, 1);
}
