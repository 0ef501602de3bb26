//! The command line, and nothing else: clap turns it into plain option structs.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "onefix",
    version,
    about = "Profile a program and name the one line that makes it slow, why, and the fix"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once and moved into its command: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Sample a program (spawned with `-- CMD...` or attached with --pid) and report findings.
    ///
    /// The findings are printed on stdout when it is a terminal; otherwise (a file, a pipe, CI)
    /// on stderr, since a program onefix starts writes its own output to the same stdout.
    Record(RecordArgs),
    /// Render a saved recording again: findings and any output format.
    Report(ReportArgs),
    /// Drive an HTTP server with an open-loop (or closed-loop) load and measure its latency.
    #[command(after_long_help = onefix_load::template::HELP)]
    Load(LoadArgs),
    /// Say whether B is faster than A, with statistics: two load results (`onefix load --json`),
    /// two recordings (a batch program's run times first; which lines' cost went down or up, and
    /// their loads if `--load` drove them), or two commands timed in interleaved runs (`--runs`).
    Compare(CompareArgs),
    /// A live view of a running program, redrawn every second: its hottest lines, the current
    /// findings and its threads' states. `q` or Ctrl-C quits.
    Top(TopArgs),
    /// Every thread's stack in a running process now (Python with --locals, or native), then
    /// its deadlocks: which thread waits at which line for the lock which other thread holds.
    Dump(DumpArgs),
    /// Shell completions and man pages, generated from this command line (for packagers).
    Generate(GenerateArgs),
    /// Always-on profiling of running processes at a low rate, each interval uploaded to
    /// ClickHouse (spooled to a bounded directory while it is away).
    Agent(AgentArgs),
    /// The fleet's store in ClickHouse: create its schema, report the findings of a service
    /// across its hosts, compare two deploys.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Removes a recording's temporary directories once onefix and its target have ended
    /// (started by onefix itself; not for people).
    #[command(hide = true)]
    Janitor(JanitorArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Every thread at every tick, running or waiting: blocked time is charged to the line that waits.
    Wall,
    /// Only threads running on a CPU.
    Cpu,
}

/// Output files, shared by `record` and `report`. Each is written to a temporary file beside it
/// and renamed into place when complete; `-` is standard output (not for --pprof). A file onefix
/// creates is 0600 (readable by you alone, like perf.data).
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
    /// pprof profile (gzipped protobuf), for `go tool pprof`, Pyroscope or Parca.
    #[arg(long, value_name = "PATH")]
    pub pprof: Option<PathBuf>,
    /// One self-contained HTML report (findings, flame graphs, timeline, hot lines with source)
    /// that opens in a browser with no network.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// The Firefox Profiler's processed format (open it at profiler.firefox.com): threads, their
    /// states, wall and CPU time, and the findings as markers.
    #[arg(long, value_name = "PATH")]
    pub firefox: Option<PathBuf>,
    /// SARIF 2.1.0: each finding a result at its file and line, for code scanning (GitHub's
    /// upload-sarif annotates the line in the pull request). Files under the current directory
    /// are written relative to it.
    #[arg(long, value_name = "PATH")]
    pub sarif: Option<PathBuf>,
    /// Exit with status 3, after writing every output, when a finding meets CONDITION:
    /// `share>20%` (or `share>=0.2`), or `kind=n-plus-one-query,repeated-setup`. Repeatable:
    /// any condition met fails.
    #[arg(long = "fail-on", value_name = "CONDITION", value_parser = parse_fail_on)]
    pub fail_on: Vec<onefix_diagnose::gate::FailOn>,
    /// Directory holding your own code (repeatable); default: the target's working directory
    /// and the script's directory. A directory of an installed package or of the standard
    /// library counts too: the maintainer's view of that code.
    #[arg(long = "user-code", value_name = "DIR")]
    pub user_code: Vec<PathBuf>,
    /// An installed package to take as your code, by import, distribution or crate name
    /// (repeatable): the maintainer's view, without finding its directory.
    #[arg(long = "package", value_name = "NAME")]
    pub packages: Vec<String>,
}

