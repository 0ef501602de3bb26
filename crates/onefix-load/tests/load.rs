//! The load generator against loopback servers started in the test (127.0.0.1, port 0).
//! Every run is bounded by a request count or a duration of a second or two.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onefix_load::{run, LoadConfig, LoadError, LoadResult};
use support::schema;

fn config(url: &str) -> LoadConfig {
    let mut cfg = LoadConfig::new(url);
    cfg.connections = 4;
    cfg.threads = 2;
    cfg.duration = None;
    cfg.timeout = Duration::from_secs(5);
    cfg
}

fn load(cfg: &LoadConfig) -> LoadResult {
    run(cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).expect("the load runs")
}

fn balanced(r: &LoadResult) {
    assert_eq!(r.sent, r.completed + r.errors.total + r.unfinished, "{r:#?}");
    let window_sent: u64 = r.windows.iter().map(|w| w.sent).sum();
    let window_completed: u64 = r.windows.iter().map(|w| w.completed).sum();
    assert_eq!(window_sent, r.sent);
    assert_eq!(window_completed, r.completed);
}

#[test]
fn closed_loop_sends_exactly_the_requests_asked_for() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/"));
    cfg.max_requests = Some(2000);
    let r = load(&cfg);
    assert_eq!(r.sent, 2000);
    assert_eq!(r.completed, 2000);
    assert_eq!(r.errors.total, 0);
    assert_eq!(server.requests.load(Ordering::Relaxed), 2000);
    // Keep-alive: one connection per client connection.
    assert!(server.connections.load(Ordering::Relaxed) <= 5, "{}", server.connections.load(Ordering::Relaxed));
    // Every one but the reachability check's is counted, once.
    assert_eq!(r.connections_opened, server.connections.load(Ordering::Relaxed) - 1);
    assert_eq!(r.status_codes.get("200"), Some(&2000));
    assert_eq!(r.mode, "closed");
    assert!(r.latency_ms.p50 > 0.0 && r.latency_ms.p50 <= r.latency_ms.p99 && r.latency_ms.p99 <= r.latency_ms.max);
    assert!(r.bytes_received > 2000 * 5 && r.bytes_sent > 2000 * 20);
    balanced(&r);
}

#[test]
fn open_loop_keeps_to_the_schedule() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/"));
    cfg.rate = Some(1000.0);
    cfg.duration = Some(Duration::from_millis(1500));
    let started = Instant::now();
    let r = load(&cfg);
    let took = started.elapsed();
    // 1,500 due times fall before the end: 0 ms, 1 ms, ... 1499 ms.
    assert_eq!(r.scheduled, 1500);
    assert_eq!(r.sent, 1500);
    assert_eq!(r.completed, 1500);
    assert_eq!(r.unsent, 0);
    assert!(took >= Duration::from_millis(1450) && took < Duration::from_secs(4), "{took:?}");
    assert!(r.achieved_rps > 900.0 && r.achieved_rps < 1010.0, "{}", r.achieved_rps);
    assert_eq!(r.windows.len(), 2);
    assert!(r.windows[0].rps > 800.0 && r.windows[0].rps < 1100.0, "{:?}", r.windows[0]);
    balanced(&r);
}

#[test]
fn open_loop_with_a_request_count_stops_at_the_count() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/"));
    cfg.rate = Some(2000.0);
    cfg.max_requests = Some(500);
    let started = Instant::now();
    let r = load(&cfg);
    assert_eq!(r.sent, 500);
    assert_eq!(server.requests.load(Ordering::Relaxed), 500);
    // The last is due at 249.5 ms.
    assert!(started.elapsed() >= Duration::from_millis(240), "{:?}", started.elapsed());
}

#[test]
fn latency_counts_from_the_due_time_when_the_server_stalls() {
    // Request 100 holds a lock every request needs for 200 ms: the whole server stalls once.
    let gate = Arc::new(tokio::sync::Mutex::new(()));
    let server = support::hyper_server(
        false,
        Arc::new(move |n, _| {
            let gate = gate.clone();
            Box::pin(async move {
                let _held = gate.lock().await;
                if n == 100 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                (200, "ok")
            })
        }),
    );
    let mut cfg = config(&server.url("/"));
    cfg.rate = Some(1000.0);
    cfg.max_requests = Some(1000);
    let r = load(&cfg);
    assert_eq!(r.completed, 1000);
    // About 200 requests were due during the stall: they waited, and their latency shows it.
    assert!(r.latency_ms.max >= 180.0, "{:?}", r.latency_ms);
    assert!(r.latency_ms.p99 >= 150.0, "{:?}", r.latency_ms);
    assert!(r.latency_ms.p90 >= 10.0, "{:?}", r.latency_ms);
    // Measured from the actual send, only the few requests caught in flight saw the stall.
    assert!(r.service_time_ms.max >= 150.0, "{:?}", r.service_time_ms);
    assert!(r.service_time_ms.p90 < r.latency_ms.p90 / 2.0, "{:?} {:?}", r.service_time_ms, r.latency_ms);
    assert!(r.service_time_ms.p99 < r.latency_ms.p99 / 2.0, "{:?} {:?}", r.service_time_ms, r.latency_ms);
}

