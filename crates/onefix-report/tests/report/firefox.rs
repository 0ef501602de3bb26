//! The Firefox Profiler file of the hand-built recording: the numbers the profiler shows (each
//! thread's wall weight, CPU time, sample times) and the findings' markers, read back from the
//! processed format's tables.

use onefix_model::Mode;
use onefix_report::write_firefox;
use serde_json::Value;

use crate::fixture::{render, updater_diagnosis, updater_profile};

fn firefox(mode: Mode) -> Value {
    let out = render(|w| write_firefox(w, &updater_profile(), &updater_diagnosis(), mode));
    serde_json::from_str(&out).expect("the Firefox profile is JSON")
}

/// A thread by its tid (the profiler names a process's main thread after the process).
fn thread(profile: &Value, tid: u64) -> &Value {
    let threads = profile["threads"].as_array().unwrap();
    threads
        .iter()
        .find(|t| t["tid"].as_str() == Some(tid.to_string().as_str()))
        .unwrap_or_else(|| panic!("no thread {tid}"))
}

fn column(table: &Value, name: &str) -> Vec<f64> {
    table[name].as_array().unwrap().iter().map(|v| v.as_f64().unwrap_or(0.0)).collect()
}

#[test]
fn every_thread_keeps_its_wall_weight_and_cpu_time_in_time_order() {
    let p = firefox(Mode::Wall);
    assert_eq!(p["threads"].as_array().unwrap().len(), 3, "one thread per thread, the unnamed one too");
    let main = thread(&p, 4242);
    assert_eq!(main["isMainThread"], true);
    assert_eq!(main["processName"], "python3");
    assert_eq!(main["name"], "python3");
    assert_eq!(thread(&p, 4250)["name"], "ThreadPoolExecutor-0_0 (tid 4250)");
    assert_eq!(thread(&p, 4251)["name"], "thread 4251");
    let samples = &main["samples"];
    // 11 intervals on the main thread, of which 8 ran (the others were blocked in a send).
    assert_eq!(column(samples, "weight").iter().sum::<f64>(), 11.0);
    assert_eq!(column(samples, "threadCPUDelta").iter().sum::<f64>(), 80_000.0, "µs of CPU");
    // The sample carrying two intervals is placed at its last tick, 30 ms, with both in CPU time.
    let times: Vec<f64> = column(samples, "timeDeltas")
        .iter()
        .scan(0.0, |t, d| {
            *t += d;
            Some(*t)
        })
        .collect();
    assert_eq!(times, [0.0, 10.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0]);
    assert_eq!(column(samples, "threadCPUDelta")[2], 20_000.0);
    // The idle worker's 5 intervals are there, with no CPU time.
    let worker = &thread(&p, 4250)["samples"];
    assert_eq!(column(worker, "weight").iter().sum::<f64>(), 5.0);
    assert_eq!(column(worker, "threadCPUDelta").iter().sum::<f64>(), 0.0);
    // CPU mode keeps only the samples that ran.
    let cpu = firefox(Mode::Cpu);
    assert_eq!(column(&thread(&cpu, 4242)["samples"], "weight").iter().sum::<f64>(), 8.0);
}

#[test]
fn frames_name_their_line_and_library_and_are_coloured_by_the_threads_state() {
    let p = firefox(Mode::Wall);
    let main = thread(&p, 4242);
    let strings: Vec<&str> = main["stringArray"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(strings.contains(&"update_all (updater.py:31)"), "{strings:?}");
    assert!(strings.contains(&"SSL_CTX_load_verify_locations [libssl.so.3]"), "{strings:?}");
    let categories: Vec<&str> =
        p["meta"]["categories"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    let frames = &main["frameTable"];
    let used: Vec<&str> =
        frames["category"].as_array().unwrap().iter().map(|c| categories[c.as_u64().unwrap() as usize]).collect();
    // The fixture's running samples hold the GIL; its blocked ones wait on I/O.
    assert!(used.contains(&"Running, holding the GIL") && used.contains(&"Waiting (I/O, sleep, idle)"), "{used:?}");
}

#[test]
fn each_finding_marks_the_stretches_when_its_line_was_on_the_stack() {
    let p = firefox(Mode::Wall);
    let main = thread(&p, 4242);
    let markers = &main["markers"];
    let strings: Vec<&str> = main["stringArray"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let mut stretches: Vec<(String, f64, f64)> = (0..markers["length"].as_u64().unwrap() as usize)
        .map(|i| {
            let name = strings[markers["name"][i].as_u64().unwrap() as usize].to_owned();
            (name, markers["startTime"][i].as_f64().unwrap(), markers["endTime"][i].as_f64().unwrap())
        })
        .collect();
    stretches.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    // Line 31 (the client built per token) is on the stack at ticks 0-4 and 8-9; line 33 (the
    // serial POST) at 5-7 and 10.
    assert_eq!(
        stretches,
        [
            ("#1 repeated-setup at updater.py:31".to_owned(), 0.0, 50.0),
            ("#1 repeated-setup at updater.py:31".to_owned(), 80.0, 100.0),
            ("#2 serial-io at updater.py:33".to_owned(), 50.0, 80.0),
            ("#2 serial-io at updater.py:33".to_owned(), 100.0, 110.0),
        ]
    );
    assert_eq!(markers["data"][0]["type"], "onefix-finding");
    let schema = p["meta"]["markerSchema"].as_array().unwrap();
    assert!(schema.iter().any(|s| s["name"] == "onefix-finding"), "{schema:?}");
}