fn parse_fail_on(s: &str) -> Result<onefix_diagnose::gate::FailOn, String> {
    s.parse().map_err(|e: onefix_diagnose::gate::FailOnError| e.to_string())
}

/// `5%` or `0.05`: a slowdown B may have over A.
fn parse_slowdown_limit(s: &str) -> Result<f64, String> {
    onefix_diagnose::gate::parse_fraction(s)
        .ok_or_else(|| format!("`{s}` is not a limit: give a percentage such as 5% (or a fraction such as 0.05)"))
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// No progress line while recording and no notes on where the recording went: only the
    /// summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// Attach to this running process instead of starting one.
    #[arg(long, short, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Stop after this long (e.g. 30s, 2m, 500ms); default: until the program exits or Ctrl-C.
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Samples per second.
    #[arg(long, short, default_value_t = 100.0, value_parser = parse_rate, allow_negative_numbers = true)]
    pub rate: f64,
    #[arg(long, value_enum, default_value_t = ModeArg::Wall)]
    pub mode: ModeArg,
    /// Merge native (C extension) frames into Python stacks; pauses the target while reading.
    #[arg(long)]
    pub native: bool,
    /// Keep only the thread holding the GIL.
    #[arg(long)]
    pub gil: bool,
    /// Sample only the process started or attached, not its children: by default child Python
    /// processes (pre-fork workers, pools, a shell's children) are sampled too.
    #[arg(long)]
    pub no_subprocesses: bool,
    /// Sample child Python processes too (the default; kept for py-spy's users).
    #[arg(long, hide = true, conflicts_with = "no_subprocesses")]
    pub subprocesses: bool,
    /// Native programs: bytes of each thread's stack copied per sample, to unwind from (up to
    /// 65528). A function with a larger frame cuts the stack short there.
    #[arg(long, default_value_t = 32 * 1024, value_parser = clap::value_parser!(u32).range(1024..=65528))]
    pub stack_bytes: u32,
    /// Where to save the recording; default: onefix-NAME-2026-12-01T13-05-22.onefix here. It is
    /// written as it goes to PATH.partial and renamed onto PATH when complete. A path ending in
    /// .svg, .html, .pb.gz, .pprof, .folded, .txt, .sarif or .speedscope.json gets that output instead
    /// (the recording keeps its default name). A device or FIFO (/dev/null) is written through;
    /// a symbolic link is written through to its target when that is a regular file you can
    /// write, and the link is kept. onefix never removes or truncates a file it did not create.
    /// In a directory others can write (/tmp), it follows no link and writes no file that is
    /// not root's or yours. Files it creates are 0600, readable by you alone, like perf.data.
    #[arg(long, short, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Keep no recording: only the report and the outputs asked for.
    #[arg(long)]
    pub no_save: bool,
    /// Seed of the sampling-interval jitter.
    #[arg(long, default_value_t = 0x0f1f)]
    pub seed: u64,
    /// Drive the started server with this load and profile it for exactly the load's duration:
    /// the arguments of `onefix load` as one string, e.g. "http://127.0.0.1:8000/?q={{int 1
    /// 100}} --rate 200 --duration 20s". onefix waits until the server's port answers first.
    #[arg(long, value_name = "LOAD", value_parser = parse_load_spec)]
    pub load: Option<LoadSpec>,
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
pub struct TopArgs {
    /// Watch this running process instead of starting one.
    #[arg(long, short, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Samples per second.
    #[arg(long, short, default_value_t = 100.0, value_parser = parse_rate)]
    pub rate: f64,
    #[arg(long, value_enum, default_value_t = ModeArg::Wall)]
    pub mode: ModeArg,
    /// Seconds of the past the view covers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub window: Duration,
    /// Stop by itself after this long.
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Save what was seen as a recording (render it later with `onefix report`).
    #[arg(long, short, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Directory holding your own code (repeatable); default: the target's working directory
    /// and the script's directory.
    #[arg(long = "user-code", value_name = "DIR")]
    pub user_code: Vec<PathBuf>,
    /// An installed package to take as your code, by import, distribution or crate name
    /// (repeatable), as `record --package` takes it.
    #[arg(long = "package", value_name = "NAME")]
    pub packages: Vec<String>,
    /// The program to start and watch.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// The running process to read.
    #[arg(long, short)]
    pub pid: u32,
    /// Also read each Python frame's arguments and local variables.
    #[arg(long)]
    pub locals: bool,
    /// Merge native (C extension) frames into Python stacks.
    #[arg(long)]
    pub native: bool,
    /// Write the threads and the deadlock analysis as JSON (`-`: standard output, instead of
    /// the text); the schema is crates/onefix-report/schema/dump.schema.json.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Directory holding your own code (repeatable): the line each thread waits at is its
    /// deepest frame there. Default: the process's working directory and its script's.
    #[arg(long = "user-code", value_name = "DIR")]
    pub user_code: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A recording written by `onefix record`, or a profile recorded elsewhere: pprof (`.pb.gz`),
    /// folded stacks, speedscope JSON, or a pprof URL (http://HOST/debug/pprof/profile?seconds=10).
    /// A profile from elsewhere, file or URL, is read whole, up to 512 MiB; a recording is read as
    /// a stream, of any size.
    #[arg(value_name = "RECORDING|PROFILE|URL")]
    pub recording: PathBuf,
    /// Weigh samples as wall time or CPU time; default: the mode it was recorded in.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    #[command(flatten)]
    pub memory_view: MemoryViewArgs,
    #[command(flatten)]
    pub outputs: OutputArgs,
    /// Accepted for scripts written when `report` shared `record`'s options: a report prints
    /// no progress line, so there is nothing to quiet.
    #[arg(long, short, hide = true)]
    pub quiet: bool,
}

#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// The URL template: http[s]://HOST:PORT/PATH?QUERY, with {{...}} placeholders in the path
    /// and query drawn per request (see the template syntax below).
    #[arg(value_name = "URL_TEMPLATE")]
    pub url: String,
    /// Requests per second on a fixed schedule (open loop: latency counts from each request's
    /// due time), or `max` to send each request as soon as the connection's previous answer
    /// arrives (closed loop).
    #[arg(long, short, default_value = "max", value_parser = parse_load_rate, allow_negative_numbers = true)]
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
    /// HTTPS: trust the certificates in this PEM file instead of the system's store.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// HTTPS: accept any certificate (a self-signed test server); the handshake is still signed.
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// Send HTTP/2 (over https, refused if the server does not agree in ALPN; over http://,
    /// h2c with prior knowledge). Over https without it, HTTP/2 is used when the server chooses it.
    #[arg(long, conflicts_with = "http1")]
    pub http2: bool,
    /// Send HTTP/1.1 even to an https server that offers HTTP/2.
    #[arg(long = "http1.1", id = "http1")]
    pub http1: bool,
    /// HTTP/2 streams in flight at once on each connection (requests at once = connections ×
    /// streams).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub streams: u64,
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

/// The load of `record --load`: `onefix load`'s arguments, given as one string.
#[derive(Clone, Debug)]
pub struct LoadSpec(pub LoadArgs);

#[derive(Parser)]
#[command(name = "--load")]
struct LoadSpecParser {
    #[command(flatten)]
    args: LoadArgs,
}

pub(crate) fn parse_load_spec(s: &str) -> Result<LoadSpec, String> {
    let split = shlex::split(s).ok_or_else(|| format!("the load `{s}` has an unclosed quote"))?;
    // A placeholder such as {{int 1 100}} is one argument even when the user did not quote it.
    let mut words: Vec<String> = Vec::new();
    let mut open = false;
    for w in split {
        match words.last_mut() {
            Some(last) if open => {
                last.push(' ');
                last.push_str(&w);
            }
            _ => words.push(w),
        }
        let last = words.last().map(String::as_str).unwrap_or("");
        open = last.matches("{{").count() > last.matches("}}").count();
    }
    LoadSpecParser::try_parse_from(std::iter::once("--load".to_owned()).chain(words)).map(|p| LoadSpec(p.args)).map_err(
        |e| {
            // clap's own message, without its usage lines: one sentence.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_owned();
            format!("in the load: {first}")
        },
    )
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
#[command(after_help = "Two files: `onefix compare before.onefix after.onefix`. Two commands, timed as hyperfine \
times them: `onefix compare --runs 10 -- python3 old.py ::: python3 new.py` (one argument holding a space is \
run by sh -c). Their output is discarded; a command that fails ends the comparison.")]
pub struct CompareArgs {
    /// Before the change: a load result (`onefix load --json`) or a recording.
    #[arg(required_unless_present = "commands")]
    pub a: Option<PathBuf>,
    /// After the change: the same kind of file as A.
    #[arg(required_unless_present = "commands")]
    pub b: Option<PathBuf>,
    /// Write the comparison as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// For two recordings: one HTML page with both side by side and their differential flame graph.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// A CI gate: exit with status 3 when B is slower than A by more than LIMIT (e.g. 5%) with
    /// 95% confidence, saying why in one line. Load results and recordings made with --load
    /// are judged by their primary metric; two runs that went to their end (a batch program) by
    /// their wall time (repeated runs by their test and interval; one run each by the ratio of
    /// the two, beyond what one run can differ by on its own); other recordings by each line's
    /// cost.
    #[arg(long = "fail-if-slower", value_name = "LIMIT", value_parser = parse_slowdown_limit)]
    pub fail_if_slower: Option<f64>,
    /// With commands: time each this many times, A and B alternating after the warm-up, so
    /// that the machine's drift falls on both.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub runs: u32,
    /// With commands: untimed runs of each before the timed ones (caches, the page cache).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub warmup: u32,
    /// With commands: time them only; by default one more run of each is recorded, to say
    /// which lines' time went away.
    #[arg(long)]
    pub no_profile: bool,
    /// Directory holding your own code (repeatable); default: what each recording was made with.
    #[arg(long = "user-code", value_name = "DIR")]
    pub user_code: Vec<PathBuf>,
    /// An installed package to take as your code (repeatable); default: what each recording
    /// was made with.
    #[arg(long = "package", value_name = "NAME")]
    pub packages: Vec<String>,
    /// Two commands to time, separated by `:::`: `-- ./old ::: ./new`.
    #[arg(last = true, value_name = "A ::: B")]
    pub commands: Vec<String>,
}

#[derive(Args, Debug)]
pub struct JanitorArgs {
    /// The target's pid: the directories are removed once it has ended.
    #[arg(long)]
    pub target: u32,
    /// The temporary directories onefix made.
    pub dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: Generate,
}

#[derive(Subcommand, Debug)]
pub enum Generate {
    /// The completion script for a shell, on stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Man pages: onefix(1) on stdout, or with --dir one page per command (onefix-record.1, ...).
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Writes the completion script for `shell`, from the same definition clap parses with.
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "onefix", out);
}

/// Writes onefix(1) to `out`.
pub fn write_man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(out)
}

