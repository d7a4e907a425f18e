#!/usr/bin/env bash
# The TCP ceilings of this host's loopback, measured with iperf3: one stream in one
# direction with 1 MiB writes, or with --bidir one stream each way at once, summed. The
# --bidir figure is C, the host's loopback capacity: n ranks on one host share it, so no
# collective's bus bandwidth at n ranks can exceed C/n.
#
# Usage: scripts/anchors/iperf-loopback.sh [--bidir] [SECONDS (default 5)] [PORT (default 5299)]
# Prints the received bytes per second (the sum of both directions with --bidir) on its
# last line. Needs Debian's iperf3 and python3.
set -euo pipefail
bidir=()
if [ "${1:-}" = --bidir ]; then
  bidir=(--bidir)
  shift
fi
secs=${1:-5} port=${2:-5299}
command -v iperf3 >/dev/null || { echo "iperf3 not found: apt-get install iperf3" >&2; exit 1; }

log=$(mktemp)
# One-off server (-1): it exits after serving this client.
iperf3 --server --one-off --port "$port" --forceflush >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
# Wait for the server to say it listens (at most 10 s) instead of guessing a delay.
for _ in $(seq 200); do
  grep -q 'Server listening' "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.05
done
grep -q 'Server listening' "$log" || { echo "iperf3 server did not start" >&2; exit 1; }

iperf3 --client 127.0.0.1 --port "$port" --time "$secs" --length 1M "${bidir[@]}" --json |
  python3 -c '
import json, sys
end = json.load(sys.stdin)["end"]
# sum_received: what the server received; with --bidir, sum_received_bidir_reverse is
# what the client received from the server at the same time.
keys = ("sum_received", "sum_received_bidir_reverse")
print(int(sum(end[k]["bits_per_second"] for k in keys if k in end) / 8))
'
wait "$server" 2>/dev/null || true
