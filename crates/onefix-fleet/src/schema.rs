//! The fleet's tables, and their versions. Only SQL that ClickHouse 18.16 (Debian's) and
//! current releases both accept: no LowCardinality, no DateTime64, no query parameters, and
//! table TTL only when asked for (it came in 19.6).
//!
//! - `samples`: one row per (batch, stack, thread, state) of an interval, partitioned by day
//!   and ordered by service and time, the way reports ask. A retried batch writes the same
//!   keys again: ReplacingMergeTree folds them when parts merge, and queries count each
//!   (batch, stack, thread, state) once (`any` over a GROUP BY of the key), so a batch that
//!   arrived twice counts once even before a merge.
//! - `stacks`: a stack's frames, root first, as frame ids; `frames`: each frame once, by id.
//!   Both are keyed by a hash of what they hold, so every agent names the same stack alike.
//! - `schema_version`: the versions applied (1: the first; 2: `samples.command`, each
//!   target's command line).

use crate::client::Client;
use crate::FleetError;

/// The schema this onefix writes and reads.
pub const SCHEMA_VERSION: u32 = 2;

/// Options of `onefix fleet init`.
#[derive(Clone, Debug, Default)]
pub struct SchemaOptions {
    /// Drop samples older than this many days.
    pub ttl_days: Option<u32>,
    /// The tables are Distributed over this cluster's shards, each of which holds the plain
    /// schema (made by `init` on each shard's database, named as the cluster's
    /// `default_database`).
    pub cluster: Option<String>,
}

/// The statements that create the current version, in order: version 1's tables, then each
/// migration, as an upgrade runs them (one path to every version, checked by both servers).
pub fn create_statements(opts: &SchemaOptions) -> Vec<String> {
    let mut out = version_one(opts);
    out.extend(MIGRATIONS.iter().flat_map(|(_, steps)| steps.iter().map(|s| (*s).to_owned())));
    out
}

fn version_one(opts: &SchemaOptions) -> Vec<String> {
    let ttl = match opts.ttl_days {
        Some(days) => format!("\nTTL ts + INTERVAL {days} DAY"),
        None => String::new(),
    };
    let local = local_statements(&ttl);
    let Some(cluster) = &opts.cluster else { return local };
    // The same columns, Distributed over the shards. A batch goes to one shard (its id is the
    // sharding key), so that its copies meet there; reports GROUP BY across all shards.
    let sharding = [("samples", "sipHash64(batch_id)"), ("stacks", "stack_id"), ("frames", "frame_id")];
    let mut out = vec![local[0].clone()];
    for (sql, (table, key)) in local[1..].iter().zip(sharding) {
        let columns = &sql[sql.find('(').expect("a column list")..=sql.find(") ENGINE").expect("an engine")];
        out.push(format!(
            "CREATE TABLE IF NOT EXISTS {table} {columns} ENGINE = Distributed({cluster}, '', {table}, {key})"
        ));
    }
    out
}

fn local_statements(ttl: &str) -> Vec<String> {
    vec![
        "CREATE TABLE IF NOT EXISTS schema_version (version UInt32, applied DateTime) ENGINE = TinyLog".to_owned(),
        format!(
            "CREATE TABLE IF NOT EXISTS samples (
    ts DateTime,
    interval_s UInt32,
    service String,
    version String,
    host String,
    pid UInt32,
    runtime String,
    batch_id String,
    stack_id UInt64,
    tid UInt64,
    thread String,
    state UInt8,
    weight UInt32,
    sample_us UInt32,
    user_code String
) ENGINE = ReplacingMergeTree()
PARTITION BY toDate(ts)
ORDER BY (service, ts, host, version, batch_id, stack_id, tid, state){ttl}"
        ),
        "CREATE TABLE IF NOT EXISTS stacks (
    stack_id UInt64,
    frame_ids Array(UInt64)
) ENGINE = ReplacingMergeTree()
ORDER BY stack_id"
            .to_owned(),
        "CREATE TABLE IF NOT EXISTS frames (
    frame_id UInt64,
    kind UInt8,
    function String,
    file String,
    line UInt32,
    module String
) ENGINE = ReplacingMergeTree()
ORDER BY frame_id"
            .to_owned(),
    ]
}

/// Migrations from each older version to the next: (from, statements); `init` applies the
/// steps in order, and a new database gets version 1 and every step. Version 2 labels each row
/// with its process's command line. On a cluster, `init` upgrades each shard's database, then
/// the Distributed tables' database (18.16 alters a Distributed table's columns too).
const MIGRATIONS: &[(u32, &[&str])] = &[(1, &["ALTER TABLE samples ADD COLUMN command String DEFAULT ''"])];

pub fn version_table_sql(database: &str) -> String {
    format!(
        "SELECT count() AS n FROM system.tables WHERE database = {} AND name = 'schema_version'",
        crate::client::quote(database)
    )
}

