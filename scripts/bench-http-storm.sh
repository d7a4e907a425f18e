#!/usr/bin/env bash
# The daemon's memory around connection storms (issue 27, item 6): idle RSS; RSS while
# STORM connections (default 10,000) are held open without sending a byte; RSS after they
# are all closed and the server has dropped them; and the same for ROUNDS storms in a row,
# so that retained memory (allocator caches) shows apart from a leak (growth per storm).
#
# A benchmark, not a test: a release daemon with simulated NPUs on 127.0.0.1; everything
# stays on the loopback interface and stops by itself.
#
#   scripts/bench-http-storm.sh             # 10000 connections, 3 storms
#   STORM=2000 ROUNDS=5 scripts/bench-http-storm.sh
set -euo pipefail
cd "$(dirname "$0")/.."

STORM=${STORM:-10000}
ROUNDS=${ROUNDS:-3}
hard=$(ulimit -Hn)
ulimit -n "$hard"
if [ "$hard" != unlimited ] && [ "$hard" -lt $((STORM + 256)) ]; then
  echo "open-file limit $hard is below STORM + 256; lower STORM" >&2
  exit 2
fi

cargo build --release --locked --bin hcclwatch >/dev/null
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/c.toml" <<TOML
[web]
listen_address = "127.0.0.1:$port"
max_connections = 16384
header_read_timeout = "5s"
[telemetry]
backend = "sim"
[log]
level = "warn"
TOML
target/release/hcclwatch run --config.file "$dir/c.toml" 2>"$dir/daemon.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
# Let the collectors fill their caches and a few scrapes happen before "idle".
for _ in $(seq 5); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null; sleep 1; done
idle=$(rss)
echo "idle RSS: ${idle} KiB"
for r in $(seq "$ROUNDS"); do
  peak=$(python3 - "$port" "$STORM" "$pid" <<'PY'
import socket, sys, time
port, n, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = []
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    socks.append(s)
time.sleep(3)
with open(f"/proc/{pid}/status") as f:
    print(next(l.split()[1] for l in f if l.startswith("VmRSS")))
for s in socks:
    s.close()
PY
)
  # The server drops the closed connections at once, and any half-open one at
  # header_read_timeout (5 s); then the memory should be back.
  sleep "${SETTLE:-8}"
  curl -sf "http://127.0.0.1:$port/metrics" >/dev/null
  after=$(rss)
  echo "storm $r: ${STORM} idle connections; RSS while held ${peak} KiB, ${SETTLE:-8} s after closing ${after} KiB ($(python3 -c "print(round($after/$idle, 2))")x idle)"
done
