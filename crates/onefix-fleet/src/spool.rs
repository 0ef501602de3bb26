//! The agent's bounded spool: every batch is written here first and removed once ClickHouse
//! has it, so that an unreachable, slow or refusing server costs disk up to a bound, never the
//! target's time. Past the bound the oldest batches go first, and are counted.
//!
//! The agent runs as root and uploads what it reads back from here: the spool is a directory
//! only the agent's user can write (created 0700, or refused), its files are created 0600
//! without following links, and a batch is read back only from a regular file of the agent's
//! user whose first line holds the checksum of the rest: nothing planted there is uploaded.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::batch::Batch;
use crate::FleetError;

const SUFFIX: &str = ".batch.json";
/// The first line of a spooled batch, before the SHA-256 of the rest in hex.
const HEADER: &str = "onefix-spool-batch sha256=";

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    /// Batches and samples dropped to keep within the bound (this run).
    pub dropped_batches: u64,
    pub dropped_samples: u64,
    sequence: u64,
}

/// A spooled batch: its file, and what it holds.
pub struct Spooled {
    pub path: PathBuf,
    pub batch: Batch,
}

impl Spool {
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool, FleetError> {
        let fail = |e: std::io::Error| FleetError::Spool { path: dir.display().to_string(), why: e.to_string() };
        let refuse = |why: String| FleetError::Spool { path: dir.display().to_string(), why };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(fail)?;
        let meta = std::fs::metadata(dir).map_err(fail)?;
        if !meta.is_dir() {
            return Err(refuse("it is not a directory".into()));
        }
        // SAFETY: geteuid has no preconditions.
        let user = unsafe { libc::geteuid() };
        if meta.uid() != user {
            return Err(refuse(format!(
                "it belongs to user {}, not to the agent's user {user}; the spool must be a directory only the agent can write",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "others can write it (mode {:04o}); the spool must be a directory only the agent can write (chmod 700)",
                meta.mode() & 0o7777
            )));
        }
        // A file made and removed: the proof that the directory takes files.
        let probe = dir.join(format!(".onefix-probe.{}", std::process::id()));
        create_private(&probe).map_err(fail)?;
        std::fs::remove_file(&probe).map_err(fail)?;
        Ok(Spool { dir: dir.to_path_buf(), max_bytes, dropped_batches: 0, dropped_samples: 0, sequence: 0 })
    }

    /// The spooled batches' files, oldest first, with their sizes.
    fn files(&self) -> Vec<(PathBuf, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<(PathBuf, u64)> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
            .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
            .collect();
        // Names start with a zero-padded time: their order is their age.
        files.sort();
        files
    }

    pub fn len(&self) -> usize {
        self.files().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        self.files().iter().map(|f| f.1).sum()
    }

    /// Writes the batch (a temporary file renamed into place: a crash leaves no half batch),
    /// then drops the oldest batches while the spool is over its bound.
    pub fn push(&mut self, batch: &Batch) -> Result<(), FleetError> {
        let fail = |e: std::io::Error| FleetError::Spool { path: self.dir.display().to_string(), why: e.to_string() };
        let micros = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
        self.sequence += 1;
        let name =
            format!("{micros:020}-{:06}-{}-{}{SUFFIX}", self.sequence % 1_000_000, batch.weight(), batch.batch_id);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let json = serde_json::to_vec(batch).expect("a batch serializes");
        let mut file = create_private(&tmp).map_err(fail)?;
        let header = format!("{HEADER}{}\n", hex_sha256(&json));
        file.write_all(header.as_bytes()).and_then(|_| file.write_all(&json)).map_err(fail)?;
        drop(file);
        std::fs::rename(&tmp, self.dir.join(&name)).map_err(fail)?;
        self.enforce_bound();
        Ok(())
    }

    fn enforce_bound(&mut self) {
        let mut files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        // The newest batch stays even when it alone is over the bound: dropping it would
        // leave nothing to send.
        while total > self.max_bytes && files.len() > 1 {
            let (path, size) = files.remove(0);
            if std::fs::remove_file(&path).is_ok() {
                self.dropped_batches += 1;
                self.dropped_samples += weight_in_name(&path);
            }
            total -= size;
        }
    }

