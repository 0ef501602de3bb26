#!/usr/bin/env bash
# Soak: the profiler's memory and the recording's size over a long recording at 100 Hz of a
# 50-thread Python target (issue 8, "bounded resources"), with py-spy attached to the same
# target for comparison. A wrapper over the long-recording section of bench/run.
#
#   bench/soak.sh                     the full 30 minutes (about 35 min with the report timing)
#   SOAK_SECONDS=300 bench/soak.sh    a 5-minute run
#
# Environment: SOAK_SECONDS=1800 SOAK_THREADS=50 SOAK_EVERY=30 (RSS poll period), and
# ONEFIX / BENCH_TMP as for bench/run. Prints the table of bench/run's long section: onefix RSS
# and file size every SOAK_EVERY seconds, peak RSS, growth per minute, bytes per sample.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LONG_SECONDS="${SOAK_SECONDS:-1800}" LONG_THREADS="${SOAK_THREADS:-50}" LONG_EVERY="${SOAK_EVERY:-30}"
export SECTIONS="long,report" REPORT_REPS="${REPORT_REPS:-1}"
exec "$HERE/run"
