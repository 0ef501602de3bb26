//! What a thread is blocked in, from the outside: the system call in
//! `/proc/PID/task/TID/syscall`, what its descriptor is, and, for a pthread mutex, which thread
//! holds it. `onefix dump` reads these for every thread; they cost a few reads of /proc each.

use std::fs;

use onefix_model::snapshot::Blocked;

/// The system call a thread is blocked in: its number and its first six arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    pub number: u64,
    pub args: [u64; 6],
}

/// x86_64 system call numbers read here (the profiler's unwinding is x86_64 only).
pub(crate) mod nr {
    pub const READ: u64 = 0;
    pub const WRITE: u64 = 1;
    pub const POLL: u64 = 7;
    pub const PREAD64: u64 = 17;
    pub const READV: u64 = 19;
    pub const WRITEV: u64 = 20;
    pub const SELECT: u64 = 23;
    pub const PAUSE: u64 = 34;
    pub const NANOSLEEP: u64 = 35;
    pub const CONNECT: u64 = 42;
    pub const ACCEPT: u64 = 43;
    pub const SENDTO: u64 = 44;
    pub const RECVFROM: u64 = 45;
    pub const SENDMSG: u64 = 46;
    pub const RECVMSG: u64 = 47;
    pub const WAIT4: u64 = 61;
    pub const FUTEX: u64 = 202;
    pub const CLOCK_NANOSLEEP: u64 = 230;
    pub const EPOLL_WAIT: u64 = 232;
    pub const WAITID: u64 = 247;
    pub const PSELECT6: u64 = 270;
    pub const PPOLL: u64 = 271;
    pub const EPOLL_PWAIT: u64 = 281;
    pub const ACCEPT4: u64 = 288;
    pub const RECVMMSG: u64 = 299;
    pub const EPOLL_PWAIT2: u64 = 441;
    pub const FUTEX_WAITV: u64 = 449;
}

/// The thread ids of a process, in the order /proc lists them.
pub fn thread_ids(pid: u32) -> Vec<u64> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut ids: Vec<u64> = tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse().ok()).collect();
    ids.sort_unstable();
    ids
}

/// Every thread of `pid` with what it is blocked in and whether it runs (on a CPU or runnable,
/// outside a system call). Read before a dump stops the threads: a stop interrupts a thread's
/// system call, which it restarts (running, for a moment) once let go.
pub fn thread_waits(pid: u32) -> Vec<(u64, Option<Blocked>, bool)> {
    thread_ids(pid)
        .into_iter()
        .map(|tid| {
            let waits = blocked_in(pid, tid);
            let running = waits.is_none() && thread_state(pid, tid) == Some('R');
            (tid, waits, running)
        })
        .collect()
}

/// The kernel's state letter for one thread (`R` running or runnable, `S`, `D`, `t`, ...).
pub fn thread_state(pid: u32, tid: u64) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The thread's name (`comm`).
pub fn thread_name(pid: u32, tid: u64) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok().map(|s| s.trim_end().to_owned())
}

