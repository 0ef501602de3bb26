//! The built-in rules and the knowledge base on realistic stacks: locks and what their holder
//! does, network waits one at a time or overlapping, the CPU cap on a bound, loop conditions,
//! native waits that are idle.

use super::*;

/// Four threads on one lock: one renders under it, three wait for it, for a second.
fn contended_lock(tag: &str) -> (std::path::PathBuf, Builder) {
    let (dir, app) = write_app(
        tag,
        "import threading\nlock = threading.Lock()\n\ndef thumb(key):\n    with lock:\n        if key not in cache:\n            cache[key] = render(key)\n        return cache[key]\n\ndef render(key):\n    return digest(key)\n",
    );
    let mut b = Builder::new();
    for tick in 0..100 {
        b.add(
            1,
            tick * 10,
            true,
            &[("worker", &format!("{LIB}/threading.py"), 975), ("thumb", &app, 7), ("render", &app, 11)],
        );
        for tid in 2..5 {
            b.add(tid, tick * 10, false, &[("worker", &format!("{LIB}/threading.py"), 975), ("thumb", &app, 5)]);
        }
    }
    (dir, b)
}

#[test]
fn a_lock_taken_in_two_places_charges_the_waits_at_one_to_the_holder_inside_the_other() {
    // A cache's lock: `put` rebuilds an index under it, `get` waits for it.
    let (dir, app) = write_app(
        "two-places",
        "import threading\nlock = threading.Lock()\n\ndef put(key, v):\n    with lock:\n        cache[key] = v\n        rebuild_index()\n\ndef get(key):\n    with lock:\n        return cache.get(key)\n\ndef rebuild_index():\n    return sorted(cache)\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let record = |seen_every: u64| {
        let mut b = Builder::new();
        for tick in 0..100 {
            // At the other ticks the holder is between two statements, read at its `with` line.
            if tick % seen_every == 0 {
                b.add(1, tick * 10, true, &[worker, ("put", &app, 7), ("rebuild_index", &app, 14)]);
            } else {
                b.add(1, tick * 10, true, &[worker, ("put", &app, 5)]);
            }
            for tid in 2..5 {
                b.add(tid, tick * 10, false, &[worker, ("get", &app, 10)]);
            }
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (d, rare) = (record(1), record(10));
    std::fs::remove_dir_all(&dir).unwrap();
    // Seen too seldom for the waits to move, the lock's line still says what its holder does,
    // inside the other place.
    let wait = rare.findings.iter().find(|f| f.line == 10).unwrap();
    assert!(wait.why.contains("the holder spends") && wait.why.contains("app.py:14"), "{}", wait.why);
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("lock-contention", 14), "{f:?}");
    assert!((f.share - 1.0).abs() < 1e-9, "{f:?}");
    assert!(f.why.contains("other threads wait for that lock at app.py:10 `with lock:` meanwhile: 75%"), "{}", f.why);
    // The work runs under the lock `put` takes: that is where it must move out of.
    assert!(f.advice.starts_with("move this work out of the lock taken at app.py:5 `with lock:`"), "{}", f.advice);
    assert!(d.findings.iter().all(|f| f.line != 10), "{:?}", d.findings);
}

#[test]
fn a_contended_lock_is_charged_to_what_its_holder_does_meanwhile() {
    let (dir, b) = contended_lock("held");
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    // The three waiters' time is the holder's line's: the render under the lock, not the
    // `with lock:` line that waits.
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("lock-contention", 11), "{f:?}");
    assert!((f.share - 1.0).abs() < 1e-9, "{f:?}");
    assert!(f.why.contains("other threads wait for that lock at app.py:5 `with lock:` meanwhile: 75%"), "{}", f.why);
    assert!(f.advice.starts_with("move this work out of the lock taken at app.py:5"), "{}", f.advice);
    assert_eq!(f.evidence[0].frame, "other threads waiting for the lock at app.py:5 `with lock:`", "{:?}", f.evidence);
    assert!((f.evidence[0].share - 0.75).abs() < 1e-9, "{:?}", f.evidence);
    assert!(d.findings.iter().all(|f| f.line != 5), "no wait is counted twice: {:?}", d.findings);
}

