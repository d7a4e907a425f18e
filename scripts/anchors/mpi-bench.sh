#!/usr/bin/env bash
# The Open MPI anchor: builds coll_bench.c with mpicc (once, again when the source changes)
# and runs it with mpirun over TCP on loopback, with the same operation, rank count and
# sizes as an `hcclwatch bench` run. Prints coll_bench's table:
#   size_bytes count time_us algbw_GBps busbw_GBps
#
# Usage: scripts/anchors/mpi-bench.sh OP RANKS MIN_BYTES MAX_BYTES FACTOR ITERS [WARMUP]
#   OP: allreduce | allgather | reduce_scatter | alltoall | broadcast
#   e.g. scripts/anchors/mpi-bench.sh allreduce 2 8 67108864 4 20
# Needs Debian's openmpi-bin (mpirun) and libopenmpi-dev (mpicc).
#
# Transport: only the TCP and self byte-transfer layers over the loopback interface, on
# the ob1 point-to-point layer (so neither UCX nor shared memory is picked up), and the
# run-time's own traffic on loopback as well. Without the interface pin Open MPI stripes
# over every interface it finds and runs several times slower, which would flatter any
# comparison. Ranks are placed as mpirun places them by default (two ranks bound to one
# core each); --oversubscribe lets 4 ranks share a 2-core machine.
set -euo pipefail
if [ $# -lt 6 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
op=$1 ranks=$2 lo=$3 hi=$4 factor=$5 iters=$6 warmup=${7:-2}

here=$(cd "$(dirname "$0")" && pwd)
for tool in mpicc mpirun; do
  command -v "$tool" >/dev/null || {
    echo "$tool not found: apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 1
  }
done
# Built next to cargo's output, which .gitignore already keeps out of the repository.
out=$here/../../target/anchors
mkdir -p "$out"
bin=$out/coll_bench
if [ ! -x "$bin" ] || [ "$here/coll_bench.c" -nt "$bin" ]; then
  mpicc -O2 -Wall -o "$bin" "$here/coll_bench.c"
fi

exec mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
  --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo \
  "$bin" "$op" "$lo" "$hi" "$factor" "$iters" "$warmup"
