//! SARIF 2.1.0 (<https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html>), the format
//! code scanning reads (GitHub's `codeql-action/upload-sarif`): each finding is a result at its
//! file and line, its kind the rule, its why and fix the message, its share and gain in the
//! result's properties.
//!
//! A finding's file under the source root (the directory onefix ran in, in CI the checkout) is
//! written relative to it with `uriBaseId` `%SRCROOT%`, which is how code scanning matches it
//! to the repository's file; any other file keeps its absolute `file://` URI.
//!
//! The level is the finding's share of the run: `error` from [`ERROR_SHARE`], `warning` from
//! [`WARNING_SHARE`], `note` below.
//!
//! The structures are plain serde ones: the few objects written do not need `serde-sarif`'s
//! generated types (and their build-time code generation).

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use onefix_diagnose::{Diagnosis, Finding, Kind};
use onefix_model::Profile;
use serde::Serialize;

use crate::describe;

/// A finding taking at least this share of the run is an `error`.
pub const ERROR_SHARE: f64 = 0.20;
/// At least this share, a `warning`; below, a `note`.
pub const WARNING_SHARE: f64 = 0.05;

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
const SRCROOT: &str = "%SRCROOT%";

pub struct SarifOptions {
    /// The directory results are made relative to (`%SRCROOT%`): the repository's checkout.
    pub source_root: Option<PathBuf>,
}

#[derive(Serialize)]
struct Log<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: Vec<Run<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Run<'a> {
    tool: Tool<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_uri_base_ids: Option<serde_json::Value>,
    results: Vec<SarifResult>,
}

#[derive(Serialize)]
struct Tool<'a> {
    driver: Driver<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver<'a> {
    name: &'static str,
    version: &'a str,
    semantic_version: &'a str,
    rules: Vec<Rule>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    id: String,
    name: String,
    short_description: Text,
    help: Text,
}

