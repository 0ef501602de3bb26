//! What a recording's samples say tick by tick, for checking the diagnosis by hand: how many
//! samples of each thread were in each state at each innermost Python frame, and how many ticks
//! had no thread holding the GIL (hand-offs, or every thread waiting).
//!
//! `cargo run -p onefix-model --example thread_states -- REC.onefix [FRAME-FILTER]`

use std::collections::BTreeMap;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: thread_states REC.onefix [FRAME-FILTER]");
        std::process::exit(2);
    };
    let filter = args.next().unwrap_or_default();
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        eprintln!("cannot open {path}: {e}");
        std::process::exit(1)
    });
    let mut profile = match onefix_model::recording::read_recording(std::io::BufReader::new(file)) {
        Ok(loaded) => loaded.profile,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1)
        }
    };
    let samples = profile.take_samples();
    let mut by_state: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut gil_at_tick: BTreeMap<u64, bool> = BTreeMap::new();
    for s in &samples {
        *gil_at_tick.entry(s.time_us).or_default() |= s.state.gil();
        let thread = profile.thread(s.thread).name.clone().unwrap_or_default();
        let leaf = profile
            .stack_frames_leaf_first(s.stack)
            .map(|f| profile.frame(f))
            .find(|f| f.kind == onefix_model::FrameKind::Python)
            .map(|f| format!("{}:{}", f.function, f.line))
            .unwrap_or_default();
        if leaf.contains(&filter) {
            // In a futex wait as the kernel said (a lock, a condition, the GIL's queue).
            let futex = if s.state.futex() { " +futex" } else { "" };
            *by_state.entry((thread, leaf, format!("{}{futex}", s.state.name()))).or_default() += s.weight as u64;
        }
    }
    let mut rows: Vec<_> = by_state.into_iter().collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1));
    for ((thread, leaf, state), n) in rows {
        println!("{n:6}  {thread:30}  {leaf:50}  {state}");
    }
    let ticks = gil_at_tick.len();
    let without = gil_at_tick.values().filter(|held| !**held).count();
    println!("ticks sampled: {ticks}; without a thread holding the GIL: {without}");
}
