//! What a process's sockets are to it: listening ones, connections it accepted from its own
//! listening ports, and the rest (connections it made). A thread blocked only on the first two
//! is a server waiting for its clients (a connection to accept, the next request on a
//! kept-alive connection), which costs the server nothing: the clients have not asked yet. This
//! is read from the kernel's state (the system call, its descriptors, the socket tables), so a
//! server no one listed (a pre-fork worker in `select`, an accept loop, a selector) is told
//! as surely as a known one.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::blocked::{self, Syscall};

/// The tables of a process are read again at most this often, when a socket is not in them.
const REREAD: Duration = Duration::from_millis(10);

/// The most descriptors read from a `select` or `poll` set, or an epoll instance: a server that
/// watches more is not looked at (its wait is counted as it was before).
const MAX_WATCHED: usize = 1024;

/// What a socket is to the process that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketRole {
    /// Listening for connections (TCP in LISTEN, or a Unix stream socket accepting).
    Listening,
    /// A TCP connection accepted from one of the ports listened on in its network namespace.
    Inbound,
    /// Any other socket: a connection the process made (a database, a backend), a datagram one.
    Other,
}

/// What a blocked thread waits for, when the kernel's state says it waits for work from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// A connection to accept (blocked in `accept`, or watching a listening socket).
    Connection,
    /// The next request on a connection it accepted.
    Request,
    /// A wake-up: a `select`, `poll` or epoll wait over no socket at all, only pipes and event,
    /// signal or timer descriptors (a supervisor such as a pre-fork server's master, woken by
    /// its workers or a signal).
    WakeUp,
}

#[derive(Default)]
pub struct Sockets {
    by_pid: HashMap<u32, Tables>,
}

#[derive(Default)]
struct Tables {
    /// Socket inodes seen in the last read, those accepted from a listening port, and the
    /// listening ones.
    known: HashSet<u64>,
    inbound: HashSet<u64>,
    listening: HashSet<u64>,
    read_at: Option<Instant>,
}

impl Sockets {
    /// Whether `fd` of `pid` is a TCP connection accepted from one of the ports listened on in
    /// its network namespace. False when anything cannot be read (the process is gone, the fd
    /// closed, not a socket).
    pub fn is_inbound(&mut self, pid: u32, fd: u64) -> bool {
        self.role(pid, fd) == Some(SocketRole::Inbound)
    }

    /// What descriptor `fd` of `pid` is, as a socket; `None` when it is no socket (a pipe, an
    /// eventfd, a file) or cannot be read.
    pub fn role(&mut self, pid: u32, fd: u64) -> Option<SocketRole> {
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()?;
        let tables = self.by_pid.entry(pid).or_default();
        let stale = !matches!(tables.read_at, Some(t) if t.elapsed() < REREAD);
        if !tables.known.contains(&inode) && stale {
            let tcp: String = ["tcp", "tcp6"]
                .iter()
                .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
                .collect();
            let unix = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
            (tables.known, tables.inbound, tables.listening) = accepted(&tcp);
            let (unix_known, unix_listening) = unix_sockets(&unix);
            tables.known.extend(unix_known);
            tables.listening.extend(unix_listening);
            tables.read_at = Some(Instant::now());
        }
        Some(if tables.listening.contains(&inode) {
            SocketRole::Listening
        } else if tables.inbound.contains(&inode) {
            SocketRole::Inbound
        } else {
            SocketRole::Other
        })
    }

