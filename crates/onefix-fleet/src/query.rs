//! Reading the fleet back: ClickHouse aggregates the samples of a window into weights per
//! stack, thread and state (never raw rows), and onefix rebuilds one profile from them, with
//! one sample per aggregate carrying its weight, for the same diagnosis and writers as a
//! recording. Each (batch, stack, thread, state) counts once, however often its batch arrived.

use std::collections::{BTreeSet, HashMap};

use onefix_model::{Frame, Language, Meta, Mode, Profile, Sample, Target, ThreadState, WeightUnit};
use serde_json::{Map, Value};

use crate::batch::kind_of;
use crate::client::{as_str, as_u64, quote, Answer, Client};
use crate::FleetError;

/// Which samples a report reads.
#[derive(Clone, Debug)]
pub struct Filter {
    pub service: String,
    /// Seconds since the Unix epoch: [from, to).
    pub from: u64,
    pub to: u64,
    pub version: Option<String>,
    pub host: Option<String>,
}

impl Filter {
    fn where_clause(&self) -> String {
        let mut w = format!(
            "service = {} AND ts >= toDateTime({}) AND ts < toDateTime({})",
            quote(&self.service),
            self.from,
            self.to
        );
        if let Some(v) = &self.version {
            w.push_str(&format!(" AND version = {}", quote(v)));
        }
        if let Some(h) = &self.host {
            w.push_str(&format!(" AND host = {}", quote(h)));
        }
        w
    }

    /// The window in words, for messages.
    pub fn describe(&self) -> String {
        let mut s = format!("the {} s from {} to {} (Unix time)", self.to - self.from, self.from, self.to);
        if let Some(v) = &self.version {
            s.push_str(&format!(", version {v}"));
        }
        if let Some(h) = &self.host {
            s.push_str(&format!(", host {h}"));
        }
        s
    }
}

/// The samples' extent in a window.
#[derive(Clone, Debug, Default)]
pub struct Overview {
    pub batches: u64,
    pub hosts: u64,
    pub first_ts: u64,
    pub last_ts: u64,
    pub interval_s: u64,
    pub min_sample_us: u64,
    pub max_sample_us: u64,
    pub user_code: Vec<String>,
    pub runtimes: Vec<String>,
}

pub fn overview_sql(f: &Filter) -> String {
    format!(
        "SELECT uniqExact(batch_id) AS batches, uniqExact(host) AS hosts, toUInt32(min(ts)) AS first_ts, \
         toUInt32(max(ts)) AS last_ts, max(interval_s) AS interval_s, min(sample_us) AS min_sample_us, \
         max(sample_us) AS max_sample_us, groupUniqArray(user_code) AS user_code, groupUniqArray(runtime) AS runtimes \
         FROM samples WHERE {}",
        f.where_clause()
    )
}

/// The inner query counts each (batch, stack, thread, state) once: a batch uploaded twice
/// (a retry after a lost answer) has the same rows twice until ClickHouse merges them. Its
/// aliases are not column names: current releases would read `host` in WHERE as `any(host)`.
fn deduplicated(f: &Filter, extra_keys: &str) -> String {
    format!(
        "SELECT batch_id, stack_id, tid, state, any(host) AS batch_host, any(pid) AS batch_pid, \
         any(thread) AS batch_thread, any(weight) AS batch_weight, any(sample_us) AS batch_sample_us{extra_keys} \
         FROM samples WHERE {} GROUP BY batch_id, stack_id, tid, state",
        f.where_clause()
    )
}

/// Weights per stack, thread and state over the window, in microseconds and in samples.
pub fn aggregate_sql(f: &Filter) -> String {
    format!(
        "SELECT stack_id, batch_host AS host, batch_pid AS pid, tid, any(batch_thread) AS thread, state, \
         sum(batch_weight) AS samples, sum(batch_weight * batch_sample_us) AS us FROM ({}) \
         GROUP BY stack_id, host, pid, tid, state",
        deduplicated(f, "")
    )
}

/// The same per host and time slot of `slot_s` seconds, for per-slot statistics.
pub fn slots_sql(f: &Filter, slot_s: u64) -> String {
    format!(
        "SELECT batch_host AS host, slot, stack_id, tid, any(batch_thread) AS thread, state, \
         sum(batch_weight) AS samples, sum(batch_weight * batch_sample_us) AS us FROM ({}) \
         GROUP BY host, slot, stack_id, tid, state",
        deduplicated(f, &format!(", intDiv(toUInt32(any(ts)), {slot_s}) AS slot"))
    )
}

