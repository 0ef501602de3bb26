//! Files onefix creates beside a destination, and removes only while they are still its own.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::parent_of;

/// A file onefix creates in a destination's directory and renames into place when complete.
/// Created 0600: a report of a root-owned service may quote its root-only sources. A file it
/// replaces keeps its own permissions.
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
            .mode(0o600)
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
        match std::fs::OpenOptions::new().write(true).read(true).create_new(true).mode(0o600).open(&path) {
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
