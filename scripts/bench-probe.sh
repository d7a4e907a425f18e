#!/usr/bin/env bash
# Probe overhead at the default probe sizes: six daemons on 127.0.0.1 probe each other every
# second for SECONDS; node 0's probe bytes and CPU time per round are measured and scaled
# to the default 30 s interval. Usage: scripts/bench-probe.sh [SECONDS] [BINARY]
set -euo pipefail
secs="${1:-60}"
bin="${2:-$(dirname "$0")/../target/release/hcclwatch}"
[ -x "$bin" ] || { echo "build it first: cargo build --release (or pass the binary)" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
head -c 32 /dev/urandom | base64 > "$dir/k.key"
base=$((20000 + RANDOM % 20000))
peers=$(for r in 0 1 2 3 4 5; do printf '"127.0.0.1:%d", ' $((base + r)); done)
for r in 0 1 2 3 4 5; do
  cat > "$dir/n$r.toml" <<CFG
[web]
listen_address = "127.0.0.1:$((base + 100 + r))"
[telemetry]
backend = "none"
[collectors]
host = false
[collective]
peers = [${peers%, }]
rank = $r
key_file = "$dir/k.key"
[probe]
enabled = true
interval = "1s"
CFG
  "$bin" run --config.file "$dir/n$r.toml" > "$dir/n$r.log" 2>&1 &
  pids+=($!)
done
m() { curl -s "127.0.0.1:$((base + 100))/metrics"; }
for _ in $(seq 1 60); do
  m | grep -q '^hcclwatch_probe_active 1' && break
  sleep 0.5
done
stat0=$(awk '{print $14 + $15}' "/proc/${pids[0]}/stat")
r0=$(m | awk '/^hcclwatch_probe_rounds_total\{result="ok"\}/ {print $2}')
b0=$(m | awk '/^hcclwatch_probe_bytes_total/ {print $2}')
sleep "$secs"
stat1=$(awk '{print $14 + $15}' "/proc/${pids[0]}/stat")
r1=$(m | awk '/^hcclwatch_probe_rounds_total\{result="ok"\}/ {print $2}')
b1=$(m | awk '/^hcclwatch_probe_bytes_total/ {print $2}')
hz=$(getconf CLK_TCK)
awk -v t=$((stat1 - stat0)) -v hz="$hz" -v r=$((r1 - r0)) -v b=$((b1 - b0)) 'BEGIN {
  if (r <= 0) { print "no probe rounds completed" > "/dev/stderr"; exit 1 }
  bpr = b / r; cpr = t / hz / r;
  printf "rounds: %d\nbytes per round per node: %.0f\nCPU per round: %.1f ms\n", r, bpr, cpr * 1000;
  printf "at the default 30 s interval: %.1f KB/s per node (%.4f %% of a 10 Gb/s link), CPU %.3f %% of one core\n",
         bpr / 30 / 1000, bpr / 30 * 8 / 1e10 * 100, cpr / 30 * 100;
}'
