//! onefix-load: an open-loop HTTP load generator with templated requests, HDR latency
//! histograms corrected for coordinated omission, and a before/after comparison with statistics.
//!
//! - [`template`]: the `{{...}}` placeholders drawn per request from a seeded generator.
//! - [`request`]: the target and the bytes of each request.
//! - [`http`]: a lean HTTP/1.1 client connection.
//! - [`tls`]: HTTPS with rustls: trust, ALPN, session tickets, and the probe that explains a
//!   server that cannot be loaded over TLS.
//! - [`h2conn`]: HTTP/2 with the `h2` crate, many streams on a connection.
//! - [`engine`]: worker threads, the schedule, the monitor; [`run`] is the entry point.
//! - [`stats`]: counters, histograms and the JSON result ([`LoadResult`]).
//! - [`summary`]: the terminal summary and progress line.
//! - [`compare`]: two results side by side, Welch's t-test and a bootstrap interval.

pub mod compare;
pub mod engine;
pub mod h2conn;
pub mod http;
pub mod request;
pub mod stats;
pub mod summary;
pub mod template;
mod timer;
pub mod tls;

pub use engine::{check_reachable, probe_unloaded, run, target_addr, wait_until_listening, LoadConfig, Progress};
pub use request::RequestSpec;
pub use stats::{ErrorKind, Errors, HistogramBucket, LatencySummary, LoadResult, TlsSummary, Unloaded, Window};
pub use tls::{Protocol, TlsOptions};

/// The JSON Schema that every `--json` result satisfies.
pub const RESULT_SCHEMA: &str = include_str!("../schema/load-result.schema.json");

/// Why a load could not run, in one sentence.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Invalid options, URL or template.
    #[error("{0}")]
    Input(String),
    /// Nothing answers at the target.
    #[error("{0}")]
    Unreachable(String),
}
