//! The importers of profiles recorded elsewhere (pprof, gzipped or not; folded stacks;
//! speedscope JSON) and every writer of what they give: any bytes must import or give an error,
//! never a panic, and a profile imported must diagnose and render, to HTML and an SVG flame
//! graph too, whatever the depth of its stacks (issue 33).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
use onefix_report::{
    write_flamegraph, write_folded, write_html, write_json, write_terminal, FlamegraphOptions, FoldedOptions, HtmlRun,
    JsonOptions, TerminalOptions,
};

fuzz_target!(|data: &[u8]| {
    let Ok(imported) = onefix_import::import(data) else { return };
    let profile = imported.profile;
    // Compiling the knowledge base's patterns dwarfs importing a profile: once per process.
    static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
    let kb = KB.get_or_init(KnowledgeBase::builtin);
    let user = UserCode::new(profile.meta.user_code.iter().map(std::path::PathBuf::from), None);
    let mode = profile.meta.mode;
    let diagnosis = diagnose(&profile, kb, &user, &Options { mode, ..Options::default() });
    let mut sink = Vec::new();
    let _ = write_json(&mut sink, &profile, &diagnosis, &JsonOptions { complete: true });
    let _ = write_terminal(&mut sink, &profile, &diagnosis, &TerminalOptions::default());
    let _ = write_folded(&mut sink, &profile, mode, &FoldedOptions::default());
    let _ = write_flamegraph(&mut sink, &profile, mode, &FlamegraphOptions::default());
    let run = HtmlRun { label: "fuzz".to_owned(), profile: &profile, diagnosis: &diagnosis, mode, complete: true };
    let _ = write_html(&mut sink, &[run], &BTreeMap::<String, String>::new());
});