    /// Whether thread `tid` of `pid`, blocked in system call `call`, waits only for its clients:
    /// `accept` on a listening socket, a read of a connection it accepted, or a `select`,
    /// `poll` or epoll wait whose watched descriptors are listening sockets or accepted
    /// connections (with, at most, pipes and event descriptors that wake it). A wait that also
    /// watches a connection the process made (a reply it waits for), or waits to write to a
    /// socket, is not: that may be the work.
    pub fn client_wait(&mut self, pid: u32, call: Syscall) -> Option<WaitFor> {
        // The system call numbers read here are x86_64's (blocked::nr): elsewhere nothing is
        // told, and waits are counted as before.
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        use blocked::nr;
        let fd = call.args[0];
        match call.number {
            nr::ACCEPT | nr::ACCEPT4 => {
                (self.role(pid, fd) == Some(SocketRole::Listening)).then_some(WaitFor::Connection)
            }
            nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG => {
                (self.role(pid, fd) == Some(SocketRole::Inbound)).then_some(WaitFor::Request)
            }
            nr::SELECT | nr::PSELECT6 => {
                let (nfds, readfds, writefds) = (call.args[0] as usize, call.args[1], call.args[2]);
                if nfds == 0 || nfds > MAX_WATCHED || readfds == 0 {
                    return None;
                }
                let mut read = vec![0u8; nfds.div_ceil(8)];
                blocked::read_memory(pid, readfds, &mut read)?;
                let mut watched: Vec<(u64, bool)> = set_bits(&read, nfds).map(|fd| (fd, false)).collect();
                if writefds != 0 {
                    let mut write = vec![0u8; nfds.div_ceil(8)];
                    blocked::read_memory(pid, writefds, &mut write)?;
                    watched.extend(set_bits(&write, nfds).map(|fd| (fd, true)));
                }
                self.only_clients(pid, &watched)
            }
            nr::POLL | nr::PPOLL => {
                let (fds, nfds) = (call.args[0], call.args[1] as usize);
                if nfds == 0 || nfds > MAX_WATCHED {
                    return None;
                }
                // struct pollfd { int fd; short events; short revents; }
                let mut raw = vec![0u8; nfds * 8];
                blocked::read_memory(pid, fds, &mut raw)?;
                const POLLOUT: i16 = 4;
                let watched: Vec<(u64, bool)> = raw
                    .chunks_exact(8)
                    .filter_map(|c| {
                        let fd = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                        let events = i16::from_ne_bytes([c[4], c[5]]);
                        (fd >= 0).then_some((fd as u64, events & POLLOUT != 0))
                    })
                    .collect();
                self.only_clients(pid, &watched)
            }
            nr::EPOLL_WAIT | nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => {
                let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
                let watched = epoll_targets(&info)?;
                self.only_clients(pid, &watched)
            }
            _ => None,
        }
    }

    /// The verdict of [`Sockets::client_wait`] over watched descriptors, each with whether it is
    /// watched for writing.
    fn only_clients(&mut self, pid: u32, watched: &[(u64, bool)]) -> Option<WaitFor> {
        let mut listening = false;
        let mut inbound = false;
        let mut other_descriptors = false;
        for &(fd, for_writing) in watched {
            match self.role(pid, fd) {
                None => other_descriptors = true,
                // A listening socket is never writable: a write mask on one (Python's
                // `poll.register` default) means nothing.
                Some(SocketRole::Listening) => listening = true,
                Some(_) if for_writing => return None,
                Some(SocketRole::Inbound) => inbound = true,
                Some(SocketRole::Other) => return None,
            }
        }
        if listening {
            Some(WaitFor::Connection)
        } else if inbound {
            Some(WaitFor::Request)
        } else if other_descriptors && !watched.iter().any(|&(_, w)| w) {
            Some(WaitFor::WakeUp)
        } else {
            None
        }
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }
}

/// The descriptors set in an `fd_set` of `nfds` bits.
fn set_bits(set: &[u8], nfds: usize) -> impl Iterator<Item = u64> + '_ {
    (0..nfds).filter(move |&i| set[i / 8] & (1 << (i % 8)) != 0).map(|i| i as u64)
}

