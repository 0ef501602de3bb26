//! What a run measured: counters, HDR latency histograms (memory flat, nothing kept per
//! request), per-window summaries, and the result written as JSON.

use std::collections::{BTreeMap, HashMap};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The format tag of a load result; bump the number on an incompatible change.
pub const FORMAT: &str = "onefix-load-result/1";

/// Why a request did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Nothing listening: the connection was refused.
    ConnectRefused,
    /// The connection was not established in time.
    ConnectTimeout,
    /// Any other failure to connect (unreachable network, no ports left, ...).
    ConnectOther,
    /// No complete response within the timeout.
    Timeout,
    /// The server closed or reset the connection before the response was complete.
    Closed,
    /// The response was not HTTP (garbage, a malformed head or body framing).
    Protocol,
    /// Another I/O error.
    Io,
    /// The TLS handshake failed (a certificate that does not verify, a server that is not TLS).
    Tls,
    /// A complete response with a status of 400 or more.
    Status(u16),
}

const TRANSPORT_KINDS: usize = 8;

impl ErrorKind {
    fn index(self) -> Option<usize> {
        Some(match self {
            ErrorKind::ConnectRefused => 0,
            ErrorKind::ConnectTimeout => 1,
            ErrorKind::ConnectOther => 2,
            ErrorKind::Timeout => 3,
            ErrorKind::Closed => 4,
            ErrorKind::Protocol => 5,
            ErrorKind::Io => 6,
            ErrorKind::Tls => 7,
            ErrorKind::Status(_) => return None,
        })
    }

    pub fn is_connect(self) -> bool {
        matches!(self, ErrorKind::ConnectRefused | ErrorKind::ConnectTimeout | ErrorKind::ConnectOther)
    }
}

/// Errors by kind, as in the JSON result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Errors {
    pub total: u64,
    pub connect_refused: u64,
    pub connect_timeout: u64,
    pub connect_other: u64,
    pub timeout: u64,
    pub closed: u64,
    pub protocol: u64,
    pub io: u64,
    /// TLS handshakes that failed. Absent from results written before HTTPS.
    #[serde(default)]
    pub tls: u64,
    /// Responses with a status of 400 or more, by status code.
    pub status: BTreeMap<String, u64>,
}

impl Errors {
    /// The non-zero kinds, in a fixed order, with their human names.
    pub fn kinds(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = [
            ("connection refused", self.connect_refused),
            ("connect timeout", self.connect_timeout),
            ("connect failed", self.connect_other),
            ("timeout", self.timeout),
            ("closed by the server", self.closed),
            ("not HTTP (protocol error)", self.protocol),
            ("I/O error", self.io),
            ("TLS handshake failed", self.tls),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        for (code, n) in &self.status {
            v.push((format!("status {code}"), *n));
        }
        v
    }
}

/// Latency percentiles and moments, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub stddev: f64,
}

/// One window (a second, by default) of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Start, in seconds from the start of the run.
    pub start_s: f64,
    /// Length in seconds (the last window may be shorter).
    pub duration_s: f64,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    /// Completed responses per second in this window.
    pub rps: f64,
    /// Latency of the responses completed in this window.
    pub latency_ms: WindowLatency,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowLatency {
    pub mean: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The whole result of a load run: what `--json` writes and `compare` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    /// Always `onefix-load-result/1`.
    pub format: String,
    /// The URL template as given.
    pub url: String,
    pub method: String,
    /// `open` (a fixed schedule at `target_rps`) or `closed` (each connection sends as soon as
    /// its previous response arrives).
    pub mode: String,
    pub target_rps: Option<f64>,
    pub duration_s: Option<f64>,
    pub max_requests: Option<u64>,
    pub connections: u64,
    pub threads: u64,
    pub keep_alive: bool,
    pub seed: u64,
    pub timeout_s: f64,
    /// From the start to the last response, in seconds.
    pub elapsed_s: f64,
    /// Requests due by the schedule before the end (open loop), or attempted (closed loop).
    pub scheduled: u64,
    /// Requests attempted: each ends completed, in error, or unfinished.
    pub sent: u64,
    /// Requests answered with a complete response whose status is below 400.
    pub completed: u64,
    /// Requests due before the end that were never sent: every connection was busy.
    pub unsent: u64,
    /// Requests still in flight when the run was interrupted.
    pub unfinished: u64,
    pub errors: Errors,
    /// Every complete response, by status code.
    pub status_codes: BTreeMap<String, u64>,
    /// Completed requests per second over the elapsed time.
    pub achieved_rps: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// TCP connections opened: the connections asked for, plus every one a server closed (or
    /// answered `Connection: close` on) and a request had to open again. Absent from results
    /// written before it was counted.
    #[serde(default)]
    pub connections_opened: u64,
    /// Latency of completed requests, from the time each was due to be sent (corrected for
    /// coordinated omission), to the end of its response.
    pub latency_ms: LatencySummary,
    /// Latency from the moment each request was actually sent (uncorrected): the server's
    /// service time as the client saw it.
    pub service_time_ms: LatencySummary,
    pub windows: Vec<Window>,
    /// `HTTP/1.1` or `HTTP/2`. Absent from results written before HTTP/2 (they are HTTP/1.1).
    #[serde(default = "http1")]
    pub protocol: String,
    /// Requests in flight on each connection at once (HTTP/2 streams; 1 for HTTP/1.1).
    #[serde(default = "one")]
    pub streams: u64,
    /// TLS handshakes, over HTTPS; `null` over plain HTTP.
    #[serde(default)]
    pub tls: Option<TlsSummary>,
    /// The corrected latency (`latency_ms`) in equal-width buckets from the fastest to the
    /// slowest response, as the terminal draws it.
    #[serde(default)]
    pub latency_histogram: Vec<HistogramBucket>,
    /// Before an open-loop load driven by `record --load`: a few requests sent one at a time,
    /// so that none queues. Their latency is the floor the load's latency cannot go below
    /// (the client, the network, the server's own work), which a queueing model of the server
    /// needs. Absent when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unloaded: Option<Unloaded>,
}

