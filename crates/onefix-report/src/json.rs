//! The findings report as JSON: the contract of DESIGN.md §3, which outside checks rely on, kept
//! in the repository as a JSON Schema: crates/onefix-report/schema/findings.schema.json.
//!
//! Contract fields (their meaning must not change): `tool`, `version`, `target` {`argv`, `pid`,
//! `language`}, `mode`, `duration_s`, `samples`, `findings` [{`rank`, `kind`, `file`, `line`,
//! `function`, `code`, `share`, `max_speedup`, `title`, `advice`, `evidence` [{`frame`, `file`,
//! `line`, `share`}]}].
//!
//! Added fields: per finding `max_speedup_range` ([low, high or null]: the bound's 95% interval
//! from sampling alone: with this many samples), `gain_basis` (what the bound rests on), `why`, `recurrence`, `rule`,
//! `enclosing_loop`; at the top `unit`,
//! `rate_hz`, `share_of` (what every share is a fraction of), `total_weight`, `busy_weight` (the
//! shares' denominator), `idle_share` (idle threads, as a fraction of `total_weight`),
//! `outside_user_share` (busy weight outside user code, as a fraction of `busy_weight`),
//! `hot_lines`, `notes`, `exit`, `complete` and `sampling`; `imported_from` ({`format`,
//! `source`}) for a profile another tool recorded; `fleet` (at the top: the service, window,
//! hosts, batches and what ClickHouse returned and read; per finding: its share of the service's
//! samples, cores busy, hosts seen and trend) for a fleet's aggregate (`onefix fleet report`).
//!
//! Shares are rounded to 4 decimals, speed-ups to 2, durations to the millisecond.

use std::io::{self, BufWriter, Write};

use onefix_diagnose::{Diagnosis, Evidence, Finding, HotLine};
use onefix_model::{Profile, TargetExit, WeightUnit};
use serde::Serialize;

use crate::describe::{self, round_to};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonOptions {
    /// Whether the recording was read to its end; false for one cut short (profiler killed,
    /// disk full), whose findings cover only what was recorded.
    pub complete: bool,
}

impl Default for JsonOptions {
    fn default() -> JsonOptions {
        JsonOptions { complete: true }
    }
}

/// The report object; the HTML report embeds the same object.
#[derive(Serialize)]
pub(crate) struct Report<'a> {
    tool: &'static str,
    version: &'a str,
    target: TargetJson<'a>,
    mode: &'static str,
    duration_s: f64,
    samples: usize,
    findings: Vec<FindingJson<'a>>,
    unit: &'static str,
    rate_hz: f64,
    share_of: &'a str,
    total_weight: u64,
    busy_weight: u64,
    idle_share: f64,
    outside_user_share: f64,
    hot_lines: Vec<HotLineJson<'a>>,
    notes: &'a [onefix_diagnose::Note],
    exit: Option<ExitJson>,
    complete: bool,
    sampling: SamplingJson,
    /// A profile another tool recorded: its format and the file or URL it was read from.
    #[serde(skip_serializing_if = "Option::is_none")]
    imported_from: Option<onefix_model::attachments::ImportedFrom>,
    /// A fleet's aggregate: what the window held and what reading it cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetJson>,
}

#[derive(Serialize)]
struct FleetJson {
    service: String,
    from_unix_s: u64,
    to_unix_s: u64,
    version: Option<String>,
    host: Option<String>,
    span_s: f64,
    hosts: u64,
    batches: u64,
    query: FleetQueryJson,
}

/// What the report's queries cost ClickHouse and sent back.
#[derive(Serialize)]
struct FleetQueryJson {
    rows_returned: u64,
    bytes_returned: u64,
    rows_read: u64,
    bytes_read: u64,
}

/// A finding's line across the fleet.
#[derive(Serialize)]
struct FleetLineJson {
    sampled_share: f64,
    cores_busy: f64,
    hosts_seen: u64,
    hosts_total: u64,
    trend: Vec<Option<f64>>,
}

#[derive(Serialize)]
struct TargetJson<'a> {
    argv: Option<&'a [String]>,
    pid: u32,
    language: Option<&'static str>,
    runtime_version: Option<&'a str>,
}

#[derive(Serialize)]
struct FindingJson<'a> {
    rank: usize,
    kind: &'a str,
    file: &'a str,
    line: u32,
    function: &'a str,
    code: Option<&'a str>,
    share: f64,
    max_speedup: Option<f64>,
    /// 95% interval of `max_speedup` from sampling alone; the upper end is null when unbounded.
    max_speedup_range: Option<(f64, Option<f64>)>,
    /// What the bound rests on: `busy-share`, `critical-path`, `work-span` or `none`.
    gain_basis: &'static str,
    title: &'a str,
    advice: &'a str,
    evidence: Vec<EvidenceJson<'a>>,
    why: &'a str,
    /// Null for a profile without sample times (imported), which cannot tell.
    recurrence: Option<f64>,
    rule: &'a str,
    enclosing_loop: Option<&'a str>,
    /// The line across the fleet, for a fleet's aggregate.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<FleetLineJson>,
}

#[derive(Serialize)]
struct EvidenceJson<'a> {
    frame: &'a str,
    file: &'a str,
    line: u32,
    share: f64,
}

#[derive(Serialize)]
struct HotLineJson<'a> {
    file: &'a str,
    line: u32,
    function: &'a str,
    code: Option<&'a str>,
    weight: u64,
    share: f64,
    self_share: f64,
    blocked_share: f64,
}

