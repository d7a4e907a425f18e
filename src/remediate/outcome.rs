//! The outcome of one remediation decision: what the audit log's `result` field and the
//! `result` label of `hcclwatch_remediation_actions_total` say. Each is written here once,
//! so the engine compares variants, never strings.

use std::fmt;

use serde::{Serialize, Serializer};

/// How one decision about one action on one node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done.
    Applied,
    /// Dry run: live mode would have done it (what [`Outcome::Applied`] becomes in dry run).
    WouldApply,
    /// A change is about to be made; written (and synced) before it.
    Intent,
    /// Nothing to do: the node already has it, or hcclwatch already quarantined it.
    AlreadyDone,
    /// The API call failed.
    Failed,
    /// The node does not exist.
    NotFound,
    /// The API refused the receiver's service account.
    Forbidden,
    /// The killswitch file exists.
    Paused,
    /// The allow/deny selectors exclude the node.
    Refused,
    /// Someone uncordoned the node by hand within `limits.manual_override_cooldown`.
    ManualOverrideCooldown,
    /// hcclwatch released the node within `limits.node_cooldown`.
    Cooldown,
    /// `limits.max_actions_per_minute` is reached.
    RateLimited,
    /// The circuit breaker is open.
    BreakerOpen,
    /// Someone uncordoned the node by hand after hcclwatch cordoned it.
    ManualOverride,
    /// A release for a node hcclwatch did not quarantine.
    NotOurs,
    /// A release for a node quarantined for another alert: kept.
    Kept,
    /// An operator override holds the node healthy: no quarantine.
    OverrideHealthy,
    /// An operator override holds the node quarantined: no release before it ends.
    OverrideQuarantined,
    /// The node is escalated (it came back too often): only a person releases it.
    Escalated,
}

impl Outcome {
    /// The name in the audit log and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::WouldApply => "would_apply",
            Outcome::Intent => "intent",
            Outcome::AlreadyDone => "already_done",
            Outcome::Failed => "failed",
            Outcome::NotFound => "not_found",
            Outcome::Forbidden => "forbidden",
            Outcome::Paused => "paused",
            Outcome::Refused => "refused",
            Outcome::ManualOverrideCooldown => "manual_override_cooldown",
            Outcome::Cooldown => "cooldown",
            Outcome::RateLimited => "rate_limited",
            Outcome::BreakerOpen => "breaker_open",
            Outcome::ManualOverride => "manual_override",
            Outcome::NotOurs => "not_ours",
            Outcome::Kept => "kept",
            Outcome::OverrideHealthy => "override_healthy",
            Outcome::OverrideQuarantined => "override_quarantined",
            Outcome::Escalated => "escalated",
        }
    }

    /// The outcome as recorded: in dry run, [`Outcome::Applied`] is
    /// [`Outcome::WouldApply`].
    pub fn recorded(self, dry_run: bool) -> Self {
        match self {
            Outcome::Applied if dry_run => Outcome::WouldApply,
            other => other,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_applied_becomes_would_apply_in_dry_run() {
        assert_eq!(Outcome::Applied.recorded(true), Outcome::WouldApply);
        assert_eq!(Outcome::Applied.recorded(false), Outcome::Applied);
        assert_eq!(Outcome::Failed.recorded(true), Outcome::Failed);
        // The JSON form is the bare name, as the audit log has always written it.
        assert_eq!(
            serde_json::to_string(&Outcome::ManualOverrideCooldown).unwrap(),
            "\"manual_override_cooldown\""
        );
    }
}
