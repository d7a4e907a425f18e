#!/usr/bin/env bash
# Runs the attribution test that once failed on a loaded machine
# (tests/attribution.rs daemon_attributes_npus_from_kubelet_vnpus_and_volcano: a scrape
# showed NPU 0's allocation while its temperature series lacked the pod labels) RUNS times
# in a row (default 50), while two other test binaries (BESIDE, default tests/collective/
# and tests/transport_security.rs) run over and over beside it to load the machine. Stops
# at the first failure and prints its output; prints one line per run and a summary.
#
#   scripts/stress-attribution.sh                 # 50 runs
#   RUNS=10 BESIDE="golden probe" scripts/stress-attribution.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-50}
BESIDE=${BESIDE:-"collective transport_security"}
TEST=daemon_attributes_npus_from_kubelet_vnpus_and_volcano

# The workspace build makes libfake_dcmi.so, which the daemon under test loads.
cargo build --locked --workspace --quiet

# The path of the test binary of tests/$1.rs (built if needed).
test_binary() {
  cargo test --locked --no-run --message-format=json --test "$1" 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])
'
}

attribution=$(test_binary attribution)
work=$(mktemp -d)
trap 'touch "$work/stop"; wait; rm -rf "$work"' EXIT

# Each binary beside runs in a loop until the stress is over, counting its runs.
for name in $BESIDE; do
  bin=$(test_binary "$name")
  (
    runs=0 failed=0
    while [ ! -e "$work/stop" ]; do
      if "$bin" >"$work/$name.last" 2>&1; then :; else
        failed=$((failed + 1))
        grep -E '^test .* FAILED$' "$work/$name.last" >>"$work/$name.failures" || true
      fi
      runs=$((runs + 1))
      echo "$runs $failed" >"$work/$name.count"
    done
  ) &
done

echo "==> $TEST, $RUNS runs, beside: $BESIDE ($(nproc) cores)"
passed=0
for i in $(seq 1 "$RUNS"); do
  start=$(date +%s.%N)
  if "$attribution" --exact "$TEST" -q >"$work/run.log" 2>&1; then
    passed=$((passed + 1))
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    printf 'run %2d: ok   %5s s  load %s\n' "$i" "$secs" "$(cut -d' ' -f1 /proc/loadavg)"
  else
    printf 'run %2d: FAILED\n' "$i"
    cat "$work/run.log"
    break
  fi
done

# The binaries beside finish the run they are in (the collective matrix takes minutes).
touch "$work/stop"
wait
for name in $BESIDE; do
  read -r runs failed <"$work/$name.count" 2>/dev/null || { runs=0; failed=0; }
  echo "beside: $name ran $runs times to the end ($failed failed)"
  if [ -s "$work/$name.failures" ]; then sort "$work/$name.failures" | uniq -c | sed 's/^/  /'; fi
done
echo "==> $passed of $RUNS runs passed in a row"
[ "$passed" -eq "$RUNS" ]
