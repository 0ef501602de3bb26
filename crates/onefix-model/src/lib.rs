//! The one model every part of onefix shares: a [`Profile`] is a table of frames, a prefix
//! tree of stacks, a table of threads and a list of timestamped samples. Collectors append to
//! it, the diagnosis engine and every writer read it, and [`recording`] streams it to disk.
//!
//! Nothing here does I/O except through the `Read`/`Write` handed to [`recording`].

pub mod memory;
mod profile;
pub mod recording;
mod tree;

pub use profile::{
    Frame, FrameId, FrameKind, INBOUND_WAIT_FRAME, Language, Meta, Mode, Profile, MERGE_SPAN_US, native_frame_can_start_stack, python_frame_can_start_stack, Sample, SamplingStats, StackId,
    Target, TargetExit, ThreadId, ThreadInfo, ThreadState, WeightUnit,
};
pub use memory::{MemoryInfo, MemoryView, RssPoint};
pub use tree::{CallTree, CallTreeNode, NodeId};