#[derive(Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
enum ExitJson {
    Exited { code: i32 },
    Killed { signal: i32 },
    StillRunning,
    Unknown,
}

#[derive(Serialize)]
struct SamplingJson {
    ticks: u64,
    errors: u64,
    late: u64,
}

/// Writes the findings report as one pretty-printed JSON object and a newline.
pub fn write_json<W: Write>(w: W, profile: &Profile, diagnosis: &Diagnosis, opts: &JsonOptions) -> io::Result<()> {
    let report = report(profile, diagnosis, opts);
    let mut out = BufWriter::new(w);
    serde_json::to_writer_pretty(&mut out, &report)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The report object [`write_json`] writes.
pub(crate) fn report<'a>(profile: &'a Profile, diagnosis: &'a Diagnosis, opts: &JsonOptions) -> Report<'a> {
    let meta = &profile.meta;
    let fleet = profile.fleet();
    Report {
        tool: "onefix",
        version: describe::tool_version(meta),
        target: TargetJson {
            argv: meta.target.argv.as_deref(),
            pid: meta.target.pid,
            language: meta.target.language.map(|l| l.as_str()),
            runtime_version: meta.target.runtime_version.as_deref(),
        },
        mode: meta.mode.as_str(),
        duration_s: round_to(meta.duration_s, 3),
        samples: profile.sample_count() as usize,
        findings: diagnosis
            .findings
            .iter()
            .map(|f| {
                let at_line =
                    fleet.as_ref().and_then(|fl| fl.lines.iter().find(|l| l.line == f.line && l.file == f.file));
                FindingJson { fleet: at_line.map(fleet_line_json), ..finding_json(f) }
            })
            .collect(),
        unit: match meta.weight_unit {
            WeightUnit::Samples { .. } => "samples",
            WeightUnit::Bytes => "bytes",
        },
        rate_hz: meta.rate_hz,
        share_of: &diagnosis.share_of,
        total_weight: diagnosis.total_weight,
        busy_weight: diagnosis.busy_weight,
        idle_share: share(fraction(diagnosis.idle_weight, diagnosis.total_weight)),
        outside_user_share: share(fraction(diagnosis.outside_user_weight, diagnosis.busy_weight)),
        hot_lines: diagnosis.hot_lines.iter().map(hot_line_json).collect(),
        notes: &diagnosis.notes,
        exit: meta.exit.as_ref().map(|exit| match *exit {
            TargetExit::Code(code) => ExitJson::Exited { code },
            TargetExit::Signal(signal) => ExitJson::Killed { signal },
            TargetExit::StillRunning => ExitJson::StillRunning,
            TargetExit::Unknown => ExitJson::Unknown,
        }),
        complete: opts.complete,
        sampling: SamplingJson { ticks: meta.stats.ticks, errors: meta.stats.errors, late: meta.stats.late },
        imported_from: profile.imported_from(),
        fleet: fleet.map(|f| FleetJson {
            service: f.service,
            from_unix_s: f.from_unix_s,
            to_unix_s: f.to_unix_s,
            version: f.version,
            host: f.host,
            span_s: round_to(f.span_s, 3),
            hosts: f.hosts,
            batches: f.batches,
            query: FleetQueryJson {
                rows_returned: f.rows_returned,
                bytes_returned: f.bytes_returned,
                rows_read: f.rows_read,
                bytes_read: f.bytes_read,
            },
        }),
    }
}

fn fleet_line_json(l: &onefix_model::attachments::FleetLine) -> FleetLineJson {
    FleetLineJson {
        sampled_share: share(l.sampled_share),
        cores_busy: round_to(l.cores_busy, 4),
        hosts_seen: l.hosts_seen,
        hosts_total: l.hosts_total,
        trend: l.trend.iter().map(|t| t.map(share)).collect(),
    }
}

fn finding_json(f: &Finding) -> FindingJson<'_> {
    FindingJson {
        rank: f.rank,
        kind: f.kind.as_str(),
        file: &f.file,
        line: f.line,
        function: &f.function,
        code: f.code.as_deref(),
        share: share(f.share),
        // An infinite bound (a cost of 100%) is not a number JSON can carry: null, "not meaningful".
        max_speedup: f.max_speedup.filter(|x| x.is_finite()).map(|x| round_to(x, 2)),
        max_speedup_range: f.speedup_range().map(|(lo, hi)| (round_to(lo, 2), hi.map(|h| round_to(h, 2)))),
        gain_basis: f.gain_basis.as_str(),
        title: &f.title,
        advice: &f.advice,
        evidence: f.evidence.iter().map(evidence_json).collect(),
        why: &f.why,
        recurrence: f.recurrence.map(share),
        rule: &f.rule,
        enclosing_loop: f.enclosing_loop.as_deref(),
        fleet: None,
    }
}

fn evidence_json(e: &Evidence) -> EvidenceJson<'_> {
    EvidenceJson { frame: &e.frame, file: &e.file, line: e.line, share: share(e.share) }
}

fn hot_line_json(h: &HotLine) -> HotLineJson<'_> {
    HotLineJson {
        file: &h.file,
        line: h.line,
        function: &h.function,
        code: h.code.as_deref(),
        weight: h.weight,
        share: share(h.share),
        self_share: share(h.self_share),
        blocked_share: share(h.blocked_share),
    }
}

fn share(value: f64) -> f64 {
    round_to(value, 4)
}

fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}
