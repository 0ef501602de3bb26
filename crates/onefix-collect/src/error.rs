/// Why sampling could not start. Each message is one sentence a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("no process with pid {0} exists")]
    NoSuchProcess(u32),
    #[error("permission denied reading process {pid}: {}", ptrace_advice(*pid))]
    PermissionDenied { pid: u32 },
    #[error("process {pid} ({exe}) is neither a Python program nor a native executable onefix can sample")]
    NotPython { pid: u32, exe: String },
    #[error("process {pid} runs a Python version onefix cannot read ({detail}); supported: CPython 3.8 to 3.13")]
    UnsupportedPython { pid: u32, detail: String },
    #[error("the target exited before it could be sampled{}", status.as_ref().map(|s| format!(" ({s})")).unwrap_or_default())]
    ExitedEarly { status: Option<String> },
    #[error("could not read Python process {pid}: {detail}")]
    Unreadable { pid: u32, detail: String },
    /// A runtime onefix cannot read (Node.js, the JVM, PyPy...), named in its one sentence.
    #[error("{0}")]
    ForeignRuntime(crate::runtime::Found),
}

/// What to do about a refused read of `pid`, chosen from the actual cause: another user's
/// process, Yama's ptrace scope, or root without CAP_SYS_PTRACE (a container).
pub fn ptrace_advice(pid: u32) -> String {
    let euid = process_euid();
    let owner = std::fs::metadata(format!("/proc/{pid}")).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok();
    let yama =
        std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().and_then(|s| s.trim().parse::<u32>().ok());
    advice_for(euid, owner, yama, has_cap_sys_ptrace())
}

fn advice_for(euid: u32, owner: Option<u32>, yama: Option<u32>, cap_sys_ptrace: bool) -> String {
    match (euid, yama) {
        (_, Some(3)) => "the kernel forbids every ptrace attach (kernel.yama.ptrace_scope = 3, which only a reboot lowers): start the program under onefix instead (onefix record -- CMD)".into(),
        (0, _) if !cap_sys_ptrace => {
            "onefix runs as root but without CAP_SYS_PTRACE (a container drops it): run the container with `--cap-add SYS_PTRACE`".into()
        }
        (e, _) if e != 0 && owner.is_some_and(|o| o != e) => format!(
            "it belongs to another user (uid {}): run onefix as root (sudo) or as that user",
            owner.unwrap_or_default()
        ),
        (e, Some(scope)) if e != 0 && scope >= 1 => format!(
            "kernel.yama.ptrace_scope = {scope} lets only a parent read its children: run onefix as root (sudo), start the program under onefix (onefix record -- CMD), or allow it with `sysctl kernel.yama.ptrace_scope=0`"
        ),
        _ => "run onefix as root (sudo), or give it CAP_SYS_PTRACE".into(),
    }
}

fn process_euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process holds CAP_SYS_PTRACE (bit 19 of its effective capabilities).
fn has_cap_sys_ptrace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 19) != 0)
}

#[cfg(test)]
mod tests {
    use super::advice_for;

    #[test]
    fn the_advice_matches_the_cause() {
        // Another user's process, no Yama (this kernel has none): ptrace_scope cannot help.
        let other = advice_for(1000, Some(1001), None, false);
        assert!(other.contains("another user (uid 1001)") && !other.contains("ptrace_scope"), "{other}");
        // The same user, held back by Yama.
        assert!(advice_for(1000, Some(1000), Some(1), false).contains("ptrace_scope = 1"));
        // Root in a container without the capability.
        assert!(advice_for(0, Some(1000), Some(1), false).contains("--cap-add SYS_PTRACE"));
        // Yama 3 stops everyone.
        assert!(advice_for(0, Some(0), Some(3), true).contains("reboot"));
    }
}