#[test]
fn an_overloaded_open_loop_stops_at_the_end_and_counts_what_it_could_not_send() {
    // 2 connections, 20 ms a request: 100 requests/s at most, against 1,000 asked for.
    let server = support::hyper_server(
        false,
        Arc::new(|_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                (200, "slow")
            })
        }),
    );
    let mut cfg = config(&server.url("/"));
    cfg.connections = 2;
    cfg.rate = Some(1000.0);
    cfg.duration = Some(Duration::from_secs(1));
    let started = Instant::now();
    let r = load(&cfg);
    assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
    assert_eq!(r.scheduled, 1000);
    assert_eq!(r.sent + r.unsent, 1000);
    assert!(r.sent < 150 && r.unsent > 850, "{} {}", r.sent, r.unsent);
    // Those sent waited ever longer behind the ones before them.
    assert!(r.latency_ms.max > 700.0, "{:?}", r.latency_ms);
    assert!(r.service_time_ms.p99 < 100.0, "{:?}", r.service_time_ms);
    let text = onefix_load::summary::render(&r);
    assert!(text.contains("never sent: every connection was busy"), "{text}");
    balanced(&r);
}

#[test]
fn nothing_listening_is_one_sentence_quickly() {
    let addr = support::dead_port();
    let mut cfg = config(&format!("http://{addr}/"));
    cfg.max_requests = Some(10);
    let started = Instant::now();
    let err = run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap_err();
    assert!(matches!(err, LoadError::Unreachable(_)));
    assert_eq!(err.to_string(), format!("nothing is listening at {addr} (connection refused)"));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn invalid_input_is_one_sentence() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/x/{{int 9 1}}"));
    cfg.max_requests = Some(1);
    let e = run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("the range is empty (9 is above 1)"), "{e}");
    let mut cfg = config(&server.url("/"));
    cfg.max_requests = Some(1);
    cfg.rate = Some(-3.0);
    let e = run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("the rate must be a positive number"), "{e}");
    assert_eq!(server.requests.load(Ordering::Relaxed), 0);
}

#[test]
fn garbage_responses_are_protocol_errors() {
    let server = support::raw_server(true, |_| Some(b"SSH-2.0-OpenSSH_9.2\r\n\r\nnot http at all\r\n\r\n".to_vec()));
    let mut cfg = config(&format!("http://{}/", server.addr));
    cfg.max_requests = Some(50);
    let r = load(&cfg);
    assert_eq!(r.sent, 50);
    assert_eq!(r.completed, 0);
    assert_eq!(r.errors.protocol, 50, "{:?}", r.errors);
    balanced(&r);
}

#[test]
fn connections_closed_without_an_answer_are_counted_as_closed() {
    let server = support::raw_server(true, |_| Some(Vec::new()));
    let mut cfg = config(&format!("http://{}/", server.addr));
    cfg.max_requests = Some(20);
    let r = load(&cfg);
    assert_eq!(r.errors.closed, 20, "{:?}", r.errors);
}

#[test]
fn kept_alive_connections_the_server_closed_are_replaced_without_an_error() {
    // Answers as if keeping the connection alive, then closes it: what a server's idle timeout
    // does to a client's pooled connection.
    let server = support::raw_server(true, |_| Some(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()));
    let mut cfg = config(&format!("http://{}/", server.addr));
    cfg.max_requests = Some(100);
    let r = load(&cfg);
    assert_eq!(r.completed, 100, "{:?}", r.errors);
    assert_eq!(r.errors.total, 0);
    assert_eq!(r.connections_opened, 100, "each request paid for a new connection");
    let said = onefix_load::summary::render(&r);
    assert!(said.contains("100 opened for"), "{said}");
}

