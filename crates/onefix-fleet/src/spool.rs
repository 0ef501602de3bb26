//! The agent's bounded spool: every batch is written here first and removed once ClickHouse
//! has it, so that an unreachable, slow or refusing server costs disk up to a bound, never the
//! target's time. Past the bound the oldest batches go first, and are counted.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::Batch;
use crate::FleetError;

const SUFFIX: &str = ".batch.json";

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
        std::fs::create_dir_all(dir).map_err(fail)?;
        let probe = dir.join(".onefix-probe");
        std::fs::write(&probe, b"").map_err(fail)?;
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
        let bytes = serde_json::to_vec(batch).expect("a batch serializes");
        std::fs::write(&tmp, &bytes).map_err(fail)?;
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
            match std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Batch>(&b).ok()) {
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
        let one = serde_json::to_vec(&batch(5)).unwrap().len() as u64;
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
}
