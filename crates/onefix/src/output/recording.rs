//! The recording file, written as it goes under a name of its own until it is complete.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::stream::StreamWriter;
use super::temp::{create_new_named, remove_if_ours};
use super::{parent_of, Dest, Output, OutputError};

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
