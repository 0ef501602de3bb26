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
//! - `-` is standard output, for the text and JSON outputs.
//!
//! Every destination is checked (and its temporary file made) before the target starts, so an
//! unwritable path costs the target nothing. Clean-up removes only the temporary files created
//! here, recognised by the inode they were created with, never by the user's path.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
    let dest = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::canonicalize(path).map_err(|_| {
                refuse(
                    "it is a symbolic link to nothing (onefix writes through a link only to an existing regular file)"
                        .into(),
                )
            })?;
            let meta = std::fs::metadata(&target).map_err(|e| refuse(e.to_string()))?;
            match kind_of(&meta) {
                Some(Kind::Regular) => {
                    if !writable(&target) {
                        return Err(refuse(format!("it links to {}, which you cannot write", target.display())));
                    }
                    Dest::File { at: target }
                }
                Some(Kind::Stream(kind)) => Dest::Stream { path: path.into(), kind },
                Some(Kind::Directory) => {
                    return Err(refuse(format!("it links to the directory {}; give a file's path", target.display())))
                }
                None => {
                    return Err(refuse(format!(
                        "it links to {}, which is not a regular file, device, FIFO or socket",
                        target.display()
                    )))
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

    /// Whether this output is standard output (the terminal summary then goes to stderr).
    pub fn is_stdout(&self) -> bool {
        self.dest == Dest::Stdout
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

/// A file onefix creates in a destination's directory and renames into place when complete.
/// Unnamed (`O_TMPFILE`) where the file system allows it, so that even a killed onefix leaves
/// nothing behind; else named, created exclusively and removed on drop only while it is still
/// the inode created here.
#[derive(Debug)]
pub struct TempFile {
    file: File,
    /// The named temporary file's path; `None` for an unnamed one.
    named: Option<PathBuf>,
    dir: PathBuf,
    created: (u64, u64),
}

impl TempFile {
    pub fn beside(dest: &Path) -> io::Result<TempFile> {
        let dir = parent_of(dest);
        let base = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "output".into());
        let (file, named) = match std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o666)
            .open(&dir)
        {
            Ok(f) => (f, None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => {
                create_new_named(&dir, |n| format!(".{base}.{}.{n}.onefix-tmp", std::process::id()))?
            }
            Err(e) => return Err(e),
        };
        // An existing destination keeps its permissions and, as far as onefix may, its owner.
        if let Ok(old) = std::fs::metadata(dest) {
            let _ = file.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777));
            // SAFETY: fchown on a descriptor we own; failure (not root) leaves our ownership.
            unsafe { libc::fchown(file.as_raw_fd(), old.uid(), old.gid()) };
        }
        let m = file.metadata()?;
        Ok(TempFile { file, named, dir, created: (m.dev(), m.ino()) })
    }

    /// Gives the complete file the name `dest`, replacing what was there in one step.
    pub fn persist(mut self, dest: &Path) -> io::Result<()> {
        self.file.sync_all()?;
        let named = match self.named.take() {
            Some(n) => n,
            None => {
                // An unnamed file gets a name of its own first: linkat cannot replace a file.
                let proc = CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd())).expect("no NUL");
                let mut linked = None;
                for n in 0..100 {
                    let name = self.dir.join(format!(".onefix-tmp.{}.{n}", std::process::id()));
                    let c = CString::new(name.as_os_str().as_bytes())
                        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                    // SAFETY: linkat(2) with two NUL-terminated paths.
                    let r = unsafe {
                        libc::linkat(libc::AT_FDCWD, proc.as_ptr(), libc::AT_FDCWD, c.as_ptr(), libc::AT_SYMLINK_FOLLOW)
                    };
                    if r == 0 {
                        linked = Some(name);
                        break;
                    }
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
                linked.ok_or_else(|| io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name"))?
            }
        };
        self.named = Some(named.clone());
        std::fs::rename(&named, dest)?;
        self.named = None;
        Ok(())
    }
}

impl Write for TempFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(path) = &self.named {
            remove_if_ours(path, self.created);
        }
    }
}