pub const VERSION_SQL: &str = "SELECT max(version) AS v, count() AS n FROM schema_version";
pub const SERVER_VERSION_SQL: &str = "SELECT version() AS v";

/// The schema version the database holds: `None` when it has no onefix schema.
pub fn current_version(client: &Client) -> Result<Option<u32>, FleetError> {
    let exists = client.select(&version_table_sql(&client.endpoint.database))?;
    let n = exists.rows.first().and_then(|r| r.get("n")).map(crate::client::as_u64).unwrap_or(0);
    if n == 0 {
        return Ok(None);
    }
    let answer = client.select(VERSION_SQL)?;
    let row = answer.rows.first();
    let count = row.and_then(|r| r.get("n")).map(crate::client::as_u64).unwrap_or(0);
    Ok((count > 0).then(|| row.and_then(|r| r.get("v")).map(crate::client::as_u64).unwrap_or(0) as u32))
}

/// Refuses a database without this onefix's schema, or with a newer one.
pub fn check(client: &Client) -> Result<(), FleetError> {
    match current_version(client)? {
        None => {
            Err(FleetError::NoSchema { database: client.endpoint.database.clone(), url: client.endpoint.url.clone() })
        }
        Some(v) if v > SCHEMA_VERSION => Err(FleetError::NewerSchema {
            database: client.endpoint.database.clone(),
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Some(v) if v < SCHEMA_VERSION => Err(FleetError::OlderSchema {
            database: client.endpoint.database.clone(),
            url: client.endpoint.url.clone(),
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Some(_) => Ok(()),
    }
}

/// What `init` did.
#[derive(Debug, PartialEq, Eq)]
pub enum InitOutcome {
    Created,
    Upgraded { from: u32 },
    AlreadyCurrent,
}

/// Creates the schema, or upgrades an older one; refuses a newer one.
pub fn init(client: &Client, opts: &SchemaOptions) -> Result<InitOutcome, FleetError> {
    let found = current_version(client)?;
    if let Some(v) = found {
        if v > SCHEMA_VERSION {
            return Err(FleetError::NewerSchema {
                database: client.endpoint.database.clone(),
                found: v,
                supported: SCHEMA_VERSION,
            });
        }
        if v == SCHEMA_VERSION {
            return Ok(InitOutcome::AlreadyCurrent);
        }
        for (from, steps) in MIGRATIONS.iter().filter(|(from, _)| *from >= v) {
            for step in steps.iter() {
                client.execute(step, None)?;
            }
            record_version(client, from + 1)?;
        }
        return Ok(InitOutcome::Upgraded { from: v });
    }
    if let Some(cluster) = &opts.cluster {
        check_cluster(client, cluster)?;
    }
    for sql in version_one(opts) {
        client.execute(&sql, None).map_err(|e| match e {
            // 18.16 reads TTL as a syntax error.
            FleetError::Refused { code: Some(62), .. } if opts.ttl_days.is_some() => {
                FleetError::NoTtl { version: server_version(client).unwrap_or_else(|_| "old".into()) }
            }
            e => e,
        })?;
    }
    // Tables left by an init that stopped before recording its version may have a step's
    // column already (18.16 has no ADD COLUMN IF NOT EXISTS): ClickHouse says so with code
    // 44 (18.16) or 15 (current releases), and the step is done.
    for step in MIGRATIONS.iter().flat_map(|(_, steps)| steps.iter()) {
        match client.execute(step, None) {
            Err(FleetError::Refused { code: Some(15 | 44), message }) if message.contains("already exists") => {}
            other => {
                other?;
            }
        }
    }
    record_version(client, SCHEMA_VERSION)?;
    Ok(InitOutcome::Created)
}

/// Refuses a cluster the server does not know, before any table names it.
fn check_cluster(client: &Client, cluster: &str) -> Result<(), FleetError> {
    if cluster.is_empty() || !cluster.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(FleetError::NoCluster {
            cluster: cluster.to_owned(),
            address: client.endpoint.address().to_owned(),
        });
    }
    let a = client.select(&format!(
        "SELECT count() AS n FROM system.clusters WHERE cluster = {}",
        crate::client::quote(cluster)
    ))?;
    if a.rows.first().and_then(|r| r.get("n")).map(crate::client::as_u64).unwrap_or(0) == 0 {
        return Err(FleetError::NoCluster {
            cluster: cluster.to_owned(),
            address: client.endpoint.address().to_owned(),
        });
    }
    Ok(())
}

fn record_version(client: &Client, version: u32) -> Result<(), FleetError> {
    client.execute(&format!("INSERT INTO schema_version VALUES ({version}, now())"), None).map(|_| ())
}

pub fn server_version(client: &Client) -> Result<String, FleetError> {
    let a = client.select(SERVER_VERSION_SQL)?;
    Ok(a.rows.first().and_then(|r| r.get("v")).map(crate::client::as_str).unwrap_or_default())
}
