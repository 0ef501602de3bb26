/// Why sampling could not start. Each message is one sentence a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("no process with pid {0} exists")]
    NoSuchProcess(u32),
    #[error("permission denied reading process {pid}: run onefix as root (sudo), or allow ptrace with `sysctl kernel.yama.ptrace_scope=0`, or in a container add `--cap-add SYS_PTRACE`")]
    PermissionDenied { pid: u32 },
    #[error("process {pid} ({exe}) is neither a Python program nor a native executable onefix can sample")]
    NotPython { pid: u32, exe: String },
    #[error("process {pid} runs a Python version onefix cannot read ({detail}); supported: CPython 3.8 to 3.13")]
    UnsupportedPython { pid: u32, detail: String },
    #[error("the target exited before it could be sampled{}", status.as_ref().map(|s| format!(" ({s})")).unwrap_or_default())]
    ExitedEarly { status: Option<String> },
    #[error("could not read Python process {pid}: {detail}")]
    Unreadable { pid: u32, detail: String },
}