/// Creates `dir/name(n)` exclusively for the first free `n`.
pub fn create_new_named(dir: &Path, name: impl Fn(u32) -> String) -> io::Result<(File, Option<PathBuf>)> {
    for n in 0..1000 {
        let path = dir.join(name(n));
        match std::fs::OpenOptions::new().write(true).read(true).create_new(true).mode(0o666).open(&path) {
            Ok(f) => return Ok((f, Some(path))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free file name"))
}

/// Removes `path` only while it is still the file onefix created (same device and inode).
pub fn remove_if_ours(path: &Path, created: (u64, u64)) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file() && (m.dev(), m.ino()) == created) {
        let _ = std::fs::remove_file(path);
    }
}

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
    fn open(path: &Path, kind: StreamKind) -> io::Result<StreamWriter> {
        let signals_at_open = SIGNALS.load(Ordering::Relaxed);
        let out = if kind == StreamKind::Socket {
            let s = UnixStream::connect(path)?;
            s.set_nonblocking(true)?;
            StreamOut::Socket(s)
        } else {
            let mut waited = false;
            loop {
                // No O_CREAT, no O_TRUNC: the file is written as it is.
                let r =
                    std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path);
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

/// The recording, written as it goes. Until it is complete it lives under a name of its own,
/// `NAME.partial` beside the destination, created exclusively: a killed onefix leaves it there,
/// readable with `onefix report`. When complete it is renamed onto the destination. A stream
/// destination (`/dev/null`, a FIFO) receives the bytes as they are written, and an unnamed
/// copy is kept to read the samples back; so does `--no-save`, with no destination at all.
pub struct RecordingFile {
    /// The user's destination; `None` with `--no-save`.
    pub dest: Option<Output>,
    file: File,
    /// The partial file's path and identity, when it has a name.
    partial: Option<(PathBuf, (u64, u64))>,
    stream: Option<StreamWriter>,
    kept: bool,
}

impl RecordingFile {
    pub fn create(dest: Option<Output>) -> Result<RecordingFile, OutputError> {
        let (file, partial) = match dest.as_ref().map(|d| &d.dest) {
            Some(Dest::File { at }) => {
                let dir = parent_of(at);
                let base = at.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let (file, path) = create_new_named(&dir, |n| {
                    if n == 0 {
                        format!("{base}.partial")
                    } else {
                        format!("{base}.{n}.partial")
                    }
                })
                .map_err(|e| refused(dest.as_ref(), e))?;
                let m = file.metadata().map_err(|e| refused(dest.as_ref(), e))?;
                (file, path.map(|p| (p, (m.dev(), m.ino()))))
            }
            _ => (unnamed_scratch().map_err(|e| refused(dest.as_ref(), e))?, None),
        };
        Ok(RecordingFile { dest, file, partial, stream: None, kept: false })
    }

    /// Opens a stream destination (waiting, interruptibly, for a FIFO's reader).
    pub fn open_stream(&mut self) -> io::Result<()> {
        if let Some(Output { dest: Dest::Stream { path, kind }, .. }) = &self.dest {
            self.stream = Some(StreamWriter::open(path, *kind)?);
        }
        Ok(())
    }

    /// A second handle on the file, to read it back (with [`ReadAt`]) while it is written.
    pub fn readback(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The bytes written so far, for reading the samples back.
    pub fn reader(&self) -> ReadAt<'_> {
        ReadAt::new(&self.file)
    }

    /// Puts the complete recording in place (a regular destination), and says where it is.
    pub fn persist(&mut self) -> io::Result<Option<PathBuf>> {
        self.file.sync_all()?;
        match (&self.dest, &self.partial) {
            (Some(Output { dest: Dest::File { at }, shown, .. }), Some((path, created))) => {
                let still_ours = std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == *created);
                if !still_ours {
                    return Err(io::Error::other(format!("{} was replaced while onefix wrote it", path.display())));
                }
                std::fs::rename(path, at)?;
                self.partial = None;
                Ok(Some(shown.clone()))
            }
            (Some(Output { shown, .. }), _) => Ok(Some(shown.clone())),
            (None, _) => Ok(None),
        }
    }

    /// Leaves the partial file where it is (what fit on a full disk), and gives its path.
    pub fn keep(&mut self) -> Option<PathBuf> {
        self.kept = true;
        self.partial.as_ref().map(|(p, _)| p.clone())
    }
}

fn refused(dest: Option<&Output>, e: io::Error) -> OutputError {
    let (what, path) = dest.map_or(("recording", String::new()), |d| (d.what, d.shown.display().to_string()));
    OutputError::Refused { what, path, why: e.to_string() }
}

/// An unnamed file in the temporary directory, gone when closed.
fn unnamed_scratch() -> io::Result<File> {
    let dir = std::env::temp_dir();
    match std::fs::OpenOptions::new().write(true).read(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(&dir) {
        Ok(f) => Ok(f),
        Err(_) => {
            let (f, path) = create_new_named(&dir, |n| format!("onefix-scratch-{}-{n}", std::process::id()))?;
            if let Some(p) = path {
                let m = f.metadata()?;
                remove_if_ours(&p, (m.dev(), m.ino()));
            }
            Ok(f)
        }
    }
}

impl Write for RecordingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(s) = &mut self.stream {
            s.write_all(buf)?;
        }
        self.file.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RecordingFile {
    fn drop(&mut self) {
        // Not persisted and not kept: nothing worth keeping (no sample, a target that never
        // started); remove the partial file, and only while it is the one created here.
        if let (false, Some((path, created))) = (self.kept, &self.partial) {
            remove_if_ours(path, *created);
        }
    }
}

/// Reads a file through positioned reads, leaving its offset (shared with a writer) alone.
pub struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl<'a> ReadAt<'a> {
    pub fn new(file: &'a File) -> ReadAt<'a> {
        ReadAt { file, pos: 0 }
    }
}

impl io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
