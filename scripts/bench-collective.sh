#!/usr/bin/env bash
# The collective engine against its anchors, in one invocation on this machine:
#   - all-reduce fp32 sum at 2 and 4 ranks, 8 B .. 64 MiB, vs Open MPI over TCP on loopback
#     (scripts/anchors/mpi-bench.sh, which builds scripts/anchors/coll_bench.c);
#   - busbw vs the loopback ceiling C/n, C = iperf3 --bidir sum
#     (scripts/anchors/iperf-loopback.sh --bidir);
#   - point-to-point 64 MiB (rank 0 -> rank 1) vs one iperf3 stream;
#   - 8-byte all-reduce latency at 2 and 4 ranks over LAT_ITERS (default 2000) iterations:
#     20 iterations of a 5 us operation time 100 us in all, too little to compare;
#   - with AUTH=1 (the default), the all-reduce sweep and the 8-byte latency again with
#     --authenticate-payloads (every payload tagged), interleaved with the rest, and the
#     cost of the tags per size (AUTH=0 skips it).
# Everything runs ROUNDS times (default 3), hcclwatch and its anchors alternating within
# each round, and every figure is the median over the rounds (the spread of hcclwatch's
# figure is printed too). This host drifts between fast and slow phases (the same binary
# varies by 20-50 % between invocations); one pass would compare phases, not programs.
# Installs what it needs from Debian when missing (openmpi-bin, libopenmpi-dev, iperf3,
# python3), so it runs from a fresh clone.
# Usage: scripts/bench-collective.sh [iters (default 20)]
#   e.g. ROUNDS=1 LAT_ITERS=200 scripts/bench-collective.sh 5 for a quick check.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-20}
ROUNDS=${ROUNDS:-3}
LAT_ITERS=${LAT_ITERS:-2000}
AUTH=${AUTH:-1}
ANCHORS=scripts/anchors

