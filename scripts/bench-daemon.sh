#!/usr/bin/env bash
# Side-by-side resource benchmark: hcclwatch with 16 fake NPUs (libfake_dcmi.so, every
# collector on, default intervals) against Debian's prometheus-node-exporter, on the same
# machine in the same invocation. Reports idle RSS, CPU seconds per hour, and scrape
# latency p50/p99 under 10 concurrent scrapers (wrk, keep-alive), with ratios.
#
# Usage: scripts/bench-daemon.sh [window_seconds (default 60)] [load_seconds (default 20)]
set -euo pipefail
cd "$(dirname "$0")/.."
WINDOW=${1:-60}
LOAD=${2:-20}

need() { command -v "$1" >/dev/null 2>&1 || { echo "installing $2" >&2; apt-get install -y -qq "$2" >/dev/null; }; }
need prometheus-node-exporter prometheus-node-exporter
need wrk wrk

cargo build --release --workspace -q
WORK=$(mktemp -d)
cleanup() { kill "${HW_PID:-}" "${NE_PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

HW_PORT=19478; NE_PORT=19100
cat > "$WORK/cfg.toml" <<CFG
[web]
listen_address = "127.0.0.1:$HW_PORT"
[log]
level = "warn"
[telemetry]
backend = "dcmi"
dcmi_library = "$PWD/target/release/libfake_dcmi.so"
CFG
FAKE_DCMI_SCENARIO="$PWD/tests/fake-dcmi/scenarios/16-npu.json" ./target/release/hcclwatch run --config.file "$WORK/cfg.toml" 2>"$WORK/hw.log" &
HW_PID=$!
prometheus-node-exporter --web.listen-address="127.0.0.1:$NE_PORT" --log.level=warn 2>"$WORK/ne.log" &
NE_PID=$!

wait_up() { for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/metrics" >/dev/null && return 0; sleep 0.1; done; echo "port $1 never came up" >&2; exit 1; }
wait_up $HW_PORT; wait_up $NE_PORT

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
HZ=$(getconf CLK_TCK)

# Idle window: each process runs its own collection; a scrape every 15 s, as Prometheus would.
sleep 5
hw0=$(cpu_ticks $HW_PID); ne0=$(cpu_ticks $NE_PID)
end=$((SECONDS + WINDOW))
while [ $SECONDS -lt $end ]; do
  curl -sf -o /dev/null "http://127.0.0.1:$HW_PORT/metrics"; curl -sf -o /dev/null "http://127.0.0.1:$NE_PORT/metrics"
  sleep 15
done
hw1=$(cpu_ticks $HW_PID); ne1=$(cpu_ticks $NE_PID)
hw_rss=$(rss_kib $HW_PID); ne_rss=$(rss_kib $NE_PID)
hw_cpu=$(echo "($hw1-$hw0)/$HZ*3600/$WINDOW" | bc -l); ne_cpu=$(echo "($ne1-$ne0)/$HZ*3600/$WINDOW" | bc -l)

lat() { wrk -t 2 -c 10 -d "${LOAD}s" --latency "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v p="$2" '$1==p {print $2}'; }
to_ms() { echo "$1" | awk '/us$/ {sub("us","");print $1/1000; next} /ms$/ {sub("ms","");print $1; next} /s$/ {sub("s","");print $1*1000}'; }
hw_p50=$(to_ms "$(lat $HW_PORT 50%)"); hw_p99=$(to_ms "$(lat $HW_PORT 99%)")
ne_p50=$(to_ms "$(lat $NE_PORT 50%)"); ne_p99=$(to_ms "$(lat $NE_PORT 99%)")
hw_series=$(curl -s "http://127.0.0.1:$HW_PORT/metrics" | grep -vc '^#'); ne_series=$(curl -s "http://127.0.0.1:$NE_PORT/metrics" | grep -vc '^#')

printf '%-28s %14s %20s %10s\n' metric hcclwatch node_exporter ratio
printf '%-28s %14s %20s %10.2f\n' "series per scrape" "$hw_series" "$ne_series" "$(echo "$hw_series/$ne_series" | bc -l)"
printf '%-28s %14.1f %20.1f %10.2f\n' "idle RSS (MiB)" "$(echo "$hw_rss/1024" | bc -l)" "$(echo "$ne_rss/1024" | bc -l)" "$(echo "$hw_rss/$ne_rss" | bc -l)"
printf '%-28s %14.2f %20.2f %10.2f\n' "CPU seconds per hour" "$hw_cpu" "$ne_cpu" "$(echo "($hw_cpu+0.0001)/($ne_cpu+0.0001)" | bc -l)"
printf '%-28s %14.3f %20.3f %10.2f\n' "scrape p50, 10 conns (ms)" "$hw_p50" "$ne_p50" "$(echo "$hw_p50/$ne_p50" | bc -l)"
printf '%-28s %14.3f %20.3f %10.2f\n' "scrape p99, 10 conns (ms)" "$hw_p99" "$ne_p99" "$(echo "$hw_p99/$ne_p99" | bc -l)"
