//! The client loop: worker threads, each a single-threaded tokio runtime driving its share of
//! the connections, a fixed schedule of due times (open loop) or back-to-back requests (closed
//! loop), and a monitor that merges per-window histograms into the result.
//!
//! Each thread runs one task per *lane*: a request in flight at a time. Over HTTP/1.1 a lane
//! is a connection of its own (plain TCP or TLS); over HTTP/2 the lanes of a connection are
//! its streams, sharing one `h2` connection (`--streams` lanes per connection). The schedule,
//! the counters and the latency from each due time are the same whatever the lane sends on.
//!
//! Open loop: request number `s` is due at `start + s / rate`, whatever the server's latency.
//! A connection that is free takes the next request of its thread's share, waits for its due
//! time (a timerfd on a 100 µs grid, so the send is not late by a millisecond timer tick, and
//! one wake-up serves every request due in the same step) and sends it. When every
//! connection is busy, requests wait and are sent late, and their latency counts from the due
//! time: the wait a real client would have seen is not omitted.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::h2conn::{H2Conn, H2Requests};
use crate::http::{Conn, Response};
use crate::request::{RequestParts, RequestPlan, RequestSpec};
use crate::stats::{self, Counters, ErrorKind, LoadResult, TlsSummary, Window};
use crate::timer::{sleep_until_ns, PreciseTimer};
use crate::tls::{self, Protocol, TlsClient, TlsOptions};
use crate::LoadError;

/// Connections wake on a grid of this step, a little before their requests' due times: the
/// thread wakes once for all the requests due in a step (at high rates a wake-up per request
/// would cost more than the request). A request sent early counts its latency from the moment
/// it was sent, one sent late from its due time.
const WAKE_GRID_NS: u64 = 100_000;
/// How long in-flight requests may finish after an interruption.
const STOP_GRACE: Duration = Duration::from_millis(1000);

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub request: RequestSpec,
    /// Requests per second (open loop); `None` sends as fast as responses come (closed loop).
    pub rate: Option<f64>,
    /// Stop scheduling after this long.
    pub duration: Option<Duration>,
    /// Stop after this many requests.
    pub max_requests: Option<u64>,
    pub connections: usize,
    /// Requests in flight at once on each HTTP/2 connection (its streams); 1 for HTTP/1.1.
    pub streams: usize,
    /// The protocol asked for; `None` takes HTTP/2 over https when the server offers it in
    /// ALPN, and HTTP/1.1 otherwise. HTTP/2 over http:// is h2c with prior knowledge.
    pub protocol: Option<Protocol>,
    /// How to trust an https server.
    pub tls: TlsOptions,
    /// Worker threads; 0 picks one per CPU (never more than the connections).
    pub threads: usize,
    /// Limit on each request, connecting included.
    pub timeout: Duration,
    /// Length of the windows the result is summarised by.
    pub window: Duration,
}

impl LoadConfig {
    pub fn new(url: &str) -> LoadConfig {
        LoadConfig {
            request: RequestSpec {
                url: url.to_string(),
                method: "GET".to_string(),
                headers: Vec::new(),
                body: None,
                keep_alive: true,
                seed: 1,
            },
            rate: None,
            duration: Some(Duration::from_secs(10)),
            max_requests: None,
            connections: 32,
            streams: 1,
            protocol: None,
            tls: TlsOptions::default(),
            threads: 0,
            timeout: Duration::from_secs(10),
            window: Duration::from_secs(1),
        }
    }

