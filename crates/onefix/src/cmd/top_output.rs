//! The output of a program `top` starts, kept visible: the program writes to a pseudo-terminal
//! (so it sees a terminal and keeps its line buffering, as when run alone), and top keeps its
//! last lines for a pane under the view and for the summary on quit. Without this, the view's
//! redraws wipe whatever the program prints.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Lines kept: more than any pane shows, few enough to cost nothing.
const KEPT_LINES: usize = 500;

/// The program's output so far, by line, the last [`KEPT_LINES`] of them.
#[derive(Clone, Default)]
pub struct ProgramOutput {
    lines: Arc<Mutex<Lines>>,
}

#[derive(Default)]
struct Lines {
    done: VecDeque<String>,
    /// The line being written, as bytes (a character may arrive split across reads).
    partial: Vec<u8>,
    count: u64,
    /// Inside an escape sequence (colours, cursor moves): skipped, as it would move top's own
    /// drawing.
    escape: Escape,
    /// A carriage return was read: the line starts over, unless a newline follows (a terminal
    /// ends its lines with both).
    return_pending: bool,
}

#[derive(Default, PartialEq)]
enum Escape {
    #[default]
    No,
    Started,
    Csi,
}

impl ProgramOutput {
    /// The last `n` lines, the one being written included.
    pub fn last(&self, n: usize) -> Vec<String> {
        let guard = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<String> = guard.done.iter().cloned().collect();
        if !guard.partial.is_empty() {
            out.push(String::from_utf8_lossy(&guard.partial).into_owned());
        }
        let skip = out.len().saturating_sub(n);
        out.split_off(skip)
    }

    /// How many lines the program has written.
    pub fn count(&self) -> u64 {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).count
    }

    fn push(&self, bytes: &[u8]) {
        let mut guard = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let l = &mut *guard;
        for &b in bytes {
            if std::mem::take(&mut l.return_pending) && b != b'\n' {
                l.partial.clear();
            }
            match (&l.escape, b) {
                (Escape::Started, b'[') => l.escape = Escape::Csi,
                (Escape::Started, _) => l.escape = Escape::No,
                // A CSI sequence ends at its final byte.
                (Escape::Csi, 0x40..=0x7e) => l.escape = Escape::No,
                (Escape::Csi, _) => {}
                (Escape::No, 0x1b) => l.escape = Escape::Started,
                (Escape::No, b'\n') => {
                    let line = String::from_utf8_lossy(&std::mem::take(&mut l.partial)).into_owned();
                    l.done.push_back(line);
                    l.count += 1;
                    if l.done.len() > KEPT_LINES {
                        l.done.pop_front();
                    }
                }
                // A carriage return starts the line over (progress bars redraw in place).
                (Escape::No, b'\r') => l.return_pending = true,
                (Escape::No, b'\t') => l.partial.extend_from_slice(b"    "),
                (Escape::No, 0..=31 | 127) => {}
                (Escape::No, _) => l.partial.push(b),
            }
        }
    }
}

/// While alive, this process's standard output and error are the pseudo-terminal's: a program
/// spawned meanwhile inherits them. Dropping it gives them back.
pub struct Redirected {
    saved: [OwnedFd; 2],
}

impl Drop for Redirected {
    fn drop(&mut self) {
        // SAFETY: dup2 of descriptors this struct owns onto 1 and 2.
        unsafe {
            libc::dup2(self.saved[0].as_raw_fd(), 1);
            libc::dup2(self.saved[1].as_raw_fd(), 2);
        }
    }
}

/// Opens a pseudo-terminal of `columns` x `rows`, points this process's stdout and stderr at it
/// until the returned guard drops, and reads what arrives into a [`ProgramOutput`]. `None` when
/// no pseudo-terminal can be had: the program then writes to the terminal as before.
pub fn capture(columns: u16, rows: u16) -> Option<(ProgramOutput, Redirected)> {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r/open on descriptors and buffers owned
    // here; each result is checked.
    let (master, slave) = unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if master < 0 {
            return None;
        }
        let master = OwnedFd::from_raw_fd(master);
        if libc::grantpt(master.as_raw_fd()) != 0 || libc::unlockpt(master.as_raw_fd()) != 0 {
            return None;
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) != 0 {
            return None;
        }
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if slave < 0 {
            return None;
        }
        let slave = OwnedFd::from_raw_fd(slave);
        let size = libc::winsize { ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
        libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &size);
        (master, slave)
    };
    // SAFETY: dup of our own standard descriptors, then dup2 of the slave onto them; dup2
    // clears close-on-exec on the copies, so a spawned program inherits them.
    let redirected = unsafe {
        let out = libc::dup(1);
        let err = libc::dup(2);
        if out < 0 || err < 0 {
            return None;
        }
        let saved = [OwnedFd::from_raw_fd(out), OwnedFd::from_raw_fd(err)];
        libc::dup2(slave.as_raw_fd(), 1);
        libc::dup2(slave.as_raw_fd(), 2);
        Redirected { saved }
    };
    drop(slave);
    let output = ProgramOutput::default();
    let kept = output.clone();
    let mut master = File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // Ends when every writer has closed the terminal (EIO on Linux) or on any error.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.push(&buf[..n]);
        }
    });
    Some((output, redirected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_kept_whole_and_redraws_and_colours_do_not_leak() {
        let out = ProgramOutput::default();
        out.push(b"done=100\r\ndone=2");
        out.push(b"00\n\x1b[31mred\x1b[0m\n50%\r75%\rlast");
        out.push("é".as_bytes()[..1].as_ref());
        out.push("é\n".as_bytes()[1..].as_ref());
        assert_eq!(out.last(10), ["done=100", "done=200", "red", "lasté"]);
        assert_eq!(out.last(2), ["red", "lasté"]);
        assert_eq!(out.count(), 4);
    }
}