/// onefix.1 and one page per visible subcommand (onefix-record.1, ...), as clap_mangen's
/// `generate_to` names them, rendered in memory for the caller to write.
pub fn man_pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(cmd: clap::Command, pages: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            walk(sub, pages)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut page = Vec::new();
        man.render(&mut page)?;
        pages.push((man.get_filename(), page));
        Ok(())
    }
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    let mut pages = Vec::new();
    walk(cmd, &mut pages)?;
    Ok(pages)
}

/// Where the fleet's samples go: `http://HOST:8123/?database=onefix`. The user and password
/// come from ONEFIX_CLICKHOUSE_USER and ONEFIX_CLICKHOUSE_PASSWORD or from --credentials, never
/// from the command line (every user of the machine can read it).
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// ClickHouse's HTTP interface and database, e.g. http://127.0.0.1:8123/?database=onefix.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// A file of `user=NAME` and `password=SECRET` lines (instead of the environment).
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Give up on a request to ClickHouse after this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// A process to profile (repeatable).
    #[arg(long, short, value_name = "PID", required_unless_present_any = ["pattern", "user"])]
    pub pid: Vec<u32>,
    /// Profile every process whose command line contains PATTERN, and each new one (a
    /// restarted service gets a new pid).
    #[arg(long = "match", value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// Profile every process (Python or native) of this user, by name or uid, and each new one
    /// as it starts; with --match, those whose command line also matches.
    #[arg(long, value_name = "USER", conflicts_with = "pid")]
    pub user: Option<String>,
    /// The service's name, a label of every sample.
    #[arg(long, default_value = "default")]
    pub service: String,
    /// The deploy: a version or commit, a label of every sample.
    #[arg(long, default_value = "")]
    pub version: String,
    /// The host's name as reports show it; default: this machine's hostname.
    #[arg(long)]
    pub host: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Each interval's samples are aggregated and uploaded as one batch.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Samples per second, per target (see BENCHMARKS.md for the cost).
    #[arg(long, short, default_value_t = 19.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Where batches wait while ClickHouse is away: a directory only the agent's user can write
    /// (created 0700; its batches are 0600, each with a checksum, and only those are sent).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/onefix/spool")]
    pub spool: PathBuf,
    /// The spool's bound: past it the oldest batches are dropped, and counted.
    #[arg(long, value_name = "BYTES", default_value = "64m", value_parser = parse_spool_bytes)]
    pub spool_max: u64,
    /// Append the agent's messages to this file instead of stderr; SIGHUP reopens it (after
    /// logrotate has moved it away). Created 0600; in a directory others can write, a link or
    /// another user's file there is refused.
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Stop after this long (default: until SIGTERM or Ctrl-C; with --pid, also when every
    /// target has exited).
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

#[derive(Subcommand, Debug)]
// Parsed once and moved into its command: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum FleetCommand {
    /// Create the fleet's tables in ClickHouse, or upgrade an older onefix schema.
    Init(FleetInitArgs),
    /// The findings of a service across its hosts over a window, from ClickHouse's aggregates.
    Report(FleetReportArgs),
    /// Two deploys of a service (--version A --version B), line by line, with statistics over
    /// per-host, per-interval values; the regression first.
    Compare(FleetCompareArgs),
    /// Every SQL statement onefix sends, with example values, separated by lines holding `;`
    /// (to check them against another ClickHouse release).
    Sql,
}

