//! What can go wrong between onefix and ClickHouse, each said in one sentence.

/// A failure of the fleet's store, worded for the person running the command.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("`{url}` is not a ClickHouse address onefix can use: {why} (e.g. http://127.0.0.1:8123/?database=onefix)")]
    BadUrl { url: String, why: String },
    #[error("ClickHouse at {address} is unreachable ({why})")]
    Unreachable { address: String, why: String },
    #[error("ClickHouse at {address} did not answer within {seconds} s")]
    TimedOut { address: String, seconds: u64 },
    #[error("the database `{database}` does not exist on ClickHouse at {address}: create it (CREATE DATABASE {database}) or name another with ?database=")]
    NoDatabase { address: String, database: String },
    #[error("ClickHouse at {address} refused the user `{user}` (wrong user or password): set ONEFIX_CLICKHOUSE_USER and ONEFIX_CLICKHOUSE_PASSWORD, or give --credentials FILE")]
    AuthRefused { address: String, user: String },
    #[error("the database `{database}` has no onefix schema: run `onefix fleet init --to {url}` first")]
    NoSchema { database: String, url: String },
    #[error("the database `{database}` holds onefix schema version {found}, older than this onefix's {supported}: run `onefix fleet init --to {url}` to upgrade it")]
    OlderSchema { database: String, url: String, found: u32, supported: u32 },
    #[error("the database `{database}` holds onefix schema version {found}, newer than this onefix's {supported}: upgrade onefix to read or write it")]
    NewerSchema { database: String, found: u32, supported: u32 },
    #[error("this ClickHouse ({version}) has no table TTL (it came in 19.6): leave out --ttl-days")]
    NoTtl { version: String },
    #[error("ClickHouse at {address} has no cluster `{cluster}` in its remote_servers")]
    NoCluster { cluster: String, address: String },
    #[error("no samples of the service `{service}` in {window}")]
    NoData { service: String, window: String },
    #[error("ClickHouse refused a statement: {message}")]
    Refused { code: Option<u32>, message: String },
    #[error("ClickHouse sent an answer onefix cannot read: {0}")]
    BadAnswer(String),
    #[error("cannot read the credentials file {path}: {why}")]
    Credentials { path: String, why: String },
    #[error("the spool directory {path}: {why}")]
    Spool { path: String, why: String },
}
