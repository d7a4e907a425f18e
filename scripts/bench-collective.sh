#!/usr/bin/env bash
# The collective engine against its anchors, in one invocation on this machine:
#   - all-reduce fp32 sum at 2 and 4 ranks, 8 B .. 64 MiB, vs Open MPI over TCP on loopback
#     (shared/anchors/mpi-bench.sh);
#   - busbw vs the loopback ceiling C/n, C = iperf3 --bidir sum (shared/anchors/iperf-loopback.sh);
#   - point-to-point 64 MiB (rank 0 -> rank 1) vs one iperf3 stream;
#   - 8-byte all-reduce latency at 2 and 4 ranks: LAT_ROUNDS (default 5) rounds of
#     LAT_ITERS (default 2000) iterations, the two engines alternating, and the medians.
#     20 iterations of a 5 us operation time 100 us in all, too little to compare, and
#     this host drifts between fast and slow phases, which alternating evens out.
# Prints ratios. Usage: scripts/bench-collective.sh [iters (default 20)]
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20}
LAT_ITERS=${LAT_ITERS:-2000}
LAT_ROUNDS=${LAT_ROUNDS:-5}
ANCHORS=${ANCHORS:-../shared/anchors}
for p in mpirun:openmpi-bin mpicc:libopenmpi-dev iperf3:iperf3; do
  command -v "${p%%:*}" >/dev/null || apt-get install -y -qq "${p##*:}" >/dev/null
done
cargo build --release -q
HW=./target/release/hcclwatch
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT

gbps() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2])/1e9:.3f}')" "$1" "${2:-1}"; }
C=$(BIDIR=1 bash "$ANCHORS/iperf-loopback.sh" 5 | tail -1)
ONE=$(bash "$ANCHORS/iperf-loopback.sh" 5 | tail -1)
echo "loopback: C (iperf3 --bidir sum) = $(gbps "$C") GB/s; one stream = $(gbps "$ONE") GB/s"

for n in 2 4; do
  $HW bench all_reduce --ranks $n -b 8 -e 64M -f 2 -n "$ITERS" -w 3 -c 0 --json > "$OUT/hw$n.json"
  bash "$ANCHORS/mpi-bench.sh" allreduce $n 8 67108864 2 "$ITERS" > "$OUT/mpi$n.txt" 2>/dev/null
  echo
  echo "all_reduce fp32 sum, $n ranks (ceiling C/$n = $(gbps "$C" "$n") GB/s)"
  printf '%12s %10s %10s %10s %10s %9s %9s\n' size hw_us mpi_us hw_busbw mpi_busbw hw/mpi hw/ceil
  python3 - "$OUT/hw$n.json" "$OUT/mpi$n.txt" "$C" "$n" <<'PY'
import json, sys
hw = {r["size"]: r for r in map(json.loads, open(sys.argv[1]))}
mpi = {}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) >= 5 and f[0].isdigit():
        mpi[int(f[0])] = (float(f[2]), float(f[4]))
C, n = float(sys.argv[3]), int(sys.argv[4])
ceil = C / n / 1e9
for size in sorted(hw):
    h = hw[size]
    m = mpi.get(size)
    if m is None:
        continue
    # Same size and bus factor on both sides, so the busbw ratio is the time ratio; as a
    # time ratio it is also defined at 8 B, where busbw rounds to 0.
    ratio_t = m[0] / h["time_us"]
    print(f'{size:12d} {h["time_us"]:10.1f} {m[0]:10.1f} {h["busbw"]:10.3f} {m[1]:10.3f} {ratio_t:9.2f} {h["busbw"]/ceil:9.2f}')
PY
done

echo
$HW bench p2p --ranks 2 -b 64M -e 64M -n "$ITERS" -w 3 -c 0 --json > "$OUT/p2p.json"
python3 - "$OUT/p2p.json" "$ONE" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
one = float(sys.argv[2]) / 1e9
print(f'p2p 64 MiB rank 0 -> 1: {r["algbw"]:.3f} GB/s; iperf3 one stream {one:.3f} GB/s; ratio {r["algbw"]/one:.2f}')
PY

echo
echo "all_reduce fp32 sum 8 B: $LAT_ROUNDS interleaved rounds of $LAT_ITERS iterations, medians"
for n in 2 4; do
  for r in $(seq "$LAT_ROUNDS"); do
    $HW bench all_reduce --ranks $n -b 8 -e 8 -n "$LAT_ITERS" -w 100 -c 0 --json >> "$OUT/lat$n.json"
    bash "$ANCHORS/mpi-bench.sh" allreduce $n 8 8 2 "$LAT_ITERS" >> "$OUT/mlat$n.txt" 2>/dev/null
  done
  python3 - "$OUT/lat$n.json" "$OUT/mlat$n.txt" "$n" <<'PY'
import json, statistics, sys
hw = [json.loads(l)["time_us"] for l in open(sys.argv[1])]
mpi = [float(l.split()[2]) for l in open(sys.argv[2]) if l.split() and l.split()[0] == "8"]
h, m = statistics.median(hw), statistics.median(mpi)
print(f'{sys.argv[3]} ranks: hcclwatch {h:.2f} us [{min(hw):.2f}-{max(hw):.2f}], '
      f'Open MPI {m:.2f} us [{min(mpi):.2f}-{max(mpi):.2f}], MPI time / ours {m/h:.2f}')
PY
done
