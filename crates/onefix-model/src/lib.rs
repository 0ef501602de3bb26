//! The one model every part of onefix shares: a [`Profile`] is a table of frames, a prefix
//! tree of stacks, a table of threads and a list of timestamped samples. Collectors append to
//! it, the diagnosis engine and every writer read it, and [`recording`] streams it to disk.
//!
//! Nothing here does I/O except through the `Read`/`Write` handed to [`recording`].

pub mod attachments;
pub mod fmt;
pub mod memory;
mod profile;
pub mod recording;
pub mod snapshot;
pub mod stats;
mod tree;

pub use memory::{MemoryInfo, MemoryView, RssPoint};
pub use profile::{
    native_frame_can_start_stack, python_frame_can_start_stack, Frame, FrameId, FrameKind, Language, Meta, Mode,
    Profile, Sample, SamplingStats, StackId, Target, TargetExit, ThreadId, ThreadInfo, ThreadState, WeightUnit,
    CONNECTION_WAIT_FRAME, GOROUTINE_TID_BASE, INBOUND_WAIT_FRAME, MERGE_SPAN_US, TASK_TID_BASE, WAKE_UP_WAIT_FRAME,
};
pub use tree::{CallTree, CallTreeNode, NodeId};
