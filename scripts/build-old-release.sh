#!/usr/bin/env bash
# Builds the hcclwatch release before wire-version negotiation (commit f5f3ca6, the last
# that speaks wire version 2 only), so that tests/upgrades.rs runs the old code itself next
# to the new: a mixed-release group and a rolling restart from the old release to this one.
#
# The binary is cached in target/old-release/<commit>/hcclwatch; when it exists nothing is
# built. Otherwise the commit's tree comes out of git (`git archive`, so the checkout itself
# is untouched) and is built in debug into a target directory seeded with a copy of this
# checkout's target/debug (without the incremental caches): the Cargo.lock is the same, so
# only the workspace crates compile. The build tree is removed afterwards; only the binary
# is kept. Prints the binary's path.
#
# Usage: scripts/build-old-release.sh [commit]
set -euo pipefail
cd "$(dirname "$0")/.."

commit=$(git rev-parse --verify "${1:-f5f3ca6adee8384b3a626c6a9aed6d4bb7cf1399}^{commit}")
out="$PWD/target/old-release/$commit"
bin="$out/hcclwatch"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

src="$out/src"
tgt="$out/target"
rm -rf "$src" "$tgt"
mkdir -p "$src" "$tgt/debug"
# -m: the files get the time of extraction, not of the commit, so Cargo sees the
# workspace crates as changed since the seeded build and compiles them from this tree.
git archive "$commit" | tar -x -m -C "$src"
if [ -d target/debug/deps ]; then
  for d in deps build .fingerprint; do
    [ -d "target/debug/$d" ] && cp -a "target/debug/$d" "$tgt/debug/"
  done
fi
# The tree has no .git: stop the build script's `git rev-parse` from finding this
# checkout's (it would stamp the old binary with the new commit).
GIT_CEILING_DIRECTORIES="$out" CARGO_INCREMENTAL=0 \
  cargo build --quiet --locked --bin hcclwatch \
  --manifest-path "$src/Cargo.toml" --target-dir "$tgt" >&2
cp "$tgt/debug/hcclwatch" "$bin.tmp"
mv "$bin.tmp" "$bin"
rm -rf "$src" "$tgt"
echo "$bin"
