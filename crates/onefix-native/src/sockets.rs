//! Which of a process's sockets were accepted from its own listening ports: a thread blocked
//! reading one is a server waiting for its client's next request, which costs the server
//! nothing (the client has not asked yet).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The tables of a process are read again at most this often, when a socket is not in them.
const REREAD: Duration = Duration::from_millis(10);

#[derive(Default)]
pub struct Sockets {
    by_pid: HashMap<u32, Tables>,
}

#[derive(Default)]
struct Tables {
    /// Socket inodes seen in the last read, and the ones accepted from a listening port.
    known: HashSet<u64>,
    inbound: HashSet<u64>,
    read_at: Option<Instant>,
}

impl Sockets {
    /// Whether `fd` of `pid` is a TCP connection accepted from one of the ports listened on in
    /// its network namespace. False when anything cannot be read (the process is gone, the fd
    /// closed, not a socket).
    pub fn is_inbound(&mut self, pid: u32, fd: u64) -> bool {
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else { return false };
        let Some(inode) = link
            .to_str()
            .and_then(|l| l.strip_prefix("socket:["))
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return false;
        };
        let tables = self.by_pid.entry(pid).or_default();
        let stale = !matches!(tables.read_at, Some(t) if t.elapsed() < REREAD);
        if !tables.known.contains(&inode) && stale {
            let text: String = ["tcp", "tcp6"]
                .iter()
                .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
                .collect();
            (tables.known, tables.inbound) = accepted(&text);
            tables.read_at = Some(Instant::now());
        }
        tables.inbound.contains(&inode)
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }
}

/// From the text of `/proc/net/tcp` and `tcp6`: every socket inode, and those whose local port
/// is a port some socket listens on (connections a server accepted).
fn accepted(text: &str) -> (HashSet<u64>, HashSet<u64>) {
    const LISTEN: &str = "0A";
    let rows: Vec<(u16, &str, u64)> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            Some((port, *f.get(3)?, f.get(9)?.parse().ok()?))
        })
        .collect();
    let listening: HashSet<u16> = rows.iter().filter(|r| r.1 == LISTEN).map(|r| r.0).collect();
    let known = rows.iter().map(|r| r.2).collect();
    let inbound = rows.iter().filter(|r| r.1 != LISTEN && listening.contains(&r.0)).map(|r| r.2).collect();
    (known, inbound)
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
        let (known, inbound) = accepted(text);
        assert_eq!(known.len(), 3);
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
}
