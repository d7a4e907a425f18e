#!/usr/bin/env bash
# /metrics latency under load while an attacker holds idle connections (issue 18 target:
# p99 < 100 ms with 2,000 concurrent scrapers and 10,000 idle connections held).
#
# A benchmark, not a test: it starts a release daemon on 127.0.0.1 (simulated NPUs), opens
# IDLE connections that send nothing (re-opened when the server closes them), and runs wrk
# (Debian's `wrk`, installed when missing) with SCRAPERS connections against /metrics for
# SECONDS. Everything stays on the loopback interface and stops by itself.
#
#   scripts/bench-http.sh            # 2000 scrapers, 10000 idle, 30 s
#   SCRAPERS=500 IDLE=2000 SECONDS_=10 scripts/bench-http.sh
#   GZIP=1 scripts/bench-http.sh     # scrapers ask for gzip, as Prometheus does
set -euo pipefail
cd "$(dirname "$0")/.."

SCRAPERS=${SCRAPERS:-2000}
IDLE=${IDLE:-10000}
DURATION=${SECONDS_:-30}

command -v wrk >/dev/null 2>&1 || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk >/dev/null
}
# Room for the idle connections, the scrapers and the daemon's own descriptors (each
# process has its own limit; the daemon needs IDLE + SCRAPERS and some).
hard=$(ulimit -Hn)
ulimit -n "$hard"
if [ "$hard" != unlimited ] && [ "$hard" -lt $((IDLE + SCRAPERS + 256)) ]; then
  echo "open-file limit $hard is below IDLE + SCRAPERS + 256; lower IDLE or SCRAPERS" >&2
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
[telemetry]
backend = "sim"
[log]
level = "warn"
TOML
target/release/hcclwatch run --config.file "$dir/c.toml" 2>"$dir/daemon.log" &
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.1; done

# The attacker: IDLE connections that never send a byte, re-opened when closed, from
# another loopback address so the load generator's connections stay distinct.
python3 - "$port" "$IDLE" "$((2 * DURATION + 10))" <<'PY' &
import selectors, socket, sys, time
port, n, until = int(sys.argv[1]), int(sys.argv[2]), time.time() + float(sys.argv[3])
sel = selectors.DefaultSelector()
def open_one():
    s = socket.socket()
    s.setblocking(False)
    try: s.bind(("127.0.0.2", 0))
    except OSError: pass
    s.connect_ex(("127.0.0.1", port))
    sel.register(s, selectors.EVENT_READ)
for _ in range(n): open_one()
while time.time() < until:
    for key, _ in sel.select(timeout=0.5):
        s = key.fileobj
        try: data = s.recv(1)
        except OSError: data = b""
        if not data:
            sel.unregister(s); s.close(); open_one()
PY
sleep 3
# Two load models, both with the idle connections held for the whole run:
# - paced: every scraper scrapes once per SCRAPE_INTERVAL_MS (1000; Prometheus' default is
#   15 s), with a random phase, the way real scrapers load a target;
# - flat out: every scraper sends its next request as soon as the last answer arrived
#   (wrk's closed loop), which measures throughput: its latency is concurrency divided
#   by the requests per second the machine can serve (Little's law).
INTERVAL_MS=${SCRAPE_INTERVAL_MS:-1000}
headers=()
if [ -n "${GZIP:-}" ]; then headers=(-H "Accept-Encoding: gzip"); fi
cat >"$dir/paced.lua" <<LUA
local first = true
function delay()
  if first then first = false; return math.random(0, $INTERVAL_MS) end
  return $INTERVAL_MS
end
LUA
echo "==> paced: $SCRAPERS scrapers, each once per ${INTERVAL_MS} ms, ${DURATION}s, $IDLE idle connections held"
wrk -t 2 -c "$SCRAPERS" -d "${DURATION}s" --timeout 10s --latency "${headers[@]}" -s "$dir/paced.lua" \
  "http://127.0.0.1:$port/metrics" | tee "$dir/paced.txt"
echo "==> flat out: $SCRAPERS scrapers, ${DURATION}s, $IDLE idle connections held"
wrk -t 2 -c "$SCRAPERS" -d "${DURATION}s" --timeout 10s --latency "${headers[@]}" "http://127.0.0.1:$port/metrics" | tee "$dir/wrk.txt"
echo "==> daemon RSS: $(ps -o rss= -p "$(pgrep -f "hcclwatch run --config.file $dir/c.toml" | head -1)") KiB"
