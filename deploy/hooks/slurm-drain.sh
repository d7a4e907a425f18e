#!/bin/sh
# hcclwatch remediate exec hook for Slurm: drain the node on a firing alert, resume it on
# the resolved one, but only if hcclwatch drained it (the reason starts with "hcclwatch:"),
# so a drain set by an administrator is never undone.
#
# Rule in remediate.toml:
#   [[rules]]
#   alertname = "HcclwatchQuarantineRecommended"
#   actions = ["exec"]
#   exec = { argv = ["/usr/local/lib/hcclwatch/slurm-drain.sh"], timeout = "30s", on_resolved = true }
#
# Input (from hcclwatch): HCCLWATCH_NODE, HCCLWATCH_STATUS (firing|resolved),
# HCCLWATCH_ALERTNAME, HCCLWATCH_REASON, HCCLWATCH_FINGERPRINT; the alert as JSON on stdin
# (unused here). The Slurm node name is the alert's node label; set SLURM_NODE_SUFFIX or
# SLURM_NODE_PREFIX if your Slurm names differ by a fixed prefix or suffix.
set -eu

node="${SLURM_NODE_PREFIX:-}${HCCLWATCH_NODE:?HCCLWATCH_NODE is not set}${SLURM_NODE_SUFFIX:-}"
status="${HCCLWATCH_STATUS:?HCCLWATCH_STATUS is not set}"
scontrol="${SCONTROL:-scontrol}"

case "$node" in
  *[!A-Za-z0-9._-]*) echo "refusing node name '$node'" >&2; exit 2 ;;
esac

case "$status" in
  firing)
    reason="hcclwatch: ${HCCLWATCH_ALERTNAME:-alert} ${HCCLWATCH_REASON:-} (${HCCLWATCH_FINGERPRINT:-})"
    "$scontrol" update nodename="$node" state=drain reason="$reason"
    echo "drained $node: $reason"
    ;;
  resolved)
    current=$("$scontrol" show node "$node" | sed -n 's/.*Reason=\(.*\)$/\1/p' | head -n 1)
    case "$current" in
      hcclwatch:*)
        "$scontrol" update nodename="$node" state=resume
        echo "resumed $node"
        ;;
      *)
        echo "left $node alone: its drain reason '$current' is not hcclwatch's"
        ;;
    esac
    ;;
  *)
    echo "unknown HCCLWATCH_STATUS '$status'" >&2
    exit 2
    ;;
esac
