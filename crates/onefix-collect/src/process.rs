//! What /proc says about a process: alive or gone, its executable, its descendants.
//!
//! onefix never reaps a child while it is sampling it (a ptrace-stop could be stolen by
//! `waitpid`), so a child that exited is a zombie until sampling stops: "gone" covers both.

use std::fs;

/// Process state letter from /proc/PID/stat, or `None` when the process no longer exists.
pub fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ": split at the last one.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// True while the process exists and has not exited (a zombie has exited).
pub fn is_running(pid: u32) -> bool {
    matches!(state(pid), Some(s) if s != 'Z' && s != 'X')
}

pub fn exists(pid: u32) -> bool {
    state(pid).is_some()
}

/// Parent pid, from /proc/PID/stat.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The fields of /proc/PID/stat after the command name (the first is the state, field 3).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// When the process started, in clock ticks after boot: with the pid, it tells a process from
/// a later one that reuses its pid.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// How long ago `pid` started, from its start time in /proc/PID/stat and the time since boot
/// (to the kernel's clock tick, 10 ms on most). `None` when it cannot be read.
pub fn age(pid: u32) -> Option<std::time::Duration> {
    let start = start_ticks(pid)?;
    let uptime = fs::read_to_string("/proc/uptime").ok()?;
    let since_boot: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Some(std::time::Duration::from_secs_f64((since_boot - start as f64 / ticks).max(0.0)))
}

/// CPU time, in seconds, of the process and its live descendants (user and system, every
/// thread, those that ended included): what a server spent on the requests sent meanwhile. In
/// clock ticks (10 ms on most kernels), so over a short stretch only a count of many ticks
/// means much.
pub fn cpu_seconds(root: u32) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let of = |pid: u32| -> Option<u64> {
        let f = stat_fields(pid)?;
        // utime and stime: fields 14 and 15, after the state (field 3).
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    };
    let own = of(root)?;
    let children: u64 = descendants(root).into_iter().filter(|&p| p != root).filter_map(of).sum();
    Some((own + children) as f64 / ticks)
}

/// Whether the process is a kernel thread (PF_KTHREAD in its flags): nothing to profile.
pub fn is_kernel_thread(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_fields(pid).and_then(|f| f.get(6)?.parse::<u64>().ok()).is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The process's real user id, from /proc/PID/status.
pub fn real_uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The executable's path, or the command name when the link cannot be read.
pub fn exe(pid: u32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .or_else(|_| fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_owned()))
        .unwrap_or_else(|_| "unknown".to_owned())
}

pub fn cwd(pid: u32) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/cwd")).ok().map(|p| p.display().to_string())
}

/// What identifies the program image a process runs, which an exec replaces under the same
/// pid: its executable, its command line, and its auxiliary vector (a few hundred bytes set by
/// each exec: where the program and its random bytes were placed, different at every exec even
/// of the same interpreter with the same arguments). Cheap enough to read a few times a second.
pub fn image(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    let auxv: String = auxv.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{}\0{}\0{auxv}", exe.display(), String::from_utf8_lossy(&cmdline)))
}

/// Whether a thread of `pid` is in uninterruptible sleep (state D): it cannot be stopped by
/// ptrace until it leaves it.
pub fn has_uninterruptible_thread(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()))
            == Some('D')
    })
}

/// The futex system call's number on this architecture.
#[cfg(target_arch = "x86_64")]
const SYS_FUTEX: u64 = 202;
#[cfg(target_arch = "aarch64")]
const SYS_FUTEX: u64 = 98;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SYS_FUTEX: u64 = u64::MAX;

/// Whether thread `tid` of `pid` is blocked in a futex wait (a lock, a condition variable, the
/// GIL), from the system call it is in: `/proc/PID/task/TID/syscall` starts with its number
/// (`running` when it is on a CPU). Needs the ptrace access a stack read needs anyway.
pub fn in_futex_wait(pid: u32, tid: u64) -> bool {
    let Ok(line) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else { return false };
    line.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()) == Some(SYS_FUTEX)
}

/// How many times thread `tid` of `pid` has been put on a CPU (the third field of
/// `/proc/PID/task/TID/schedstat`): unchanged between two reads of a waiting thread, it waited
/// all along; changed, it woke and ran in between, so a wait seen at both reads is two waits.
pub fn run_count(pid: u32, tid: u64) -> Option<u64> {
    let line = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    line.split_whitespace().nth(2)?.parse().ok()
}

pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect(),
    )
}

/// Whether the process looks like a CPython interpreter: its executable or a mapped library
/// is named python/libpython.
pub fn looks_like_python(pid: u32) -> bool {
    let exe_name = exe(pid);
    let base = onefix_model::fmt::file_name(&exe_name);
    if base.starts_with("python") || base.starts_with("pypy") {
        return true;
    }
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| maps.lines().any(|l| l.contains("/libpython")))
        .unwrap_or(false)
}

/// Every live descendant of `root` (children, grandchildren, ...), found by one pass over /proc.
pub fn descendants(root: u32) -> Vec<u32> {
    // The kernel lists each thread's children (CONFIG_PROC_CHILDREN): a few small reads instead
    // of one per process on the machine, cheap enough to look every few ticks.
    if std::path::Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
        let mut found = vec![root];
        let mut i = 0;
        while i < found.len() {
            let p = found[i];
            if let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) {
                for task in tasks.flatten() {
                    let Ok(list) = fs::read_to_string(task.path().join("children")) else { continue };
                    found.extend(
                        list.split_ascii_whitespace()
                            .filter_map(|c| c.parse::<u32>().ok())
                            .filter(|c| !found.contains(c))
                            .collect::<Vec<_>>(),
                    );
                }
            }
            i += 1;
        }
        found.remove(0);
        found.retain(|&p| is_running(p));
        return found;
    }
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(ppid) = parent(pid) {
                    parents.push((pid, ppid));
                }
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found.retain(|&p| is_running(p));
    found
}

/// Lets go of every thread of `pid` still ptrace-attached to the calling thread, and says how
/// many there were. A paused read (py-spy's lock mode) seizes each thread and detaches it after
/// the read; a thread that began to exit during the read cannot be detached then (it is not in
/// a stop yet), and later stops at its exit event, waiting for its tracer. Left so, it blocks
/// the target's exit (and any join of that thread), so the sampler calls this between reads.
/// Only the tracer thread itself may detach, hence "the calling thread".
pub fn release_traced_threads(pid: u32) -> usize {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    let mut released = 0;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(status) = fs::read_to_string(task.path().join("status")) else { continue };
        let tracer =
            status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse::<u32>().ok());
        if tracer == Some(me) {
            // SAFETY: PTRACE_DETACH of a thread this thread traces; it fails harmlessly (ESRCH)
            // when the thread is not in a stop yet, and is retried at the next call.
            if unsafe { libc::ptrace(libc::PTRACE_DETACH, tid as libc::pid_t, 0usize, 0usize) } == 0 {
                released += 1;
            }
        }
    }
    released
}

/// The TCP ports `pid` and its descendants listen on: their socket inodes (from
/// `/proc/PID/fd`) found in the listening rows of `/proc/PID/net/tcp` and `tcp6`. Empty when
/// nothing can be read.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    const LISTEN: &str = "0A";
    let mut inodes = std::collections::HashSet::new();
    for p in std::iter::once(pid).chain(descendants(pid)) {
        let Ok(fds) = fs::read_dir(format!("/proc/{p}/fd")) else { continue };
        for fd in fds.flatten() {
            let Ok(link) = fs::read_link(fd.path()) else { continue };
            if let Some(inode) = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
            {
                inodes.insert(inode);
            }
        }
    }
    let mut ports: Vec<u16> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
                    let inode: u64 = f.get(9)?.parse().ok()?;
                    (*f.get(3)? == LISTEN && inodes.contains(&inode)).then_some(port)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_itself_and_not_a_missing_pid() {
        let me = std::process::id();
        assert!(is_running(me));
        assert!(cwd(me).is_some());
        assert!(!exists(u32::MAX - 1));
    }

    #[test]
    fn finds_a_child_among_descendants() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let found = descendants(std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found.contains(&child.id()), "{found:?}");
    }

    #[test]
    fn lists_the_ports_a_process_listens_on_and_no_other() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // A connected socket of this process is no listening port.
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let ports = listening_ports(std::process::id());
        assert!(ports.contains(&port), "{ports:?}");
        assert!(!ports.contains(&client.local_addr().unwrap().port()), "{ports:?}");
        drop(listener);
        assert!(!listening_ports(std::process::id()).contains(&port));
    }
}
