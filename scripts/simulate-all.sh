#!/usr/bin/env bash
# Runs the detection simulator at full size and prints its tables (docs/detection.md
# quotes them): every shipped scenario, the shipped set pooled, the world-class suite
# (scenarios/world/) one by one and pooled, the quiet fleet over several seeds (the
# false-quarantine bound), a batch of out-of-distribution held-out scenarios the
# thresholds were never tuned on (and, for comparison, the older in-sample held-out
# batch), and the sensitivity to how steady congestion is and to how much of it the
# nodes' own counters show. Every run is at the shipped probe.interval (the scenarios are
# written in 30 s rounds and rescaled to it), or at PROBE_INTERVAL.
#
#   scripts/simulate-all.sh                 # everything (about an hour on one core)
#   HELD_OUT=20 QUIET_SEEDS=1 scripts/simulate-all.sh   # quicker
#   PROBE_INTERVAL=10s scripts/simulate-all.sh          # the same world probed every 10 s
#
# Environment: HELD_OUT (generated scenarios of each held-out set, default 100),
# QUIET_SEEDS (default 4), PROBE_INTERVAL (default: the shipped probe.interval),
# HCCLWATCH (a prebuilt binary; default: build target/release/hcclwatch).
set -euo pipefail
cd "$(dirname "$0")/.."

held_out=${HELD_OUT:-100}
quiet_seeds=${QUIET_SEEDS:-4}
if [[ -n ${HCCLWATCH:-} ]]; then
    bin=$HCCLWATCH
else
    cargo build --release --locked --quiet
    bin=target/release/hcclwatch
fi

interval=()
if [[ -n ${PROBE_INTERVAL:-} ]]; then
    interval=(--probe-interval "$PROBE_INTERVAL")
fi
sim() { "$bin" simulate "${interval[@]}" "$@"; }

section() { printf '\n==================== %s ====================\n\n' "$1"; }

for f in scenarios/*.toml; do
    section "$f"
    sim --scenario "$f"
done

section "the shipped scenarios pooled"
args=()
for f in scenarios/*.toml; do args+=(--scenario "$f"); done
sim "${args[@]}"

for f in scenarios/world/*.toml; do
    section "$f"
    sim --scenario "$f"
done

section "the world-class suite pooled"
args=()
for f in scenarios/world/*.toml; do args+=(--scenario "$f"); done
sim "${args[@]}"

section "quiet fleet: $quiet_seeds seeds x 4096 nodes x 24 h"
sim --scenario scenarios/quiet.toml --nodes 4096 --batch "$quiet_seeds"

section "held out, out of distribution: $held_out generated scenarios (seeds from 1000000)"
sim --generate 1000000 --batch "$held_out"

section "held out, in sample (the older set, for comparison): $held_out generated scenarios (seeds from 1000000)"
sim --generate-in-sample 1000000 --batch "$held_out"

# One quiet-fleet run per value of a scenario key: the false verdicts it costs.
# sensitivity KEY SHIPPED VALUE...: replaces the line "KEY = SHIPPED" of quiet.toml.
sensitivity() {
    local key=$1 shipped=$2
    shift 2
    printf '%-8s %-40s %s\n' "$key" "false confirmed / 1000 node-h" "false quarantines / 1000 node-h"
    for v in "$@"; do
        sed "s/^$key = $shipped\$/$key = $v/" scenarios/quiet.toml >"$tmp/quiet.toml"
        sim --scenario "$tmp/quiet.toml" |
            awk -v j="$v" '$1 == "node" && $2 == "confirmed" { c = $6 " (" $3 - $4 ")" }
                           $1 == "cordon" { q = $5 " (" $2 - $3 ")" }
                           END { printf "%-8s %-40s %s\n", j, c, q }'
    done
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

section "sensitivity: how steady congestion is (quiet fleet, 1024 nodes x 24 h)"
sensitivity jitter 1.0 0.0 0.25 0.5 0.75 1.0 1.5

section "sensitivity: how much congestion the nodes' own counters show (quiet fleet, 1024 nodes x 24 h)"
sensitivity signal 0.8 0.0 0.5 0.8 0.95
