//! `onefix dump`: every thread's stack in a running process now, then its deadlocks or stall.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use onefix_collect::dump::{python_snapshot, DumpOptions};
use onefix_collect::process;
use onefix_diagnose::names::SourceCache;
use onefix_diagnose::stall::analyse;
use onefix_diagnose::UserCode;

use crate::cli::DumpArgs;

pub fn run(args: DumpArgs) -> Result<ExitCode> {
    let pid = args.pid;
    // Checked before the target is touched.
    let json = args.json.as_deref().map(|p| crate::output::check(p, "dump's JSON", true)).transpose()?;
    if !process::is_running(pid) {
        anyhow::bail!(onefix_collect::CollectError::NoSuchProcess(pid));
    }
    let snapshot = if onefix_native::is_native_pid(pid) {
        if args.locals {
            crate::messages::say(format_args!(
                "process {pid} is a native program: --locals reads Python variables only"
            ));
        }
        onefix_native::native_snapshot(pid)?
    } else {
        python_snapshot(pid, DumpOptions { locals: args.locals, native: args.native })?
    };
    let cwd = process::cwd(pid);
    let argv = process::cmdline(pid).unwrap_or_default();
    let dirs = if args.user_code.is_empty() {
        if snapshot.runtime == "native" {
            crate::outputs::default_native_user_dirs(cwd.as_deref(), pid)
        } else {
            crate::outputs::default_user_dirs(cwd.as_deref(), &argv)
        }
    } else {
        args.user_code
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()).display().to_string())
            .collect()
    };
    let user = UserCode::new(&dirs, cwd.as_deref().map(Path::new));
    let analysis = analyse(&snapshot, &user, &mut SourceCache::default());

    let to_stdout = json.as_ref().is_some_and(|o| o.is_stdout());
    if !to_stdout {
        let mut out = std::io::stdout().lock();
        onefix_report::write_dump(&mut out, &snapshot, &analysis)?;
        out.flush()?;
    }
    if let Some(out) = json {
        let shown = out.shown.display().to_string();
        out.write_with(|w| {
            onefix_report::write_dump_json(&mut *w, &snapshot, &analysis)?;
            writeln!(w)
        })
        .with_context(|| format!("cannot write the dump's JSON to {shown}"))?;
    }
    Ok(ExitCode::SUCCESS)
}
