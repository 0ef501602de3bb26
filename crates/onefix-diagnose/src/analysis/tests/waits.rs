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

/// The sniffing line's finding in a run of 200 ticks where the main thread sniffs 90% of the
/// time and queues a batch the rest, while eight workers wait on the queue and upload (sleep)
/// at the ticks `uploading(tick, worker)` says.
fn sniffing_beside_uploaders(tag: &str, uploading: impl Fn(u64, u64) -> bool) -> Finding {
    let (dir, app) = write_app(
        tag,
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
            if uploading(tick, w) {
                b.add(w, tick * 10, false, &[worker, ("upload", &app, 11)]);
            } else {
                b.add(w, tick * 10, false, &[worker, ("upload", &app, 10), get]);
            }
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = d.findings.iter().find(|f| f.line == 5).unwrap().clone();
    assert_eq!(f.gain_basis, GainBasis::CriticalPath, "{f:?}");
    f
}

#[test]
fn a_main_thread_that_the_workers_overlap_gains_by_its_path_not_by_its_share() {
    // Each worker uploads a fifth of the run.
    let f = sniffing_beside_uploaders("path", |tick, w| (tick + w) % 5 == 0);
    // Busy share: 180 of 200 + 8 × 40 ticks, 1.5x. On the path: 180 of 200 ticks, but each
    // worker's own 40 ticks of uploads stay, so 5x.
    let gain = f.max_speedup.unwrap();
    assert!((gain - 5.0).abs() < 0.3, "{gain} {f:?}");
}

#[test]
fn workers_that_took_uneven_shares_of_a_queue_share_them_anew_once_the_producer_is_fast() {
    // One worker took half of the uploads while a slow producer fed them one at a time
    // (whichever is free takes the next item). Once the producer is fast, the eight share them
    // out: the pool's 240 ticks over 8 stay, not the busiest worker's 100.
    let f = sniffing_beside_uploaders("pool", |tick, w| if w == 2 { tick % 2 == 0 } else { (tick + w) % 10 == 0 });
    // 200 ticks; the sniffing's 180 go; 240 / 8 = 30 ticks of uploads stay: 6.7x (the busiest
    // worker's 100 would say 2x).
    let gain = f.max_speedup.unwrap();
    assert!((gain - 200.0 / 30.0).abs() < 0.4, "{gain} {f:?}");
}

#[test]
fn a_join_read_as_one_merged_sample_ends_where_the_joined_thread_stopped() {
    // The main thread joins a worker; identical reads of the join are merged into samples of
    // ten ticks, the last of five. The worker's last read ends at 940 ms, inside the join's last
    // sample (900-950 ms), with no read of it at 949 ms: the path still goes to it there.
    let (dir, app) = write_app(
        "merged",
        "import threading\n\ndef work():\n    return crunch()\n\nt = threading.Thread(target=work)\nt.start()\nt.join()\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let join = ("Thread.join", &*format!("{LIB}/threading.py"), 1112);
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..94u64 {
        b.add(2, tick * 10, true, &[worker, ("work", &app, 4)]);
    }
    for start in (0..100u64).step_by(10) {
        b.add(1, start * 10, false, &[("<module>", &app, 8), join]);
        b.p.samples.last_mut().unwrap().weight = if start == 90 { 5 } else { 10 };
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = d.findings.iter().find(|f| f.line == 4).unwrap();
    assert_eq!(f.gain_basis, GainBasis::CriticalPath, "{f:?}");
    // 950 ms end to end; the work's 940 ms go, 10 ms of the join stay (a tick at least): 95x.
    // Stopping at the merged sample's start instead would leave 50 ms: 19x.
    let gain = f.max_speedup.unwrap();
    assert!(gain > 60.0, "{gain} {f:?}");
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

#[test]
fn a_client_waiting_on_a_server_thread_of_its_own_program_gains_by_the_servers_work() {
    // The client sends a request and waits for the reply (80% of the ticks) while a server
    // thread of the same program hashes; the server waits for the next request while the
    // client works. Each round trip is shorter than a tick: only the overlap tells who serves.
    let (dir, app) = write_app(
        "client-server",
        "import hashlib, http.client\n\ndef main(conn):\n    for i in range(200):\n        resp = conn.getresponse()\n        rows.append(resp.read())\n\ndef do_GET(self):\n    key = self.headers['key']\n    self.check(key)\n    digest = hashlib.pbkdf2_hmac('sha256', key, SALT, 100_000)\n",
    );
    let socket = ("SocketIO.readinto", &*format!("{LIB}/socket.py"), 706);
    let serve = ("BaseServer.serve_forever", &*format!("{LIB}/socketserver.py"), 233);
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..300u64 {
        let client_waits = tick % 5 != 0;
        if client_waits {
            b.add(1, tick * 10, false, &[("<module>", &app, 20), ("main", &app, 5), socket]);
            b.add(2, tick * 10, true, &[serve, ("do_GET", &app, 11)]);
        } else {
            b.add(1, tick * 10, true, &[("<module>", &app, 20), ("main", &app, 6)]);
            b.add(2, tick * 10, false, &[serve]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let hashing = d.findings.iter().find(|f| f.line == 11).unwrap_or_else(|| panic!("{d:#?}"));
    assert_eq!(hashing.rank, 1, "{:?}", d.findings);
    assert!((hashing.max_speedup.unwrap() - 5.0).abs() < 0.3, "{hashing:?}");
    // The client's wait (reported at its loop) is the server's work: removing the wait
    // itself gains nothing.
    let wait =
        d.findings.iter().find(|f| f.kind == Kind::SerialIo).unwrap_or_else(|| {
            panic!("{:?}", d.findings.iter().map(|f| (f.line, f.kind, f.share)).collect::<Vec<_>>())
        });
    assert_eq!(wait.line, 4, "{wait:?}");
    assert!(wait.max_speedup.unwrap() < 1.1, "{wait:?}");
}

#[test]
fn a_caller_and_the_thread_it_hands_work_to_take_turns_faster_than_a_tick() {
    // The caller blocks for each reply from a runtime thread that builds a table per request;
    // a round trip takes a fraction of a tick, so the samples show both threads working at some
    // ticks and both waiting at others. Between them they use one thread's time: turns.
    let (dir, app) = write_app(
        "turns",
        "import socket\n\ndef main(sock):\n    for key in keys:\n        sock.sendall(key)\n        total += int(sock.recv(64))\n\ndef serve(conn):\n    while True:\n        key = conn.recv(64)\n        table = build_table()\n        conn.sendall(table[key])\n",
    );
    let recv = ("socket.recv", &*format!("{LIB}/socket.py"), 1);
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..300u64 {
        let (main_works, runtime_works) = match tick % 10 {
            0 => (true, true),
            1 => (false, false),
            _ => (false, true),
        };
        if main_works {
            b.add(1, tick * 10, true, &[("<module>", &app, 20), ("main", &app, 5)]);
        } else {
            b.add(1, tick * 10, false, &[("<module>", &app, 20), ("main", &app, 6), recv]);
        }
        if runtime_works {
            b.add(2, tick * 10, true, &[("serve", &app, 11)]);
        } else {
            b.add(2, tick * 10, false, &[("serve", &app, 10), recv]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let table = d.findings.iter().find(|f| f.line == 11).unwrap_or_else(|| panic!("{:?}", d.findings));
    assert_eq!(table.rank, 1, "{:?}", d.findings);
    assert!(table.max_speedup.unwrap() > 4.0, "{table:?}");
}

/// A producer whose per-item line is slow, a consumer that waits on the queue for each item.
/// `edge_line` is the consumer's line read at the edges of its wait (with no frame of the wait
/// beneath it), holding the GIL while the producer queues for it.
fn feeding_a_consumer(tag: &str, consumer_line: &str) -> Diagnosis {
    let (dir, app) = write_app(
        tag,
        &format!("import queue\n\ndef produce(q, texts):\n    for t in texts:\n        item = sorted(t.split())\n        q.put(item)\n\ndef consume(q):\n    while True:\n{consumer_line}\n        tally(item)\n"),
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let get = ("Queue.get", &*format!("{LIB}/queue.py"), 171);
    let wait = ("Condition.wait", &*format!("{LIB}/threading.py"), 327);
    let join = ("Thread.join", &*format!("{LIB}/threading.py"), 1112);
    let (holding, queuing) = (ThreadState::new(true, true), ThreadState::new(false, false).with_futex(true));
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..200u64 {
        b.add(1, tick * 10, false, &[("<module>", &app, 14), join]);
        let (producer, consumer, consumer_stack): (_, _, &[(&str, &str, u32)]) = match tick % 10 {
            // The consumer back from its wait, the producer queuing for the GIL behind it.
            3 => (queuing, holding, &[worker, ("consume", &app, 10)]),
            // The consumer's work on the item.
            7 => (queuing, holding, &[worker, ("consume", &app, 11)]),
            _ => (holding, queuing, &[worker, ("consume", &app, 10), get, wait]),
        };
        b.add_in(2, tick * 10, producer, &[worker, ("produce", &app, 5)]);
        b.add_in(3, tick * 10, consumer, consumer_stack);
    }
    b.add(3, 2000, true, &[worker, ("consume", &app, 11)]);
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    d
}

#[test]
fn reads_at_the_edges_of_a_wait_on_the_queue_are_the_wait_not_the_consumers_work() {
    let d = feeding_a_consumer("edges", "        item = q.get()");
    let f = d.findings.iter().find(|f| f.line == 5).unwrap();
    assert_eq!(f.gain_basis, GainBasis::CriticalPath, "{f:?}");
    // 201 ticks end to end. The producer's 160 ticks go, and with them its 20 ticks of queuing
    // behind the consumer's returns from the queue, which only a slow producer causes: the
    // consumer's 21 ticks of work stay, 9.6x. Taken for the consumer's work, the returns
    // would stay too: 201 / 41, 4.9x.
    let gain = f.max_speedup.unwrap();
    assert!((gain - 201.0 / 21.0).abs() < 0.5, "{gain} {f:?}");
    assert!(d.findings.iter().all(|f| f.line != 10), "{:?}", d.findings);
    assert!(d.hot_lines.iter().all(|h| h.line != 10 || h.self_share < 0.01), "{:?}", d.hot_lines);

    // A line that also calls something else may be doing that: its reads stay its own.
    let d = feeding_a_consumer("edges-call", "        item = decode(q.get())");
    let gain = d.findings.iter().find(|f| f.line == 5).unwrap().max_speedup.unwrap();
    assert!((gain - 201.0 / 41.0).abs() < 0.3, "{gain}");
    assert!(d.hot_lines.iter().any(|h| h.line == 10 && h.self_share > 0.09), "{:?}", d.hot_lines);
}

#[test]
fn pool_workers_sleeping_in_their_tasks_are_what_the_submitter_waits_for_not_background_timers() {
    // The main thread maps a fetch over a pool of 8 and parses each result; the fetch is a
    // sleep standing in for a remote call. The workers sleep nearly all the time, as a
    // watchdog does, but in tasks the main thread waits for: the parse overlaps them.
    let (dir, app) = write_app(
        "pool-sleep",
        "import time\nfrom concurrent.futures import ThreadPoolExecutor\n\ndef fetch(i):\n    time.sleep(0.02)\n    return i\n\nfor r in pool.map(fetch, range(400)):\n    total += parse(r)\n",
    );
    let threading = format!("{LIB}/threading.py");
    let futures = format!("{LIB}/concurrent/futures/thread.py");
    let base = format!("{LIB}/concurrent/futures/_base.py");
    let mut b = Builder::new();
    ended(&mut b);
    for tick in 0..200u64 {
        if tick % 5 == 0 {
            b.add(1, tick * 10, true, &[("<module>", &app, 9)]);
        } else {
            b.add(
                1,
                tick * 10,
                false,
                &[
                    ("<module>", &app, 8),
                    ("Executor.map.<locals>.result_iterator", &base, 621),
                    ("Future.result", &base, 451),
                ],
            );
        }
        for w in 2..10u64 {
            let task: &[(&str, &str, u32)] = &[
                ("Thread.run", &threading, 975),
                ("_worker", &futures, 83),
                ("_WorkItem.run", &futures, 58),
                ("fetch", &app, 5),
            ];
            b.add(w, tick * 10, false, task);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    // The fetches are the run: rank 1, on the path. The parse overlaps them and gains nothing
    // (taken for the only working thread's, its 40 ticks would be all of the busy time).
    let fetch = &d.findings[0];
    assert_eq!((fetch.line, fetch.gain_basis), (5, GainBasis::CriticalPath), "{:?}", d.findings);
    assert!(d.findings.iter().all(|f| f.line != 9 || f.max_speedup.unwrap() < 1.1), "{:?}", d.findings);
}

#[test]
fn a_program_waiting_on_a_process_pool_it_was_not_recorded_with_is_told_how_to_see_it() {
    let (dir, app) = write_app(
        "process-pool",
        "from multiprocessing import Pool\n\ndef work(i):\n    return digest(i)\n\nwith Pool(2) as pool:\n    total = sum(pool.map(work, range(600)))\n",
    );
    let pool = format!("{LIB}/multiprocessing/pool.py");
    let threading = format!("{LIB}/threading.py");
    let waiting: &[(&str, &str, u32)] = &[
        ("<module>", &app, 7),
        ("Pool.map", &pool, 367),
        ("ApplyResult.get", &pool, 768),
        ("Event.wait", &threading, 629),
        ("Condition.wait", &threading, 327),
    ];
    let starting: &[(&str, &str, u32)] = &[("<module>", &app, 6)];
    let run = |children: bool| {
        let mut b = Builder::new();
        ended(&mut b);
        for tick in 0..100u64 {
            b.add(1, tick * 10, tick < 5, if tick < 5 { starting } else { waiting });
        }
        if children {
            // A worker process sampled too (--subprocesses): its work is there to be named.
            let t = b.p.intern_thread(2, 2, None);
            let frames = [b.p.intern_frame(Frame::python("work", &app, 4))];
            let stack = b.p.intern_stack(frames.to_vec());
            for tick in 0..100u64 {
                b.p.samples.push(Sample {
                    time_us: tick * 10_000,
                    thread: t,
                    stack,
                    state: ThreadState::new(true, true),
                    weight: 1,
                });
            }
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (alone, with_children) = (run(false), run(true));
    std::fs::remove_dir_all(&dir).unwrap();
    let said = |d: &Diagnosis| d.notes.iter().any(|n| n.contains("record without --no-subprocesses"));
    assert!(said(&alone), "{:?}", alone.notes);
    assert!(alone.notes.iter().any(|n| matches!(n, Note::ChildProcesses { percent } if (percent - 95.0).abs() < 1e-9)));
    assert!(!said(&with_children), "{:?}", with_children.notes);
}

#[test]
fn a_wait_for_a_queues_mutex_is_a_lock_wait_not_work_of_the_thread_running_meanwhile() {
    // The consumer's `q.get()` blocks on the queue's mutex (`with self.not_empty:`, the
    // condition's `__enter__`) while the producer works: a wait for another thread, not I/O.
    let (dir, app) = write_app(
        "queue-mutex",
        "import queue\n\ndef produce(q, texts):\n    for t in texts:\n        item = sorted(t.split())\n        q.put(item)\n\ndef consume(q):\n    while True:\n        item = q.get()\n        tally(item)\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let get = ("Queue.get", &*format!("{LIB}/queue.py"), 165);
    let enter = ("Condition.__enter__", &*format!("{LIB}/threading.py"), 272);
    let mut b = Builder::new();
    for tick in 0..100u64 {
        b.add(2, tick * 10, true, &[worker, ("produce", &app, 5)]);
        if tick % 4 == 0 {
            b.add(3, tick * 10, false, &[worker, ("consume", &app, 10), get, enter]);
        } else {
            b.add(3, tick * 10, true, &[worker, ("consume", &app, 11)]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let kind_at = |line: u32| d.findings.iter().find(|f| f.line == line).map(|f| f.kind.as_str().to_owned());
    // Waiting for a lock, not for I/O (which would be a blocking wait)...
    assert_eq!(kind_at(10).as_deref(), Some("lock-contention"), "{:?}", d.findings);
    // ...held inside the queue by whichever thread is in it: the producer's line, working
    // meanwhile, is not work under that lock.
    assert_eq!(kind_at(5).as_deref(), Some("hot-call"), "{:?}", d.findings);
    let at = |line: u32| d.hot_lines.iter().find(|h| h.line == line).map_or(0.0, |h| h.share);
    assert!((at(5) - 0.5).abs() < 1e-9, "{:?}", d.hot_lines);
}
