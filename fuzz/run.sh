#!/usr/bin/env bash
# Runs the cargo-fuzz targets (docs/fuzzing.md): builds them once, then runs each for
# FUZZ_SECONDS from the committed seeds (fuzz/seeds/<target>) plus whatever earlier runs
# found (fuzz/corpus/<target>, not committed), FUZZ_JOBS targets at a time. A crash (panic,
# failed assertion, sanitizer report), a leak report, an input slower than 10 s or one that
# needs more than 2 GiB fails the run; the reproducer's path and the command that replays
# it are printed, and small reproducers also as base64, so a CI log is enough to replay one.
#
#   fuzz/run.sh                      # every target, FUZZ_SECONDS (60) each
#   FUZZ_SECONDS=600 fuzz/run.sh probe_plan health_restore
#   FUZZ_NO_BUILD=1 fuzz/run.sh      # without rebuilding first
#
# cargo-fuzz needs a nightly compiler for its sanitizer flags. The machine's nightly is
# used when there is one; otherwise the stable toolchain (which ships the same sanitizer
# runtimes) with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")"

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-2}
export CARGO_INCREMENTAL=0

if rustup run nightly rustc -V >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
else
  echo "==> no nightly toolchain: cargo fuzz on stable with RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <("${fuzz[@]}" list)
fi

start=$(date +%s)
# FUZZ_NO_BUILD=1 runs the binaries already built (replaying after a long campaign).
[ "${FUZZ_NO_BUILD:-0}" = 1 ] || "${fuzz[@]}" build
bin=target/$(rustc -vV | sed -n 's/^host: //p')/release
echo "==> fuzz targets built in $(( $(date +%s) - start )) s"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# One target: run it, and on failure say what failed and where its reproducer is.
run_one() {
  local t=$1
  local corpus="corpus/$t" artifacts="artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  # The binary itself, not `cargo fuzz run`: that would ask cargo again for every target.
  if "$bin/$t" "$corpus" "seeds/$t" \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 >"$logs/$t.log" 2>&1; then
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$t.log" | grep -o '[0-9]*$' || echo '?')
    echo "ok    $t: $runs inputs in ${SECONDS_PER_TARGET}s, corpus $(find "$corpus" -type f | wc -l) files"
    return 0
  fi
  echo "FAIL  $t"
  # libFuzzer's report: the sanitizer or panic message and the stack, then the artifact.
  local report='^(==[0-9]+== ?ERROR|thread .* panicked|ALARM)'
  if grep -qE "$report" "$logs/$t.log"; then
    grep -E -m1 -A40 "$report" "$logs/$t.log" | head -60
  else
    tail -60 "$logs/$t.log"
  fi
  local a
  for a in $(grep -o "Test unit written to [^ ]*" "$logs/$t.log" | awk '{print $5}'); do
    echo "reproducer: fuzz/$a"
    echo "replay:     cd fuzz && $FUZZ_CMD run $t $a"
    if [ "$(stat -c %s "$a")" -le 4096 ]; then
      echo "base64:     $(base64 -w0 "$a")"
    fi
  done
  return 1
}
export -f run_one
export SECONDS_PER_TARGET logs bin
export FUZZ_CMD="${fuzz[*]}"

failed=0
# xargs runs JOBS targets at once and exits non-zero if any failed.
printf '%s\n' "${targets[@]}" |
  xargs -P "$JOBS" -I{} bash -c 'run_one "$1"' _ {} || failed=1
echo "==> fuzzing took $(( $(date +%s) - start )) s in all"
if [ "$failed" -ne 0 ]; then
  echo "fuzzing found a problem: see FAIL above" >&2
  exit 1
fi
