//! TLS test servers: a self-signed certificate made by rcgen, and a hyper server behind
//! tokio-rustls that speaks HTTP/1.1 or HTTP/2 as ALPN decides. Listens on 127.0.0.1 port 0
//! and stops when dropped.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed certificate for `localhost` and 127.0.0.1, and its key.
pub struct Cert {
    pub pem: String,
    pub key_pem: String,
    der: CertificateDer<'static>,
    key: Vec<u8>,
}

pub fn self_signed() -> Cert {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    Cert {
        pem: made.cert.pem(),
        key_pem: made.key_pair.serialize_pem(),
        der: made.cert.der().clone(),
        key: made.key_pair.serialize_der(),
    }
}

/// A file in a directory of the test's own, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "onefix-load-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Clone)]
pub struct Options {
    /// ALPN protocols the server accepts, in its order of preference.
    pub alpn: Vec<Vec<u8>>,
    /// Close the connection after each response (HTTP/1.1), so each request needs a handshake.
    pub close_each: bool,
    /// How long each answer takes.
    pub delay: Duration,
    /// Keep the request targets seen.
    pub keep_paths: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            close_each: false,
            delay: Duration::ZERO,
            keep_paths: false,
        }
    }
}

pub struct TlsServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    /// TCP connections accepted (the load's reachability check and TLS probe included).
    pub connections: Arc<AtomicU64>,
    /// TLS handshakes completed, and how many of them resumed a session.
    pub handshakes: Arc<AtomicU64>,
    pub resumed: Arc<AtomicU64>,
    /// Requests being answered at once, at most.
    pub max_in_flight: Arc<AtomicU64>,
    /// HTTP/2 connections served.
    pub h2_connections: Arc<AtomicU64>,
    pub paths: Arc<Mutex<Vec<String>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TlsServer {
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{}", self.addr, path)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub fn server(cert: &Cert, opts: Options) -> TlsServer {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der.clone()], PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone())))
        .unwrap();
    config.alpn_protocols = opts.alpn.clone();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let mut s = TlsServer {
        addr,
        requests: Arc::default(),
        connections: Arc::default(),
        handshakes: Arc::default(),
        resumed: Arc::default(),
        max_in_flight: Arc::default(),
        h2_connections: Arc::default(),
        paths: Arc::default(),
        shutdown: None,
    };
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (requests, connections, handshakes, resumed, max_in_flight, h2_connections, paths) = (
        s.requests.clone(),
        s.connections.clone(),
        s.handshakes.clone(),
        s.resumed.clone(),
        s.max_in_flight.clone(),
        s.h2_connections.clone(),
        s.paths.clone(),
    );
    let in_flight = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        connections.fetch_add(1, Ordering::Relaxed);
                        let acceptor = acceptor.clone();
                        let (requests, handshakes, resumed, max_in_flight, h2_connections, paths, in_flight, opts) = (
                            requests.clone(), handshakes.clone(), resumed.clone(), max_in_flight.clone(),
                            h2_connections.clone(), paths.clone(), in_flight.clone(), opts.clone(),
                        );
                        tokio::spawn(async move {
                            let Ok(tls) = acceptor.accept(tcp).await else { return };
                            handshakes.fetch_add(1, Ordering::Relaxed);
                            let (_, session) = tls.get_ref();
                            if session.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                                resumed.fetch_add(1, Ordering::Relaxed);
                            }
                            let h2 = session.alpn_protocol() == Some(b"h2");
                            let close_each = opts.close_each;
                            let service = service_fn(move |req: Request<Incoming>| {
                                requests.fetch_add(1, Ordering::Relaxed);
                                if opts.keep_paths {
                                    let path = req.uri().path_and_query().map(|x| x.to_string()).unwrap_or_default();
                                    paths.lock().unwrap().push(path);
                                }
                                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                                max_in_flight.fetch_max(now, Ordering::SeqCst);
                                let in_flight = in_flight.clone();
                                let delay = opts.delay;
                                async move {
                                    if !delay.is_zero() {
                                        tokio::time::sleep(delay).await;
                                    }
                                    in_flight.fetch_sub(1, Ordering::SeqCst);
                                    let mut resp = Response::builder().status(200);
                                    if close_each {
                                        resp = resp.header("connection", "close");
                                    }
                                    Ok::<_, std::convert::Infallible>(resp.body(Full::new(Bytes::from_static(b"hello"))).unwrap())
                                }
                            });
                            let io = TokioIo::new(tls);
                            if h2 {
                                h2_connections.fetch_add(1, Ordering::Relaxed);
                                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                    .max_concurrent_streams(256)
                                    .serve_connection(io, service)
                                    .await;
                            } else {
                                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                            }
                        });
                    }
                }
            }
        });
    });
    s.shutdown = Some(tx);
    s
}