    fn check(&self) -> Result<(), LoadError> {
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0 && r <= 1e8) {
                return Err(LoadError::Input(format!(
                    "the rate must be a positive number of requests per second (or `max`), not {r}"
                )));
            }
        }
        if self.duration.is_none() && self.max_requests.is_none() {
            return Err(LoadError::Input(
                "give a duration or a number of requests, or the load would never end".into(),
            ));
        }
        if self.duration == Some(Duration::ZERO) {
            return Err(LoadError::Input("the duration must be positive".into()));
        }
        if self.max_requests == Some(0) {
            return Err(LoadError::Input("the number of requests must be at least 1".into()));
        }
        if self.connections == 0 || self.connections > 100_000 {
            return Err(LoadError::Input(format!(
                "the connections must be between 1 and 100000, not {}",
                self.connections
            )));
        }
        if self.streams == 0 || self.streams > 1000 {
            return Err(LoadError::Input(format!("the streams must be between 1 and 1000, not {}", self.streams)));
        }
        if self.streams > 1 && self.protocol == Some(Protocol::Http1) {
            return Err(LoadError::Input(
                "--streams sends several requests at once on a connection, which only HTTP/2 can: drop --http1.1"
                    .into(),
            ));
        }
        if !self.request.keep_alive && self.protocol == Some(Protocol::Http2) {
            return Err(LoadError::Input(
                "a new connection per request is an HTTP/1.1 measure: drop --http2 or --new-connection-per-request"
                    .into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err(LoadError::Input("the timeout must be positive".into()));
        }
        if self.window < Duration::from_millis(10) {
            return Err(LoadError::Input("the window must be at least 10 ms".into()));
        }
        Ok(())
    }
}

/// Reported after each window while the load runs.
#[derive(Clone, Debug)]
pub struct Progress {
    pub window: Window,
    pub elapsed_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
}

/// Nanoseconds on CLOCK_MONOTONIC (the clock timerfd and `Instant` use).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Checks up front that something listens at `addr`, within `limit`.
pub fn check_reachable(addr: SocketAddr, limit: Duration) -> Result<(), LoadError> {
    match std::net::TcpStream::connect_timeout(&addr, limit) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            Err(LoadError::Unreachable(format!("nothing is listening at {addr} (connection refused)")))
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => Err(
            LoadError::Unreachable(format!("{addr} did not accept a connection within {:.1} s", limit.as_secs_f64())),
        ),
        Err(e) => Err(LoadError::Unreachable(format!("cannot connect to {addr}: {}", e.to_string().to_lowercase()))),
    }
}

/// Checks the options and the request template, and gives the address the load will be sent
/// to: everything that can be wrong with a load before any server is started.
pub fn target_addr(cfg: &LoadConfig) -> Result<SocketAddr, LoadError> {
    cfg.check()?;
    Ok(RequestPlan::compile(&cfg.request)?.target.addr)
}

