//! What onefix, running as root, will follow and open in a directory other users can write.
//!
//! The rule is what the kernel's `fs.protected_symlinks` and `fs.protected_regular` enforce,
//! applied whatever the sysctls say (containers often turn them off): in a directory that is
//! sticky or writable by others (`/tmp`, `/var/tmp`, a shared upload directory), a symbolic link
//! is followed, and an existing file opened, only when it belongs to root or to the user running
//! onefix. Anyone else's link there may lead anywhere (`/etc/shadow`); anyone else's file may be
//! swapped or hard-linked at will.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// The mode of a directory others may write into: sticky (`/tmp`) or writable by group or
/// others; `None` for any other directory.
fn shared(dir: &Path) -> Option<u32> {
    let mode = std::fs::metadata(dir).ok()?.mode();
    (mode & 0o1000 != 0 || mode & 0o022 != 0).then_some(mode & 0o7777)
}

/// Whether files owned by `uid` are trusted: root's, and the user's running onefix (through
/// sudo, the user who ran it).
fn trusted(uid: u32) -> bool {
    // SAFETY: getuid and geteuid have no preconditions.
    let (real, effective) = unsafe { (libc::getuid(), libc::geteuid()) };
    let invoking = std::env::var("SUDO_UID").ok().and_then(|u| u.parse::<u32>().ok());
    uid == 0 || uid == real || uid == effective || Some(uid) == invoking
}

/// Whether `path`'s directory is one others may write: a link or file there that is not ours
/// must not be followed or opened (open with `O_NOFOLLOW`).
pub fn in_shared_dir(path: &Path) -> bool {
    shared(&super::parent_of(path)).is_some()
}

/// Checks every component of `path` that exists: none may be a link, or (the last) a file,
/// owned by someone other than root or the user inside a directory others can write. The
/// refusal is one clause saying which path and why.
pub fn check_path(path: &Path) -> Result<(), String> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut at = PathBuf::new();
    let components: Vec<Component> = absolute.components().collect();
    for (i, component) in components.iter().enumerate() {
        at.push(component);
        let Ok(meta) = std::fs::symlink_metadata(&at) else { break };
        let last = i + 1 == components.len();
        let is_link = meta.file_type().is_symlink();
        if !(is_link || last) || trusted(meta.uid()) {
            continue;
        }
        let dir = super::parent_of(&at);
        if let Some(mode) = shared(&dir) {
            let what = match () {
                _ if is_link => "a symbolic link",
                _ if meta.is_dir() => "a directory",
                _ => "a file",
            };
            return Err(format!(
                "{} is {what} of user {} in {} (mode {mode:04o}), a directory others can write; as root onefix follows no link and opens no file there that is not root's or yours",
                at.display(),
                meta.uid(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// After opening `path`: the file opened is the user's or root's, or it lies in a directory
/// only they can write (what [`check_path`] checked may have been swapped since).
pub fn check_opened(path: &Path, file: &File) -> Result<(), String> {
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if trusted(meta.uid()) || !in_shared_dir(path) {
        return Ok(());
    }
    Err(format!(
        "{} became a file of user {} in a directory others can write; onefix did not write to it",
        path.display(),
        meta.uid()
    ))
}