#[test]
fn bad_statuses_are_errors_by_code() {
    let server = support::hyper_server(
        false,
        Arc::new(|n, _| {
            Box::pin(async move {
                if n % 10 == 0 {
                    (503, "busy")
                } else {
                    (200, "ok")
                }
            })
        }),
    );
    let mut cfg = config(&server.url("/"));
    cfg.max_requests = Some(1000);
    let r = load(&cfg);
    assert_eq!(r.errors.status.get("503"), Some(&100));
    assert_eq!(r.errors.total, 100);
    assert_eq!(r.completed, 900);
    assert_eq!(r.status_codes.get("503"), Some(&100));
    assert_eq!(r.status_codes.get("200"), Some(&900));
}

#[test]
fn silent_servers_time_out() {
    let server = support::raw_server(false, |_| None);
    let mut cfg = config(&format!("http://{}/", server.addr));
    cfg.connections = 2;
    cfg.max_requests = Some(2);
    cfg.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let r = load(&cfg);
    assert_eq!(r.errors.timeout, 2, "{:?}", r.errors);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn chunked_and_close_delimited_bodies_are_read_to_the_end() {
    let chunked = support::raw_server(false, |_| {
        Some(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".to_vec())
    });
    let mut cfg = config(&format!("http://{}/", chunked.addr));
    cfg.max_requests = Some(300);
    let r = load(&cfg);
    assert_eq!(r.completed, 300, "{:?}", r.errors);

    let until_close = support::raw_server(true, |_| Some(b"HTTP/1.0 200 OK\r\n\r\nall of it".to_vec()));
    let mut cfg = config(&format!("http://{}/", until_close.addr));
    cfg.max_requests = Some(50);
    let r = load(&cfg);
    assert_eq!(r.completed, 50, "{:?}", r.errors);
}

#[test]
fn a_new_connection_per_request_when_asked() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/"));
    cfg.max_requests = Some(200);
    cfg.request.keep_alive = false;
    let r = load(&cfg);
    assert_eq!(r.completed, 200);
    assert!(!r.keep_alive);
    // One for the reachability check, one per request.
    assert_eq!(server.connections.load(Ordering::Relaxed), 201);
    assert_eq!(r.connections_opened, 200);
}

#[test]
fn templates_draw_from_seeded_pools_the_same_way_every_run() {
    let run_once = |seed: u64| -> BTreeMap<u64, String> {
        let server = support::hyper_server(true, Arc::new(|_, _| Box::pin(async { (200, "d14:intervali1800ee") })));
        let mut cfg = config(&server.url(
            "/announce?n={{seq}}&info_hash={{pick 20 bytes 20 urlencode}}&peer_id={{pick 10 bytes 20 urlencode}}&port={{int 1024 65535}}",
        ));
        cfg.request.seed = seed;
        cfg.max_requests = Some(600);
        let r = load(&cfg);
        assert_eq!(r.completed, 600);
        let paths = server.paths.lock().unwrap().clone();
        paths
            .into_iter()
            .map(|p| {
                let n: u64 = p.split("n=").nth(1).unwrap().split('&').next().unwrap().parse().unwrap();
                (n, p)
            })
            .collect()
    };
    let a = run_once(7);
    assert_eq!(a.len(), 600);
    let field =
        |p: &str, name: &str| p.split(&format!("{name}=")).nth(1).unwrap().split('&').next().unwrap().to_string();
    let hashes: HashSet<String> = a.values().map(|p| field(p, "info_hash")).collect();
    let peers: HashSet<String> = a.values().map(|p| field(p, "peer_id")).collect();
    assert_eq!(hashes.len(), 20);
    assert_eq!(peers.len(), 10);
    for p in a.values() {
        let port: u32 = field(p, "port").parse().unwrap();
        assert!((1024..=65535).contains(&port));
    }
    // Request n is the same whichever connection or thread sent it.
    assert_eq!(a, run_once(7));
    assert_ne!(a, run_once(8));
}

#[test]
fn the_json_result_matches_the_committed_schema() {
    let schema: serde_json::Value = serde_json::from_str(onefix_load::RESULT_SCHEMA).unwrap();
    let server = support::hyper_server(
        false,
        Arc::new(|n, _| {
            Box::pin(async move {
                if n % 50 == 0 {
                    (500, "no")
                } else {
                    (200, "ok")
                }
            })
        }),
    );
    let mut cfg = config(&server.url("/"));
    cfg.rate = Some(500.0);
    cfg.max_requests = Some(300);
    let result = load(&cfg);
    let value = serde_json::to_value(&result).unwrap();
    let mut errors = Vec::new();
    schema::validate(&schema, &value, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    // The keys the issue asks for, by name.
    for key in ["sent", "completed", "errors", "achieved_rps", "latency_ms"] {
        assert!(value.get(key).is_some(), "{key}");
    }
    for key in ["p50", "p90", "p99", "p999", "max", "mean", "stddev"] {
        assert!(value["latency_ms"][key].is_number(), "{key}");
    }
    // The histogram's buckets hold every completed request; plain HTTP has no TLS summary.
    let buckets = value["latency_histogram"].as_array().unwrap();
    assert_eq!(buckets.len(), onefix_load::stats::HISTOGRAM_BUCKETS);
    let in_buckets: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(in_buckets, result.completed);
    assert!(value["tls"].is_null());
    assert_eq!(value["protocol"], "HTTP/1.1");
    // A result read back is the same result.
    let back: LoadResult = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(back, result);
    // The checker is not blind: a missing key and a wrong type are caught.
    let mut broken = value.clone();
    broken.as_object_mut().unwrap().remove("achieved_rps");
    broken["sent"] = serde_json::json!("many");
    let mut errors = Vec::new();
    schema::validate(&schema, &broken, "$", &mut errors);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

#[test]
fn an_interrupted_run_reports_what_it_did() {
    let server = support::ok_server();
    let mut cfg = config(&server.url("/"));
    cfg.rate = Some(200.0);
    cfg.duration = Some(Duration::from_secs(30));
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let started = Instant::now();
    let mut windows = 0;
    let r = run(&cfg, stop, &mut |_| {
        windows += 1;
        s.store(true, Ordering::Relaxed);
    })
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(windows >= 1);
    assert!(r.completed >= 150 && r.completed < 600, "{}", r.completed);
    assert!(r.scheduled < 600, "{}", r.scheduled);
    balanced(&r);
}

#[test]
fn the_unloaded_probe_sends_one_request_at_a_time_and_measures_their_latency() {
    // Each request takes 2 ms; two in flight at once would show in `most_at_once`.
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most_at_once = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (now, most) = (in_flight.clone(), most_at_once.clone());
    let server = support::hyper_server(
        false,
        Arc::new(move |_, _| {
            let (now, most) = (now.clone(), most.clone());
            Box::pin(async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                (200, "ok")
            })
        }),
    );
    // The load it precedes: 8 connections at 500 requests/s; the probe ignores both.
    let mut cfg = config(&server.url("/"));
    cfg.connections = 8;
    cfg.rate = Some(500.0);
    let started = Instant::now();
    let probe = onefix_load::probe_unloaded(&cfg, Arc::new(AtomicBool::new(false))).expect("the probe runs");
    assert!(started.elapsed() < onefix_load::engine::PROBE_LIMIT + Duration::from_secs(1));
    assert_eq!(most_at_once.load(Ordering::SeqCst), 1, "the probe's requests overlapped");
    assert!((5..=onefix_load::engine::PROBE_REQUESTS).contains(&probe.completed), "{probe:?}");
    assert!(probe.latency_ms.mean >= 2.0 && probe.latency_ms.min >= 2.0, "{probe:?}");
    // The server's CPU time is the caller's to read (it knows the server's process).
    assert_eq!(probe.server_cpu_ms, None);

    // A request that may change the server's state is not sent more times than asked.
    let mut post = config(&server.url("/"));
    post.request.method = "POST".into();
    post.rate = Some(100.0);
    let before = server.requests.load(Ordering::Relaxed);
    assert!(onefix_load::probe_unloaded(&post, Arc::new(AtomicBool::new(false))).is_none());
    assert_eq!(server.requests.load(Ordering::Relaxed), before);

    // A server slower than the probe's limit gives no floor, and does not hold the load back
    // until it answers.
    let slow = support::hyper_server(
        false,
        Arc::new(|_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(4)).await;
                (200, "late")
            })
        }),
    );
    let mut cfg = config(&slow.url("/"));
    cfg.rate = Some(10.0);
    let started = Instant::now();
    assert!(onefix_load::probe_unloaded(&cfg, Arc::new(AtomicBool::new(false))).is_none());
    assert!(started.elapsed() < Duration::from_secs(3), "the probe took {:?}", started.elapsed());

    // A server that fails every request gives no floor.
    let failing = support::hyper_server(false, Arc::new(|_, _| Box::pin(async { (500, "no") })));
    let mut cfg = config(&failing.url("/"));
    cfg.rate = Some(100.0);
    assert!(onefix_load::probe_unloaded(&cfg, Arc::new(AtomicBool::new(false))).is_none());
}