pub fn stacks_sql(ids: &[u64]) -> String {
    format!(
        "SELECT stack_id, any(frame_ids) AS frame_ids FROM stacks WHERE stack_id IN ({}) GROUP BY stack_id",
        join_ids(ids)
    )
}

pub fn frames_sql(ids: &[u64]) -> String {
    format!(
        "SELECT frame_id, any(kind) AS kind, any(function) AS function, any(file) AS file, any(line) AS line, \
         any(module) AS module FROM frames WHERE frame_id IN ({}) GROUP BY frame_id",
        join_ids(ids)
    )
}

fn join_ids(ids: &[u64]) -> String {
    if ids.is_empty() {
        // `IN ()` is a syntax error; no id is 0-length, and 0 names nothing.
        return "0".to_owned();
    }
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn get_u64(row: &Map<String, Value>, k: &str) -> u64 {
    row.get(k).map(as_u64).unwrap_or(0)
}

fn get_str(row: &Map<String, Value>, k: &str) -> String {
    row.get(k).map(as_str).unwrap_or_default()
}

fn get_strings(row: &Map<String, Value>, k: &str) -> Vec<String> {
    match row.get(k) {
        Some(Value::Array(items)) => items.iter().map(as_str).collect(),
        _ => Vec::new(),
    }
}

/// The window's extent; [`FleetError::NoData`] when the service has no samples in it.
pub fn overview(client: &Client, f: &Filter) -> Result<Overview, FleetError> {
    let a = client.select(&overview_sql(f))?;
    let row = a.rows.first().ok_or_else(|| FleetError::BadAnswer("no row in an aggregate".into()))?;
    let o = Overview {
        batches: get_u64(row, "batches"),
        hosts: get_u64(row, "hosts"),
        first_ts: get_u64(row, "first_ts"),
        last_ts: get_u64(row, "last_ts"),
        interval_s: get_u64(row, "interval_s"),
        min_sample_us: get_u64(row, "min_sample_us"),
        max_sample_us: get_u64(row, "max_sample_us"),
        user_code: get_strings(row, "user_code").iter().flat_map(|u| u.lines().map(str::to_owned)).collect(),
        runtimes: get_strings(row, "runtimes"),
    };
    if o.batches == 0 {
        return Err(FleetError::NoData { service: f.service.clone(), window: f.describe() });
    }
    Ok(o)
}

/// What the store sent back for a report, and what reading it cost.
#[derive(Clone, Debug, Default)]
pub struct Cost {
    pub rows_returned: u64,
    pub bytes_returned: u64,
    pub rows_read: u64,
    pub bytes_read: u64,
}

impl Cost {
    fn add(&mut self, a: &Answer) {
        self.rows_returned += a.rows.len() as u64;
        self.bytes_returned += a.bytes_returned;
        self.rows_read += a.rows_read;
        self.bytes_read += a.bytes_read;
    }
}

/// The fleet's window as one profile, with who contributed to it.
pub struct FleetProfile {
    pub profile: Profile,
    pub overview: Overview,
    /// The host of each of the profile's threads, by thread index.
    pub thread_hosts: Vec<String>,
    /// Seconds the samples span: the first interval's start to the last one's end, within
    /// the window.
    pub span_s: f64,
    pub cost: Cost,
    /// Each stack's frames (root first), by the store's ids: to find the stacks through a line.
    stacks: HashMap<u64, Vec<u64>>,
    frames: HashMap<u64, Frame>,
}

/// One aggregate row: a stack's weight on one thread in one state.
struct WeightRow {
    stack_id: u64,
    host: String,
    pid: u32,
    tid: u64,
    thread: String,
    state: u8,
    samples: u64,
    us: u64,
    /// The row's time slot, when the query grouped by one.
    slot: u64,
}

fn weight_rows(a: &Answer) -> Vec<WeightRow> {
    a.rows
        .iter()
        .map(|r| WeightRow {
            stack_id: get_u64(r, "stack_id"),
            host: get_str(r, "host"),
            pid: get_u64(r, "pid") as u32,
            tid: get_u64(r, "tid"),
            thread: get_str(r, "thread"),
            state: get_u64(r, "state") as u8,
            samples: get_u64(r, "samples"),
            us: get_u64(r, "us"),
            slot: get_u64(r, "slot"),
        })
        .collect()
}

/// A profile's tables: the frames and stacks the rows name, fetched by id.
struct Tables {
    stacks: HashMap<u64, Vec<u64>>,
    frames: HashMap<u64, Frame>,
}

fn tables(client: &Client, stack_ids: &BTreeSet<u64>, cost: &mut Cost) -> Result<Tables, FleetError> {
    let ids: Vec<u64> = stack_ids.iter().copied().collect();
    let a = client.select(&stacks_sql(&ids))?;
    cost.add(&a);
    let mut stacks = HashMap::new();
    let mut frame_ids = BTreeSet::new();
    for r in &a.rows {
        let frames: Vec<u64> = match r.get("frame_ids") {
            Some(Value::Array(items)) => items.iter().map(as_u64).collect(),
            _ => Vec::new(),
        };
        frame_ids.extend(frames.iter().copied());
        stacks.insert(get_u64(r, "stack_id"), frames);
    }
    let ids: Vec<u64> = frame_ids.into_iter().collect();
    let a = client.select(&frames_sql(&ids))?;
    cost.add(&a);
    let frames = a
        .rows
        .iter()
        .map(|r| {
            let frame = Frame {
                kind: kind_of(get_u64(r, "kind") as u8),
                function: get_str(r, "function"),
                file: get_str(r, "file"),
                line: get_u64(r, "line") as u32,
                module: get_str(r, "module"),
            };
            (get_u64(r, "frame_id"), frame)
        })
        .collect();
    Ok(Tables { stacks, frames })
}

/// A profile whose weight unit suits the rows: one sample when every agent sampled at one
/// rate (the counts keep their precision for the bounds), else a millisecond.
fn empty_profile(o: &Overview, service: &str) -> (Profile, bool) {
    let same_rate = o.min_sample_us == o.max_sample_us && o.min_sample_us > 0;
    let interval_us = if same_rate { o.min_sample_us } else { 1000 };
    let language = if o.runtimes.iter().all(|r| r == "native") { Language::Native } else { Language::Python };
    let meta = Meta {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        target: Target {
            argv: Some(vec!["service".to_owned(), service.to_owned()]),
            pid: 0,
            language: Some(language),
            cwd: None,
            runtime_version: o.runtimes.first().cloned(),
        },
        mode: Mode::Wall,
        rate_hz: 1e6 / interval_us as f64,
        weight_unit: WeightUnit::Samples { interval_us },
        start_unix_ms: o.first_ts * 1000,
        duration_s: 0.0,
        user_code: o.user_code.clone(),
        exit: None,
        stats: Default::default(),
        native: language == Language::Native,
    };
    (Profile::new(meta), same_rate)
}

/// Adds the rows' samples to `profile`, interning their frames, stacks and threads; returns
/// each new thread's host. Threads are told apart by host, pid and tid.
fn add_rows(
    profile: &mut Profile,
    rows: &[WeightRow],
    tables: &Tables,
    same_rate: bool,
    threads: &mut HashMap<(String, u32, u64), onefix_model::ThreadId>,
    thread_hosts: &mut Vec<String>,
    time_us: impl Fn(&WeightRow) -> u64,
) {
    let mut stack_ids = HashMap::new();
    for row in rows {
        let stack = *stack_ids.entry(row.stack_id).or_insert_with(|| {
            let frames = tables.stacks.get(&row.stack_id).cloned().unwrap_or_default();
            let ids: Vec<_> = frames
                .iter()
                .map(|f| {
                    let frame = tables.frames.get(f).cloned().unwrap_or_else(|| Frame::native("[unknown frame]", ""));
                    profile.intern_frame(frame)
                })
                .collect();
            profile.intern_stack(ids)
        });
        let key = (row.host.clone(), row.pid, row.tid);
        let next = threads.len() as u64 + 1;
        let thread = *threads.entry(key).or_insert_with(|| {
            thread_hosts.push(row.host.clone());
            // Each (host, pid, tid) is its own thread: numbered, since tids repeat across hosts.
            let name = if row.thread.is_empty() { None } else { Some(format!("{} {}", row.host, row.thread)) };
            profile.intern_thread(row.pid, next, name.as_deref())
        });
        let weight = if same_rate { row.samples } else { (row.us + 500) / 1000 };
        profile.samples.push(Sample {
            time_us: time_us(row),
            thread,
            stack,
            state: ThreadState(row.state),
            weight: weight.min(u32::MAX as u64) as u32,
        });
    }
}

/// The window's aggregate as one profile (`onefix fleet report`).
pub fn fleet_profile(client: &Client, f: &Filter) -> Result<FleetProfile, FleetError> {
    let overview = overview(client, f)?;
    let mut cost = Cost::default();
    let a = client.select(&aggregate_sql(f))?;
    cost.add(&a);
    let rows = weight_rows(&a);
    let stack_ids: BTreeSet<u64> = rows.iter().map(|r| r.stack_id).collect();
    let tables = tables(client, &stack_ids, &mut cost)?;
    let (mut profile, same_rate) = empty_profile(&overview, &f.service);
    let mut thread_hosts = Vec::new();
    add_rows(&mut profile, &rows, &tables, same_rate, &mut HashMap::new(), &mut thread_hosts, |_| 0);
    let start = overview.first_ts.max(f.from);
    let end = (overview.last_ts + overview.interval_s.max(1)).min(f.to);
    let span_s = end.saturating_sub(start).max(1) as f64;
    profile.meta.duration_s = span_s;
    Ok(FleetProfile { profile, overview, thread_hosts, span_s, cost, stacks: tables.stacks, frames: tables.frames })
}

/// Each line's share of the service's samples (every thread, waiting or not) in each of the
/// window's parts of `bucket_s` seconds: one column `at_I` per line (the weight of the stacks
/// through it) and the part's `total`, in one pass over the window whatever the number of lines.
pub fn trend_sql(f: &Filter, stacks_per_line: &[Vec<u64>], bucket_s: u64) -> String {
    let at_lines: String = stacks_per_line
        .iter()
        .enumerate()
        .map(|(i, ids)| format!("sumIf(batch_weight, stack_id IN ({})) AS at_{i}, ", join_ids(ids)))
        .collect();
    format!(
        "SELECT intDiv(batch_ts - {}, {bucket_s}) AS part, {at_lines}sum(batch_weight) AS total FROM ({}) \
         GROUP BY part ORDER BY part",
        f.from,
        deduplicated(f, ", toUInt32(any(ts)) AS batch_ts")
    )
}

impl FleetProfile {
    /// The store's ids of the stacks that pass through `file:line`.
    pub fn stacks_through(&self, file: &str, line: u32) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .stacks
            .iter()
            .filter(|(_, frames)| {
                frames.iter().any(|id| self.frames.get(id).is_some_and(|f| f.line == line && f.file == file))
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The trend of each line over the window: its share of the samples in each of `parts`,
    /// `None` for a part without samples.
    pub fn trends(
        &mut self,
        client: &Client,
        f: &Filter,
        lines: &[(&str, u32)],
        parts: u64,
    ) -> Result<Vec<Vec<Option<f64>>>, FleetError> {
        let mut shares = vec![vec![None; parts as usize]; lines.len()];
        if lines.is_empty() {
            return Ok(shares);
        }
        let bucket_s = (f.to - f.from).div_ceil(parts.max(1)).max(1);
        let stacks: Vec<Vec<u64>> = lines.iter().map(|(file, line)| self.stacks_through(file, *line)).collect();
        let a = client.select(&trend_sql(f, &stacks, bucket_s))?;
        self.cost.add(&a);
        for r in &a.rows {
            let part = get_u64(r, "part") as usize;
            let total = get_u64(r, "total");
            for (i, line_shares) in shares.iter_mut().enumerate() {
                if let Some(slot) = line_shares.get_mut(part) {
                    *slot = (total > 0).then(|| get_u64(r, &format!("at_{i}")) as f64 / total as f64);
                }
            }
        }
        Ok(shares)
    }
}

/// A window cut into per-host slots: the profile holds every slot's samples, each stamped
/// with its slot's index as a time in seconds, and `slots` says how many there are.
pub struct SlotProfile {
    pub profile: Profile,
    pub slots: usize,
    pub slot_s: u64,
    pub cost: Cost,
}

/// Slots of one host's interval (coarser when there would be more than `max_slots`), for
/// per-host, per-interval statistics (`onefix fleet compare`).
pub fn slot_profile(client: &Client, f: &Filter, max_slots: u64) -> Result<SlotProfile, FleetError> {
    let o = overview(client, f)?;
    let interval = o.interval_s.max(1);
    let intervals = (o.last_ts - o.first_ts) / interval + 1;
    let per_slot = (intervals * o.hosts).div_ceil(max_slots.max(1)).max(1);
    let slot_s = interval * per_slot;
    let mut cost = Cost::default();
    let a = client.select(&slots_sql(f, slot_s))?;
    cost.add(&a);
    let rows = weight_rows(&a);
    let stack_ids: BTreeSet<u64> = rows.iter().map(|r| r.stack_id).collect();
    let tables = tables(client, &stack_ids, &mut cost)?;
    // Each (host, slot) is numbered in order of appearance: its samples are stamped with
    // that number in seconds, so that the slots are the windows of per-slot statistics.
    let mut index: HashMap<(String, u64), u64> = HashMap::new();
    for r in &rows {
        let next = index.len() as u64;
        index.entry((r.host.clone(), r.slot)).or_insert(next);
    }
    let (mut profile, same_rate) = empty_profile(&o, &f.service);
    let (mut threads, mut hosts) = (HashMap::new(), Vec::new());
    add_rows(&mut profile, &rows, &tables, same_rate, &mut threads, &mut hosts, |r| {
        index[&(r.host.clone(), r.slot)] * 1_000_000
    });
    Ok(SlotProfile { profile, slots: index.len(), slot_s, cost })
}

/// Every statement form onefix sends, with example values, in an order that runs on an empty
/// database: for checking them against another ClickHouse release (`onefix fleet sql`).
pub fn example_statements() -> Vec<String> {
    use crate::batch::{Batch, Labels, StackCount, StackRow};
    let mut out = crate::schema::create_statements(&Default::default());
    out.push(format!("INSERT INTO schema_version VALUES ({}, now())", crate::schema::SCHEMA_VERSION));
    let frame = Frame::python("handle", "/srv/api/app.py", 42);
    let frame_id = crate::batch::frame_id(&frame);
    let stack_id = crate::batch::stack_id(&[frame_id]);
    let batch = Batch {
        batch_id: crate::batch::new_batch_id(),
        ts: 1_764_600_000,
        interval_s: 10,
        sample_us: 52_631,
        labels: Labels {
            service: "api".into(),
            version: "v42".into(),
            host: "web-1".into(),
            pid: 4242,
            runtime: "python 3.11".into(),
            user_code: vec!["/srv/api".into()],
            command: "gunicorn api.wsgi".into(),
        },
        counts: vec![StackCount { stack_id, tid: 4242, thread: "MainThread".into(), state: 3, weight: 190 }],
        stacks: vec![StackRow { stack_id, frame_ids: vec![frame_id] }],
        frames: vec![crate::batch::FrameRow {
            frame_id,
            kind: 0,
            function: frame.function.clone(),
            file: frame.file.clone(),
            line: 42,
            module: String::new(),
        }],
    };
    let (frames, stacks, samples) = batch.rows();
    for (table, rows) in [("frames", frames), ("stacks", stacks), ("samples", samples)] {
        out.push(format!("INSERT INTO {table} FORMAT JSONEachRow {}", String::from_utf8_lossy(&rows).trim()));
    }
    let filter = Filter {
        service: "api".into(),
        from: 1_764_590_000,
        to: 1_764_610_000,
        version: Some("v42".into()),
        host: Some("web-1".into()),
    };
    out.push(crate::schema::version_table_sql("onefix"));
    out.push(crate::schema::VERSION_SQL.into());
    out.push(crate::schema::SERVER_VERSION_SQL.into());
    out.push(overview_sql(&filter));
    out.push(aggregate_sql(&filter));
    out.push(slots_sql(&filter, 10));
    out.push(trend_sql(&filter, &[vec![stack_id], vec![stack_id, 7]], 3333));
    out.push(stacks_sql(&[stack_id]));
    out.push(frames_sql(&[frame_id]));
    out
}
