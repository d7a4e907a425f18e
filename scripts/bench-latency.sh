#!/usr/bin/env bash
# Fault-to-cordon latency at the shipped settings (docs/latency.md): the whole chain
# (daemons on loopback with deploy/config/hcclwatch.toml, Debian's Prometheus with
# alerts/hcclwatch-rules.yml at deploy/prometheus's intervals, Alertmanager with
# deploy/alertmanager/alertmanager.yml, `hcclwatch remediate` not in dry-run against the
# tests' stand-in API server), a slow node and two hard faults injected at recorded times,
# and the time from injection to each stage. Independent chains run side by side; each
# takes the warm-up (12 probe rounds) plus the slowest fault's way to the cordon.
#
#   scripts/bench-latency.sh                       # 3 chains
#   LATENCY_RUNS=5 scripts/bench-latency.sh        # more runs
#
# Environment: LATENCY_RUNS, LATENCY_WARMUP_ROUNDS, LATENCY_THROTTLE and
# LATENCY_BASE_THROTTLE (bytes/s: the slow node's and every other node's probe send cap),
# LATENCY_TIMEOUT_SECONDS, LATENCY_STAGGER_SECONDS, LATENCY_PROBE_INTERVAL (try another
# probe.interval than the shipped one), LATENCY_OUT (JSON lines, one per run
# and fault; default target/latency-bench.jsonl). Needs prometheus and
# prometheus-alertmanager (Debian packages; scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

for bin in prometheus prometheus-alertmanager; do
    command -v "$bin" >/dev/null || { echo "$bin is missing: apt-get install $bin" >&2; exit 1; }
done
export LATENCY_OUT=${LATENCY_OUT:-$PWD/target/latency-bench.jsonl}
# The fake DCMI library is a workspace member; the test finds it next to the test binary.
cargo build --release --workspace --locked --quiet
cargo test --release --locked --test latency_bench -- --ignored --nocapture --test-threads 1
echo "per-run results: $LATENCY_OUT"
