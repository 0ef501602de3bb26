//! `onefix load`: drive an HTTP server and summarise what it did.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use onefix_load::{summary, LoadConfig, LoadResult, RequestSpec};

use crate::cli::LoadArgs;
use crate::output::Output;

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_interrupt(_: libc::c_int) {
    if let Some(stop) = STOP.get() {
        stop.store(true, Ordering::Relaxed);
    }
    // A second Ctrl-C ends the program at once.
    // SAFETY: signal() is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    crate::output::SIGNALS.fetch_add(1, Ordering::Relaxed);
}

pub fn config(args: &LoadArgs) -> Result<LoadConfig> {
    let body = match &args.body {
        Some(b) if b.starts_with('@') => {
            let path = &b[1..];
            Some(std::fs::read_to_string(path).with_context(|| format!("cannot read the body template {path}"))?)
        }
        other => other.clone(),
    };
    let duration = match (args.duration, args.max_requests) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    Ok(LoadConfig {
        request: RequestSpec {
            url: args.url.clone(),
            method: args.method.clone(),
            headers: args.headers.clone(),
            body,
            keep_alive: !args.new_connection_per_request,
            seed: args.seed,
        },
        rate: args.rate.0,
        duration,
        max_requests: args.max_requests,
        connections: args.connections as usize,
        threads: args.threads.unwrap_or(0) as usize,
        timeout: args.timeout,
        window: Duration::from_secs(1),
    })
}

/// Prints the summary of a load and writes its JSON result where asked.
/// The summary goes to stderr when the JSON result takes stdout (`--json -`).
pub fn emit(result: &LoadResult, json: Option<Output>) -> Result<()> {
    match &json {
        Some(o) if o.is_stdout() => eprint!("{}", summary::render(result)),
        _ => print!("{}", summary::render(result)),
    }
    if let Some(out) = json {
        let shown = out.shown.display().to_string();
        out.write_with(|w| {
            serde_json::to_writer_pretty(&mut *w, result)?;
            writeln!(w)
        })
        .with_context(|| format!("cannot write the load's JSON result to {shown}"))?;
    }
    Ok(())
}

pub fn run(args: LoadArgs) -> Result<ExitCode> {
    let cfg = config(&args)?;
    // Checked before any request is sent.
    let json = args.json.as_deref().map(|p| crate::output::check(p, "load's JSON result", true)).transpose()?;
    let stop = STOP.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
    let handler = on_interrupt as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic and resets the disposition.
    unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };

    let live = std::io::stderr().is_terminal() && !args.quiet;
    let result = onefix_load::run(&cfg, stop, &mut |p| {
        if live {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{}", summary::progress_line(p));
            let _ = err.flush();
        }
    });
    if live {
        eprint!("\r\x1b[2K");
    }
    let result = result?;
    emit(&result, json)?;
    if result.completed == 0 {
        let why = match result.errors.kinds().into_iter().max_by_key(|(_, n)| *n) {
            Some((kind, n)) => format!(" ({n} of {} ended in: {kind})", result.sent),
            None => String::new(),
        };
        bail!("no request completed{why}");
    }
    Ok(ExitCode::SUCCESS)
}