#[derive(Args, Debug)]
pub struct FleetInitArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Drop samples older than this many days (ClickHouse 19.6 and later).
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub ttl_days: Option<u32>,
    /// Make the tables Distributed over this cluster of the server's remote_servers. Run
    /// `init` without it on each shard's database first (the cluster's default_database).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
}

/// Which samples: a service, a window, and optionally a deploy and a host.
#[derive(Args, Clone, Debug)]
pub struct FleetWindowArgs {
    /// The service, as the agents labelled it.
    #[arg(long)]
    pub service: String,
    /// The window ending now (e.g. 1h, 15m); default 1h.
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["from", "until"])]
    pub since: Option<Duration>,
    /// Start of the window: Unix seconds or 2026-12-01T13:00:00Z.
    #[arg(long, value_parser = parse_time, requires = "until")]
    pub from: Option<u64>,
    /// End of the window: Unix seconds or 2026-12-01T14:00:00Z.
    #[arg(long, value_parser = parse_time, requires = "from")]
    pub until: Option<u64>,
    /// Only this host.
    #[arg(long)]
    pub host: Option<String>,
}

#[derive(Args, Debug)]
pub struct FleetReportArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub window: FleetWindowArgs,
    /// Only this deploy.
    #[arg(long)]
    pub version: Option<String>,
    #[command(flatten)]
    pub outputs: OutputArgs,
}

