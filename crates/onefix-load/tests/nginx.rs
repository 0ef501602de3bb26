//! HTTPS and HTTP/2 against a real nginx (Debian's; `./setup` installs it) on 127.0.0.1, with
//! a self-signed certificate made for the test: nginx runs in the foreground as a child with a
//! configuration in a temporary directory, and is killed at the end. Every load is bounded by
//! a request count or a second.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onefix_load::{run, LoadConfig, LoadResult, Protocol};
use support::schema;
use support::tls::{self, TempDir};

fn nginx_binary() -> PathBuf {
    let candidates = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx", "/usr/local/bin/nginx"];
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("nginx")).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(candidates.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .expect("nginx is not installed: run ./setup (it installs Debian's nginx) to run the live HTTPS tests")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// nginx with three TLS servers: HTTP/1.1 only, HTTP/2, and one that closes every connection.
struct Nginx {
    child: Child,
    dir: TempDir,
    ca: PathBuf,
    http1: u16,
    http2: u16,
    closing: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn start() -> Nginx {
        let cert = tls::self_signed();
        let dir = TempDir::new("nginx");
        let ca = dir.write("cert.pem", &cert.pem);
        dir.write("key.pem", &cert.key_pem);
        let (http1, http2, closing) = (free_port(), free_port(), free_port());
        let d = dir.0.display();
        let server = |port: u16, extra_listen: &str, extra: &str| {
            format!(
                "server {{ listen 127.0.0.1:{port} ssl{extra_listen}; ssl_certificate {d}/cert.pem; \
                 ssl_certificate_key {d}/key.pem; {extra} location / {{ return 200 \"Hello, world!\"; }} }}\n"
            )
        };
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n default_type text/plain;\n access_log off;\n keepalive_requests 1000000;\n\
             client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n{}{}{}}}\n",
            server(http1, "", ""),
            // `listen ... http2` is what Debian 12's nginx 1.22 knows (`http2 on` came in 1.25).
            server(http2, " http2", ""),
            server(closing, "", "keepalive_timeout 0;"),
        );
        let conf_path = dir.write("nginx.conf", &conf);
        let child = Command::new(nginx_binary())
            .arg("-e")
            .arg(dir.0.join("error.log"))
            .arg("-p")
            .arg(&dir.0)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nginx");
        let mut nginx = Nginx { child, dir, ca, http1, http2, closing };
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [http1, http2, closing] {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
                if let Ok(Some(status)) = nginx.child.try_wait() {
                    let log = std::fs::read_to_string(nginx.dir.0.join("error.log")).unwrap_or_default();
                    panic!("nginx ended ({status}) before listening: {log}");
                }
                assert!(Instant::now() < deadline, "nginx did not listen on {port} within 10 s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        nginx
    }

    fn config(&self, port: u16) -> LoadConfig {
        // `localhost`: the name in the certificate, checked against --cacert.
        let mut cfg = LoadConfig::new(&format!("https://localhost:{port}/"));
        cfg.tls.cacert = Some(self.ca.clone());
        cfg.connections = 4;
        cfg.threads = 1;
        cfg.duration = None;
        cfg.timeout = Duration::from_secs(5);
        cfg
    }
}

fn load(cfg: &LoadConfig) -> LoadResult {
    run(cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).expect("the load runs")
}

fn valid_json(r: &LoadResult) {
    let schema: serde_json::Value = serde_json::from_str(onefix_load::RESULT_SCHEMA).unwrap();
    let value = serde_json::to_value(r).unwrap();
    let mut errors = Vec::new();
    schema::validate(&schema, &value, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn nginx_over_https_and_http2() {
    let nginx = Nginx::start();

    // HTTPS, HTTP/1.1, closed loop: every request answered, one handshake per connection.
    let mut cfg = nginx.config(nginx.http1);
    cfg.max_requests = Some(3000);
    let r = load(&cfg);
    assert_eq!((r.sent, r.completed, r.errors.total), (3000, 3000, 0), "{:?}", r.errors);
    assert_eq!(r.protocol, "HTTP/1.1");
    assert_eq!(r.status_codes.get("200"), Some(&3000));
    assert_eq!(r.tls.as_ref().unwrap().handshakes, 4);
    assert_eq!(r.connections_opened, 4);
    // "Hello, world!" and nginx's head, 3000 times.
    assert!(r.bytes_received > 3000 * 100, "{}", r.bytes_received);
    valid_json(&r);

    // --http2 where nginx does not offer it: one sentence.
    cfg.protocol = Some(Protocol::Http2);
    let e = run(&cfg, Arc::new(AtomicBool::new(false)), &mut |_| {}).unwrap_err().to_string();
    assert!(e.contains("refused HTTP/2") && e.contains("localhost"), "{e}");

    // HTTP/2 chosen by ALPN, 10 streams on each of 2 connections.
    let mut cfg = nginx.config(nginx.http2);
    cfg.connections = 2;
    cfg.streams = 10;
    cfg.max_requests = Some(3000);
    let r = load(&cfg);
    assert_eq!((r.completed, r.errors.total), (3000, 0), "{:?}", r.errors);
    assert_eq!((r.protocol.as_str(), r.streams), ("HTTP/2", 10));
    assert_eq!(r.connections_opened, 2);
    valid_json(&r);

    // HTTP/2, open loop: the schedule is kept, latency counted from each due time.
    cfg.max_requests = None;
    cfg.rate = Some(2000.0);
    cfg.duration = Some(Duration::from_secs(1));
    let r = load(&cfg);
    assert_eq!((r.scheduled, r.sent, r.completed, r.unsent), (2000, 2000, 2000, 0), "{:?}", r.errors);
    assert!(r.latency_ms.p50 > 0.0 && r.latency_ms.p50 < 50.0, "{:?}", r.latency_ms);

    // A server that closes every connection: each request pays a handshake, resumed from a
    // session ticket, and the summary says so with the cost.
    let mut cfg = nginx.config(nginx.closing);
    cfg.max_requests = Some(300);
    let r = load(&cfg);
    assert_eq!(r.completed, 300, "{:?}", r.errors);
    let t = r.tls.as_ref().unwrap();
    assert_eq!(t.handshakes, 300);
    assert!(t.resumed > 200, "{t:?}");
    let text = onefix_load::summary::render(&r);
    assert!(text.contains("300 opened for 4 connections") && text.contains("TLS handshake each"), "{text}");
}
