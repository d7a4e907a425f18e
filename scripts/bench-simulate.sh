#!/usr/bin/env bash
# The simulator's speed: `hcclwatch simulate` on the built-in campaign at 10,000 nodes for
# one simulated hour (3600 s at the shipped 10 s probe interval: 360 rounds), timed with
# GNU time. Two binaries can be compared in one invocation (BEFORE and AFTER): they are
# run alternately, ROUNDS times each, so that a drifting shared machine slows both alike,
# and the medians of wall-clock and CPU (user + system) seconds are printed with the
# ratio AFTER ÷ BEFORE. docs/benchmarks.md quotes the results.
#
#   scripts/bench-simulate.sh                          # target/release/hcclwatch alone
#   BEFORE=/tmp/hcclwatch-main AFTER=target/release/hcclwatch ROUNDS=5 scripts/bench-simulate.sh
#
# Environment: BEFORE, AFTER (binaries; default AFTER: build target/release/hcclwatch),
# ROUNDS (default 3), ARGS (the simulate arguments; default the one above).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
args=${ARGS:---nodes 10000 --hours 1 --seed 1}
if [[ -z ${AFTER:-} ]]; then
    cargo build --release --locked --quiet
    AFTER=target/release/hcclwatch
fi
bins=()
[[ -n ${BEFORE:-} ]] && bins+=("$BEFORE")
bins+=("$AFTER")
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (/usr/bin/time, Debian package time)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((k = 0; k < rounds; k++)); do
    for i in "${!bins[@]}"; do
        # shellcheck disable=SC2086 # ARGS is a list of words
        /usr/bin/time -f '%e %U %S' -o "$tmp/t" "${bins[$i]}" simulate $args >/dev/null
        read -r wall user sys <"$tmp/t"
        echo "$wall $(echo "$user + $sys" | bc)" >>"$tmp/$i"
        printf 'run %d %-40s wall %6.1f s  cpu %6.1f s\n' "$k" "${bins[$i]}" "$wall" "$(echo "$user + $sys" | bc)"
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -a wall cpu
for i in "${!bins[@]}"; do
    wall[i]=$(cut -d' ' -f1 "$tmp/$i" | median)
    cpu[i]=$(cut -d' ' -f2 "$tmp/$i" | median)
    printf 'median %-40s wall %6.1f s  cpu %6.1f s  (%d runs: simulate %s)\n' "${bins[$i]}" "${wall[i]}" "${cpu[i]}" "$rounds" "$args"
done
if ((${#bins[@]} == 2)); then
    printf 'after / before: wall %.2f, cpu %.2f\n' "$(echo "${wall[1]} / ${wall[0]}" | bc -l)" "$(echo "${cpu[1]} / ${cpu[0]}" | bc -l)"
fi