/// Waits for a server that is starting until something accepts connections at `addr`: polls
/// every 50 ms for up to `limit`, and gives up at once when `gone()` says the server ended.
pub fn wait_until_listening(
    addr: SocketAddr,
    limit: Duration,
    mut gone: impl FnMut() -> bool,
) -> Result<(), LoadError> {
    let deadline = Instant::now() + limit;
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if gone() {
            return Err(LoadError::Unreachable(format!("the server ended before anything listened at {addr}")));
        }
        if Instant::now() >= deadline {
            return Err(LoadError::Unreachable(format!(
                "nothing listened at {addr} within {:.0} s of starting the server",
                limit.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Requests of [`probe_unloaded`], and the longest it may take: enough for a stable mean of a
/// fast server's latency and for many ticks of its CPU time, short beside the load that follows.
pub const PROBE_REQUESTS: u64 = 1000;
pub const PROBE_LIMIT: Duration = Duration::from_secs(1);
/// Fewer answers than this say nothing of the floor.
const PROBE_MIN_COMPLETED: u64 = 5;

/// The latency of `cfg`'s requests when none queues: [`PROBE_REQUESTS`] of them sent one at a
/// time on one connection, for at most [`PROBE_LIMIT`]. `None` when too few were answered (a
/// server slower than that, or failing): the load goes on without it.
///
/// Only for safe methods (GET, HEAD, OPTIONS): requests that change the server's state (a POST
/// that creates a record) are sent only as many times as the user asked.
pub fn probe_unloaded(cfg: &LoadConfig, stop: Arc<AtomicBool>) -> Option<stats::Unloaded> {
    if !["GET", "HEAD", "OPTIONS"].contains(&cfg.request.method.to_ascii_uppercase().as_str()) {
        return None;
    }
    let probe = LoadConfig {
        rate: None,
        duration: Some(PROBE_LIMIT),
        max_requests: Some(PROBE_REQUESTS),
        connections: 1,
        streams: 1,
        threads: 1,
        // A request slower than the whole probe would hold the load back until it answered.
        timeout: cfg.timeout.min(PROBE_LIMIT),
        ..cfg.clone()
    };
    let result = run(&probe, stop, &mut |_| {}).ok()?;
    (result.completed >= PROBE_MIN_COMPLETED && result.errors.total == 0).then_some(stats::Unloaded {
        completed: result.completed,
        latency_ms: result.service_time_ms,
        server_cpu_ms: None,
    })
}

/// Compiles the request, checks that the target listens, and runs the load. `stop` ends the
/// run early (in-flight requests get a second to finish); `on_window` sees each window.
pub fn run(
    cfg: &LoadConfig,
    stop: Arc<AtomicBool>,
    on_window: &mut dyn FnMut(&Progress),
) -> Result<LoadResult, LoadError> {
    cfg.check()?;
    let plan = RequestPlan::compile(&cfg.request)?;
    let limit = cfg.timeout.min(Duration::from_secs(5));
    check_reachable(plan.target.addr, limit)?;
    let t = &plan.target;
    let protocol = if !t.tls {
        cfg.protocol.unwrap_or(Protocol::Http1)
    } else {
        // A new connection per request is measured over HTTP/1.1, as that is what it is for.
        let want = if cfg.request.keep_alive { cfg.protocol } else { Some(Protocol::Http1) };
        tls::probe(&cfg.tls, &t.host, t.addr, want, limit)?.protocol
    };
    if cfg.streams > 1 && protocol == Protocol::Http1 && !t.tls {
        return Err(LoadError::Input(
            "--streams sends several requests at once on a connection, which only HTTP/2 can: add --http2 to \
             send h2c to a plain http:// server"
                .into(),
        ));
    }
    if cfg.streams > 1 && protocol == Protocol::Http1 {
        return Err(LoadError::Input(format!(
            "{} chose HTTP/1.1 in ALPN, which sends one request at a time on a connection: drop --streams, or \
             enable HTTP/2 on the server",
            t.host
        )));
    }
    let tls = if t.tls { Some(TlsClient::new(&cfg.tls, &t.host, &[protocol])?) } else { None };
    let h2 = if protocol == Protocol::Http2 { Some(H2Requests::new(&plan)?) } else { None };
    Ok(run_plan(cfg, Transport { plan, protocol, tls, h2 }, stop, on_window))
}

/// The request and how it travels: the protocol, TLS, and HTTP/2's form of the request.
struct Transport {
    plan: RequestPlan,
    protocol: Protocol,
    tls: Option<TlsClient>,
    h2: Option<H2Requests>,
}

/// Each connection needs a socket and, in the open loop, a timerfd: lift the soft limit on open
/// files as far as the hard limit allows.
fn raise_fd_limit(connections: u64) {
    let need = (connections * 2 + 256) as libc::rlim_t;
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < need {
            rl.rlim_cur = need.min(rl.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

struct Shared {
    transport: Arc<Transport>,
    start_ns: u64,
    end_ns: Option<u64>,
    period_ns: Option<f64>,
    max: u64,
    /// Requests in flight at once over all threads: connections times streams.
    lanes: u64,
    timeout: Duration,
    window_ns: u64,
    stop: Arc<AtomicBool>,
    stop_ns: AtomicU64,
    closed_next: AtomicU64,
}

struct WindowAcc {
    sent: u64,
    completed: u64,
    errors: u64,
    hist: Histogram<u64>,
}

impl WindowAcc {
    fn new() -> WindowAcc {
        WindowAcc { sent: 0, completed: 0, errors: 0, hist: stats::new_histogram() }
    }
}

struct ThreadStats {
    c: Counters,
    corrected: Histogram<u64>,
    service: Histogram<u64>,
    handshake: Histogram<u64>,
    end_ns: u64,
}

impl ThreadStats {
    fn new(end_ns: u64) -> ThreadStats {
        ThreadStats {
            c: Counters::default(),
            corrected: stats::new_histogram(),
            service: stats::new_histogram(),
            handshake: stats::new_histogram(),
            end_ns,
        }
    }

    fn count_handshake(&mut self, h: tls::Handshake) {
        self.c.handshakes += 1;
        self.c.resumed += u64::from(h.resumed);
        self.handshake.saturating_record(h.micros);
    }
}

enum Msg {
    Window { thread: usize, index: u64, duration_ns: u64, acc: WindowAcc },
    Done { thread: usize, stats: Box<ThreadStats> },
}

/// One worker thread's state, shared by its connection tasks.
struct Local {
    sh: Arc<Shared>,
    thread: usize,
    slot_base: u64,
    slots: u64,
    next: Cell<u64>,
    stopping: Cell<bool>,
    inflight: Cell<u64>,
    window_index: Cell<u64>,
    stats: RefCell<ThreadStats>,
    win: RefCell<WindowAcc>,
    tx: mpsc::Sender<Msg>,
}

impl Local {
    /// The next request of this thread's share: its number and due time.
    fn take_ticket(&self, now: u64) -> Option<(u64, u64)> {
        if self.stopping.get() {
            return None;
        }
        let sh = &*self.sh;
        match sh.period_ns {
            Some(period) => {
                let m = self.next.get();
                let seq = self.slot_base + m % self.slots + sh.lanes * (m / self.slots);
                if seq >= sh.max {
                    return None;
                }
                let due = sh.start_ns + (seq as f64 * period) as u64;
                // Past the end nothing more is sent, not even requests that fell behind: those
                // are counted as unsent.
                if sh.end_ns.is_some_and(|end| due >= end || now >= end) {
                    return None;
                }
                self.next.set(m + 1);
                Some((seq, due))
            }
            None => {
                if sh.end_ns.is_some_and(|end| now >= end) {
                    return None;
                }
                let seq = sh.closed_next.fetch_add(1, Ordering::Relaxed);
                if seq >= sh.max {
                    return None;
                }
                Some((seq, now))
            }
        }
    }

    fn flush_window(&self, duration_ns: u64) {
        let index = self.window_index.get();
        let acc = std::mem::replace(&mut *self.win.borrow_mut(), WindowAcc::new());
        let _ = self.tx.send(Msg::Window { thread: self.thread, index, duration_ns, acc });
        self.window_index.set(index + 1);
    }
}

/// Connects when needed, then sends one request and reads its response.
/// A kept-alive connection the server closed while it was idle is replaced, and the request
/// sent again once, as browsers and HTTP libraries do.
async fn exchange(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    req: &[u8],
    head: bool,
) -> Result<Response, ErrorKind> {
    if let Some(c) = conn.as_mut() {
        match c.round_trip(req, head).await {
            Err(ErrorKind::Closed) if c.went_stale() => *conn = None,
            other => return other,
        }
    }
    let c = conn.insert(Conn::connect(addr, tls).await?);
    c.round_trip(req, head).await
}

/// What a lane sends on: its own HTTP/1.1 connection, or a stream of a shared HTTP/2 one.
enum Lane {
    Http1(Option<Conn>),
    Http2(Rc<H2Conn>),
}

impl Lane {
    /// Moves what the connection measured since the last call into the thread's counters.
    fn harvest(&mut self, st: &mut ThreadStats) {
        match self {
            Lane::Http1(Some(c)) => {
                st.c.bytes_received += std::mem::take(&mut c.bytes_in);
                st.c.connections_opened += std::mem::take(&mut c.uncounted) as u64;
                if let Some(h) = c.handshake.take() {
                    st.count_handshake(h);
                }
            }
            Lane::Http1(None) => {}
            Lane::Http2(h2) => {
                st.c.bytes_received += h2.bytes_in.replace(0);
                st.c.bytes_sent += h2.bytes_out.replace(0);
                st.c.connections_opened += h2.opened.replace(0);
                for h in h2.handshakes.borrow_mut().drain(..) {
                    st.count_handshake(h);
                }
            }
        }
    }
}

async fn connection(local: Rc<Local>, mut lane: Lane) {
    let sh = local.sh.clone();
    let transport = &sh.transport;
    let plan = &transport.plan;
    let tls = transport.tls.as_ref();
    let head = plan.is_head();
    let open = sh.period_ns.is_some();
    let mut ctx = plan.new_ctx();
    let mut buf = Vec::with_capacity(512);
    let mut parts = RequestParts::default();
    let timer = if open { PreciseTimer::new().ok() } else { None };
    let deadline = tokio::time::sleep(sh.timeout);
    tokio::pin!(deadline);
    loop {
        let now = mono_ns();
        let Some((seq, due)) = local.take_ticket(now) else { break };
        let wake = due - due % WAKE_GRID_NS;
        if wake > now {
            match &timer {
                Some(t) => t.wait_until(wake).await,
                None => sleep_until_ns(wake).await,
            }
            if local.stopping.get() {
                break;
            }
        }
        let sent_ns;
        let outcome = match &mut lane {
            Lane::Http1(conn) => {
                let req: &[u8] = match &plan.fixed {
                    Some(fixed) => fixed,
                    None => {
                        plan.render_into(&mut ctx, seq, &mut buf);
                        &buf
                    }
                };
                sent_ns = mono_ns();
                {
                    let mut st = local.stats.borrow_mut();
                    st.c.sent += 1;
                    st.c.bytes_sent += req.len() as u64;
                    local.win.borrow_mut().sent += 1;
                }
                local.inflight.set(local.inflight.get() + 1);
                deadline.as_mut().reset(tokio::time::Instant::now() + sh.timeout);
                tokio::select! {
                    biased;
                    r = exchange(conn, plan.target.addr, tls, req, head) => r,
                    _ = &mut deadline => Err(if conn.is_none() { ErrorKind::ConnectTimeout } else { ErrorKind::Timeout }),
                }
            }
            Lane::Http2(h2) => {
                let h2_requests = transport.h2.as_ref().expect("HTTP/2 requests are built for HTTP/2 lanes");
                let request = h2_requests.request(plan, &mut ctx, seq, &mut parts);
                sent_ns = mono_ns();
                {
                    local.stats.borrow_mut().c.sent += 1;
                    local.win.borrow_mut().sent += 1;
                }
                local.inflight.set(local.inflight.get() + 1);
                deadline.as_mut().reset(tokio::time::Instant::now() + sh.timeout);
                match request {
                    Err(kind) => Err(kind),
                    Ok((req, body)) => tokio::select! {
                        biased;
                        r = h2.round_trip(plan.target.addr, tls, req, body) => r.map(|status| Response { status, keep_alive: true }),
                        _ = &mut deadline => Err(if h2.is_open() { ErrorKind::Timeout } else { ErrorKind::ConnectTimeout }),
                    },
                }
            }
        };
        local.inflight.set(local.inflight.get() - 1);
        let done_ns = mono_ns();
        let back_off = {
            let mut st = local.stats.borrow_mut();
            let mut win = local.win.borrow_mut();
            lane.harvest(&mut st);
            st.end_ns = done_ns;
            match outcome {
                Ok(resp) => {
                    if !resp.keep_alive || !plan.keep_alive {
                        if let Lane::Http1(conn) = &mut lane {
                            *conn = None;
                        }
                    }
                    *st.c.status_codes.entry(resp.status).or_default() += 1;
                    if resp.status >= 400 {
                        st.c.error(ErrorKind::Status(resp.status));
                        win.errors += 1;
                    } else {
                        let from = if open { due.min(sent_ns) } else { sent_ns };
                        let latency_us = ((done_ns - from) / 1000).max(1);
                        let service_us = ((done_ns - sent_ns) / 1000).max(1);
                        st.c.completed += 1;
                        st.corrected.saturating_record(latency_us);
                        st.service.saturating_record(service_us);
                        win.completed += 1;
                        win.hist.saturating_record(latency_us);
                    }
                    false
                }
                Err(kind) => {
                    // An HTTP/2 connection carries other streams: it is replaced only when
                    // it ends, not when one of its requests fails.
                    if let Lane::Http1(conn) = &mut lane {
                        *conn = None;
                    }
                    st.c.error(kind);
                    win.errors += 1;
                    (kind.is_connect() || kind == ErrorKind::Tls) && !open
                }
            }
        };
        if back_off {
            // Do not spin on a dead server: each connection retries every 10 ms.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn ticker(local: Rc<Local>) {
    let sh = local.sh.clone();
    loop {
        let boundary = sh.start_ns + (local.window_index.get() + 1) * sh.window_ns;
        loop {
            let now = mono_ns();
            if sh.stop.load(Ordering::Relaxed) && !local.stopping.get() {
                local.stopping.set(true);
                let _ = sh.stop_ns.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
            }
            if now >= boundary {
                break;
            }
            tokio::time::sleep(Duration::from_nanos((boundary - now).min(50_000_000))).await;
        }
        local.flush_window(sh.window_ns);
    }
}

/// What a worker has before the schedule is fixed: enough to open its connections.
struct WorkerStart {
    transport: Arc<Transport>,
    protocol: Protocol,
    timeout: Duration,
    streams: u64,
    slots: u64,
    /// Says the connections are open; the schedule (the shared state) comes back.
    ready: mpsc::Sender<usize>,
    schedule: mpsc::Receiver<Arc<Shared>>,
}

/// The lanes of a thread. Over TLS or HTTP/2 their connections are opened before the schedule
/// starts, as wrk and h2load do: a handshake costs milliseconds of CPU on both sides, and dozens
/// of them at the first request's due time would delay the schedule by as much. (A plain TCP
/// connect costs microseconds and is made by the first request.) Connections opened here are
/// counted at once, as those a request opens are when it ends.
async fn open_lanes(w: &WorkerStart, st: &mut ThreadStats) -> Vec<Lane> {
    let t = &w.transport;
    let warm = t.tls.is_some() || w.protocol == Protocol::Http2;
    match w.protocol {
        Protocol::Http2 => {
            let conns: Vec<Rc<H2Conn>> = (0..w.slots / w.streams).map(|_| H2Conn::new()).collect();
            if warm {
                let opening: Vec<_> = conns
                    .iter()
                    .map(|c| {
                        let (c, t, timeout) = (c.clone(), t.clone(), w.timeout);
                        tokio::task::spawn_local(async move {
                            let _ = tokio::time::timeout(timeout, c.open(t.plan.target.addr, t.tls.as_ref())).await;
                        })
                    })
                    .collect();
                for o in opening {
                    let _ = o.await;
                }
                for c in &conns {
                    Lane::Http2(c.clone()).harvest(st);
                }
            }
            (0..w.slots).map(|i| Lane::Http2(conns[(i / w.streams) as usize].clone())).collect()
        }
        Protocol::Http1 if warm => {
            let opening: Vec<_> = (0..w.slots)
                .map(|_| {
                    let (t, timeout) = (t.clone(), w.timeout);
                    tokio::task::spawn_local(async move {
                        tokio::time::timeout(timeout, Conn::connect(t.plan.target.addr, t.tls.as_ref()))
                            .await
                            .ok()?
                            .ok()
                    })
                })
                .collect();
            let mut lanes = Vec::with_capacity(opening.len());
            for o in opening {
                let mut lane = Lane::Http1(o.await.ok().flatten());
                lane.harvest(st);
                lanes.push(lane);
            }
            lanes
        }
        Protocol::Http1 => (0..w.slots).map(|_| Lane::Http1(None)).collect(),
    }
}

fn worker(w: WorkerStart, thread: usize, slot_base: u64, tx: mpsc::Sender<Msg>) {
    // Precise wake-ups for the schedule: no timer slack on this thread.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let set = tokio::task::LocalSet::new();
    let mut warm_stats = ThreadStats::new(0);
    let lanes = set.block_on(&rt, open_lanes(&w, &mut warm_stats));
    let _ = w.ready.send(thread);
    let Ok(sh) = w.schedule.recv() else { return };
    let slots = w.slots;
    warm_stats.end_ns = sh.start_ns;
    let local = Rc::new(Local {
        sh: sh.clone(),
        thread,
        slot_base,
        slots,
        next: Cell::new(0),
        stopping: Cell::new(false),
        inflight: Cell::new(0),
        window_index: Cell::new(0),
        stats: RefCell::new(warm_stats),
        win: RefCell::new(WindowAcc::new()),
        tx,
    });
    set.block_on(&rt, async {
        sleep_until_ns(sh.start_ns).await;
        let mut handles: Vec<_> =
            lanes.into_iter().map(|lane| tokio::task::spawn_local(connection(local.clone(), lane))).collect();
        let tick = tokio::task::spawn_local(ticker(local.clone()));
        let wait_all = async {
            for h in handles.iter_mut() {
                let _ = h.await;
            }
        };
        let on_stop = async {
            loop {
                if local.stopping.get() {
                    tokio::time::sleep(STOP_GRACE).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = wait_all => {}
            _ = on_stop => {}
        }
        for h in &handles {
            h.abort();
        }
        tick.abort();
    });
    drop(set);
    let now = mono_ns();
    let window_start = sh.start_ns + local.window_index.get() * sh.window_ns;
    local.flush_window(now.saturating_sub(window_start).max(1));
    let mut st = local.stats.borrow_mut();
    st.c.unfinished += local.inflight.get();
    let stats = Box::new(std::mem::replace(&mut *st, ThreadStats::new(0)));
    let _ = local.tx.send(Msg::Done { thread, stats });
}

struct PendingWindow {
    reported: Vec<bool>,
    duration_ns: u64,
    acc: WindowAcc,
}

fn run_plan(
    cfg: &LoadConfig,
    transport: Transport,
    stop: Arc<AtomicBool>,
    on_window: &mut dyn FnMut(&Progress),
) -> LoadResult {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = if cfg.threads == 0 { cpus } else { cfg.threads }.clamp(1, cfg.connections);
    let connections = cfg.connections as u64;
    let protocol = transport.protocol;
    let tls_used = transport.tls.is_some();
    let streams = if protocol == Protocol::Http2 { cfg.streams as u64 } else { 1 };
    // Each lane may hold a timerfd, each connection a socket.
    raise_fd_limit(connections * streams);
    let window_ns = cfg.window.as_nanos() as u64;
    let transport = Arc::new(transport);

    // The workers open their connections (over TLS or HTTP/2), say they are ready, and are
    // then given the schedule.
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut joins = Vec::new();
    let mut schedules = Vec::new();
    let mut base = 0u64;
    for t in 0..threads {
        // Threads share out whole connections; an HTTP/2 connection brings its streams.
        let slots = streams * (connections / threads as u64 + u64::from((t as u64) < connections % threads as u64));
        let (schedule_tx, schedule_rx) = mpsc::channel();
        schedules.push(schedule_tx);
        let start = WorkerStart {
            transport: transport.clone(),
            protocol,
            timeout: cfg.timeout,
            streams,
            slots,
            ready: ready_tx.clone(),
            schedule: schedule_rx,
        };
        let tx = tx.clone();
        let slot_base = base;
        base += slots;
        joins.push(
            std::thread::Builder::new()
                .name(format!("onefix-load-{t}"))
                .spawn(move || worker(start, t, slot_base, tx))
                .expect("spawn a load thread"),
        );
    }
    drop((tx, ready_tx));
    for _ in 0..threads {
        let _ = ready_rx.recv();
    }

    // Start a little ahead so that every thread is ready when the schedule begins.
    let start_ns = mono_ns() + 20_000_000;
    let sh = Arc::new(Shared {
        transport,
        start_ns,
        end_ns: cfg.duration.map(|d| start_ns + d.as_nanos() as u64),
        period_ns: cfg.rate.map(|r| 1e9 / r),
        max: cfg.max_requests.unwrap_or(u64::MAX),
        lanes: connections * streams,
        timeout: cfg.timeout,
        window_ns,
        stop,
        stop_ns: AtomicU64::new(0),
        closed_next: AtomicU64::new(0),
    });
    for s in schedules {
        let _ = s.send(sh.clone());
    }

    let mut done = vec![false; threads];
    let mut pending: BTreeMap<u64, PendingWindow> = BTreeMap::new();
    let mut windows = Vec::new();
    let mut thread_stats = Vec::new();
    let (mut sent, mut completed, mut errors) = (0u64, 0u64, 0u64);
    for msg in rx {
        match msg {
            Msg::Window { thread, index, duration_ns, acc } => {
                let p = pending.entry(index).or_insert_with(|| PendingWindow {
                    reported: vec![false; threads],
                    duration_ns: 0,
                    acc: WindowAcc::new(),
                });
                p.reported[thread] = true;
                p.duration_ns = p.duration_ns.max(duration_ns);
                p.acc.sent += acc.sent;
                p.acc.completed += acc.completed;
                p.acc.errors += acc.errors;
                let _ = p.acc.hist.add(&acc.hist);
            }
            Msg::Done { thread, stats } => {
                done[thread] = true;
                thread_stats.push(stats);
            }
        }
        while let Some(entry) = pending.first_entry() {
            let ready = entry.get().reported.iter().zip(&done).all(|(r, d)| *r || *d);
            if !ready {
                break;
            }
            let (index, p) = entry.remove_entry();
            let duration_s = p.duration_ns as f64 / 1e9;
            let w = Window {
                start_s: (index * window_ns) as f64 / 1e9,
                duration_s,
                sent: p.acc.sent,
                completed: p.acc.completed,
                errors: p.acc.errors,
                rps: if duration_s > 0.0 { p.acc.completed as f64 / duration_s } else { 0.0 },
                latency_ms: stats::summarize_window(&p.acc.hist),
            };
            sent += w.sent;
            completed += w.completed;
            errors += w.errors;
            on_window(&Progress { elapsed_s: w.start_s + w.duration_s, window: w.clone(), sent, completed, errors });
            // Trailing windows with nothing in them (the drain after an interruption) add nothing.
            windows.push(w);
        }
    }
    for j in joins {
        let _ = j.join();
    }
    while windows.last().is_some_and(|w| w.sent == 0 && w.completed == 0 && w.errors == 0) && windows.len() > 1 {
        windows.pop();
    }

    let mut c = Counters::default();
    let mut corrected = stats::new_histogram();
    let mut service = stats::new_histogram();
    let mut handshake = stats::new_histogram();
    let mut end_ns = start_ns;
    for s in &thread_stats {
        c.merge(&s.c);
        let _ = corrected.add(&s.corrected);
        let _ = service.add(&s.service);
        let _ = handshake.add(&s.handshake);
        end_ns = end_ns.max(s.end_ns);
    }
    let mut elapsed_ns = end_ns - start_ns;
    let stop_ns = sh.stop_ns.load(Ordering::Relaxed);
    let (scheduled, unsent) = match sh.period_ns {
        Some(period) => {
            let mut horizon = sh.end_ns.unwrap_or(u64::MAX);
            if stop_ns != 0 {
                horizon = horizon.min(stop_ns);
            }
            let due = if horizon == u64::MAX {
                u64::MAX
            } else {
                ((horizon.saturating_sub(start_ns)) as f64 / period).ceil() as u64
            };
            let scheduled = due.min(sh.max);
            if due < sh.max && horizon != u64::MAX {
                // The schedule ran to its end: the run lasted at least that long.
                elapsed_ns = elapsed_ns.max(horizon - start_ns);
            }
            (scheduled, scheduled.saturating_sub(c.sent))
        }
        None => (c.sent, 0),
    };
    let elapsed_s = (elapsed_ns as f64 / 1e9).max(1e-9);
    let spec = &cfg.request;
    LoadResult {
        format: stats::FORMAT.to_string(),
        url: spec.url.clone(),
        method: spec.method.clone(),
        mode: if cfg.rate.is_some() { "open" } else { "closed" }.to_string(),
        target_rps: cfg.rate,
        duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        max_requests: cfg.max_requests,
        connections,
        threads: threads as u64,
        keep_alive: spec.keep_alive,
        seed: spec.seed,
        timeout_s: cfg.timeout.as_secs_f64(),
        elapsed_s,
        scheduled,
        sent: c.sent,
        completed: c.completed,
        unsent,
        unfinished: c.unfinished,
        errors: c.errors(),
        status_codes: c.status_codes(),
        achieved_rps: c.completed as f64 / elapsed_s,
        bytes_sent: c.bytes_sent,
        bytes_received: c.bytes_received,
        connections_opened: c.connections_opened,
        latency_ms: stats::summarize(&corrected),
        service_time_ms: stats::summarize(&service),
        windows,
        protocol: protocol.name().to_string(),
        streams,
        tls: tls_used.then(|| TlsSummary {
            handshakes: c.handshakes,
            resumed: c.resumed,
            handshake_ms: stats::summarize(&handshake),
        }),
        latency_histogram: stats::histogram_buckets(&corrected),
        unloaded: None,
    }
}