missing=()
for p in mpirun:openmpi-bin mpicc:libopenmpi-dev iperf3:iperf3 python3:python3; do
  command -v "${p%%:*}" >/dev/null || missing+=("${p##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing ${missing[*]} (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cargo build --release -q
HW=./target/release/hcclwatch
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT

for r in $(seq "$ROUNDS"); do
  bash "$ANCHORS/iperf-loopback.sh" --bidir 5 | tail -1 >> "$OUT/c.txt"
  bash "$ANCHORS/iperf-loopback.sh" 5 | tail -1 >> "$OUT/one.txt"
  for n in 2 4; do
    $HW bench all_reduce --ranks $n -b 8 -e 64M -f 2 -n "$ITERS" -w 3 -c 0 --json >> "$OUT/hw$n.json"
    bash "$ANCHORS/mpi-bench.sh" allreduce $n 8 67108864 2 "$ITERS" >> "$OUT/mpi$n.txt" 2>/dev/null
    $HW bench all_reduce --ranks $n -b 8 -e 8 -n "$LAT_ITERS" -w 100 -c 0 --json >> "$OUT/lat$n.json"
    bash "$ANCHORS/mpi-bench.sh" allreduce $n 8 8 2 "$LAT_ITERS" >> "$OUT/mlat$n.txt" 2>/dev/null
    if [ "$AUTH" = 1 ]; then
      $HW bench all_reduce --ranks $n -b 8 -e 64M -f 2 -n "$ITERS" -w 3 -c 0 --json \
        --authenticate-payloads >> "$OUT/hwa$n.json"
      $HW bench all_reduce --ranks $n -b 8 -e 8 -n "$LAT_ITERS" -w 100 -c 0 --json \
        --authenticate-payloads >> "$OUT/lata$n.json"
    fi
  done
  # Unbound, as iperf3 runs (the all-reduce ranks are bound to cores, as mpirun binds its
  # two ranks).
  $HW bench p2p --ranks 2 --bind-to none -b 64M -e 64M -n "$ITERS" -w 3 -c 0 --json >> "$OUT/p2p.json"
done

python3 - "$OUT" "$ROUNDS" "$LAT_ITERS" "$AUTH" <<'PY'
import json, os, statistics, sys
out, rounds, lat_iters, auth = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
med = statistics.median
def lines(name):
    return [l for l in open(os.path.join(out, name)) if l.strip()]
def mpi_rows(name):
    """size -> [(time_us, busbw), ...] over the rounds."""
    rows = {}
    for line in lines(name):
        f = line.split()
        if len(f) >= 5 and f[0].isdigit():
            rows.setdefault(int(f[0]), []).append((float(f[2]), float(f[4])))
    return rows
def hw_rows(name):
    rows = {}
    for line in lines(name):
        j = json.loads(line)
        rows.setdefault(j["size"], []).append(j)
    return rows
C = med(float(l) for l in lines("c.txt"))
ONE = med(float(l) for l in lines("one.txt"))
print(f"{rounds} rounds, medians. loopback: C (iperf3 --bidir sum) = {C/1e9:.3f} GB/s; "
      f"one stream = {ONE/1e9:.3f} GB/s")
for n in (2, 4):
    hw, mpi = hw_rows(f"hw{n}.json"), mpi_rows(f"mpi{n}.txt")
    ceil = C / n / 1e9
    print(f"\nall_reduce fp32 sum, {n} ranks (ceiling C/{n} = {ceil:.3f} GB/s)")
    print("%12s %10s %10s %10s %13s %10s %9s %9s" % ("size", "hw_us", "mpi_us", "hw_busbw",
          "hw_range", "mpi_busbw", "hw/mpi", "hw/ceil"))
    for size in sorted(hw):
        if size not in mpi:
            continue
        h_t = med(j["time_us"] for j in hw[size])
        h_b = [j["busbw"] for j in hw[size]]
        m_t = med(t for t, _ in mpi[size])
        m_b = med(b for _, b in mpi[size])
        # Same size and bus factor on both sides: the busbw ratio is the time ratio, which
        # is also defined at 8 B, where busbw rounds to 0.
        print(f"{size:12d} {h_t:10.1f} {m_t:10.1f} {med(h_b):10.3f} "
              f"{min(h_b):6.2f}-{max(h_b):<6.2f} {m_b:10.3f} {m_t / h_t:9.2f} {med(h_b) / ceil:9.2f}")
p2p = med(json.loads(l)["algbw"] for l in lines("p2p.json"))
print(f"\np2p 64 MiB rank 0 -> 1: {p2p:.3f} GB/s; iperf3 one stream {ONE/1e9:.3f} GB/s; "
      f"ratio {p2p / (ONE / 1e9):.2f}")
print(f"\nall_reduce fp32 sum 8 B over {lat_iters} iterations")
for n in (2, 4):
    h = [json.loads(l)["time_us"] for l in lines(f"lat{n}.json")]
    m = [float(l.split()[2]) for l in lines(f"mlat{n}.txt") if l.split()[0] == "8"]
    print(f"{n} ranks: hcclwatch {med(h):.2f} us [{min(h):.2f}-{max(h):.2f}], Open MPI "
          f"{med(m):.2f} us [{min(m):.2f}-{max(m):.2f}], MPI time / ours {med(m) / med(h):.2f}")
if auth:
    # Authenticated (every payload tagged) against untagged, both hcclwatch, same rounds.
    for n in (2, 4):
        plain, tagged, mpi = hw_rows(f"hw{n}.json"), hw_rows(f"hwa{n}.json"), mpi_rows(f"mpi{n}.txt")
        print(f"\nall_reduce fp32 sum, {n} ranks, --authenticate-payloads against without")
        print("%12s %10s %10s %10s %13s %10s %9s %9s" % ("size", "plain_us", "auth_us", "auth_busbw",
              "auth_range", "mpi_busbw", "auth/plain", "auth/mpi"))
        for size in sorted(tagged):
            if size not in plain:
                continue
            p_t = med(j["time_us"] for j in plain[size])
            a_t = med(j["time_us"] for j in tagged[size])
            a_b = [j["busbw"] for j in tagged[size]]
            m_t = med(t for t, _ in mpi[size]) if size in mpi else float("nan")
            m_b = med(b for _, b in mpi[size]) if size in mpi else float("nan")
            print(f"{size:12d} {p_t:10.1f} {a_t:10.1f} {med(a_b):10.3f} "
                  f"{min(a_b):6.2f}-{max(a_b):<6.2f} {m_b:10.3f} {p_t / a_t:10.2f} {m_t / a_t:9.2f}")
        h = [json.loads(l)["time_us"] for l in lines(f"lata{n}.json")]
        print(f"8 B over {lat_iters} iterations, authenticated: {med(h):.2f} us [{min(h):.2f}-{max(h):.2f}]")
PY
