//! Sampled allocation tracking for onefix.
//!
//! - `agent/agent.c` is an LD_PRELOAD library (built by build.rs, embedded here as [`AGENT`])
//!   that interposes the C allocator and anonymous mmap in the target, samples about one
//!   allocation per [`MemoryOptions::rate_bytes`] allocated (exponential intervals, unbiased
//!   estimates) and sends each sample, and each free of a sampled allocation, with its stack;
//! - [`event`] reads its datagrams;
//! - [`MemoryTracker`] prepares a command to carry the agent, drains its events on a thread
//!   and builds the memory [`onefix_model::Profile`] (bytes; frees flagged
//!   [`onefix_model::ThreadState::FREED`]) with native frames symbolized from /proc/PID/maps
//!   and Python frames as the agent read them.

mod agent;
pub mod event;
mod tracker;

pub use agent::{AgentFile, AGENT};
pub use tracker::{monotonic_ns, read_rss, MemoryError, MemoryOptions, MemoryTracker, ProcessMemory};
