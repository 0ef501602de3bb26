//! `onefix load`: drive an HTTP server and summarise what it did.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Result};

use onefix_load::summary;

use crate::cli::LoadArgs;

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

/// Whether a URL template with placeholders goes on, after its last `}}`, with flags: a space
/// inside `{{int 1 500}}` is the template's own.
fn spec_beyond_template(url: &str) -> bool {
    let tail = url.rfind("}}").map_or(url, |i| &url[i + 2..]);
    url.contains("{{") && tail.split_whitespace().any(|w| w.starts_with('-'))
}

pub fn run(args: LoadArgs) -> Result<ExitCode> {
    // A URL holds no space: one that does is the whole load in one string, as `record --load`
    // takes it (`onefix load "http://127.0.0.1:8000/ --rate 1000 --duration 30s"`).
    let args = if args.url.contains(char::is_whitespace) && !args.url.contains("{{") || spec_beyond_template(&args.url)
    {
        crate::cli::parse_load_spec(&args.url).map_err(|e| anyhow::anyhow!("{e}"))?.0
    } else {
        args
    };
    let cfg = crate::target::load_config(&args)?;
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
    crate::outputs::emit_load(&result, json, false)?;
    if result.completed == 0 {
        let why = match result.errors.kinds().into_iter().max_by_key(|(_, n)| *n) {
            Some((kind, n)) => format!(" ({n} of {} ended in: {kind})", result.sent),
            None => String::new(),
        };
        bail!("no request completed{why}");
    }
    Ok(ExitCode::SUCCESS)
}
