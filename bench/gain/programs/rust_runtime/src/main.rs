//! A blocking caller waits on an async runtime thread that does the expensive work.
//!
//! `rust_runtime slow|fixed`: the main thread sends each request through a channel to a
//! tokio runtime thread and blocks on the reply. In `slow`, the runtime thread builds a
//! big lookup table for every request (the culprit); in `fixed` it builds the table once,
//! before the first request, and reuses it. Everything else is the same work.
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const REQUESTS: u64 = 800;
const TABLE: u64 = 150_000;
const CALLER_WORK: u64 = 300_000;
const DEADLINE: Duration = Duration::from_secs(20);

struct Request {
    key: u64,
    reply: oneshot::Sender<u64>,
}

#[inline(never)]
fn answer(table: &HashMap<u64, u64>, key: u64) -> u64 {
    // Light per-request work: a few lookups.
    let mut acc = 0u64;
    for i in 0..64 {
        acc = acc.wrapping_add(*table.get(&((key * 31 + i) % TABLE)).unwrap_or(&0));
    }
    acc
}

#[inline(never)]
fn caller_work(key: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for i in 0..CALLER_WORK {
        (key ^ i).hash(&mut h);
    }
    h.finish()
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let slow = match mode.as_str() {
        "slow" => true,
        "fixed" => false,
        _ => {
            eprintln!("usage: rust_runtime slow|fixed");
            std::process::exit(2);
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
    let runtime = std::thread::Builder::new()
        .name("runtime".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async move {
                let seed = 0x9E37_79B9_7F4A_7C15u64;
                let shared: HashMap<u64, u64> = if slow { HashMap::new() } else { (0..TABLE).map(|i| (i, i.wrapping_mul(seed) >> 7)).collect() };
                while let Some(req) = rx.recv().await {
                    let table: HashMap<u64, u64> = if slow { (0..TABLE).map(|i| (i, i.wrapping_mul(seed) >> 7)).collect() } else { HashMap::new() }; // # CULPRIT
                    let t = if slow { &table } else { &shared };
                    let _ = req.reply.send(answer(t, req.key));
                }
            });
        })
        .unwrap();
    let start = Instant::now();
    let mut total = 0u64;
    for key in 0..REQUESTS {
        if start.elapsed() > DEADLINE {
            break;
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        tx.send(Request { key, reply: reply_tx }).unwrap();
        total = total.wrapping_add(reply_rx.blocking_recv().unwrap());
        // The caller's own work between requests (the same in both variants).
        total = total.wrapping_add(caller_work(key));
    }
    drop(tx);
    runtime.join().unwrap();
    println!("rust_runtime {mode}: {total:x}");
}
