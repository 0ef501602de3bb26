//! The `.onefix` recording file: written as the profiler goes, so that a killed profiler or a
//! crashed target loses at most the last batch, and read back by `onefix report`.
//!
//! Layout: an 8-byte magic, a little-endian `u32` format version, then chunks. A chunk is a
//! one-byte tag, a `u32` payload length, a `u32` CRC-32 of the payload and the payload
//! (bincode, varint). The first chunk is the metadata; batches carry only what is new since the
//! previous batch (frames, stacks, threads, samples); a final metadata chunk marks a complete
//! recording. Attachment chunks (format 2) carry named results that came with the recording,
//! such as the load that drove the target, as opaque bytes. A file that ends inside a chunk or without the final metadata is *truncated*:
//! everything before is still read and the reader says so.

use std::io::{self, Read, Write};

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::profile::{Frame, FrameId, Meta, Profile, Sample, StackId, ThreadInfo};

pub const MAGIC: &[u8; 8] = b"ONEFIX\0R";
/// 2 added attachment chunks; version 1 files are still read.
pub const FORMAT_VERSION: u32 = 2;
/// No chunk is ever this large; a bigger length means a damaged file, not a reason to allocate.
const MAX_CHUNK: u32 = 512 << 20;

const TAG_META: u8 = 1;
const TAG_BATCH: u8 = 2;
const TAG_END: u8 = 3;
const TAG_ATTACHMENT: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("the file is empty")]
    Empty,
    #[error("this is not an onefix recording (it does not start with onefix's header)")]
    NotARecording,
    #[error("this recording uses format version {found}, newer than this onefix reads (up to {supported}); upgrade onefix to read it")]
    NewerVersion { found: u32, supported: u32 },
    #[error("the recording is damaged at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// What a batch chunk holds, as written: borrowed from the profile, so a flush copies nothing.
/// It encodes exactly as [`Batch`], which reads it back.
#[derive(Serialize)]
struct BatchRef<'a> {
    frames: &'a [Frame],
    stacks: Vec<(Option<StackId>, FrameId)>,
    threads: &'a [ThreadInfo],
    samples: &'a [Sample],
}

#[derive(Deserialize)]
struct Batch {
    frames: Vec<Frame>,
    stacks: Vec<(Option<StackId>, FrameId)>,
    threads: Vec<ThreadInfo>,
    samples: Vec<Sample>,
}

fn codec() -> impl Options {
    bincode::DefaultOptions::new().with_limit(MAX_CHUNK as u64)
}