/// The descriptors an epoll instance watches, from its `/proc/PID/fdinfo/EPFD` text (`tfd: N
/// events: MASK ...` lines), each with whether it is watched for writing; `None` past
/// [`MAX_WATCHED`].
fn epoll_targets(info: &str) -> Option<Vec<(u64, bool)>> {
    const EPOLLOUT: u32 = 4;
    let mut out = Vec::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("tfd:") else { continue };
        let mut f = rest.split_whitespace();
        let Some(fd) = f.next().and_then(|n| n.parse::<u64>().ok()) else { continue };
        let events = match (f.next(), f.next()) {
            (Some("events:"), Some(mask)) => u32::from_str_radix(mask, 16).unwrap_or(0),
            _ => 0,
        };
        out.push((fd, events & EPOLLOUT != 0));
        if out.len() > MAX_WATCHED {
            return None;
        }
    }
    Some(out)
}

/// From the text of `/proc/net/tcp` and `tcp6`: every socket inode, those whose local port is a
/// port some socket listens on (connections a server accepted), and the listening ones.
fn accepted(text: &str) -> (HashSet<u64>, HashSet<u64>, HashSet<u64>) {
    const LISTEN: &str = "0A";
    let rows: Vec<(u16, &str, u64)> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            Some((port, *f.get(3)?, f.get(9)?.parse().ok()?))
        })
        .collect();
    let listening_ports: HashSet<u16> = rows.iter().filter(|r| r.1 == LISTEN).map(|r| r.0).collect();
    let known = rows.iter().map(|r| r.2).collect();
    let inbound = rows.iter().filter(|r| r.1 != LISTEN && listening_ports.contains(&r.0)).map(|r| r.2).collect();
    let listening = rows.iter().filter(|r| r.1 == LISTEN).map(|r| r.2).collect();
    (known, inbound, listening)
}

/// From the text of `/proc/net/unix` (`Num RefCount Protocol Flags Type St Inode Path`): every
/// socket inode, and the listening ones (flag `__SO_ACCEPTCON`, 0x10000).
fn unix_sockets(text: &str) -> (HashSet<u64>, HashSet<u64>) {
    const ACCEPTCON: u32 = 0x10000;
    let mut known = HashSet::new();
    let mut listening = HashSet::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(inode)) = (f.get(3), f.get(6)) else { continue };
        let (Ok(flags), Ok(inode)) = (u32::from_str_radix(flags, 16), inode.parse::<u64>()) else { continue };
        known.insert(inode);
        if flags & ACCEPTCON != 0 {
            listening.insert(inode);
        }
    }
    (known, listening)
}

