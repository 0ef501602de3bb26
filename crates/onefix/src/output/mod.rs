//! The one way onefix writes a file.
//!
//! onefix runs as root on machines it shares with other work, so it never removes, truncates,
//! renames over or follows a path into anything it did not create:
//! - a regular file is written whole to an unnamed temporary file in the destination's directory
//!   (`O_TMPFILE`; a named `.NAME.PID.onefix-tmp` where the file system has none) and renamed into
//!   place when complete: a failure or a kill leaves the previous file, if any, as it was;
//! - a character device, FIFO or socket (`/dev/null`, `/dev/stdout`, a named pipe) is written
//!   through as a stream: opened without creating or truncating, never renamed over or removed;
//! - a symbolic link is written through to its target when that is a regular file the user can
//!   write; the link itself is left alone;
//! - in a directory others can write (sticky, like `/tmp`, or group- or other-writable), no link
//!   and no existing file is followed or written unless it is root's or the user's
//!   ([`trust`]: what `fs.protected_symlinks` and `fs.protected_regular` refuse, whatever
//!   the sysctls say), and streams there are opened with `O_NOFOLLOW`;
//! - files onefix creates are readable by their owner only (0600, as perf writes `perf.data`);
//!   a file replaced keeps its own permissions;
//! - `-` is standard output, for the text and JSON outputs.
//!
//! Every destination is checked (and its temporary file made) before the target starts, so an
//! unwritable path costs the target nothing. Clean-up removes only the temporary files created
//! here, recognised by the inode they were created with, never by the user's path.

use std::ffi::CString;
use std::fs::Metadata;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;

mod recording;
mod stream;
mod temp;
pub mod trust;

pub use recording::{ReadAt, RecordingFile};
pub use stream::StreamWriter;
pub use temp::TempFile;

/// Signals received that end what onefix is doing (SIGINT, SIGTERM); raised by the handlers of
/// the commands. A stream that cannot be written gives up when this changes, so that a signal
/// always ends onefix, even one blocked on a FIFO nobody reads.
pub static SIGNALS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write the {what} to {path}: {why}")]
    Refused { what: &'static str, path: String, why: String },
    #[error("the {what} and the {other} both go to {path}: give each its own path")]
    Twice { what: &'static str, other: &'static str, path: String },
    #[error("the {what} would be written over {path}, which onefix reads: give the {what} another path")]
    OverInput { what: &'static str, path: String },
}

/// Where one output goes, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    Stdout,
    /// A character device, FIFO or socket, reached directly or through a link.
    Stream {
        path: PathBuf,
        kind: StreamKind,
    },
    /// A regular file (existing or not); `at` is the path renamed onto: a link's target when
    /// the user's path is a link.
    File {
        at: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    CharDevice,
    Fifo,
    Socket,
}

/// An output the user asked for, checked and ready to be opened.
#[derive(Debug)]
pub struct Output {
    /// What it is, in words ("JSON report").
    pub what: &'static str,
    /// The path as the user gave it.
    pub shown: PathBuf,
    pub dest: Dest,
    /// Made when checked: its creation is the proof that the directory takes files.
    temp: Option<TempFile>,
}

/// Checks where an output may go. `stdout_ok`: whether `-` may stand for standard output.
pub fn check(path: &Path, what: &'static str, stdout_ok: bool) -> Result<Output, OutputError> {
    let refuse = |why: String| OutputError::Refused { what, path: path.display().to_string(), why };
    if path.as_os_str() == "-" {
        if !stdout_ok {
            return Err(refuse(
                "the standard output (`-`) takes only text and JSON outputs; give a file's path".into(),
            ));
        }
        return Ok(Output { what, shown: path.into(), dest: Dest::Stdout, temp: None });
    }
    trust::check_path(path).map_err(refuse)?;
    let dest = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            // What the link leads to, followed as open(2) would: /dev/stdout may lead to a
            // pipe, which has no path to canonicalize.
            let meta = std::fs::metadata(path).map_err(|_| {
                refuse(
                    "it is a symbolic link to nothing (onefix writes through a link only to an existing regular file)"
                        .into(),
                )
            })?;
            match kind_of(&meta) {
                Some(Kind::Regular) => {
                    let target = std::fs::canonicalize(path).map_err(|e| refuse(e.to_string()))?;
                    if !writable(&target) {
                        return Err(refuse(format!("it links to {}, which you cannot write", target.display())));
                    }
                    Dest::File { at: target }
                }
                Some(Kind::Stream(kind)) => Dest::Stream { path: path.into(), kind },
                Some(Kind::Directory) => return Err(refuse("it links to a directory; give a file's path".into())),
                None => {
                    return Err(refuse(
                        "it links to a block device; give a regular file, a character device, a FIFO or a socket"
                            .into(),
                    ))
                }
            }
        }
        Ok(meta) => match kind_of(&meta) {
            Some(Kind::Regular) => Dest::File { at: path.into() },
            Some(Kind::Stream(kind)) => Dest::Stream { path: path.into(), kind },
            Some(Kind::Directory) => return Err(refuse("it is a directory; give a file's path".into())),
            None => {
                return Err(refuse(
                    "it is a block device; give a regular file, a character device, a FIFO or a socket".into(),
                ))
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = parent_of(path);
            match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Dest::File { at: path.into() },
                Ok(_) => return Err(refuse(format!("{} is not a directory", dir.display()))),
                Err(_) => return Err(refuse(format!("the directory {} does not exist", dir.display()))),
            }
        }
        Err(e) => return Err(refuse(e.to_string())),
    };
    let temp = match &dest {
        Dest::File { at } => Some(TempFile::beside(at).map_err(|e| refuse(e.to_string()))?),
        Dest::Stream { path, kind } => {
            if *kind != StreamKind::Socket && !writable(path) {
                return Err(refuse("you cannot write it".into()));
            }
            None
        }
        Dest::Stdout => None,
    };
    Ok(Output { what, shown: path.into(), dest, temp })
}

