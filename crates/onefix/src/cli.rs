//! The command line, and nothing else: clap turns it into plain option structs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "onefix", version, about = "Profile a program and name the one line that makes it slow, why, and the fix")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Sample a program (spawned with `-- CMD...` or attached with --pid) and report findings.
    Record(RecordArgs),
    /// Render a saved recording again: findings and any output format.
    Report(ReportArgs),
    /// Drive an HTTP server with an open-loop (or closed-loop) load and measure its latency.
    #[command(after_long_help = onefix_load::template::HELP)]
    Load(LoadArgs),
    /// Say whether B is faster than A: two load results (`onefix load --json`), with statistics.
    Compare(CompareArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Every thread at every tick, running or waiting: blocked time is charged to the line that waits.
    Wall,
    /// Only threads running on a CPU.
    Cpu,
}

/// Output files, shared by `record` and `report`.
#[derive(Args, Clone, Debug, Default)]
pub struct OutputArgs {
    /// Findings as JSON (the documented contract).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Flame graph SVG.
    #[arg(long, value_name = "PATH")]
    pub flamegraph: Option<PathBuf>,
    /// speedscope JSON (open it at speedscope.app or in the speedscope CLI).
    #[arg(long, value_name = "PATH")]
    pub speedscope: Option<PathBuf>,
    /// Collapsed stacks, one line per stack, for the classic flame graph tools.
    #[arg(long, value_name = "PATH")]
    pub folded: Option<PathBuf>,
    /// Directory holding your own code (repeatable); default: the target's working directory
    /// and the script's directory.
    #[arg(long = "user-code", value_name = "DIR")]
    pub user_code: Vec<PathBuf>,
    /// No progress line, only the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Attach to this running process instead of starting one.
    #[arg(long, short, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Stop after this long (e.g. 30s, 2m, 500ms); default: until the program exits or Ctrl-C.
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Samples per second.
    #[arg(long, short, default_value_t = 100.0, value_parser = parse_rate)]
    pub rate: f64,
    #[arg(long, value_enum, default_value_t = ModeArg::Wall)]
    pub mode: ModeArg,
    /// Merge native (C extension) frames into Python stacks; pauses the target while reading.
    #[arg(long)]
    pub native: bool,
    /// Keep only the thread holding the GIL.
    #[arg(long)]
    pub gil: bool,
    /// Also sample child Python processes (workers, pools).
    #[arg(long)]
    pub subprocesses: bool,
    /// Where to save the recording; default: onefix-NAME-TIME.onefix in the current directory.
    #[arg(long, short, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Seed of the sampling-interval jitter.
    #[arg(long, default_value_t = 0x0f1f)]
    pub seed: u64,
    /// Track allocations instead of time: an agent preloaded into the program samples about one
    /// allocation per --memory-rate bytes; findings name the lines that retain memory or churn
    /// it. Python programs run with PYTHONMALLOC=malloc (about +30% CPU) so objects are seen.
    #[arg(long)]
    pub memory: bool,
    /// Mean bytes allocated between two allocation samples (e.g. 512k, 64k, 1m).
    #[arg(long, value_name = "BYTES", default_value = "512k", value_parser = parse_bytes)]
    pub memory_rate: u64,
    #[command(flatten)]
    pub memory_view: MemoryViewArgs,
    #[command(flatten)]
    pub outputs: OutputArgs,
    /// The program to start and profile.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Which bytes the flame graph, speedscope and folded outputs of a memory recording weigh.
#[derive(Args, Clone, Copy, Debug)]
pub struct MemoryViewArgs {
    /// For memory recordings: `retained` (live at the heap's peak) or `allocated` (every byte).
    #[arg(long, value_enum, default_value_t = MemoryViewArg::Retained)]
    pub memory_view: MemoryViewArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MemoryViewArg {
    /// Bytes live at the peak of the sampled heap, by the stack that allocated them.
    Retained,
    /// Every byte allocated during the recording.
    Allocated,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A recording written by `onefix record`.
    pub recording: PathBuf,
    /// Weigh samples as wall time or CPU time; default: the mode it was recorded in.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    #[command(flatten)]
    pub memory_view: MemoryViewArgs,
    #[command(flatten)]
    pub outputs: OutputArgs,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The URL template: http://HOST:PORT/PATH?QUERY, with {{...}} placeholders in the path and
    /// query drawn per request (see the template syntax below).
    #[arg(value_name = "URL_TEMPLATE")]
    pub url: String,
    /// Requests per second on a fixed schedule (open loop: latency counts from each request's
    /// due time), or `max` to send each request as soon as the connection's previous answer
    /// arrives (closed loop).
    #[arg(long, short, default_value = "max", value_parser = parse_load_rate)]
    pub rate: LoadRate,
    /// How long to send (e.g. 30s, 2m); default 10s, or until --max-requests are done.
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many requests.
    #[arg(long = "max-requests", short = 'n', value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: Option<u64>,
    /// Connections kept open to the server (each has one request in flight at a time).
    #[arg(long, short, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub connections: u64,
    /// Worker threads; default one per CPU.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    pub method: String,
    /// A request header, 'Name: value' (repeatable); the value may hold placeholders.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The request body template, or @FILE to read it from FILE.
    #[arg(long, value_name = "TEMPLATE")]
    pub body: Option<String>,
    /// Open a new connection for every request (measures the cost of connecting).
    #[arg(long)]
    pub new_connection_per_request: bool,
    /// Limit on each request, connecting included.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Seed of the values the templates draw: the same seed sends the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the result as JSON (the schema is crates/onefix-load/schema/load-result.schema.json).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// No progress line, only the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Requests per second, or `None` for `max`.
#[derive(Clone, Copy, Debug)]
pub struct LoadRate(pub Option<f64>);

fn parse_load_rate(s: &str) -> Result<LoadRate, String> {
    if s.trim().eq_ignore_ascii_case("max") {
        return Ok(LoadRate(None));
    }
    let rate: f64 = s
        .trim()
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("`{s}` is not a rate: give requests per second (e.g. 1000) or `max`"))?;
    if !(rate.is_finite() && rate > 0.0 && rate <= 1e8) {
        return Err(format!("the rate must be above 0 and at most 100000000 requests per second, not {s}"));
    }
    Ok(LoadRate(Some(rate)))
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The result before the change (`onefix load --json`).
    pub a: PathBuf,
    /// The result after the change.
    pub b: PathBuf,
    /// Write the comparison as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// `30s`, `2m`, `1h`, `500ms`, or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let value: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a duration (try 30s, 2m or 500ms)"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" | "sec" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("`{s}` has an unknown unit (use ms, s, m or h)")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("`{s}` must be a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `524288`, `512k`, `4m`, `1g` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.trim_end_matches('b').trim_end_matches('i');
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let value: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a number of bytes (try 512k, 64k or 1m)"))?;
    let bytes = value * mult as f64;
    if !(bytes.is_finite() && (1.0..=(1u64 << 40) as f64).contains(&bytes)) {
        return Err(format!("the memory rate must be between 1 byte and 1 TiB, not {s}"));
    }
    Ok(bytes as u64)
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a rate in samples per second"))?;
    if !(rate.is_finite() && (1.0..=10_000.0).contains(&rate)) {
        return Err(format!("the rate must be between 1 and 10000 samples per second, not {s}"));
    }
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_reject_nonsense() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_rate("1000"), Ok(1000.0));
        assert_eq!(parse_bytes("512k"), Ok(512 * 1024));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err());
    }
}