    /// The oldest spooled batch. A file that cannot be read (damaged by hand) is dropped and
    /// counted.
    pub fn oldest(&mut self) -> Option<Spooled> {
        loop {
            let (path, _) = self.files().into_iter().next()?;
            match read_own(&path, self.max_bytes).and_then(|b| serde_json::from_slice::<Batch>(&b).ok()) {
                Some(batch) => return Some(Spooled { path, batch }),
                None => {
                    let _ = std::fs::remove_file(&path);
                    self.dropped_batches += 1;
                    self.dropped_samples += weight_in_name(&path);
                }
            }
        }
    }

    /// Forgets a batch ClickHouse has.
    pub fn remove(&self, spooled: &Spooled) -> Result<(), FleetError> {
        std::fs::remove_file(&spooled.path)
            .map_err(|e| FleetError::Spool { path: spooled.path.display().to_string(), why: e.to_string() })
    }
}

/// Creates `path` for writing, 0600, never through a link nor over an existing file.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The batch's JSON from a spooled file, if the agent wrote it: a regular file of the agent's
/// user, not reached through a link, no larger than the spool's bound, whose checksum holds.
fn read_own(path: &Path, max_bytes: u64) -> Option<Vec<u8>> {
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: geteuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } || meta.len() > max_bytes.max(1 << 20) * 2 {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(meta.len()).read_to_end(&mut bytes).ok()?;
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let json = bytes.split_off(newline + 1);
    let sum = std::str::from_utf8(&bytes[..newline]).ok()?.strip_prefix(HEADER)?;
    (hex_sha256(&json) == sum).then_some(json)
}

fn weight_in_name(path: &Path) -> u64 {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.split('-').nth(2).and_then(|w| w.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Labels, StackCount};

    fn batch(weight: u32) -> Batch {
        Batch {
            batch_id: crate::batch::new_batch_id(),
            ts: 1,
            interval_s: 10,
            sample_us: 52_632,
            labels: Labels::default(),
            counts: vec![StackCount { stack_id: 1, tid: 1, thread: String::new(), state: 1, weight }],
            stacks: Vec::new(),
            frames: Vec::new(),
        }
    }

    #[test]
    fn the_oldest_batches_are_dropped_past_the_bound_and_counted() {
        let dir = std::env::temp_dir().join(format!("onefix-spool-test-{}", std::process::id()));
        let one = serde_json::to_vec(&batch(5)).unwrap().len() as u64 + HEADER.len() as u64 + 65;
        let mut spool = Spool::open(&dir, one * 3 + one / 2).unwrap();
        let batches: Vec<Batch> = (0..5).map(|_| batch(5)).collect();
        for b in &batches {
            spool.push(b).unwrap();
        }
        assert_eq!(spool.len(), 3);
        assert_eq!((spool.dropped_batches, spool.dropped_samples), (2, 10));
        let oldest = spool.oldest().unwrap();
        assert_eq!(oldest.batch, batches[2], "the two oldest went, the newest stayed");
        spool.remove(&oldest).unwrap();
        assert_eq!(spool.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_the_agent_did_not_write_is_never_read_back() {
        let dir = std::env::temp_dir().join(format!("onefix-spool-planted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut spool = Spool::open(&dir, 1 << 20).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "the spool is the agent's alone");
        let planted = serde_json::to_vec(&batch(7)).unwrap();
        // A batch without a checksum, one whose checksum is wrong, and a link to a real batch.
        std::fs::write(dir.join(format!("00000000000000000001-000001-7-a{SUFFIX}")), &planted).unwrap();
        let forged = [format!("{HEADER}{}\n", "0".repeat(64)).into_bytes(), planted].concat();
        std::fs::write(dir.join(format!("00000000000000000002-000001-7-b{SUFFIX}")), forged).unwrap();
        let real = batch(3);
        spool.push(&real).unwrap();
        let written = spool.files()[2].0.clone();
        assert_eq!(std::fs::metadata(&written).unwrap().mode() & 0o777, 0o600);
        std::os::unix::fs::symlink(&written, dir.join(format!("00000000000000000003-000001-7-c{SUFFIX}"))).unwrap();
        let oldest = spool.oldest().unwrap();
        assert_eq!(oldest.batch, real, "only the batch the agent wrote is read back");
        assert_eq!(spool.dropped_batches, 3, "the two planted files and the link");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_spool_others_can_write_is_refused() {
        let dir = std::env::temp_dir().join(format!("onefix-spool-shared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let err = Spool::open(&dir, 1 << 20).err().unwrap().to_string();
        assert!(err.contains("others can write it (mode 0777)"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
