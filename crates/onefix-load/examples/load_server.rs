//! A trivial HTTP/1.1 server for benchmarks and manual tries: answers every request with
//! `200 OK` and a 13-byte body, keep-alive. `load_server [PORT] [THREADS] [STALL_EVERY_MS]`:
//! with STALL_EVERY_MS, the whole server stalls for 100 ms once per that period (to see
//! coordinated omission). Prints `listening on ADDR` and serves until killed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    let threads: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(1);
    let stall_every: Option<u64> = args.get(3).and_then(|s| s.parse().ok());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        println!("listening on {}", listener.local_addr().unwrap());
        let gate = Arc::new(tokio::sync::RwLock::new(()));
        if let Some(every) = stall_every {
            let gate = gate.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(every)).await;
                    let _held = gate.write().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let gate = gate.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    let gate = gate.clone();
                    async move {
                        if stall_every.is_some() {
                            let _ = gate.read().await;
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"Hello, world!"))))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
}