/// Refuses two outputs that would land on the same file (the same regular file, or standard
/// output twice; a character device such as /dev/null may take several), and any output that
/// would land on a file onefix reads.
pub fn check_distinct(outputs: &[&Output], inputs: &[&Path]) -> Result<(), OutputError> {
    for (i, a) in outputs.iter().enumerate() {
        for b in &outputs[..i] {
            if a.same_place(b) {
                return Err(OutputError::Twice { what: b.what, other: a.what, path: a.shown.display().to_string() });
            }
        }
        if let Dest::File { at } = &a.dest {
            if let Ok(out) = std::fs::metadata(at) {
                for input in inputs {
                    if std::fs::metadata(input).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino()) {
                        return Err(OutputError::OverInput { what: a.what, path: a.shown.display().to_string() });
                    }
                }
            }
        }
    }
    Ok(())
}

impl Output {
    fn same_place(&self, other: &Output) -> bool {
        match (&self.dest, &other.dest) {
            (Dest::Stdout, Dest::Stdout) => true,
            (Dest::File { at: a }, Dest::File { at: b }) => identity(a) == identity(b),
            (Dest::Stream { path: a, kind: StreamKind::Fifo | StreamKind::Socket }, Dest::Stream { path: b, .. }) => {
                std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok()
            }
            _ => false,
        }
    }

    /// Whether this output is standard output, as `-` or through a path such as /dev/stdout
    /// (the terminal summary then goes to stderr).
    pub fn is_stdout(&self) -> bool {
        match &self.dest {
            Dest::Stdout => true,
            Dest::Stream { path, .. } => {
                let id = |m: Metadata| (m.dev(), m.ino(), m.rdev());
                let stdout = std::fs::metadata("/proc/self/fd/1").map(id).ok();
                stdout.is_some() && std::fs::metadata(path).map(id).ok() == stdout
            }
            Dest::File { .. } => false,
        }
    }

    /// Opens the output for writing: the temporary file made when it was checked, the stream
    /// (waiting, interruptibly, for a FIFO's reader), or standard output.
    pub fn open(mut self) -> io::Result<Sink> {
        Ok(match self.dest {
            Dest::Stdout => Sink::Stdout(io::stdout()),
            Dest::Stream { ref path, kind } => Sink::Stream(StreamWriter::open(path, kind)?),
            Dest::File { ref at } => {
                let temp = match self.temp.take() {
                    Some(t) => t,
                    None => TempFile::beside(at)?,
                };
                Sink::File(io::BufWriter::new(temp), at.clone())
            }
        })
    }

    /// Writes the whole output with `write`, then puts it in place; on any error the
    /// destination is left as it was.
    pub fn write_with(self, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
        let mut sink = self.open()?;
        write(&mut sink)?;
        sink.finish()
    }
}

/// An opened output.
pub enum Sink {
    Stdout(io::Stdout),
    Stream(StreamWriter),
    File(io::BufWriter<TempFile>, PathBuf),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stdout(s) => s.write(buf),
            Sink::Stream(s) => s.write(buf),
            Sink::File(f, _) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(s) => s.flush(),
            Sink::Stream(s) => s.flush(),
            Sink::File(f, _) => f.flush(),
        }
    }
}