/// Requests sent one at a time on one connection before a load (see [`LoadResult::unloaded`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unloaded {
    /// Requests answered.
    pub completed: u64,
    /// Their latency, from the moment each was sent.
    pub latency_ms: LatencySummary,
    /// The server's CPU time per request meanwhile, when the server's process was known
    /// (`record --load`) and ran long enough for its CPU time to be counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_ms: Option<f64>,
}

fn http1() -> String {
    "HTTP/1.1".to_string()
}

fn one() -> u64 {
    1
}

/// The TLS handshakes of a run, counted apart from the requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsSummary {
    /// Handshakes completed: one per connection opened over TLS.
    pub handshakes: u64,
    /// Of those, abbreviated ones that resumed an earlier session from its ticket.
    pub resumed: u64,
    /// Time from the TCP connection to the end of the handshake.
    pub handshake_ms: LatencySummary,
}

/// One bucket of the latency histogram: responses with `from_ms < latency <= to_ms` (the first
/// bucket includes its lower edge).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramBucket {
    pub from_ms: f64,
    pub to_ms: f64,
    pub count: u64,
}

/// How many buckets the histogram has, as oha draws it.
pub const HISTOGRAM_BUCKETS: usize = 11;

/// Equal-width buckets from the smallest to the largest value of `h` (microseconds).
pub fn histogram_buckets(h: &Histogram<u64>) -> Vec<HistogramBucket> {
    if h.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (h.min(), h.max());
    // HDR values are the low ends of their bucket: use their highest equivalents as the top.
    let hi = h.highest_equivalent(hi).max(lo);
    let step = ((hi - lo) as f64 / HISTOGRAM_BUCKETS as f64).max(1.0);
    let mut buckets: Vec<HistogramBucket> = (0..HISTOGRAM_BUCKETS)
        .map(|i| HistogramBucket {
            from_ms: ms(lo as f64 + step * i as f64),
            to_ms: ms(lo as f64 + step * (i + 1) as f64),
            count: 0,
        })
        .collect();
    for v in h.iter_recorded() {
        let value = h.highest_equivalent(v.value_iterated_to()).min(hi);
        let i = (((value - lo) as f64 / step).ceil() as usize).saturating_sub(1).min(HISTOGRAM_BUCKETS - 1);
        buckets[i].count += v.count_at_value();
    }
    buckets
}

/// Histograms count microseconds, up to an hour, with 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn ms(us: f64) -> f64 {
    us / 1000.0
}

pub fn summarize(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        p50: ms(h.value_at_quantile(0.50) as f64),
        p90: ms(h.value_at_quantile(0.90) as f64),
        p99: ms(h.value_at_quantile(0.99) as f64),
        p999: ms(h.value_at_quantile(0.999) as f64),
        min: ms(h.min() as f64),
        max: ms(h.max() as f64),
        mean: ms(h.mean()),
        stddev: ms(h.stdev()),
    }
}

pub fn summarize_window(h: &Histogram<u64>) -> WindowLatency {
    if h.is_empty() {
        return WindowLatency::default();
    }
    WindowLatency {
        mean: ms(h.mean()),
        stddev: ms(h.stdev()),
        p50: ms(h.value_at_quantile(0.50) as f64),
        p90: ms(h.value_at_quantile(0.90) as f64),
        p99: ms(h.value_at_quantile(0.99) as f64),
        max: ms(h.max() as f64),
    }
}

/// Counters kept by one worker thread.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    pub unfinished: u64,
    pub transport: [u64; TRANSPORT_KINDS],
    pub bad_status: HashMap<u16, u64>,
    pub status_codes: HashMap<u16, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub connections_opened: u64,
    pub handshakes: u64,
    pub resumed: u64,
}

impl Counters {
    pub fn error(&mut self, kind: ErrorKind) {
        self.errors += 1;
        match kind.index() {
            Some(i) => self.transport[i] += 1,
            None => {
                if let ErrorKind::Status(code) = kind {
                    *self.bad_status.entry(code).or_default() += 1;
                }
            }
        }
    }

    pub fn merge(&mut self, o: &Counters) {
        self.sent += o.sent;
        self.completed += o.completed;
        self.errors += o.errors;
        self.unfinished += o.unfinished;
        for (a, b) in self.transport.iter_mut().zip(o.transport) {
            *a += b;
        }
        for (k, v) in &o.bad_status {
            *self.bad_status.entry(*k).or_default() += v;
        }
        for (k, v) in &o.status_codes {
            *self.status_codes.entry(*k).or_default() += v;
        }
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.connections_opened += o.connections_opened;
        self.handshakes += o.handshakes;
        self.resumed += o.resumed;
    }

    pub fn errors(&self) -> Errors {
        let t = &self.transport;
        Errors {
            total: self.errors,
            connect_refused: t[0],
            connect_timeout: t[1],
            connect_other: t[2],
            timeout: t[3],
            closed: t[4],
            protocol: t[5],
            io: t[6],
            tls: t[7],
            status: self.bad_status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    pub fn status_codes(&self) -> BTreeMap<String, u64> {
        self.status_codes.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }
}