#[test]
fn waits_at_ticks_where_the_holder_was_not_read_are_charged_as_the_others() {
    let (dir, app) = write_app(
        "unseen-holder",
        "import threading\nlock = threading.Lock()\n\ndef thumb(key):\n    with lock:\n        if key not in cache:\n            cache[key] = render(key)\n        return cache[key]\n\ndef render(key):\n    return digest(key)\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let record = |seen_every: u64| {
        let mut b = Builder::new();
        for tick in 0..100 {
            // One tick in `seen_every` the holder is read inside the block; at the others it is
            // between two statements, read at the `with lock:` line like the waiters.
            if tick % seen_every == 0 {
                b.add(1, tick * 10, true, &[worker, ("thumb", &app, 7), ("render", &app, 11)]);
            } else {
                b.add(1, tick * 10, true, &[worker, ("thumb", &app, 5)]);
            }
            for tid in 2..5 {
                b.add(tid, tick * 10, false, &[worker, ("thumb", &app, 5)]);
            }
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (half, rare) = (record(2), record(10));
    std::fs::remove_dir_all(&dir).unwrap();
    // Seen at half the ticks: every wait goes to what the holder was seen doing.
    let f = &half.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("lock-contention", 11), "{f:?}");
    let waits = |d: &Diagnosis| d.hot_lines.iter().find(|h| h.line == 5).map_or(0.0, |h| h.blocked_share);
    assert!(waits(&half) < 1e-9, "no wait left at the lock: {:?}", half.hot_lines);
    // Seen at a tenth: too seldom to say what the holder does at the others; they stay.
    assert!(waits(&rare) > 0.5, "{:?}", rare.hot_lines);
}

#[test]
fn a_lock_whose_holder_cannot_be_told_stays_on_the_line_that_waits() {
    // Two threads run user code while three wait on a lock with no block the source shows:
    // which one holds it is not known, so nothing moves.
    let (dir, app) = write_app("no-holder", "import threading\nlock = threading.Lock()\n\ndef thumb(key):\n    lock.acquire()\n    log(key)\n\ndef render(key):\n    return digest(key)\n\ndef other():\n    return tally()\n");
    let mut b = Builder::new();
    for tick in 0..100 {
        let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
        b.add(1, tick * 10, true, &[worker, ("render", &app, 9)]);
        b.add(2, tick * 10, true, &[worker, ("other", &app, 12)]);
        for tid in 3..6 {
            b.add(tid, tick * 10, false, &[worker, ("thumb", &app, 5)]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("lock-contention", 5), "{f:?}");
    assert!((f.share - 0.6).abs() < 1e-9, "{f:?}");
}

#[test]
fn a_bound_is_capped_by_the_cpus_the_remaining_work_needs() {
    // Three threads wait for replies while one computes, for a second.
    let (dir, app) = write_app(
        "cpu-cap",
        "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef thumb(key):\n    cache[key] = render(key)\n\n\ndef render(key):\n    return digest(key)\n",
    );
    let mut b = Builder::new();
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    for tick in 0..100 {
        b.add(1, tick * 10, true, &[worker, ("thumb", &app, 7), ("render", &app, 11)]);
        for tid in 2..5 {
            let (api, socket) = (format!("{SITE}/requests/api.py"), format!("{LIB}/socket.py"));
            b.add(tid, tick * 10, false, &[worker, ("fetch", &app, 4), ("get", &api, 73), ("readinto", &socket, 706)]);
        }
    }
    let bound = |cpus: Option<u32>| {
        let user = UserCode::new([dir.to_str().unwrap()], Some(dir.as_path()));
        let d = diagnose(&b.p, &KnowledgeBase::builtin(), &user, &Options { cpus, ..Options::default() });
        let f = d.findings.iter().find(|f| f.line == 4).unwrap().clone();
        assert_eq!(f.gain_basis, GainBasis::BusyShare, "a run not seen to its end has no critical path");
        (f.max_speedup.unwrap(), f.why)
    };
    // Amdahl alone: the waits are three quarters of the busy time.
    let (amdahl, _) = bound(None);
    assert!((amdahl - 4.0).abs() < 0.05, "{amdahl}");
    assert_eq!(bound(Some(8)).0, amdahl, "eight CPUs run the remaining second of CPU work in time");
    // Two CPUs: the second of computing that stays takes half the stretch at best.
    let (capped, why) = bound(Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!((capped - 1.98).abs() < 0.05, "{capped}");
    assert!(why.contains("on the machine's 2 CPUs"), "{why}");
}

#[test]
fn network_waits_one_at_a_time_are_serial_and_overlapping_ones_are_not() {
    let (dir, app) = write_app("inflight", "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    for u in urls:\n        pool.submit(fetch, u)\n");
    let wait = |b: &mut Builder, tid: u64, ms: u64| {
        b.add(
            tid,
            ms,
            false,
            &[
                ("main", &app, 8),
                ("fetch", &app, 4),
                ("get", &format!("{SITE}/requests/api.py"), 73),
                ("readinto", &format!("{LIB}/socket.py"), 706),
            ],
        );
    };
    // One thread: a wait at every tick, and a little work between requests.
    let mut serial = Builder::new();
    for tick in 0..300 {
        if tick % 5 == 4 {
            serial.add(1, tick * 10, true, &[("main", &app, 8), ("fetch", &app, 4)]);
        } else {
            wait(&mut serial, 1, tick * 10);
        }
    }
    // Four threads waiting at once, each now and then.
    let mut overlapping = Builder::new();
    for tick in 0..300 {
        for tid in 1..=4 {
            if (tick + tid) % 5 != 0 {
                wait(&mut overlapping, tid, tick * 10);
            }
        }
    }
    let (s, o) = (serial.diagnose(dir.to_str().unwrap()), overlapping.diagnose(dir.to_str().unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &s.findings[0];
    assert_eq!((f.kind.as_str(), f.rule.as_str(), f.line), ("serial-io", "network-wait", 7), "{f:?}");
    assert!(f.why.contains("one wait in flight at a time (mean 0.8 over 50 ms windows, at most 0.8)"), "{}", f.why);
    assert!(f.evidence.iter().all(|e| !e.frame.contains("in flight")), "a statistic is no frame: {:?}", f.evidence);
    let f = &o.findings[0];
    assert_eq!(
        (f.kind.as_str(), f.rule.as_str(), f.line),
        ("blocking-wait", "network-wait-concurrent", 4),
        "the waiting call, not the loop: {f:?}"
    );
    assert!(
        f.why.starts_with("3.2 waits are in flight at once here (mean over 50 ms windows, at most 3.2)"),
        "{}",
        f.why
    );
    assert!(o.findings.iter().all(|f| f.kind != "serial-io"), "{:?}", o.findings);
}

#[test]
fn late_ticks_of_one_thread_are_still_one_wait_in_flight() {
    let (dir, app) = write_app("late-ticks", "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    for u in urls:\n        fetch(u)\n");
    let mut b = Builder::new();
    // A loaded machine: the sampler reads every 100 ms instead of every 10, and each read
    // weighs the 10 intervals it stands for, so every other 50 ms window gets two windows'
    // worth of one thread's wait.
    for tick in 0..60u64 {
        b.add(
            1,
            tick * 100,
            false,
            &[
                ("main", &app, 8),
                ("fetch", &app, 4),
                ("get", &format!("{SITE}/requests/api.py"), 73),
                ("readinto", &format!("{LIB}/socket.py"), 706),
            ],
        );
        b.p.samples.last_mut().unwrap().weight = 10;
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("serial-io", 7), "{f:?}");
    assert!(f.why.contains("(mean 1.0 over 50 ms windows, at most 1.0)"), "{}", f.why);
}

/// A stack of native frames (outermost first) of the program `/app/server`.
fn native(p: &mut Profile, stack: &[(&str, &str, u32)]) -> Option<StackId> {
    let ids: Vec<FrameId> = stack
        .iter()
        .map(|&(f, file, line)| {
            p.intern_frame(Frame { file: file.to_owned(), line, ..Frame::native(f, "/app/server") })
        })
        .collect();
    p.intern_stack(ids)
}

#[test]
fn a_bound_called_in_a_loop_condition_is_quadratic_work_to_hoist() {
    let dir = std::env::temp_dir().join(format!("onefix-strlen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let app = dir.join("count.c");
    std::fs::write(&app, "size_t count(const char *s) {\n    size_t n = 0;\n    for (size_t i = 0; i < strlen(s); i++) {\n        n += s[i] == ',';\n    }\n    return n;\n}\n").unwrap();
    let app = app.to_str().unwrap().to_owned();
    let mut b = Builder::new();
    for tick in 0..100u64 {
        let stack = native(&mut b.p, &[("_start", "", 0), ("count", &app, 3), ("__strlen_avx2", "strlen-avx2.S", 76)]);
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
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.rule.as_str(), f.line), ("hot-loop-compute", "call-in-loop-condition", 3), "{f:?}");
    assert!(f.why.contains("strlen"), "the call is named as people write it: {}", f.why);
    assert!(f.advice.starts_with("compute it once before the loop"), "{}", f.advice);
}

#[test]
fn native_waits_for_others_and_the_go_runtime_are_idle() {
    let (dir, app) = write_app("native-idle", "package main\n\nfunc main() {\n\twg.Wait()\n\twork()\n}\n");
    let mut b = Builder::new();
    for tick in 0..200u64 {
        let joined = native(
            &mut b.p,
            &[
                ("runtime.main", "/usr/lib/go-1.19/src/runtime/proc.go", 250),
                ("main.main", &app, 4),
                ("sync.(*WaitGroup).Wait", "/usr/lib/go-1.19/src/sync/waitgroup.go", 136),
                ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
            ],
        );
        let parked = native(
            &mut b.p,
            &[
                ("runtime.goexit", "/usr/lib/go-1.19/src/runtime/asm_amd64.s", 1594),
                ("runtime.bgsweep", "/usr/lib/go-1.19/src/runtime/mgcsweep.go", 278),
                ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
            ],
        );
        let working =
            native(&mut b.p, &[("runtime.main", "/usr/lib/go-1.19/src/runtime/proc.go", 250), ("main.main", &app, 5)]);
        // A kept-alive connection's read loop: parked under a network read nobody waits for.
        let read_loop = native(
            &mut b.p,
            &[
                ("runtime.goexit", "/usr/lib/go-1.19/src/runtime/asm_amd64.s", 1594),
                ("net/http.(*persistConn).readLoop", "/usr/lib/go-1.19/src/net/http/transport.go", 2093),
                ("net.(*conn).Read", "/usr/lib/go-1.19/src/net/net.go", 183),
                ("runtime.gopark", "/usr/lib/go-1.19/src/runtime/proc.go", 364),
            ],
        );
        for (tid, stack, active) in [(1, joined, false), (2, parked, false), (3, working, true), (4, read_loop, false)]
        {
            let thread = b.p.intern_thread(1, tid, None);
            b.p.samples.push(Sample {
                time_us: tick * 10_000,
                thread,
                stack,
                state: ThreadState::new(active, active),
                weight: 1,
            });
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((d.busy_weight, d.idle_weight), (200, 600), "{:?}", d.findings);
    assert_eq!(d.findings.len(), 1);
    assert_eq!(d.findings[0].line, 5);
}

#[test]
fn native_servers_waiting_for_connections_and_joins_through_glibc_are_idle() {
    let (dir, app) = write_app("native-server", "int main() {\n  serve();\n  join();\n  work();\n}\n");
    let mut b = Builder::new();
    for tick in 0..200u64 {
        // C: the line calls accept(); a join whose pthread_join frame glibc tail-called away;
        // Rust's standard library as v0 mangling names it; Go's http.Server in a goroutine.
        let accept = native(&mut b.p, &[("_start", "", 0), ("main", &app, 2), ("accept4", "accept4.c", 31)]);
        let join = native(
            &mut b.p,
            &[
                ("_start", "", 0),
                ("main", &app, 3),
                ("__pthread_clockjoin_ex", "pthread_join_common.c", 102),
                ("__futex_abstimed_wait_common", "futex-internal.c", 87),
            ],
        );
        let rust = native(
            &mut b.p,
            &[
                ("_start", "", 0),
                ("main", &app, 2),
                ("<std::net::tcp::Incoming as core::iter::traits::iterator::Iterator>::next", "tcp.rs", 1041),
                ("<std::net::tcp::TcpListener>::accept", "tcp.rs", 844),
                ("accept4", "accept4.c", 31),
            ],
        );
        let go = native(
            &mut b.p,
            &[
                ("runtime.goexit", "asm_amd64.s", 1594),
                ("main.main.func2", &app, 2),
                ("net/http.(*Server).Serve", "server.go", 3070),
                ("net.(*TCPListener).Accept", "tcpsock.go", 288),
                ("runtime.gopark", "proc.go", 364),
            ],
        );
        let working = native(&mut b.p, &[("_start", "", 0), ("main", &app, 4)]);
        for (tid, stack, active) in
            [(1, accept, false), (2, join, false), (3, rust, false), (4, go, false), (5, working, true)]
        {
            let thread = b.p.intern_thread(1, tid, None);
            b.p.samples.push(Sample {
                time_us: tick * 10_000,
                thread,
                stack,
                state: ThreadState::new(active, active),
                weight: 1,
            });
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((d.busy_weight, d.idle_weight), (200, 800), "{:?}", d.findings);
    assert_eq!(d.findings.iter().map(|f| f.line).collect::<Vec<_>>(), [4]);
}

#[test]
fn a_thread_that_only_sleeps_beside_working_ones_is_a_background_timer() {
    let (dir, app) = write_app("timer", "import time\n\ndef work():\n    while True:\n        crunch()\n\ndef watchdog():\n    while True:\n        time.sleep(1)\n");
    // time.sleep is C: no frame of its own, the call is read off the line.
    let mut b = Builder::new();
    for tick in 0..200u64 {
        b.add(1, tick * 10, true, &[("work", &app, 5)]);
        b.add(2, tick * 10, false, &[("watchdog", &app, 9)]);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    assert_eq!((d.busy_weight, d.idle_weight), (200, 200), "{:?}", d.findings);
    assert!(d.findings.iter().all(|f| f.line != 9), "{:?}", d.findings);
    // Alone, a thread that mostly sleeps is the program waiting on the clock: a cost.
    let mut alone = Builder::new();
    for tick in 0..200u64 {
        if tick % 20 == 0 {
            alone.add(1, tick * 10, true, &[("work", &app, 5)]);
        } else {
            alone.add(1, tick * 10, false, &[("watchdog", &app, 9)]);
        }
    }
    let d = alone.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(d.findings[0].line, 9, "{:?}", d.findings);
}

#[test]
fn a_program_that_only_waits_is_told_where_it_waits() {
    let (dir, app) = write_app("all-idle", "def writer(q):\n    while True:\n        item = q.get()\n\ndef producer(done):\n    while not done.wait(0.02):\n        pass\n");
    let mut b = Builder::new();
    for tick in 0..200u64 {
        b.add(1, tick * 10, false, &[("writer", &app, 3), ("Queue.get", &format!("{LIB}/queue.py"), 171)]);
        b.add(2, tick * 10, false, &[("producer", &app, 6), ("Event.wait", &format!("{LIB}/threading.py"), 629)]);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    let places = d
        .notes
        .iter()
        .find_map(|n| match n {
            Note::StalledAt { places, .. } => Some(places),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{:?}", d.notes));
    assert!(places.contains("app.py:3") && places.contains("app.py:6 `while not done.wait(0.02):`"), "{places}");
}

#[test]
fn too_few_samples_make_no_finding() {
    let mut b = Builder::new();
    for ms in 0..3 {
        b.add(1, ms * 10, true, &[("f", "/app/x.py", 2)]);
    }
    assert!(b.diagnose("/app").findings.is_empty());
}

#[test]
fn serial_calls_counted_where_the_thread_ran_bound_the_gain_by_the_slowest() {
    let (dir, app) = write_app(
        "span",
        "import requests\n\ndef fetch(url):\n    return requests.get(url).json()\n\ndef main(urls):\n    for u in urls:\n        fetch(u)\n",
    );
    let (api, socket) = (format!("{SITE}/requests/api.py"), format!("{LIB}/socket.py"));
    let stack = [("main", &*app, 8), ("fetch", &*app, 4), ("get", &*api, 73), ("readinto", &*socket, 706)];
    // 12 calls back to back, the first 20 ticks and the others 10, with 10 ticks of work
    // before them: the thread runs between the calls, unseen by the stack.
    let record = |read: bool| {
        let mut b = Builder::new();
        b.p.meta.exit = Some(onefix_model::TargetExit::Code(0));
        b.p.meta.target.pid = 1;
        let mut tick = 0u64;
        for _ in 0..10 {
            b.add(1, tick * 10, true, &[("main", &app, 9)]);
            tick += 1;
        }
        for call in 0..12 {
            for k in 0..if call == 0 { 20 } else { 10 } {
                let same = (k > 0 || call > 0).then_some(k > 0);
                let state = ThreadState::new(false, false).with_same_wait(if read { same } else { None });
                b.add_in(1, tick * 10, state, &stack);
                tick += 1;
            }
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (counted, unread) = (record(true), record(false));
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &counted.findings[0];
    assert_eq!((f.kind.as_str(), f.line, f.gain_basis), ("serial-io", 7, GainBasis::WorkSpan), "{f:?}");
    // 130 ticks of waits in a run of 140: overlapped, the 20-tick call and the 10 of work stay.
    let bound = f.max_speedup.unwrap();
    assert!((bound - 140.0 / 30.0).abs() < 1e-6, "{bound} {}", f.why);
    assert!(f.why.contains("12 separate waits were seen (a call whose reply comes in pieces may be two), the slowest 200 ms, 1.30 s in all"), "{}", f.why);
    assert!(f.why.contains("0.30 s of its 1.40 s"), "{}", f.why);
    // Without the run counts the calls cannot be told apart: no work/span bound.
    let f = &unread.findings[0];
    assert_ne!(f.gain_basis, GainBasis::WorkSpan, "{f:?}");
    assert!(!f.why.contains("waits were seen"), "{}", f.why);
}

#[test]
fn a_set_up_paid_at_its_first_use_has_no_bound_from_python_samples() {
    let (dir, app) = write_app(
        "lazy",
        "import sqlite3\n\ndef lookup(path, i):\n    conn = sqlite3.connect(path)\n    row = conn.execute(\"SELECT 1\").fetchone()\n    conn.close()\n    return row\n\nfor i in range(9):\n    lookup(\"x.db\", i)\n",
    );
    let mut b = Builder::new();
    for tick in 0..300u64 {
        let line = match tick % 10 {
            0..=3 => 4,
            4..=8 => 5,
            _ => 10,
        };
        let stack: Vec<(&str, &str, u32)> = if line == 10 {
            vec![("<module>", &app, 10)]
        } else {
            vec![("<module>", &app, 10), ("lookup", &app, line)]
        };
        b.add(1, tick * 10, true, &stack);
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!((f.kind.as_str(), f.line), ("new-connection-per-request", 4), "{f:?}");
    assert!(f.evidence.iter().any(|e| e.frame.ends_with("(first use)")), "{:?}", f.evidence);
    // The query's own work stays once the connection is reused: the first use's share is no
    // cost that goes away, so neither it nor the set-up's bound with it is given.
    assert_eq!(f.max_speedup, None, "{f:?}");
    assert!(f.no_bound.as_deref().is_some_and(|w| w.contains("first use on line 5")), "{f:?}");
}

#[test]
fn a_native_lock_wait_goes_to_the_thread_the_kernel_saw_wake_it() {
    // Thread 1 waits for a mutex taken through a helper (no block to read in the source) while
    // threads 2 and 3 both work: who holds the lock cannot be told from the samples alone.
    // The kernel's wake-ups say thread 2 released it each time.
    let (dir, app) = write_app(
        "native-waker",
        "void put(struct t *t) {\n    lock_table(t);\n}\nvoid rebuild(void) {\n    for (;;) step();\n}\nvoid parse(void) {\n    for (;;) scan();\n}\n",
    );
    let build = |wakes: bool| {
        let mut b = Builder::new();
        let waiting = native(
            &mut b.p,
            &[
                ("put", &app, 2),
                ("lock_table", "/app/lock.h", 9),
                ("___pthread_mutex_lock", "pthread_mutex_lock.c", 93),
            ],
        );
        let rebuilding = native(&mut b.p, &[("rebuild", &app, 5)]);
        let parsing = native(&mut b.p, &[("parse", &app, 8)]);
        let mut edges = Vec::new();
        for tick in 0..200u64 {
            for (tid, stack, active) in [(1, waiting, false), (2, rebuilding, true), (3, parsing, true)] {
                let thread = b.p.intern_thread(1, tid, None);
                b.p.samples.push(Sample {
                    time_us: tick * 10_000,
                    thread,
                    stack,
                    state: ThreadState::new(active, false).with_same_wait(Some(tick % 4 != 0)),
                    weight: 1,
                });
            }
            // Each wait lasts four ticks and is ended by thread 2.
            if tick % 4 == 0 {
                edges.push(onefix_model::attachments::WakeEdge {
                    thread: 0,
                    from_us: tick * 10_000,
                    to_us: (tick + 4) * 10_000,
                    waker: 1,
                });
            }
        }
        if wakes {
            b.p.attach(onefix_model::attachments::WAKES, &onefix_model::attachments::Wakes { edges });
        }
        b.diagnose(dir.to_str().unwrap())
    };
    let (with, without) = (build(true), build(false));
    std::fs::remove_dir_all(&dir).unwrap();
    let rebuild = with.findings.iter().find(|f| f.line == 5).unwrap_or_else(|| panic!("{:?}", with.findings));
    assert_eq!(rebuild.rank, 1, "{:?}", with.findings);
    assert!(
        rebuild.evidence.iter().any(|e| e.frame.starts_with("other threads waiting for the lock at")),
        "{rebuild:?}"
    );
    assert!(with.findings.iter().all(|f| f.line != 2), "the wait is charged, not left: {:?}", with.findings);
    let parse = with.findings.iter().find(|f| f.line == 8).unwrap();
    assert!(parse.evidence.iter().all(|e| !e.frame.contains("waiting for the lock")), "{parse:?}");
    // Without them, two threads work at every tick: no guess, the wait stays where it is.
    assert!(without.findings.iter().any(|f| f.line == 2 && f.kind == "lock-contention"), "{:?}", without.findings);
}

#[test]
fn an_open_loop_load_says_whether_the_server_kept_up_and_what_a_gain_means_there() {
    let with_load = |json: &str| {
        let mut b = Builder::new();
        for tick in 0..100u64 {
            b.add(1, tick * 10, true, &[("handle", "/app/server.py", 12)]);
        }
        b.p.attachments.insert(onefix_model::attachments::LOAD.to_owned(), json.as_bytes().to_vec());
        b.diagnose("/app").notes.iter().map(|n| n.to_string()).find(|n| n.starts_with("the load asked"))
    };
    let kept_up = with_load(r#"{"mode":"open","target_rps":80.0,"achieved_rps":79.6,"scheduled":400,"unsent":0}"#);
    assert!(
        kept_up.as_deref().is_some_and(|n| n.contains("served them all") && n.contains("throughput stays")),
        "{kept_up:?}"
    );
    let behind = with_load(r#"{"mode":"open","target_rps":80.0,"achieved_rps":61.0,"scheduled":400,"unsent":90}"#);
    assert!(behind.as_deref().is_some_and(|n| n.contains("fell behind (61/s served)")), "{behind:?}");
    // A closed loop has no rate to keep up with; a profile with no load says nothing.
    assert_eq!(
        with_load(r#"{"mode":"closed","target_rps":null,"achieved_rps":300.0,"scheduled":900,"unsent":0}"#),
        None
    );
    assert_eq!(with_load("not json"), None);
}

/// A program onefix started ran its interpreter's start-up before the first sample: a user
/// timing it waits for that too, and a fix leaves it. 180 of 200 sampled ticks at one line
/// bound the gain at 10x over the samples; 20 ticks of start-up before them bring it to
/// 220 / 40 = 5.5x.
#[test]
fn a_started_programs_unsampled_start_up_stays_after_the_fix() {
    let record = |unsampled_us: Option<u64>| {
        let mut b = Builder::new();
        b.p.meta.exit = Some(onefix_model::TargetExit::Code(0));
        b.p.meta.target.pid = 1;
        for tick in 0..200u64 {
            let line = if tick % 10 == 9 { 5 } else { 4 };
            b.add(1, tick * 10, true, &[("<module>", "/app/job.py", 9), ("work", "/app/job.py", line)]);
        }
        if let Some(unsampled_us) = unsampled_us {
            b.p.attach(
                onefix_model::attachments::PROGRAM_START,
                &onefix_model::attachments::ProgramStart { unsampled_us },
            );
        }
        let d = b.diagnose("/app");
        (d.findings[0].line, d.findings[0].share, d.findings[0].max_speedup.unwrap())
    };
    let (line, share, bound) = record(None);
    assert_eq!(line, 4);
    assert!((share - 0.9).abs() < 1e-9 && (bound - 10.0).abs() < 0.01, "{share} {bound}");
    // The share is of the samples; only the bound counts the start-up.
    let (_, share, bound) = record(Some(200_000));
    assert!((share - 0.9).abs() < 1e-9 && (bound - 5.5).abs() < 0.01, "{share} {bound}");
}

#[test]
fn a_lock_holder_waiting_on_a_queue_inside_its_block_is_what_the_waiters_wait_for() {
    // The holder takes the next job from a queue while holding the lock: its queue wait is
    // parked, yet it is what the three threads at `with lock:` wait for.
    let (dir, app) = write_app(
        "parked-holder",
        "import threading\nlock = threading.Lock()\n\ndef step(jobs):\n    with lock:\n        job = jobs.get()\n        run(job)\n",
    );
    let worker = ("worker", &*format!("{LIB}/threading.py"), 975);
    let get = ("Queue.get", &*format!("{LIB}/queue.py"), 171);
    let wait = ("Condition.wait", &*format!("{LIB}/threading.py"), 327);
    let mut b = Builder::new();
    for tick in 0..100 {
        b.add(1, tick * 10, false, &[worker, ("step", &app, 6), get, wait]);
        for tid in 2..5 {
            b.add(tid, tick * 10, false, &[worker, ("step", &app, 5)]);
        }
    }
    let d = b.diagnose(dir.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let f = &d.findings[0];
    assert_eq!(f.line, 6, "{:?}", d.findings);
    assert!(f.why.contains("other threads wait for that lock at app.py:5"), "{}", f.why);
}
