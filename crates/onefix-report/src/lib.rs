//! onefix's writers. Every one reads the same model (a [`Profile`](onefix_model::Profile), and
//! for the findings reports a [`Diagnosis`](onefix_diagnose::Diagnosis)) and writes to any
//! [`std::io::Write`]; none opens files, so the command line decides where output goes and tests
//! compare exact bytes.
//!
//! | writer | format |
//! |---|---|
//! | [`write_folded`] | collapsed stacks (`root;…;leaf count`), as flamegraph.pl and inferno read |
//! | [`write_flamegraph`] | flame graph SVG, drawn by inferno with deterministic colours |
//! | [`write_speedscope`] | speedscope's JSON file format, one sampled profile per thread |
//! | [`write_firefox`] | the Firefox Profiler's processed format: threads, states, CPU time, findings as markers |
//! | [`write_sarif`] | SARIF 2.1.0: each finding a result at its line, for code scanning (GitHub) |
//! | [`write_pprof`] | pprof's gzipped protobuf, as `go tool pprof`, Pyroscope and Parca read |
//! | [`write_html`] | one self-contained HTML page: findings, flame graphs, timeline, hot lines with source |
//! | [`write_json`] | the findings report, the JSON contract of DESIGN.md §3 |
//! | [`write_dump`] | every thread's stack at one moment, then its deadlocks or stall (`onefix dump`) |
//! | [`write_top`] | one screen of `onefix top`: the last seconds' hot lines, findings, thread states |
//! | [`write_terminal`] | the human summary: findings first, then the hot lines |
//!
//! The stack writers take a [`Mode`](onefix_model::Mode) deciding which samples count, so one
//! wall-mode recording can also be drawn as CPU time.

pub mod compare;
mod describe;
mod dump;
mod firefox;
mod flamegraph;
mod folded;
pub mod html;
mod json;
pub mod pprof;
mod sarif;
mod speedscope;
mod terminal;
mod top;

pub use describe::signal_name;
pub use dump::{write_dump, write_dump_json, DumpJson};
pub use firefox::write_firefox;
pub use flamegraph::{write_flamegraph, FlamegraphOptions};
pub use folded::{escape_label, write_folded, FoldedOptions};
pub use html::{write_html, write_html_compared, FileSystemSources, HtmlRun, SourceFiles};
pub use json::{write_json, JsonOptions};
pub use pprof::write_pprof;
pub use sarif::{write_sarif, SarifOptions};
pub use speedscope::write_speedscope;
pub use terminal::{write_terminal, TerminalOptions, DEFAULT_WIDTH};
pub use top::{write_top, TopStatus};
