//! One interval of one target, aggregated: stack counts by thread and state, with the frames
//! and stacks they name. What the agent spools and uploads, and what ClickHouse stores.

use std::collections::{BTreeMap, HashMap};

use onefix_model::{Frame, FrameKind, Profile, StackId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Who the samples are of: the labels every row carries.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Labels {
    pub service: String,
    pub version: String,
    pub host: String,
    pub pid: u32,
    /// `python 3.11.2`, `native`.
    pub runtime: String,
    /// The target's own code, for the diagnosis: directories, one per line.
    pub user_code: Vec<String>,
    /// The target's command line (cut at [`COMMAND_CHARS`]); empty in batches an older agent
    /// spooled.
    #[serde(default)]
    pub command: String,
}

/// The longest command line a row keeps: enough to tell processes apart.
pub const COMMAND_CHARS: usize = 256;

/// One row of `samples`: the weight of a stack on one thread in one state over an interval.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StackCount {
    pub stack_id: u64,
    pub tid: u64,
    pub thread: String,
    /// [`onefix_model::ThreadState`] bits: running, holding the GIL, in a futex wait.
    pub state: u8,
    /// Samples, each of `Batch::sample_us` microseconds.
    pub weight: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FrameRow {
    pub frame_id: u64,
    pub kind: u8,
    pub function: String,
    pub file: String,
    pub line: u32,
    pub module: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StackRow {
    pub stack_id: u64,
    /// Root first.
    pub frame_ids: Vec<u64>,
}

/// An interval's aggregate, with an id that makes a retried upload count once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Batch {
    pub batch_id: String,
    /// Start of the interval, seconds since the Unix epoch.
    pub ts: u64,
    pub interval_s: u32,
    pub sample_us: u32,
    pub labels: Labels,
    pub counts: Vec<StackCount>,
    pub stacks: Vec<StackRow>,
    pub frames: Vec<FrameRow>,
}

fn kind_code(kind: FrameKind) -> u8 {
    match kind {
        FrameKind::Python => 0,
        FrameKind::Native => 1,
        FrameKind::Kernel => 2,
    }
}

pub fn kind_of(code: u8) -> FrameKind {
    match code {
        1 => FrameKind::Native,
        2 => FrameKind::Kernel,
        _ => FrameKind::Python,
    }
}

fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        // Length first, so that ("ab","c") and ("a","bc") differ.
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let digest = h.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
}

/// A frame's id: the same frame has the same id on every host.
pub fn frame_id(f: &Frame) -> u64 {
    hash64(&[
        &[kind_code(f.kind)],
        f.function.as_bytes(),
        f.file.as_bytes(),
        &f.line.to_le_bytes(),
        f.module.as_bytes(),
    ])
}

pub fn stack_id(frame_ids: &[u64]) -> u64 {
    let bytes: Vec<u8> = frame_ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    hash64(&[b"stack", &bytes])
}

/// A fresh batch id: 128 random bits.
pub fn new_batch_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// Aggregates the samples `profile` holds (its tables name their frames) into a batch.
pub fn aggregate(profile: &Profile, labels: &Labels, ts: u64, interval_s: u32) -> Batch {
    let sample_us = match profile.meta.weight_unit {
        onefix_model::WeightUnit::Samples { interval_us } => interval_us.min(u32::MAX as u64) as u32,
        onefix_model::WeightUnit::Bytes => 0,
    };
    let mut stack_ids: HashMap<Option<StackId>, u64> = HashMap::new();
    let mut stacks: BTreeMap<u64, StackRow> = BTreeMap::new();
    let mut frames: BTreeMap<u64, FrameRow> = BTreeMap::new();
    let mut counts: BTreeMap<(u64, u64, u8), (String, u64)> = BTreeMap::new();
    for s in &profile.samples {
        let id = *stack_ids.entry(s.stack).or_insert_with(|| {
            let ids: Vec<u64> = profile
                .stack_frames_root_first(s.stack)
                .into_iter()
                .map(|fid| {
                    let f = profile.frame(fid);
                    let id = frame_id(f);
                    frames.entry(id).or_insert_with(|| FrameRow {
                        frame_id: id,
                        kind: kind_code(f.kind),
                        function: f.function.clone(),
                        file: f.file.clone(),
                        line: f.line,
                        module: f.module.clone(),
                    });
                    id
                })
                .collect();
            let id = stack_id(&ids);
            stacks.entry(id).or_insert(StackRow { stack_id: id, frame_ids: ids });
            id
        });
        let thread = profile.thread(s.thread);
        let entry =
            counts.entry((id, thread.tid, s.state.0)).or_insert_with(|| (thread.name.clone().unwrap_or_default(), 0));
        entry.1 += s.weight as u64;
    }
    Batch {
        batch_id: new_batch_id(),
        ts,
        interval_s,
        sample_us,
        labels: labels.clone(),
        counts: counts
            .into_iter()
            .map(|((stack_id, tid, state), (thread, weight))| StackCount {
                stack_id,
                tid,
                thread,
                state,
                weight: weight.min(u32::MAX as u64) as u32,
            })
            .collect(),
        stacks: stacks.into_values().collect(),
        frames: frames.into_values().collect(),
    }
}

