#!/usr/bin/env bash
# Fault-to-cordon latency (docs/latency.md), two benchmarks:
#
# - paths (the default): a hard fault (a DCMI fault event with a SeparateNPU code) to the
#   node cordoned, by the daemon's push to the receiver and by Prometheus + Alertmanager,
#   each over LATENCY_RUNS fresh chains (tests/latency_paths.rs); prints the median and
#   p95 of each path.
# - chain: the whole chain at the shipped settings, stage by stage, with a slow node and
#   two hard faults injected at recorded times (tests/latency_bench.rs; about half an hour).
#
#   scripts/bench-latency.sh                                  # both paths, 10 runs each
#   LATENCY_INJECT=read scripts/bench-latency.sh              # the code read, no event
#   LATENCY_PATHS=push LATENCY_RUNS=20 scripts/bench-latency.sh
#   LATENCY_BENCH=chain LATENCY_RUNS=3 scripts/bench-latency.sh
#
# Environment (paths): LATENCY_RUNS (per path, default 10), LATENCY_PATHS (push,
# alertmanager), LATENCY_INJECT (event, the default, or read). Environment (chain):
# LATENCY_RUNS, LATENCY_WARMUP_ROUNDS, LATENCY_THROTTLE and LATENCY_BASE_THROTTLE
# (bytes/s: the slow node's and every other node's probe send cap),
# LATENCY_TIMEOUT_SECONDS, LATENCY_STAGGER_SECONDS, LATENCY_PROBE_INTERVAL (try another
# probe.interval than the shipped one). Both: LATENCY_OUT (JSON lines, one per run; default
# target/latency-<bench>.jsonl), LATENCY_PROFILE (release, the default, or debug: the
# chain's time is the intervals', so a debug build measures about the same, and skips a
# long release build). Needs prometheus and prometheus-alertmanager (Debian packages;
# scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

for bin in prometheus prometheus-alertmanager; do
    command -v "$bin" >/dev/null || { echo "$bin is missing: apt-get install $bin" >&2; exit 1; }
done
bench=${LATENCY_BENCH:-paths}
case "$bench" in
    paths) test=latency_paths ;;
    chain) test=latency_bench ;;
    *) echo "LATENCY_BENCH=$bench: paths or chain" >&2; exit 1 ;;
esac
profile=()
case "${LATENCY_PROFILE:-release}" in
    release) profile=(--release) ;;
    debug) ;;
    *) echo "LATENCY_PROFILE=${LATENCY_PROFILE}: release or debug" >&2; exit 1 ;;
esac
export LATENCY_OUT=${LATENCY_OUT:-$PWD/target/latency-$bench.jsonl}
# The fake DCMI library is a workspace member; the test finds it next to the test binary.
cargo build "${profile[@]}" --workspace --locked --quiet
cargo test "${profile[@]}" --locked --test "$test" -- --ignored --nocapture --test-threads 1
echo "per-run results: $LATENCY_OUT"