/// The system call the thread is blocked in; `None` when it is running, not in a system call,
/// or cannot be read.
pub fn syscall(pid: u32, tid: u64) -> Option<Syscall> {
    parse_syscall(&fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// Parses a `/proc/PID/task/TID/syscall` line: `NR ARG1 … ARG6 SP PC` (hex arguments),
/// `-1 SP PC` outside a system call, or `running`.
fn parse_syscall(text: &str) -> Option<Syscall> {
    let mut fields = text.split_whitespace();
    let number: i64 = fields.next()?.parse().ok()?;
    if number < 0 {
        return None;
    }
    let mut args = [0u64; 6];
    for a in args.iter_mut() {
        *a = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some(Syscall { number: number as u64, args })
}

/// What a blocked thread waits in; `None` when it is not blocked in a system call.
pub fn blocked_in(pid: u32, tid: u64) -> Option<Blocked> {
    let call = syscall(pid, tid)?;
    Some(classify(pid, call))
}

fn classify(pid: u32, call: Syscall) -> Blocked {
    let fd = call.args[0] as i64;
    let what = || describe_fd(pid, fd);
    match call.number {
        nr::FUTEX => Blocked::Futex { address: call.args[0], owner: mutex_owner(pid, call.args[0]), name: None },
        nr::FUTEX_WAITV => Blocked::Futex { address: call.args[0], owner: None, name: None },
        nr::READ | nr::PREAD64 | nr::READV | nr::RECVFROM | nr::RECVMSG | nr::RECVMMSG => {
            Blocked::Read { fd, what: what() }
        }
        nr::WRITE | nr::WRITEV | nr::SENDTO | nr::SENDMSG => Blocked::Write { fd, what: what() },
        nr::ACCEPT | nr::ACCEPT4 => Blocked::Accept { fd, what: what() },
        nr::CONNECT => Blocked::Connect { fd, what: what() },
        nr::POLL | nr::SELECT | nr::PSELECT6 | nr::PPOLL | nr::EPOLL_WAIT | nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => {
            Blocked::Poll
        }
        nr::NANOSLEEP | nr::CLOCK_NANOSLEEP | nr::PAUSE => Blocked::Sleep,
        nr::WAIT4 | nr::WAITID => Blocked::Child,
        number => Blocked::Other { syscall: number },
    }
}

/// What a descriptor is, in words: a TCP connection with both ends, a listening socket, a Unix
/// socket, a pipe, or a file's path.
pub fn describe_fd(pid: u32, fd: i64) -> String {
    let Ok(link) = fs::read_link(format!("/proc/{pid}/fd/{fd}")) else { return format!("descriptor {fd}") };
    let link = link.display().to_string();
    if let Some(inode) = link.strip_prefix("socket:[").and_then(|l| l.strip_suffix(']')).and_then(|n| n.parse().ok()) {
        return describe_socket(pid, inode).unwrap_or_else(|| format!("socket (descriptor {fd})"));
    }
    if link.starts_with("pipe:[") {
        return format!("a pipe (descriptor {fd})");
    }
    link
}

fn describe_socket(pid: u32, inode: u64) -> Option<String> {
    for (table, v6) in [("tcp", false), ("tcp6", true)] {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        if let Some(said) = text.lines().skip(1).find_map(|l| tcp_row(l, inode, v6)) {
            return Some(said);
        }
    }
    let unix = fs::read_to_string(format!("/proc/{pid}/net/unix")).ok()?;
    unix.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(6)?.parse::<u64>().ok()? == inode)
            .then(|| format!("Unix socket {}", f.get(7).copied().unwrap_or("(unnamed)")))
    })
}

/// One row of /proc/net/tcp{,6} for `inode`: "TCP 127.0.0.1:5312 -> 127.0.0.1:8080", or
/// "TCP 127.0.0.1:8080 (listening)".
fn tcp_row(line: &str, inode: u64, v6: bool) -> Option<String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.get(9)?.parse::<u64>().ok()? != inode {
        return None;
    }
    let local = socket_address(f.get(1)?, v6)?;
    if *f.get(3)? == "0A" {
        return Some(format!("TCP {local} (listening)"));
    }
    Some(format!("TCP {local} -> {}", socket_address(f.get(2)?, v6)?))
}

/// `0100007F:1F90` (IPv4 in host byte order, port in hex) as `127.0.0.1:8080`; IPv6 likewise.
fn socket_address(field: &str, v6: bool) -> Option<String> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    if !v6 {
        let ip = u32::from_str_radix(addr, 16).ok()?;
        return Some(format!("{}:{port}", std::net::Ipv4Addr::from(ip.to_le_bytes())));
    }
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(4).enumerate() {
        let word = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    let ip = std::net::Ipv6Addr::from(bytes);
    Some(match ip.to_ipv4_mapped() {
        Some(v4) => format!("{v4}:{port}"),
        None => format!("[{ip}]:{port}"),
    })
}

