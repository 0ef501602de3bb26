use std::io;

/// Why native sampling could not start. Each message is one sentence a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("no process with pid {0} exists")]
    NoSuchProcess(u32),
    #[error("the kernel does not let this user sample with perf_event_open (kernel.perf_event_paranoid = {level}): run onefix as root (sudo), or allow it with `sysctl kernel.perf_event_paranoid=1`")]
    Paranoid { level: i32 },
    #[error("permission denied sampling process {pid}: it belongs to another user; run onefix as root (sudo) or as that user")]
    PermissionDenied { pid: u32 },
    #[error("perf_event_open is not available here ({detail}): the kernel needs CONFIG_PERF_EVENTS, and in a container the seccomp profile must allow perf_event_open (e.g. `--security-opt seccomp=unconfined` or `--cap-add PERFMON`)")]
    Unsupported { detail: String },
    #[error("too many open files for one perf event per thread and CPU: raise the limit with `ulimit -n 65536`")]
    TooManyFiles,
    #[error("`{0}` was not found: give its path or check that it is on PATH")]
    CommandNotFound(String),
    #[error("cannot run `{command}`: {source}")]
    Exec { command: String, source: io::Error },
    #[error("no command was given to run")]
    EmptyCommand,
    #[error("cannot stop thread {tid} of process {pid} to read its stack ({source}): is a debugger or another profiler attached to it?")]
    Attach { pid: u32, tid: u64, source: io::Error },
    #[error("perf_event_open failed: {0}")]
    Os(io::Error),
}

/// The current `kernel.perf_event_paranoid` level, or 2 (the kernel's default) when unreadable.
pub fn paranoid_level() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}