/// Whether a native function is a read from a file descriptor (the C library's wrappers).
pub fn reads_a_descriptor(function: &str) -> bool {
    let f =
        function.trim_start_matches('_').trim_start_matches("GI_").trim_start_matches('_').trim_start_matches("libc_");
    matches!(f, "recv" | "recvfrom" | "recvmsg" | "read" | "read_nocancel" | "readv")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_on_a_listening_port_is_inbound_and_one_from_an_ephemeral_port_is_not() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0 20 4 30 10 -1
   2: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0 20 4 30 10 -1
";
        let (known, inbound, listening) = accepted(text);
        assert_eq!(known.len(), 3);
        assert_eq!(listening, HashSet::from([1001]));
        assert!(inbound.contains(&1002), "the server's side of the connection to port 8080");
        assert!(!inbound.contains(&1003), "the client's side, from port 50000");
        assert!(!inbound.contains(&1001), "the listening socket itself");
    }

    #[test]
    fn reads_are_told_from_other_waits() {
        for read in ["recv", "__libc_recv", "__GI___libc_read", "read", "__recvfrom", "__libc_recvmsg"] {
            assert!(reads_a_descriptor(read), "{read}");
        }
        for other in ["futex_wait", "epoll_wait", "__libc_write", "pthread_rwlock_rdlock", "nanosleep"] {
            assert!(!reads_a_descriptor(other), "{other}");
        }
    }

    #[test]
    fn a_socket_this_process_accepted_is_inbound() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut served, _) = listener.accept().unwrap();
        client.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        served.read_exact(&mut b).unwrap();
        use std::os::fd::AsRawFd;
        let mut s = Sockets::default();
        let pid = std::process::id();
        assert!(s.is_inbound(pid, served.as_raw_fd() as u64));
        assert!(!s.is_inbound(pid, client.as_raw_fd() as u64));
        assert!(!s.is_inbound(pid, 0), "stdin is no socket");
        assert!(!s.is_inbound(pid, 1 << 20), "no such descriptor");
    }

    #[test]
    fn epoll_and_unix_tables_are_read() {
        let info = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\ntfd:        5 events:       19 data:                5  pos:0 ino:3b0f sdev:8\ntfd:        7 events:        4 data:                7  pos:0 ino:3b10 sdev:8\n";
        assert_eq!(epoll_targets(info), Some(vec![(5, false), (7, true)]));
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 23456 /run/app.sock\n0000000000000000: 00000003 00000000 00000000 0001 03 23457 /run/app.sock\n";
        let (known, listening) = unix_sockets(unix);
        assert_eq!(known.len(), 2);
        assert_eq!(listening, HashSet::from([23456]));
    }

    /// A Python process blocked in `WAIT` over the descriptors `SETUP` makes, as a server's
    /// worker would be: what its wait is, read from outside.
    fn wait_of(setup: &str, wait: &str) -> Option<WaitFor> {
        let script = format!(
            "import socket, select, selectors, sys\nls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen()\n{setup}\nprint('ready', flush=True)\n{wait}\n"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let pid = child.id();
        // Blocked once its system call is one of the waits (not the write of "ready").
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut verdict = None;
        while Instant::now() < deadline {
            if let Some(call) = blocked::syscall(pid, pid as u64) {
                if call.number != blocked::nr::WRITE {
                    verdict = Sockets::default().client_wait(pid, call);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().ok();
        child.wait().ok();
        verdict
    }

    #[test]
    fn a_worker_waiting_on_its_listening_socket_waits_for_a_connection() {
        let pipe = "import os; r, w = os.pipe()";
        assert_eq!(wait_of("", "ls.accept()"), Some(WaitFor::Connection));
        assert_eq!(
            wait_of(pipe, "select.select([ls, r], [], [])"),
            Some(WaitFor::Connection),
            "gunicorn's sync worker"
        );
        assert_eq!(
            wait_of(pipe, "p = select.poll(); p.register(ls); p.register(r); p.poll()"),
            Some(WaitFor::Connection)
        );
        assert_eq!(
            wait_of("sel = selectors.EpollSelector(); sel.register(ls, selectors.EVENT_READ)", "sel.select()"),
            Some(WaitFor::Connection)
        );
        let served = "c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()";
        assert_eq!(wait_of(served, "s.recv(1)"), Some(WaitFor::Request), "a kept-alive connection");
    }

    #[test]
    fn a_wait_that_includes_a_reply_or_a_write_is_not_for_clients() {
        let outbound = "c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()";
        assert_eq!(wait_of(outbound, "c.recv(1)"), None, "a reply from a server it called");
        assert_eq!(wait_of(outbound, "select.select([ls, c], [], [])"), None, "a reply may be the work");
        assert_eq!(wait_of(outbound, "select.select([ls], [s], [], 5); import time; time.sleep(5)"), None);
        assert_eq!(wait_of("import time", "time.sleep(5)"), None);
    }

    #[test]
    fn a_wait_over_pipes_only_is_a_wake_up() {
        let pipe = "import os; r, w = os.pipe()";
        assert_eq!(wait_of(pipe, "select.select([r], [], [], 30)"), Some(WaitFor::WakeUp), "gunicorn's master");
        assert_eq!(wait_of(pipe, "os.read(r, 1)"), None, "a read of a pipe is a wait for its writer's output");
    }
}
