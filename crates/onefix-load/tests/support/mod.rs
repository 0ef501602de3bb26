//! Loopback servers for the tests: a hyper server with a pluggable handler, and raw TCP servers
//! that answer whatever bytes a test wants (garbage, chunked bodies, silence). Each listens on
//! 127.0.0.1 port 0 and stops when dropped.
#![allow(dead_code)]

pub mod schema;
pub mod tls;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

pub type Reply = Pin<Box<dyn Future<Output = (u16, &'static str)> + Send>>;
pub type Handler = Arc<dyn Fn(u64, String) -> Reply + Send + Sync>;

pub struct Server {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    pub connections: Arc<AtomicU64>,
    /// Request targets seen, when asked to keep them.
    pub paths: Arc<Mutex<Vec<String>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A hyper HTTP/1.1 server; `handler(n, path)` answers request number n (from 0).
pub fn hyper_server(keep_paths: bool, handler: Handler) -> Server {
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let paths = Arc::new(Mutex::new(Vec::new()));
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (r, c, p) = (requests.clone(), connections.clone(), paths.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        c.fetch_add(1, Ordering::Relaxed);
                        let (r, p, handler) = (r.clone(), p.clone(), handler.clone());
                        tokio::spawn(async move {
                            let service = service_fn(move |req: Request<Incoming>| {
                                let n = r.fetch_add(1, Ordering::Relaxed);
                                let path = req.uri().path_and_query().map(|x| x.to_string()).unwrap_or_default();
                                if keep_paths {
                                    p.lock().unwrap().push(path.clone());
                                }
                                let reply = handler(n, path);
                                async move {
                                    let (status, body) = reply.await;
                                    Ok::<_, std::convert::Infallible>(
                                        Response::builder().status(status).body(Full::new(Bytes::from_static(body.as_bytes()))).unwrap(),
                                    )
                                }
                            });
                            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                        });
                    }
                }
            }
        });
    });
    Server { addr, requests, connections, paths, shutdown: Some(tx) }
}

pub fn ok_server() -> Server {
    hyper_server(false, Arc::new(|_, _| Box::pin(async { (200, "hello") })))
}

/// A raw TCP server: reads each request head, answers `reply(n)` bytes; closes the connection
/// after each answer when `close` is set.
pub struct RawServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

pub fn raw_server(close: bool, reply: fn(u64) -> Option<Vec<u8>>) -> RawServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (r, s) = (requests.clone(), stop.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if s.load(Ordering::Relaxed) {
                break;
            }
            let Ok(mut stream) = stream else { continue };
            let r = r.clone();
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request head (the tests send no bodies here).
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    let n = r.fetch_add(1, Ordering::Relaxed);
                    match reply(n) {
                        Some(bytes) => {
                            if stream.write_all(&bytes).is_err() {
                                return;
                            }
                        }
                        None => {
                            // Say nothing; hold the connection until the client gives up.
                            std::thread::sleep(Duration::from_secs(3));
                            return;
                        }
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    RawServer { addr, requests, stop }
}

/// A port with nothing listening on it.
pub fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// An HTTP/2 server over plain TCP (h2c, prior knowledge) that answers every request `status`.
pub fn hyper_h2c_server(status: u16) -> Server {
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (r, c) = (requests.clone(), connections.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        c.fetch_add(1, Ordering::Relaxed);
                        let r = r.clone();
                        tokio::spawn(async move {
                            let service = service_fn(move |_req: Request<Incoming>| {
                                r.fetch_add(1, Ordering::Relaxed);
                                async move {
                                    Ok::<_, std::convert::Infallible>(
                                        Response::builder().status(status).body(Full::new(Bytes::from_static(b"busy"))).unwrap(),
                                    )
                                }
                            });
                            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                }
            }
        });
    });
    Server { addr, requests, connections, paths: Arc::default(), shutdown: Some(tx) }
}
