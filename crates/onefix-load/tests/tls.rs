//! HTTPS and HTTP/2 against in-process rustls + hyper servers on 127.0.0.1 with a certificate
//! made for the test, and the one-sentence refusals of servers that cannot be loaded over TLS.
//! Every run is bounded by a request count or a duration of a second or so.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onefix_load::{run, LoadConfig, LoadError, LoadResult, Protocol};
use support::schema;
use support::tls::{self, Options, TempDir};

fn config(url: &str) -> LoadConfig {
    let mut cfg = LoadConfig::new(url);
    cfg.connections = 2;
    cfg.threads = 1;
    cfg.duration = None;
    cfg.timeout = Duration::from_secs(5);
    cfg
}

fn load(cfg: &LoadConfig) -> LoadResult {
    run(cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).expect("the load runs")
}

fn refusal(cfg: &LoadConfig) -> String {
    match run(cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}) {
        Ok(r) => panic!("the load ran: {r:#?}"),
        Err(e) => {
            let text = e.to_string();
            assert!(!text.contains('\n'), "one sentence: {text}");
            text
        }
    }
}

fn valid_json(r: &LoadResult) {
    let schema: serde_json::Value = serde_json::from_str(onefix_load::RESULT_SCHEMA).unwrap();
    let value = serde_json::to_value(r).unwrap();
    let mut errors = Vec::new();
    schema::validate(&schema, &value, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    let back: LoadResult = serde_json::from_value(value).unwrap();
    assert_eq!(&back, r);
}

#[test]
fn https_verifies_the_server_with_cacert_and_handshakes_once_per_connection() {
    let cert = tls::self_signed();
    let dir = TempDir::new("cacert");
    let ca = dir.write("ca.pem", &cert.pem);
    let server = tls::server(&cert, Options { alpn: vec![b"http/1.1".to_vec()], ..Options::default() });
    let mut cfg = config(&format!("https://localhost:{}/", server.addr.port()));
    cfg.tls.cacert = Some(ca);
    cfg.max_requests = Some(600);
    let r = load(&cfg);
    assert_eq!((r.sent, r.completed, r.errors.total), (600, 600, 0), "{:?}", r.errors);
    assert_eq!(server.requests.load(Ordering::Relaxed), 600);
    assert_eq!(r.protocol, "HTTP/1.1");
    let t = r.tls.as_ref().expect("a TLS summary");
    // Two connections, kept alive: two handshakes, counted apart from the 600 requests. The
    // server also saw the reachability check (no TLS) and the probe's handshake.
    assert_eq!(t.handshakes, 2);
    assert_eq!(server.handshakes.load(Ordering::Relaxed), 3);
    assert_eq!(server.connections.load(Ordering::Relaxed), 4);
    assert!(t.handshake_ms.max > 0.0 && t.handshake_ms.mean <= t.handshake_ms.max);
    // The histogram holds every completed request.
    assert_eq!(r.latency_histogram.iter().map(|b| b.count).sum::<u64>(), 600);
    assert!(r.latency_histogram.windows(2).all(|w| w[0].to_ms <= w[1].from_ms + 1e-9));
    valid_json(&r);
    let text = onefix_load::summary::render(&r);
    assert!(text.contains("HTTP/1.1 over TLS"), "{text}");
    assert!(text.contains("Response time histogram") && text.contains("[200] 600 responses"), "{text}");
}

#[test]
fn a_self_signed_server_is_refused_without_insecure_and_loaded_with_it() {
    let cert = tls::self_signed();
    let server = tls::server(&cert, Options::default());
    let mut cfg = config(&server.url("/"));
    cfg.max_requests = Some(100);
    let e = refusal(&cfg);
    assert!(e.contains("127.0.0.1") && e.contains("does not verify"), "{e}");
    assert!(e.contains("signed by an authority that is not trusted"), "{e}");
    assert!(e.contains("--cacert") && e.contains("--insecure"), "{e}");
    // Nothing was sent: the probe said it first.
    assert_eq!(server.requests.load(Ordering::Relaxed), 0);

    cfg.tls.insecure = true;
    let r = load(&cfg);
    assert_eq!(r.completed, 100, "{:?}", r.errors);

    // A CA file that is not the one that signed the server's certificate.
    let other = tls::self_signed();
    let dir = TempDir::new("wrongca");
    cfg.tls.insecure = false;
    cfg.tls.cacert = Some(dir.write("other.pem", &other.pem));
    let e = refusal(&cfg);
    assert!(e.contains("does not verify") && e.contains("--cacert holds the CA"), "{e}");
    cfg.tls.cacert = Some(dir.write("empty.pem", "not a certificate\n"));
    assert!(refusal(&cfg).contains("holds no PEM certificate"));
}

#[test]
fn a_server_that_closes_each_connection_makes_every_request_pay_a_resumed_handshake() {
    let cert = tls::self_signed();
    let server =
        tls::server(&cert, Options { alpn: vec![b"http/1.1".to_vec()], close_each: true, ..Options::default() });
    let mut cfg = config(&server.url("/"));
    cfg.tls.insecure = true;
    cfg.max_requests = Some(200);
    let r = load(&cfg);
    assert_eq!(r.completed, 200, "{:?}", r.errors);
    let t = r.tls.as_ref().unwrap();
    assert_eq!(t.handshakes, 200);
    assert_eq!(r.connections_opened, 200);
    // Session tickets: the reconnects resume (the server agrees on its side).
    assert!(t.resumed >= 150, "{t:?}");
    assert!(server.resumed.load(Ordering::Relaxed) >= t.resumed);
    let text = onefix_load::summary::render(&r);
    assert!(text.contains("the server closed kept-alive connections") && text.contains("TLS handshake each"), "{text}");
}

#[test]
fn http2_runs_many_streams_on_each_connection() {
    let cert = tls::self_signed();
    let server = tls::server(&cert, Options { delay: Duration::from_millis(30), ..Options::default() });
    let mut cfg = config(&server.url("/"));
    cfg.tls.insecure = true;
    cfg.protocol = Some(Protocol::Http2);
    cfg.streams = 8;
    cfg.max_requests = Some(320);
    let r = load(&cfg);
    assert_eq!((r.completed, r.errors.total), (320, 0), "{:?}", r.errors);
    assert_eq!((r.protocol.as_str(), r.streams), ("HTTP/2", 8));
    // Two connections of 8 streams: 16 requests at once, on two HTTP/2 connections (and the
    // probe's, which sends nothing).
    assert_eq!(server.max_in_flight.load(Ordering::SeqCst), 16);
    assert_eq!(server.h2_connections.load(Ordering::Relaxed), 3);
    assert_eq!(r.connections_opened, 2);
    assert_eq!(r.tls.as_ref().unwrap().handshakes, 2);
    assert!(r.bytes_received > 320 * 5 && r.bytes_sent > 320 * 5);
    valid_json(&r);
}

#[test]
fn alpn_chooses_http2_and_the_open_loop_keeps_its_schedule() {
    let cert = tls::self_signed();
    let server = tls::server(&cert, Options::default());
    let mut cfg = config(&server.url("/"));
    cfg.tls.insecure = true;
    cfg.rate = Some(500.0);
    cfg.duration = Some(Duration::from_millis(1000));
    let started = Instant::now();
    let r = load(&cfg);
    assert_eq!(r.protocol, "HTTP/2");
    assert_eq!((r.scheduled, r.sent, r.completed, r.unsent), (500, 500, 500, 0), "{:?}", r.errors);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(r.windows.len(), 1);

    // The same server over HTTP/1.1 when asked.
    cfg.protocol = Some(Protocol::Http1);
    let r = load(&cfg);
    assert_eq!((r.protocol.as_str(), r.completed), ("HTTP/1.1", 500));
}

#[test]
fn templates_draw_the_same_requests_over_http1_and_http2() {
    let cert = tls::self_signed();
    let run_with = |protocol: Protocol| -> BTreeMap<String, usize> {
        let server = tls::server(&cert, Options { keep_paths: true, ..Options::default() });
        let mut cfg =
            config(&server.url("/items/{{int 1 50}}?q={{choice a b c}}&h={{pick 20 bytes 8 urlencode}}&n={{seq}}"));
        cfg.tls.insecure = true;
        cfg.protocol = Some(protocol);
        cfg.max_requests = Some(300);
        let r = load(&cfg);
        assert_eq!((r.completed, r.protocol.as_str()), (300, protocol.name()), "{:?}", r.errors);
        let mut seen = BTreeMap::new();
        for p in server.paths.lock().unwrap().iter() {
            *seen.entry(p.clone()).or_insert(0) += 1;
        }
        seen
    };
    let h1 = run_with(Protocol::Http1);
    let h2 = run_with(Protocol::Http2);
    assert_eq!(h1.len(), 300, "each request has its own n");
    assert_eq!(h1, h2);
}

#[test]
fn a_plain_http_port_is_said_not_to_speak_tls() {
    let plain = support::ok_server();
    let mut cfg = config(&format!("https://{}/", plain.addr));
    cfg.max_requests = Some(10);
    let e = refusal(&cfg);
    assert!(e.contains(&plain.addr.to_string()) && e.contains("does not speak TLS"), "{e}");
    assert!(e.contains("http://"), "{e}");
}

#[test]
fn http2_refused_by_alpn_is_one_sentence() {
    let cert = tls::self_signed();
    let server = tls::server(&cert, Options { alpn: vec![b"http/1.1".to_vec()], ..Options::default() });
    let mut cfg = config(&server.url("/"));
    cfg.tls.insecure = true;
    cfg.protocol = Some(Protocol::Http2);
    cfg.max_requests = Some(10);
    let e = refusal(&cfg);
    assert!(e.contains("refused HTTP/2") && e.contains("--http2") && e.contains("127.0.0.1"), "{e}");
    // Streams need HTTP/2: a server that chooses HTTP/1.1 is said to.
    cfg.protocol = None;
    cfg.streams = 4;
    let e = refusal(&cfg);
    assert!(e.contains("chose HTTP/1.1") && e.contains("--streams"), "{e}");
}

#[test]
fn a_handshake_that_never_finishes_is_a_timeout_in_one_sentence() {
    // Accepts connections and never answers.
    let silent = support::raw_server(false, |_| None);
    let mut cfg = config(&format!("https://{}/", silent.addr));
    cfg.max_requests = Some(10);
    cfg.timeout = Duration::from_millis(400);
    let started = Instant::now();
    let e = refusal(&cfg);
    assert!(e.contains("TLS handshake") && e.contains("did not finish within 0.4 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn http2_bad_statuses_and_resets_are_errors_by_kind() {
    // An h2c server (HTTP/2 over plain TCP, prior knowledge) that answers 503.
    let server = support::hyper_h2c_server(503);
    let mut cfg = config(&format!("http://{}/", server.addr));
    cfg.protocol = Some(Protocol::Http2);
    cfg.max_requests = Some(50);
    let r = load(&cfg);
    assert_eq!(r.protocol, "HTTP/2");
    assert!(r.tls.is_none());
    assert_eq!(r.errors.status.get("503"), Some(&50));
    assert_eq!(r.status_codes.get("503"), Some(&50));
    let text = onefix_load::summary::render(&r);
    assert!(text.contains("Error distribution:") && text.contains("[50] status 503"), "{text}");
}

#[test]
fn bad_options_are_refused_before_connecting() {
    let mut cfg = config("https://127.0.0.1:1/");
    cfg.max_requests = Some(1);
    cfg.streams = 4;
    cfg.protocol = Some(Protocol::Http1);
    assert!(
        matches!(run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}), Err(LoadError::Input(e)) if e.contains("--streams"))
    );
    // Over plain http there is no ALPN: streams need --http2 (h2c).
    let plain = support::ok_server();
    let mut h2c = config(&plain.url("/"));
    h2c.max_requests = Some(1);
    h2c.streams = 4;
    assert!(
        matches!(run(&h2c, Arc::new(AtomicBool::new(false)), &mut |_| {}), Err(LoadError::Input(e)) if e.contains("add --http2"))
    );
    cfg.streams = 1;
    cfg.protocol = Some(Protocol::Http2);
    cfg.request.keep_alive = false;
    assert!(
        matches!(run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}), Err(LoadError::Input(e)) if e.contains("new connection per request"))
    );
}