#[derive(Args, Debug)]
pub struct FleetCompareArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub window: FleetWindowArgs,
    /// The two deploys, before then after: --version v41 --version v42.
    #[arg(long, num_args = 1, required = true)]
    pub version: Vec<String>,
    /// Write the comparison as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

/// Unix seconds, or `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn parse_time(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(secs);
    }
    let bad = || format!("`{s}` is not a time: give Unix seconds or 2026-12-01T13:00:00Z (UTC)");
    let t = t.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = t.split_once(['T', ' ']).ok_or_else(bad)?;
    let d: Vec<i64> = date.split('-').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    let h: Vec<i64> = time.split(':').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if d.len() != 3 || h.len() != 3 || !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) {
        return Err(bad());
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 { (d[0] - 1, d[1] + 9) } else { (d[0], d[1] - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h[0] * 3600 + h[1] * 60 + h[2];
    u64::try_from(secs).map_err(|_| bad())
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
    // A bound far past any run keeps every deadline computed from a duration representable
    // (a 20-digit duration would overflow the clock instead of meaning "forever").
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("`{s}` is longer than the longest duration onefix takes, 365 days (8760h)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The longest duration any argument takes: a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

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

fn parse_spool_bytes(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|_| format!("the spool's bound must be a size between 1 byte and 1 TiB (e.g. 64m), not {s}"))
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
        assert_eq!(parse_duration("8760h"), Ok(MAX_DURATION));
        assert!(parse_duration("8761h").unwrap_err().contains("365 days"));
        assert!(parse_duration("99999999999999999999s").unwrap_err().contains("365 days"));
        assert!(parse_rate("0").is_err());
        assert_eq!(parse_time("2026-12-01T13:00:00Z"), Ok(1_796_130_000));
        assert_eq!(parse_time("1700000000"), Ok(1_700_000_000));
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn a_load_spec_parses_as_onefix_load_arguments() {
        let spec = parse_load_spec("'http://127.0.0.1:9/?q={{int 1 9}}' --rate 50 -d 2s --json 'l r.json'").unwrap();
        assert_eq!(spec.0.url, "http://127.0.0.1:9/?q={{int 1 9}}");
        assert_eq!(spec.0.rate.0, Some(50.0));
        assert_eq!(spec.0.duration, Some(Duration::from_secs(2)));
        assert_eq!(spec.0.json.as_deref(), Some(std::path::Path::new("l r.json")));
        let unquoted = parse_load_spec("http://127.0.0.1:9/p?a={{int 0 99}}&b={{pick 1 2 3}} -r 5").unwrap();
        assert_eq!(unquoted.0.url, "http://127.0.0.1:9/p?a={{int 0 99}}&b={{pick 1 2 3}}");
        assert_eq!(unquoted.0.rate.0, Some(5.0));
        let err = parse_load_spec("http://127.0.0.1:9/ --rate fast").unwrap_err();
        assert!(err.starts_with("in the load: ") && !err.contains('\n'), "{err}");
        assert!(parse_load_spec("'http://127.0.0.1:9/").is_err());
        let tls = parse_load_spec("https://127.0.0.1:9/ -k --http2 --streams 8 --cacert ca.pem").unwrap();
        assert!(tls.0.insecure && tls.0.http2 && !tls.0.http1 && tls.0.streams == 8);
        assert_eq!(tls.0.cacert.as_deref(), Some(std::path::Path::new("ca.pem")));
        assert!(parse_load_spec("https://127.0.0.1:9/ --http2 --http1.1").unwrap_err().contains("cannot be used with"));
        assert_eq!(parse_rate("1000"), Ok(1000.0));
        assert_eq!(parse_bytes("512k"), Ok(512 * 1024));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("lots").is_err());
    }
}
