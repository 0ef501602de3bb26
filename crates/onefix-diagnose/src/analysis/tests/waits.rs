//! Waits charged to their cause (a lock's holder, the GIL's) and the gain read off the critical
//! path of a run that went to its end.

use super::*;
use onefix_model::TargetExit;

/// A run that went to its end, started as pid 1 (thread 1 is its main thread).
fn ended(b: &mut Builder) {
    b.p.meta.exit = Some(TargetExit::Code(0));
    b.p.meta.target.pid = 1;
}

#[test]
fn a_thread_queuing_for_the_gil_is_charged_to_the_line_that_holds_it() {
    let (dir, app) = write_app(
        "gil",
        "import threading\n\ndef crunch(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n\ndef tally(rows):\n    t = 0\n    for r in rows:\n        t += r\n    return t\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let (holding, queuing) = (ThreadState::new(true, true), ThreadState::new(false, false).with_futex(true));
    let mut b = Builder::new();
    for tick in 0..100u64 {
        // Thread 2 crunches 80% of the ticks; thread 3's tally gets the GIL the others.
        let crunch_holds = tick % 5 != 0;
        let (s2, s3) = if crunch_holds { (holding, queuing) } else { (queuing, holding) };
        b.add_in(2, tick * 10, s2, &[worker, ("crunch", &app, 6)]);
        b.add_in(3, tick * 10, s3, &[worker, ("tally", &app, 12)]);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    // A wait the kernel did not see in a futex may be I/O at that line: it stays.
    let mut unseen = Builder::new();
    for tick in 0..100u64 {
        let crunch_holds = tick % 5 != 0;
        let idle = ThreadState::new(false, false);
        let (s2, s3) = if crunch_holds { (holding, idle) } else { (idle, holding) };
        unseen.add_in(2, tick * 10, s2, &[worker, ("crunch", &app, 6)]);
        unseen.add_in(3, tick * 10, s3, &[worker, ("tally", &app, 12)]);
    }
    let without = unseen.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();

    let f = &d.findings[0];
    assert_eq!(f.line, 6, "{f:?}");
    assert!((f.share - 0.8).abs() < 1e-9, "its 80 ticks and the 80 that tally waited: {f:?}");
    assert!(f.why.contains("other Python threads queue for the GIL meanwhile: 40%"), "{}", f.why);
    assert!(f.evidence[0].frame.starts_with("other threads queuing for the GIL at app.py:12"), "{:?}", f.evidence);
    assert!(d.findings.iter().all(|f| f.kind != "blocking-wait"), "{:?}", d.findings);
    assert_eq!(without.findings.iter().find(|f| f.line == 12).unwrap().kind, "blocking-wait");
}

#[test]
fn a_main_thread_that_the_workers_overlap_gains_by_its_path_not_by_its_share() {
    // The main thread sniffs 90% of the run and queues a batch the rest; eight workers wait
    // on the queue and sleep a fifth of the run (an upload).
    let (dir, app) = write_app(
        "path",
        "import csv, queue, time\n\ndef main(lines):\n    for line in lines:\n        d = csv.Sniffer().sniff(line)\n        q.put(line)\n\ndef upload(q):\n    while True:\n        batch = q.get()\n        time.sleep(0.01)\n",
    );
    let sniffer = ("Sniffer.sniff", &*format!("{LIB}/csv.py"), 180);
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let get = ("Queue.get", &*format!("{LIB}/queue.py"), 171);
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..200u64 {
        if tick % 10 == 9 {
            b.add(1, tick * 10, true, &[("<module>", &app, 20), ("main", &app, 6)]);
        } else {
            b.add(1, tick * 10, true, &[("<module>", &app, 20), ("main", &app, 5), sniffer]);
        }
        for w in 2..10u64 {
            if (tick + w) % 5 == 0 {
                b.add(w, tick * 10, false, &[worker, ("upload", &app, 11)]);
            } else {
                b.add(w, tick * 10, false, &[worker, ("upload", &app, 10), get]);
            }
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = d.findings.iter().find(|f| f.line == 5).unwrap();
    assert_eq!(f.gain_basis, GainBasis::CriticalPath, "{f:?}");
    // Busy share: 180 of 200 + 8 × 40 ticks, 1.5x. On the path: 180 of 200 ticks, but each
    // worker's own 40 ticks of uploads stay, so 5x.
    let gain = f.max_speedup.unwrap();
    assert!((gain - 5.0).abs() < 0.3, "{gain} {f:?}");
}

#[test]
fn the_gain_of_a_thread_the_end_does_not_wait_for_is_nothing() {
    // Coz's fork/join toy: main joins two workers; one computes for 2 s, the other for 1 s. The
    // shorter one's line holds a third of the busy time, yet removing it gains nothing.
    let (dir, app) = write_app(
        "join",
        "import threading\n\ndef long_half():\n    return crunch(2)\n\ndef short_half():\n    return crunch(1)\n\nts = [threading.Thread(target=f) for f in (long_half, short_half)]\nfor t in ts: t.join()\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let join = ("Thread.join", &*format!("{LIB}/threading.py"), 1112);
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..200u64 {
        b.add(1, tick * 10, false, &[("<module>", &app, 10), join]);
        b.add(2, tick * 10, true, &[worker, ("long_half", &app, 4)]);
        if tick < 100 {
            b.add(3, tick * 10, true, &[worker, ("short_half", &app, 7)]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let long = d.findings.iter().find(|f| f.line == 4).unwrap();
    let short = d.findings.iter().find(|f| f.line == 7).unwrap();
    assert!((short.share - 1.0 / 3.0).abs() < 0.01, "{short:?}");
    assert!((short.max_speedup.unwrap() - 1.0).abs() < 0.02, "{short:?}");
    // Removing the long half leaves the short one: 2 s to 1 s.
    assert!((long.max_speedup.unwrap() - 2.0).abs() < 0.05, "{long:?}");
}
