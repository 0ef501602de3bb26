//! `onefix janitor` (hidden; started by [`crate::target::watch_temporary_dirs`]): removes the temporary directories a recording made (the asyncio
//! bootstrap, the allocation agent) once both onefix and its target are gone. onefix removes
//! them itself when it ends; a killed onefix (SIGKILL, an OOM kill, a CI timeout) cannot, and
//! the target may still need them (a child it execs preloads the agent by its path), so a small
//! process started beside the target waits for both to end and then removes them.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::cli::JanitorArgs;

pub fn run(args: JanitorArgs) -> Result<ExitCode> {
    // SAFETY: ignoring signals before anything else runs.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    // Until onefix ends: nothing is ever written, so the read returns at its exit or death.
    let mut byte = [0u8; 1];
    let _ = std::io::stdin().read(&mut byte);
    while onefix_collect::process::is_running(args.target) {
        std::thread::sleep(Duration::from_millis(100));
    }
    for dir in &args.dirs {
        remove_if_made_by_onefix(dir);
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes `dir` only if it is what onefix makes: a directory named `onefix-...` directly in
/// the temporary directory, owned by this user.
fn remove_if_made_by_onefix(dir: &PathBuf) {
    let named = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("onefix-"));
    let in_temp = dir.parent() == Some(std::env::temp_dir().as_path());
    // SAFETY: geteuid cannot fail.
    let ours = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == unsafe { libc::geteuid() });
    if named && in_temp && ours {
        let _ = std::fs::remove_dir_all(dir);
    }
}
