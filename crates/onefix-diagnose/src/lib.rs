//! Turns a [`onefix_model::Profile`] into findings: which line of the user's code costs, why,
//! what to change, and how much it can gain.
//!
//! - [`origin`] decides whose code a frame is (the user's, a library's, the runtime's);
//! - [`kb`] is the knowledge base of costly operations, loaded from `kb/*.toml`;
//! - [`diagnose`] charges samples to the user's lines and explains the top ones.

mod analysis;
mod builtin;
pub mod compare;
mod finding;
pub mod frontier;
pub mod gate;
pub mod kb;
pub mod kind;
pub mod memory;
pub mod names;
pub mod note;
pub mod origin;
pub mod stall;
mod template;

pub use analysis::{diagnose, settle_running, settle_stale_reads, Options};
pub use finding::{Diagnosis, Evidence, Finding, GainBasis, HotLine};
pub use kb::KnowledgeBase;
pub use kind::Kind;
pub use memory::{diagnose_memory, MemoryOptions};
pub use note::Note;
pub use origin::{package_dirs, Exclusion, Origin, UserCode};
