//! Samplers that fill a [`onefix_model::Profile`], and the recording loop that drives them at a
//! jittered rate and streams the profile to disk as it goes.

pub mod asyncio;
pub mod blocked;
pub mod dump;
mod error;
pub mod kept;
pub mod process;
mod python;
mod record;
mod replay;
pub mod runtime;
pub mod sockets;

pub use error::CollectError;
pub use python::{PythonOptions, PythonSampler};
pub use record::{record, Schedule, StopReason};
pub use replay::ReplaySampler;

use onefix_model::Profile;

/// What one tick of a sampler saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    /// The target was read; this many samples were added.
    Sampled(usize),
    /// The read failed but the target is still there (a torn read, a thread exiting mid-read):
    /// counted, not fatal.
    Failed,
    /// Every process of the target has exited.
    TargetGone,
}

/// A source of samples, read once per tick by [`record`].
pub trait Sampler {
    /// Reads the target once and appends what it saw to `profile`, stamped `time_us`.
    fn tick(&mut self, profile: &mut Profile, time_us: u64) -> Tick;
}
