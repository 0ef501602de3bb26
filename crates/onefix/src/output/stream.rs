//! Devices, FIFOs and sockets, written through without ever blocking past a signal.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{StreamKind, SIGNALS};

/// A character device, FIFO or socket, written through. Opened without blocking, so that a
/// FIFO with no reader, or one whose reader stopped reading, never holds onefix past a signal.
pub struct StreamWriter {
    out: StreamOut,
    /// [`SIGNALS`] when the stream was opened: a later signal ends any wait.
    signals_at_open: usize,
}

enum StreamOut {
    File(File),
    Socket(UnixStream),
}

impl StreamWriter {
    pub(super) fn open(path: &Path, kind: StreamKind) -> io::Result<StreamWriter> {
        let signals_at_open = SIGNALS.load(Ordering::Relaxed);
        let out = if kind == StreamKind::Socket {
            let s = UnixStream::connect(path)?;
            s.set_nonblocking(true)?;
            StreamOut::Socket(s)
        } else {
            let mut waited = false;
            loop {
                // No O_CREAT, no O_TRUNC: the file is written as it is.
                // A link in a directory others can write is not followed (see `trust`).
                let nofollow = if super::trust::in_shared_dir(path) { libc::O_NOFOLLOW } else { 0 };
                let r = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow)
                    .open(path);
                match r {
                    Ok(f) => break StreamOut::File(f),
                    // A FIFO with no reader yet: wait for one, as a blocking open would.
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                        if !waited {
                            crate::messages::say(format_args!("waiting for a reader of the FIFO {}", path.display()));
                            waited = true;
                        }
                        if SIGNALS.load(Ordering::Relaxed) != signals_at_open {
                            return Err(io::Error::new(
                                io::ErrorKind::Interrupted,
                                "interrupted while waiting for a reader",
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(StreamWriter { out, signals_at_open })
    }

    fn fd(&self) -> i32 {
        match &self.out {
            StreamOut::File(f) => f.as_raw_fd(),
            StreamOut::Socket(s) => s.as_raw_fd(),
        }
    }
}

impl Write for StreamWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let r = match &mut self.out {
                StreamOut::File(f) => f.write(buf),
                StreamOut::Socket(s) => s.write(buf),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if SIGNALS.load(Ordering::Relaxed) != self.signals_at_open {
                        return Err(io::Error::new(
                            io::ErrorKind::Interrupted,
                            "interrupted while the reader was not reading",
                        ));
                    }
                    let mut pfd = libc::pollfd { fd: self.fd(), events: libc::POLLOUT, revents: 0 };
                    // SAFETY: poll(2) on one valid descriptor.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
