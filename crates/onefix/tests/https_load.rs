//! `onefix load` and `record --load` over HTTPS, end to end with the binary: a Python server
//! (tests/servers/catalog_https.py, the standard library's ssl) with a self-signed certificate
//! made by the test, profiled under an https load with --insecure; the two loads' results are
//! then compared. The assertions are about which line, what was counted and what was said,
//! never about how fast anything ran.

mod common;
use common::{free_port, line_of, onefix, Scratch};

use std::path::{Path, PathBuf};

use serde_json::Value;

fn servers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/servers").canonicalize().unwrap()
}

fn certificate(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (scratch.path("cert.pem"), scratch.path("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    (cert, key)
}

#[test]
fn a_tls_server_is_profiled_under_an_https_load_and_its_loads_compared() {
    let scratch = Scratch::new("https-load");
    let (cert, key) = certificate(&scratch);
    let parse_line = line_of(&servers().join("catalog_api.py"), "return json.load(f)");
    let record = |variant: &str| -> (Value, Value) {
        let port = free_port();
        let load = format!(
            "https://127.0.0.1:{port}/price?sku={{{{int 0 3999}}}} --insecure --rate 40 --duration 3s -c 4 --json {}",
            scratch.arg(&format!("load-{variant}.json"))
        );
        let mut cmd = onefix();
        cmd.current_dir(&scratch.0)
            // 120 requests of a few ms each are near the evidence needed to name a line at the default
            // 100 Hz on a fast machine: sampled at 250 Hz.
            .args(["record", "--quiet", "--rate", "250", "-o", &scratch.arg(&format!("{variant}.onefix"))])
            .args(["--json", &scratch.arg(&format!("{variant}.json"))])
            .args(["--load", &load, "--", "python3"])
            .arg(servers().join("catalog_https.py"))
            .arg(port.to_string())
            .arg(&cert)
            .arg(&key);
        if variant == "fixed" {
            cmd.arg("--fixed");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "onefix failed: {}", String::from_utf8_lossy(&out.stderr));
        // Not a terminal: the summary and the load's are on stderr, beside the server's output.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("the load, while the server was profiled"), "{stderr}");
        let read =
            |name: String| -> Value { serde_json::from_slice(&std::fs::read(scratch.path(&name)).unwrap()).unwrap() };
        (read(format!("{variant}.json")), read(format!("load-{variant}.json")))
    };

    let (slow, slow_load) = record("slow");
    // The load went over TLS: four connections, one handshake each, every request answered.
    assert_eq!(slow_load["protocol"], "HTTP/1.1", "{slow_load:#}");
    assert_eq!(slow_load["tls"]["handshakes"], 4, "{slow_load:#}");
    assert!(slow_load["completed"].as_u64().unwrap() > 60, "{slow_load:#}");
    assert_eq!(slow_load["errors"]["total"], 0, "{slow_load:#}");
    // The server's planted mistake is named through TLS as it is over plain HTTP.
    let top = &slow["findings"][0];
    assert!(top["file"].as_str().unwrap().ends_with("catalog_api.py"), "{slow:#}");
    assert_eq!(top["line"], parse_line, "{slow:#}");

    let (_, fixed_load) = record("fixed");
    assert!(fixed_load["tls"]["handshakes"].as_u64().unwrap() >= 4);
    let out = onefix()
        .arg("compare")
        .arg(scratch.path("load-slow.json"))
        .arg(scratch.path("load-fixed.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("HTTP/1.1 over TLS"), "{text}");
}

#[test]
fn onefix_load_refuses_a_self_signed_server_in_one_sentence_and_loads_it_with_insecure() {
    let scratch = Scratch::new("https-refusal");
    let (cert, key) = certificate(&scratch);
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .arg(servers().join("catalog_https.py"))
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg("--fixed")
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(100)).is_err() {
        assert!(started.elapsed().as_secs() < 20, "the server did not listen");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let url = format!("https://localhost:{port}/price?sku=1");
    let out = onefix().args(["load", &url, "-n", "20", "-c", "2", "-q"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("localhost") && err.contains("--cacert") && err.contains("--insecure"), "{err}");

    let json = scratch.path("load.json");
    let out = onefix()
        .args(["load", &url, "-n", "20", "-c", "2", "-q", "--cacert"])
        .arg(&cert)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Status code distribution:") && stdout.contains("[200] 20 responses"), "{stdout}");
    assert!(stdout.contains("Response time histogram"), "{stdout}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["completed"], 20);
    assert_eq!(
        r["latency_histogram"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(),
        20
    );
}