/// The thread that holds the pthread mutex whose lock word is at `address`, when the futex is
/// one: glibc's `pthread_mutex_t` on x86_64 and aarch64 keeps the lock word at offset 0, the
/// owner's thread id at 8 and the kind at 16. Anything else there (a condition variable, a
/// semaphore, the GIL) is told apart by requiring a locked word, a kind glibc uses, and an
/// owner that is a thread of this process.
pub fn mutex_owner(pid: u32, address: u64) -> Option<u64> {
    let mut raw = [0u8; 20];
    read_memory(pid, address, &mut raw)?;
    let word = |at: usize| u32::from_ne_bytes(raw[at..at + 4].try_into().unwrap());
    let (lock, owner, kind) = (word(0), word(8) as i32, word(16));
    // The kind's low bits are the type (normal, recursive, error-checking, adaptive); the
    // others are flags (robust, priority inheritance or protection, shared).
    let plausible_kind = kind & 0x7f & !(16 | 32 | 64) <= 3 && kind >> 8 == 0;
    // With priority inheritance the lock word itself holds the owner's tid (and flag bits).
    let owner = if kind & 32 != 0 { (lock & 0x3fff_ffff) as i32 } else { owner };
    let is_thread = owner > 0 && std::path::Path::new(&format!("/proc/{pid}/task/{owner}")).exists();
    (lock != 0 && plausible_kind && is_thread).then_some(owner as u64)
}

/// Reads `out.len()` bytes of `pid`'s memory at `address`; `None` when any cannot be read.
pub fn read_memory(pid: u32, address: u64, out: &mut [u8]) -> Option<()> {
    let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: out.len() };
    let remote = libc::iovec { iov_base: address as *mut libc::c_void, iov_len: out.len() };
    // SAFETY: `local` covers exactly `out`; the kernel checks the remote range.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    (n == out.len() as isize).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_blocked_call_and_not_a_running_thread() {
        let call = parse_syscall("202 0x7f3a2c000b60 0x80 0x2 0x0 0x0 0x0 0x7ffd6f0c1a38 0x7f3a2f8a4d36").unwrap();
        assert_eq!(call.number, 202);
        assert_eq!(call.args[0], 0x7f3a2c000b60);
        assert_eq!(call.args[2], 2);
        assert_eq!(parse_syscall("running"), None);
        assert_eq!(parse_syscall("-1 0x7ffd6f0c1a38 0x7f3a2f8a4d36"), None);
        assert_eq!(parse_syscall("0 0x3"), None, "a truncated line");
    }

    #[test]
    fn socket_addresses_as_people_write_them() {
        assert_eq!(socket_address("0100007F:1F90", false).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(socket_address("0000000000000000FFFF00000100007F:1F90", true).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(socket_address("00000000000000000000000001000000:0050", true).as_deref(), Some("[::1]:80"));
        assert_eq!(socket_address("junk", false), None);
    }

    #[test]
    fn a_thread_blocked_in_a_read_on_a_connection_is_said_with_both_ends() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut stream = std::net::TcpStream::connect(server).unwrap();
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u64).unwrap();
            let mut b = [0u8; 1];
            let _ = stream.read(&mut b);
        });
        let tid = rx.recv().unwrap();
        let (held, _) = listener.accept().unwrap();
        let pid = std::process::id();
        let mut seen = None;
        for _ in 0..200 {
            seen = blocked_in(pid, tid);
            if matches!(seen, Some(Blocked::Read { .. })) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(held);
        reader.join().unwrap();
        match seen {
            Some(Blocked::Read { what, .. }) => {
                assert!(what.starts_with("TCP 127.0.0.1:") && what.ends_with(&format!("-> {server}")), "{what}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_the_owner_of_a_held_pthread_mutex_and_no_owner_for_other_words() {
        let pid = std::process::id();
        let mut mutex: libc::pthread_mutex_t = unsafe { std::mem::zeroed() };
        // SAFETY: a zeroed pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
        unsafe { libc::pthread_mutex_lock(&mut mutex) };
        let at = std::ptr::addr_of!(mutex) as u64;
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u64;
        assert_eq!(mutex_owner(pid, at), Some(me));
        unsafe { libc::pthread_mutex_unlock(&mut mutex) };
        assert_eq!(mutex_owner(pid, at), None, "an unlocked mutex has no owner");
        let plain = [1u32, 0, 12345, 0, 0];
        assert_eq!(mutex_owner(pid, plain.as_ptr() as u64), None, "a word whose 'owner' is no thread of ours");
        assert_eq!(mutex_owner(pid, 8), None, "unreadable memory");
    }
}