#[derive(Serialize)]
struct Text {
    text: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifResult {
    rule_id: String,
    rule_index: usize,
    level: &'static str,
    message: Text,
    locations: Vec<Location>,
    properties: Properties,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    physical_location: PhysicalLocation,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<Region>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactLocation {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uri_base_id: Option<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    snippet: Option<Text>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Properties {
    rank: usize,
    /// Of what the diagnosis's shares are of (`share_of` of the JSON report).
    share: f64,
    share_of: String,
    function: String,
    /// The Amdahl bound if the line's cost went away; absent when not meaningful.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_speedup: Option<f64>,
    gain_basis: &'static str,
}

/// What each kind of finding is, as a rule's short description.
fn kind_description(kind: Kind) -> &'static str {
    match kind {
        Kind::RepeatedSetup => "Setup repeated on every call that could be done once",
        Kind::NewConnectionPerRequest => "A new connection opened for every request",
        Kind::SerialIo => "Independent I/O done one after another",
        Kind::Serialization => "Time spent encoding or decoding data",
        Kind::NPlusOneQuery => "One query per item instead of one for all",
        Kind::DeepCopy => "Deep copies of data on a hot path",
        Kind::Hashing => "Hashing on a hot path",
        Kind::GcPressure => "Garbage collection driven by allocation",
        Kind::LockContention => "Threads waiting for a lock others hold",
        Kind::BlockingWait => "A thread blocked waiting",
        Kind::HotLoopCompute => "Computation in a hot loop",
        Kind::HotCall => "A call that costs much of the run",
        Kind::Logging => "A log record formatted and written per item",
        Kind::Filesystem => "A directory listed or files looked up on every call",
        Kind::RegexMatching => "A regular expression matched over much text",
        Kind::RepeatedWalk => "A whole structure walked again on every call",
        Kind::Quadratic => "Work per call that grows with the input",
        Kind::Idle => "Threads idle for want of work",
        Kind::MemoryRetention => "Memory kept alive longer than needed",
        Kind::MemoryPeak => "A line driving the heap's peak",
        Kind::AllocationChurn => "Many short-lived allocations",
    }
}

/// `repeated-setup` → `RepeatedSetup`: SARIF's rule names are identifiers.
fn rule_name(kind: Kind) -> String {
    kind.as_str()
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

fn level(share: f64) -> &'static str {
    if share >= ERROR_SHARE {
        "error"
    } else if share >= WARNING_SHARE {
        "warning"
    } else {
        "note"
    }
}

/// A path's characters as a URI reference allows them (RFC 3986: unreserved and `/` kept).
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The finding's file as SARIF locates it: relative to the source root when under it.
fn artifact(file: &str, cwd: Option<&str>, root: Option<&Path>) -> ArtifactLocation {
    let path = Path::new(file);
    let absolute = match (path.is_absolute(), cwd) {
        (false, Some(cwd)) => Path::new(cwd).join(path),
        _ => path.to_path_buf(),
    };
    if let Some(relative) = root.and_then(|r| absolute.strip_prefix(r).ok()) {
        return ArtifactLocation { uri: uri_path(&relative.to_string_lossy()), uri_base_id: Some(SRCROOT) };
    }
    if absolute.is_absolute() {
        ArtifactLocation { uri: format!("file://{}", uri_path(&absolute.to_string_lossy())), uri_base_id: None }
    } else {
        ArtifactLocation { uri: uri_path(file), uri_base_id: None }
    }
}

/// Text as a sentence: trimmed, ending with a full stop.
fn sentence(text: &str) -> String {
    let text = text.trim();
    if text.ends_with(['.', '!', '?']) {
        text.to_owned()
    } else {
        format!("{text}.")
    }
}

/// Writes the diagnosis's findings as one SARIF 2.1.0 run.
pub fn write_sarif<W: Write>(w: W, profile: &Profile, diagnosis: &Diagnosis, opts: &SarifOptions) -> io::Result<()> {
    let version = describe::tool_version(&profile.meta);
    let root = opts.source_root.as_deref();
    let mut rules: Vec<Rule> = Vec::new();
    let mut kinds: Vec<Kind> = Vec::new();
    let results = diagnosis
        .findings
        .iter()
        .map(|f: &Finding| {
            let rule_index = match kinds.iter().position(|k| *k == f.kind) {
                Some(i) => i,
                None => {
                    kinds.push(f.kind);
                    rules.push(Rule {
                        id: f.kind.as_str().to_owned(),
                        name: rule_name(f.kind),
                        short_description: Text { text: kind_description(f.kind).to_owned() },
                        // The first finding's fix: each result's message carries its own.
                        help: Text { text: f.advice.clone() },
                    });
                    kinds.len() - 1
                }
            };
            let message = format!(
                "{} ({:.1}% of {}). Why: {} Fix: {}",
                f.title.trim_end_matches('.'),
                f.share * 100.0,
                diagnosis.share_of,
                sentence(&f.why),
                sentence(&f.advice)
            );
            SarifResult {
                rule_id: f.kind.as_str().to_owned(),
                rule_index,
                level: level(f.share),
                message: Text { text: message },
                locations: vec![Location {
                    physical_location: PhysicalLocation {
                        artifact_location: artifact(&f.file, profile.meta.target.cwd.as_deref(), root),
                        region: (f.line > 0).then(|| Region {
                            start_line: f.line,
                            snippet: f.code.as_ref().map(|c| Text { text: c.clone() }),
                        }),
                    },
                }],
                properties: Properties {
                    rank: f.rank,
                    share: f.share,
                    share_of: diagnosis.share_of.clone(),
                    function: f.function.clone(),
                    max_speedup: f.max_speedup.filter(|x| x.is_finite()),
                    gain_basis: f.gain_basis.as_str(),
                },
            }
        })
        .collect();
    let original_uri_base_ids = root.map(|r| {
        let mut uri = format!("file://{}", uri_path(&r.to_string_lossy()));
        if !uri.ends_with('/') {
            uri.push('/');
        }
        serde_json::json!({ "%SRCROOT%": { "uri": uri } })
    });
    let log = Log {
        schema: SCHEMA,
        version: "2.1.0",
        runs: vec![Run {
            tool: Tool { driver: Driver { name: "onefix", version, semantic_version: version, rules } },
            original_uri_base_ids,
            results,
        }],
    };
    let mut out = BufWriter::new(w);
    serde_json::to_writer_pretty(&mut out, &log)?;
    out.write_all(b"\n")?;
    out.flush()
}
