//! onefix across a fleet. Agents aggregate each interval of each target into stack counts
//! ([`batch`]), spool them ([`spool`]) and upload them to ClickHouse over its HTTP interface
//! ([`client`], [`schema`]); reports read back per-stack aggregates, never raw rows, as one
//! profile for the diagnosis ([`query`]).

pub mod batch;
pub mod client;
pub mod compare;
mod error;
pub mod figures;
pub mod query;
pub mod schema;
pub mod spool;

pub use client::{Client, Credentials, Endpoint};
pub use error::FleetError;
