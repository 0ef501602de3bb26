#!/usr/bin/env bash
# Fuzz onefix's parsers of untrusted input for a bounded time each (issue 8); CI runs the
# recording and import targets for 60 s each (.ci/run).
#
#   bench/fuzz.sh                  every target, FUZZ_SECONDS (default 300) each
#   FUZZ_SECONDS=60 bench/fuzz.sh recording template
#
# Targets (fuzz/fuzz_targets/): recording (the .onefix reader, then diagnosis and every
# report writer on what it reads), import (the pprof, folded and speedscope importers, then
# diagnosis and every writer, HTML and SVG included), kb (the knowledge-base loader), template
# (the load template compiler and renderer). Needs a nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`). Seeds come from fuzz/seeds/<target>, and for kb from the real
# knowledge base (crates/onefix-diagnose/kb, never a stale copy); the working corpus goes to
# fuzz/corpus/<target> (not committed). A crash leaves its input in fuzz/artifacts/<target>/:
# turn it into a regression test next to the code it broke, fix, and commit both.
# Prints one line per target: runs, seconds, corpus size, and whether it crashed.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FUZZ="$(dirname "$HERE")/fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-300}"
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=(recording import kb template)
cd "$FUZZ"
cargo +nightly fuzz build -O >&2 || exit 2
status=0
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    log="$(mktemp "${TMPDIR:-/tmp}/onefix-fuzz-$t.XXXXXX")"
    seeds="seeds/$t"
    [[ "$t" == kb ]] && seeds="../crates/onefix-diagnose/kb"
    cargo +nightly fuzz run -O "$t" "corpus/$t" "$seeds" -- -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1
    rc=$?
    runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)"
    [[ -z "$runs" ]] && runs="$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')"
    corpus="$(ls "corpus/$t" | wc -l)"
    if [[ $rc -eq 0 ]]; then
        echo "$t: ${runs:-?} runs in ${SECONDS_EACH} s, corpus $corpus inputs, no crash (log $log)"
    else
        echo "$t: CRASH after ${runs:-?} runs (exit $rc): see $log and fuzz/artifacts/$t/"
        status=1
    fi
done
exit $status