impl Batch {
    /// Samples (units of weight) the batch holds.
    pub fn weight(&self) -> u64 {
        self.counts.iter().map(|c| c.weight as u64).sum()
    }

    /// The rows of the three tables, one JSON object per line (ClickHouse's JSONEachRow).
    pub fn rows(&self) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let mut frames = Vec::new();
        for f in &self.frames {
            serde_json::to_writer(&mut frames, f).expect("a frame serializes");
            frames.push(b'\n');
        }
        let mut stacks = Vec::new();
        for s in &self.stacks {
            serde_json::to_writer(&mut stacks, s).expect("a stack serializes");
            stacks.push(b'\n');
        }
        let user_code = self.labels.user_code.join("\n");
        let mut samples = Vec::new();
        for c in &self.counts {
            let row = serde_json::json!({
                "ts": self.ts,
                "interval_s": self.interval_s,
                "service": self.labels.service,
                "version": self.labels.version,
                "host": self.labels.host,
                "pid": self.labels.pid,
                "runtime": self.labels.runtime,
                "batch_id": self.batch_id,
                "stack_id": c.stack_id,
                "tid": c.tid,
                "thread": c.thread,
                "state": c.state,
                "weight": c.weight,
                "sample_us": self.sample_us,
                "user_code": user_code,
                "command": self.labels.command,
            });
            serde_json::to_writer(&mut samples, &row).expect("a row serializes");
            samples.push(b'\n');
        }
        (frames, stacks, samples)
    }

    /// Uploads the batch: frames and stacks first, so that no sample names a stack the store
    /// lacks; the samples last. A retry writes the same rows again, which count once.
    /// Returns the bytes of rows sent.
    pub fn upload(&self, client: &crate::Client) -> Result<u64, crate::FleetError> {
        let (frames, stacks, samples) = self.rows();
        client.insert_json_rows("frames", &frames)?;
        client.insert_json_rows("stacks", &stacks)?;
        client.insert_json_rows("samples", &samples)?;
        Ok((frames.len() + stacks.len() + samples.len()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onefix_model::{Meta, Sample, ThreadState};

    #[test]
    fn samples_fold_into_stack_counts_with_stable_ids() {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(7, 70, Some("main"));
        let a = p.intern_frame(Frame::python("main", "/app/a.py", 1));
        let b = p.intern_frame(Frame::python("work", "/app/a.py", 9));
        let s = p.intern_stack([a, b]);
        for (i, active) in [true, true, false].into_iter().enumerate() {
            p.samples.push(Sample {
                time_us: i as u64 * 200_000,
                thread: t,
                stack: s,
                state: ThreadState::new(active, false),
                weight: 2,
            });
        }
        let batch = aggregate(&p, &Labels::default(), 100, 10);
        assert_eq!(batch.counts.len(), 2, "running and waiting are separate rows");
        assert_eq!(batch.weight(), 6);
        assert_eq!(batch.stacks.len(), 1);
        assert_eq!(batch.frames.len(), 2);
        let ids: Vec<u64> = [Frame::python("main", "/app/a.py", 1), Frame::python("work", "/app/a.py", 9)]
            .iter()
            .map(frame_id)
            .collect();
        assert_eq!(batch.stacks[0].frame_ids, ids);
        assert_eq!(batch.stacks[0].stack_id, stack_id(&ids));
        assert_ne!(new_batch_id(), new_batch_id());
    }
}
