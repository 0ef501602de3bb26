//! Integration tests of every writer over one hand-built recording (see `fixture`).

mod firefox;
mod fixture;
mod flamegraph;
mod golden;
mod html;
mod json;
mod pprof;
mod sarif;
mod speedscope;
