//! The body of a hard-fault push, as the daemon sends it and the receiver reads it.
//!
//! It lives with the sender because the receiver (an action) may read the exporters' types
//! and not the other way round; the receiver validates every field before acting
//! (`remediate::push`).

use serde::{Deserialize, Serialize};

/// The only version there is.
pub const VERSION: &str = "1";

/// The path the receiver serves pushes on.
pub const PATH: &str = "/v1/push";

/// The largest body the receiver reads: a push is a few hundred bytes.
pub const MAX_BODY: usize = 16 << 10;

/// Longest `summary`, bytes.
pub const MAX_SUMMARY: usize = 1024;

/// Firing (the hard fault is there) or resolved (it is over, hold-down included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushStatus {
    /// The node has a hard fault.
    Firing,
    /// It no longer has one.
    Resolved,
}

impl PushStatus {
    /// `firing` or `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            PushStatus::Firing => "firing",
            PushStatus::Resolved => "resolved",
        }
    }
}

/// One verdict about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Push {
    /// [`VERSION`].
    pub version: String,
    /// The Kubernetes node the verdict is about (the daemon's own).
    pub node: String,
    /// Firing or resolved.
    pub status: PushStatus,
    /// The quarantine reason, as `hcclwatch_quarantine_recommended` labels it
    /// (`hard_fault`: the only one pushed).
    pub reason: String,
    /// When the daemon first read the fault (RFC 3339): the start of the receiver's
    /// latency measurement.
    pub onset: String,
    /// The verdict's identity: the same for its firing and its resolution, and for every
    /// retry of either (the receiver releases a node only for the fingerprint that
    /// quarantined it).
    pub fingerprint: String,
    /// What the daemon saw, in words (for the node's condition and event).
    #[serde(default)]
    pub summary: String,
    /// The NPU's physical id when the verdict is that NPU's own (`health.hard_npu_scoped`):
    /// the receiver then isolates the NPU (`HcclwatchNpuIsolationRecommended`), and the
    /// reason is one of [`NPU_REASONS`]. Absent for a verdict about the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npu: Option<u32>,
}

/// The reasons an NPU's own hard fault is pushed with (the `reason` label of
/// `hcclwatch_npu_isolation_recommended` for the faults the push judges).
pub const NPU_REASONS: [&str; 2] = ["health_critical", "separate_npu_fault"];