/// Streams a [`Profile`] to `out` as it grows.
pub struct RecordingWriter<W: Write> {
    out: W,
    frames_done: usize,
    stacks_done: usize,
    threads_done: usize,
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W, meta: &Meta) -> io::Result<RecordingWriter<W>> {
        out.write_all(MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        let mut w = RecordingWriter { out, frames_done: 0, stacks_done: 0, threads_done: 0 };
        w.chunk(TAG_META, meta)?;
        w.out.flush()?;
        Ok(w)
    }

    /// Writes everything the profile gained since the previous call and flushes; the samples
    /// written are taken out of the profile, which keeps only its tables in memory.
    pub fn write_batch(&mut self, profile: &mut Profile) -> io::Result<()> {
        let (frames, stacks, threads) = profile.table_lens();
        if frames == self.frames_done
            && stacks == self.stacks_done
            && threads == self.threads_done
            && profile.samples.is_empty()
        {
            return Ok(());
        }
        let batch = BatchRef {
            frames: &profile.frames()[self.frames_done..],
            stacks: profile.stacks_from(self.stacks_done),
            threads: &profile.threads()[self.threads_done..],
            samples: &profile.samples,
        };
        self.chunk(TAG_BATCH, &batch)?;
        self.out.flush()?;
        profile.take_samples();
        self.frames_done = frames;
        self.stacks_done = stacks;
        self.threads_done = threads;
        Ok(())
    }

    /// Stores a named result that belongs with the recording (e.g. `load`: the load's JSON
    /// result); [`read_recording`] gives it back in [`Profile::attachments`].
    pub fn write_attachment(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.chunk(TAG_ATTACHMENT, &(name, data))?;
        self.out.flush()
    }

    /// Writes what is left and the final metadata, marking the recording complete.
    pub fn finish(mut self, profile: &mut Profile) -> io::Result<W> {
        self.write_batch(profile)?;
        self.chunk(TAG_END, &profile.meta)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn chunk<T: Serialize>(&mut self, tag: u8, value: &T) -> io::Result<()> {
        let payload = codec().serialize(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let mut head = [0u8; 9];
        head[0] = tag;
        head[1..5].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[5..9].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        self.out.write_all(&head)?;
        self.out.write_all(&payload)?;
        Ok(())
    }
}

/// A recording read back.
pub struct Loaded {
    pub profile: Profile,
    /// False when the file ends early (profiler killed, disk full): what was there is in
    /// `profile`, with the metadata of the start of the recording.
    pub complete: bool,
}

/// Reads a whole recording.
pub fn read_recording<R: Read>(mut input: R) -> Result<Loaded, RecordingError> {
    let mut header = [0u8; 12];
    let got = read_up_to(&mut input, &mut header)?;
    if got == 0 {
        return Err(RecordingError::Empty);
    }
    if got < 8 || &header[..8] != MAGIC {
        return Err(RecordingError::NotARecording);
    }
    if got < 12 {
        return Err(RecordingError::Corrupt { offset: got as u64, what: "the file ends inside its header".into() });
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    if version > FORMAT_VERSION {
        return Err(RecordingError::NewerVersion { found: version, supported: FORMAT_VERSION });
    }
    if version == 0 {
        return Err(RecordingError::Corrupt { offset: 8, what: "format version 0 does not exist".into() });
    }

    let mut offset = 12u64;
    let mut profile: Option<Profile> = None;
    let mut complete = false;
    loop {
        let mut head = [0u8; 9];
        let got = read_up_to(&mut input, &mut head)?;
        if got == 0 {
            break;
        }
        if got < head.len() {
            break; // truncated inside a chunk header
        }
        let tag = head[0];
        let len = u32::from_le_bytes(head[1..5].try_into().unwrap());
        let crc = u32::from_le_bytes(head[5..9].try_into().unwrap());
        if len > MAX_CHUNK || !(TAG_META..=TAG_ATTACHMENT).contains(&tag) {
            return Err(RecordingError::Corrupt {
                offset,
                what: format!("a chunk header is invalid (tag {tag}, length {len})"),
            });
        }
        // The chunk's declared length is not trusted: the payload grows with the bytes that
        // are actually there, so a damaged or hostile length costs no more than the file holds.
        let mut payload = Vec::new();
        (&mut input).take(u64::from(len)).read_to_end(&mut payload)?;
        if payload.len() < len as usize {
            break; // truncated inside a chunk
        }
        if crc32fast::hash(&payload) != crc {
            return Err(RecordingError::Corrupt {
                offset,
                what: "a chunk's checksum does not match its contents".into(),
            });
        }
        let corrupt = |what: String| RecordingError::Corrupt { offset, what };
        match (tag, profile.as_mut()) {
            (TAG_META, None) => {
                let meta: Meta = codec().deserialize(&payload).map_err(|e| corrupt(e.to_string()))?;
                profile = Some(Profile::new(meta));
            }
            (TAG_BATCH, Some(p)) => {
                let batch: Batch = codec().deserialize(&payload).map_err(|e| corrupt(e.to_string()))?;
                apply_batch(p, batch).map_err(corrupt)?;
            }
            (TAG_ATTACHMENT, Some(p)) => {
                let (name, data): (String, Vec<u8>) =
                    codec().deserialize(&payload).map_err(|e| corrupt(e.to_string()))?;
                p.attachments.insert(name, data);
            }
            (TAG_END, Some(p)) => {
                p.meta = codec().deserialize(&payload).map_err(|e| corrupt(e.to_string()))?;
                complete = true;
            }
            _ => return Err(corrupt("chunks are out of order".into())),
        }
        offset += (head.len() + payload.len()) as u64;
        if complete {
            break;
        }
    }
    match profile {
        Some(mut profile) => {
            if !complete {
                // The metadata of a recording that ended early is that of its start: its span
                // is what its samples cover.
                let last_us = profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0);
                profile.meta.duration_s = profile.meta.duration_s.max(last_us as f64 / 1e6);
            }
            Ok(Loaded { profile, complete })
        }
        None => Err(RecordingError::Corrupt { offset, what: "the file ends before its metadata".into() }),
    }
}

fn apply_batch(p: &mut Profile, batch: Batch) -> Result<(), String> {
    for frame in batch.frames {
        let before = p.frames().len();
        if p.intern_frame(frame) as usize != before {
            return Err("a frame is listed twice".into());
        }
    }
    let nframes = p.frames().len() as u32;
    for (parent, frame) in batch.stacks {
        let nstacks = p.stack_count() as u32;
        if frame >= nframes || parent.is_some_and(|s| s >= nstacks) {
            return Err("a stack refers to a frame or stack that does not exist".into());
        }
        if p.intern_stack_node(parent, frame) != nstacks {
            return Err("a stack is listed twice".into());
        }
    }
    for t in batch.threads {
        let before = p.threads().len() as u32;
        let id = p.intern_thread(t.pid, t.tid, None);
        if id != before {
            return Err("a thread is listed twice".into());
        }
        p.replace_thread_name(id, t.name);
    }
    let (nstacks, nthreads) = (p.stack_count() as u32, p.threads().len() as u32);
    for s in &batch.samples {
        if s.thread >= nthreads || s.stack.is_some_and(|st| st >= nstacks) {
            return Err("a sample refers to a thread or stack that does not exist".into());
        }
    }
    p.samples.extend(batch.samples);
    Ok(())
}

fn read_up_to<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, ThreadState, MERGE_SPAN_US};

    fn sample_profile() -> Profile {
        let mut p = Profile::new(Meta { tool_version: "test".into(), ..Meta::default() });
        let t = p.intern_thread(10, 11, Some("MainThread"));
        let a = p.intern_frame(Frame::python("main", "/app/a.py", 3));
        let b = p.intern_frame(Frame::python("f", "/app/a.py", 7));
        let stack = p.intern_stack([a, b]);
        for i in 0..5 {
            p.push_sample(Sample {
                time_us: i * MERGE_SPAN_US,
                thread: t,
                stack,
                state: ThreadState::new(true, true),
                weight: 1,
            });
        }
        p
    }

    fn write_in_two_batches(p: &Profile) -> Vec<u8> {
        let mut live = p.clone();
        let rest = live.samples.split_off(2);
        let mut w = RecordingWriter::new(Vec::new(), &p.meta).unwrap();
        w.write_batch(&mut live).unwrap();
        assert!(live.samples.is_empty(), "written samples leave memory");
        live.samples = rest;
        w.finish(&mut live).unwrap()
    }

    #[test]
    fn round_trips_across_batches() {
        let p = sample_profile();
        let bytes = write_in_two_batches(&p);
        let loaded = read_recording(&bytes[..]).unwrap();
        assert!(loaded.complete);
        assert_eq!(loaded.profile.samples, p.samples);
        assert_eq!(loaded.profile.frames(), p.frames());
        assert_eq!(loaded.profile.threads(), p.threads());
        assert_eq!(loaded.profile.meta, p.meta);
    }

    #[test]
    fn attachments_come_back_by_name() {
        let mut p = sample_profile();
        let mut w = RecordingWriter::new(Vec::new(), &p.meta).unwrap();
        w.write_batch(&mut p).unwrap();
        w.write_attachment("load", b"{\"sent\": 3}").unwrap();
        let bytes = w.finish(&mut p).unwrap();
        let loaded = read_recording(&bytes[..]).unwrap();
        assert!(loaded.complete);
        assert_eq!(loaded.profile.attachments.get("load").map(Vec::as_slice), Some(&b"{\"sent\": 3}"[..]));
        assert_eq!(loaded.profile.attachments.len(), 1);
    }

    #[test]
    fn version_1_files_are_still_read() {
        let p = sample_profile();
        let mut bytes = write_in_two_batches(&p);
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert!(read_recording(&bytes[..]).unwrap().complete);
    }

    #[test]
    fn truncation_anywhere_keeps_what_came_before() {
        let p = sample_profile();
        let bytes = write_in_two_batches(&p);
        for cut in 12..bytes.len() {
            match read_recording(&bytes[..cut]) {
                Ok(loaded) => {
                    assert!(!loaded.complete, "cut at {cut} must be reported incomplete");
                    assert!(loaded.profile.samples.len() <= p.samples.len());
                    // Its span is what its samples cover, not the 0 s of its first metadata.
                    let last = loaded.profile.samples.iter().map(|s| s.time_us).max().unwrap_or(0);
                    assert_eq!(loaded.profile.meta.duration_s, last as f64 / 1e6, "cut at {cut}");
                }
                Err(RecordingError::Corrupt { .. }) => {} // cut before the metadata chunk ended
                Err(e) => panic!("cut at {cut}: unexpected {e}"),
            }
        }
    }

    #[test]
    fn foreign_empty_and_newer_files_are_named() {
        assert!(matches!(read_recording(&b""[..]), Err(RecordingError::Empty)));
        assert!(matches!(read_recording(&b"hello world, not a recording"[..]), Err(RecordingError::NotARecording)));
        let mut newer = MAGIC.to_vec();
        newer.extend_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        assert!(matches!(read_recording(&newer[..]), Err(RecordingError::NewerVersion { .. })));
    }

    #[test]
    fn flipped_bytes_never_panic() {
        let p = sample_profile();
        let bytes = write_in_two_batches(&p);
        for i in 12..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x5a;
            // Any outcome but a panic is acceptable; a checksum catches payload damage.
            let _ = read_recording(&damaged[..]);
        }
    }
}