impl Sink {
    /// Flushes, and for a regular file renames the complete file into place.
    pub fn finish(self) -> io::Result<()> {
        match self {
            Sink::Stdout(mut s) => s.flush(),
            Sink::Stream(mut s) => s.flush(),
            Sink::File(f, at) => f.into_inner().map_err(|e| e.into_error())?.persist(&at),
        }
    }
}

enum Kind {
    Regular,
    Directory,
    Stream(StreamKind),
}

fn kind_of(meta: &Metadata) -> Option<Kind> {
    let t = meta.file_type();
    if t.is_file() {
        Some(Kind::Regular)
    } else if t.is_dir() {
        Some(Kind::Directory)
    } else if t.is_char_device() {
        Some(Kind::Stream(StreamKind::CharDevice))
    } else if t.is_fifo() {
        Some(Kind::Stream(StreamKind::Fifo))
    } else if t.is_socket() {
        Some(Kind::Stream(StreamKind::Socket))
    } else {
        None
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: access(2) on a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// What names the same file: the device and inode when it exists, else the canonical directory
/// and the file name.
fn identity(path: &Path) -> (u64, u64, PathBuf) {
    match std::fs::metadata(path) {
        Ok(m) => (m.dev(), m.ino(), PathBuf::new()),
        Err(_) => {
            let dir = std::fs::canonicalize(parent_of(path)).unwrap_or_else(|_| parent_of(path));
            (0, 0, dir.join(path.file_name().unwrap_or_default()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("onefix-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_failed_write_leaves_the_previous_file_and_no_temporary_file() {
        let dir = scratch("fail");
        let path = dir.join("out.json");
        std::fs::write(&path, "previous").unwrap();
        let out = check(&path, "JSON report", true).unwrap();
        let err = out.write_with(|w| {
            w.write_all(b"half of it")?;
            Err(io::Error::other("disk full"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "previous");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the user's file is left");
        // And a good write replaces it whole, keeping its permissions.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        check(&path, "JSON report", true).unwrap().write_with(|w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    }

    #[test]
    fn a_link_is_written_through_and_kept() {
        let dir = scratch("link");
        let target = dir.join("real.svg");
        std::fs::write(&target, "old").unwrap();
        let link = dir.join("link.svg");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        check(&link, "flame graph", false).unwrap().write_with(|w| w.write_all(b"svg")).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "svg");
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
        assert!(check(&dangling, "flame graph", false).unwrap_err().to_string().contains("link to nothing"));
        assert!(std::fs::symlink_metadata(&dangling).is_ok());
    }

    #[test]
    fn devices_are_streams_and_bad_paths_are_one_sentence() {
        let null = check(Path::new("/dev/null"), "recording", false).unwrap();
        assert!(matches!(null.dest, Dest::Stream { kind: StreamKind::CharDevice, .. }));
        null.write_with(|w| w.write_all(b"x")).unwrap();
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let dir = scratch("bad");
        let e = |p: &Path| check(p, "flame graph", false).unwrap_err().to_string();
        assert!(e(&dir).contains("is a directory"), "{}", e(&dir));
        assert!(e(&dir.join("missing/out.svg")).contains("does not exist"));
        assert!(e(Path::new("-")).contains("standard output"));
        assert!(check(Path::new("-"), "JSON report", true).unwrap().is_stdout());
    }

    #[test]
    fn two_outputs_on_one_file_or_on_an_input_are_refused() {
        let dir = scratch("twice");
        let a = check(&dir.join("x.svg"), "flame graph", false).unwrap();
        let b = check(&dir.join("./x.svg"), "HTML report", false).unwrap();
        assert!(check_distinct(&[&a, &b], &[]).unwrap_err().to_string().contains("both go to"));
        let n1 = check(Path::new("/dev/null"), "flame graph", false).unwrap();
        let n2 = check(Path::new("/dev/null"), "HTML report", false).unwrap();
        check_distinct(&[&n1, &n2], &[]).unwrap();
        let rec = dir.join("rec.onefix");
        std::fs::write(&rec, "r").unwrap();
        let over = check(&rec, "JSON report", true).unwrap();
        assert!(check_distinct(&[&over], &[&rec]).unwrap_err().to_string().contains("which onefix reads"));
    }

    #[test]
    fn a_fifo_nobody_reads_gives_up_on_a_signal() {
        let dir = scratch("fifo");
        let fifo = dir.join("f");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let out = check(&fifo, "JSON report", true).unwrap();
        let t = std::thread::spawn(move || out.write_with(|w| w.write_all(b"{}")));
        std::thread::sleep(Duration::from_millis(200));
        SIGNALS.fetch_add(1, Ordering::Relaxed);
        let r = t.join().unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::Interrupted);
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
}
