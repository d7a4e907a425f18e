//! Operator overrides: a person's "hold this node (or this NPU) healthy, or quarantined,
//! until this time", written as annotations on the Kubernetes node.
//!
//! The annotations are the one place an override lives, so that the daemon on the node,
//! the remediation receiver and `hcclwatch override` all read the same thing and nothing
//! has to be kept in step. This module only names the keys and parses them: it does no I/O,
//! so the daemon's source (which reads its node from the API), the receiver and the
//! command line can all share it.
//!
//! - node: `hcclwatch.io/override` = `healthy` | `quarantined`, with
//!   `hcclwatch.io/override-until` (RFC 3339, required: an override without an end is
//!   refused, so none is forgotten), and optional `hcclwatch.io/override-reason` and
//!   `hcclwatch.io/override-by`;
//! - one NPU: `hcclwatch.io/override.npu.<index>` = a JSON object
//!   `{"state": "healthy", "until": "<RFC 3339>", "reason": "...", "by": "..."}`.
//!
//! An override is active while now is before its `until`; past it, it is over by itself,
//! without anyone removing the annotations (they are then only a record).

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The node-level state: `healthy` or `quarantined`.
pub const OVERRIDE: &str = "hcclwatch.io/override";
/// When the node-level override ends (RFC 3339).
pub const OVERRIDE_UNTIL: &str = "hcclwatch.io/override-until";
/// Why (free text).
pub const OVERRIDE_REASON: &str = "hcclwatch.io/override-reason";
/// Who set it.
pub const OVERRIDE_BY: &str = "hcclwatch.io/override-by";
/// The prefix of one NPU's override key; the NPU's index follows.
pub const NPU_PREFIX: &str = "hcclwatch.io/override.npu.";

/// The state an override holds an entity in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Held {
    /// Healthy whatever the verdicts say: nothing recommends or applies a quarantine.
    Healthy,
    /// Quarantined whatever the verdicts say, and never released before the end.
    Quarantined,
}

impl Held {
    /// `healthy` or `quarantined`.
    pub fn as_str(self) -> &'static str {
        match self {
            Held::Healthy => "healthy",
            Held::Quarantined => "quarantined",
        }
    }

    /// Parses `healthy` or `quarantined`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "healthy" => Some(Held::Healthy),
            "quarantined" => Some(Held::Quarantined),
            _ => None,
        }
    }
}

/// One override.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The state held.
    pub state: Held,
    /// When it ends.
    pub until: SystemTime,
    /// Why (may be empty).
    pub reason: String,
    /// Who set it (may be empty).
    pub by: String,
}

impl Override {
    /// Whether it holds at `now`.
    pub fn active(&self, now: SystemTime) -> bool {
        now < self.until
    }

    /// Its `until` as RFC 3339.
    pub fn until_text(&self) -> String {
        time_text(self.until)
    }
}

/// The per-NPU annotation's value.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NpuValue {
    /// `healthy` or `quarantined`.
    pub state: Held,
    /// RFC 3339.
    pub until: String,
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Who.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

/// Every override a node's annotations carry (active or not: [`Override::active`] says).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// The node's own.
    pub node: Option<Override>,
    /// Each NPU's, by index.
    pub npus: BTreeMap<u32, Override>,
}

impl Overrides {
    /// The node's override if it holds at `now`.
    pub fn node_at(&self, now: SystemTime) -> Option<&Override> {
        self.node.as_ref().filter(|o| o.active(now))
    }

    /// NPU `index`'s override if it holds at `now`.
    pub fn npu_at(&self, index: u32, now: SystemTime) -> Option<&Override> {
        self.npus.get(&index).filter(|o| o.active(now))
    }
}

impl Overrides {
    /// Only the overrides that hold at `now`.
    pub fn active_at(&self, now: SystemTime) -> Overrides {
        Overrides {
            node: self.node_at(now).cloned(),
            npus: self
                .npus
                .iter()
                .filter(|(_, o)| o.active(now))
                .map(|(i, o)| (*i, o.clone()))
                .collect(),
        }
    }

    /// The earliest end after `now` among them: when what holds changes next.
    pub fn next_end(&self, now: SystemTime) -> Option<SystemTime> {
        self.node
            .iter()
            .chain(self.npus.values())
            .map(|o| o.until)
            .filter(|t| *t > now)
            .min()
    }

    /// The quarantine reason to export for this node after its overrides, from the
    /// engine's (`engine`) and the NPUs whose ports the device plane recommends for
    /// quarantine (`bad_npus`): a node override decides alone (`healthy`: none,
    /// `quarantined`: `operator_override`); else an NPU held quarantined gives
    /// `operator_override`; else an `npu_port` reason is withheld when every such NPU is
    /// held healthy; else the engine's.
    pub fn apply(&self, engine: Option<&'static str>, bad_npus: &[u32]) -> Option<&'static str> {
        match self.node.as_ref().map(|o| o.state) {
            Some(Held::Healthy) => return None,
            Some(Held::Quarantined) => return Some(OPERATOR),
            None => {}
        }
        if self.npus.values().any(|o| o.state == Held::Quarantined) {
            return Some(OPERATOR);
        }
        let held_healthy = |n: &u32| self.npus.get(n).is_some_and(|o| o.state == Held::Healthy);
        if engine == Some("npu_port") && !bad_npus.is_empty() && bad_npus.iter().all(held_healthy) {
            return None;
        }
        engine
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.node.is_none() && self.npus.is_empty()
    }
}

/// This node's operator overrides as the daemon's source last read them: only those that
/// held when it published (it publishes again at each end, so an override that ends
/// disappears without a restart and without anything computed at scrape time).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverridesSnapshot {
    /// This node's name (the `node` label of what is exported about it).
    pub node: String,
    /// The overrides that hold.
    pub active: Overrides,
    /// Annotations that were refused, with why.
    pub refused: Vec<String>,
    /// Why the last read failed (then `active` is empty: a failed read gives nothing).
    pub error: Option<String>,
}

/// The quarantine reason of a recommendation an operator override forces.
pub const OPERATOR: &str = "operator_override";

/// Why an override annotation was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverrideError {
    /// The state is neither `healthy` nor `quarantined`.
    #[error("{key}: {value:?} is not healthy or quarantined")]
    State {
        /// The annotation.
        key: String,
        /// Its value.
        value: String,
    },
    /// No end time, or not RFC 3339.
    #[error("{key}: the end time {value:?} is missing or not RFC 3339; an override needs an end")]
    Until {
        /// The annotation.
        key: String,
        /// Its value.
        value: String,
    },
    /// A per-NPU key whose index or value does not parse.
    #[error("{key}: {why}")]
    Npu {
        /// The annotation.
        key: String,
        /// Why.
        why: String,
    },
}

/// Parses an RFC 3339 time.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    s.trim()
        .parse::<jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

/// A time as RFC 3339 (empty if it cannot be written).
pub fn time_text(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The overrides in a node's annotations, and the annotations that were refused (each is
/// ignored, never guessed at).
pub fn parse(annotations: &BTreeMap<String, String>) -> (Overrides, Vec<OverrideError>) {
    let mut out = Overrides::default();
    let mut errors = Vec::new();
    if let Some(v) = annotations.get(OVERRIDE) {
        match node_override(annotations, v) {
            Ok(o) => out.node = Some(o),
            Err(e) => errors.push(e),
        }
    }
    for (key, value) in annotations.range(NPU_PREFIX.to_string()..) {
        let Some(index) = key.strip_prefix(NPU_PREFIX) else {
            break;
        };
        match npu_override(key, index, value) {
            Ok((i, o)) => {
                out.npus.insert(i, o);
            }
            Err(e) => errors.push(e),
        }
    }
    (out, errors)
}

fn node_override(a: &BTreeMap<String, String>, v: &str) -> Result<Override, OverrideError> {
    let state = Held::parse(v).ok_or_else(|| OverrideError::State {
        key: OVERRIDE.into(),
        value: v.into(),
    })?;
    let until_text = a.get(OVERRIDE_UNTIL).cloned().unwrap_or_default();
    let until = parse_time(&until_text).ok_or(OverrideError::Until {
        key: OVERRIDE_UNTIL.into(),
        value: until_text,
    })?;
    Ok(Override {
        state,
        until,
        reason: a.get(OVERRIDE_REASON).cloned().unwrap_or_default(),
        by: a.get(OVERRIDE_BY).cloned().unwrap_or_default(),
    })
}

fn npu_override(key: &str, index: &str, value: &str) -> Result<(u32, Override), OverrideError> {
    let npu = |why: String| OverrideError::Npu {
        key: key.into(),
        why,
    };
    let i = index
        .parse::<u32>()
        .map_err(|_| npu(format!("{index:?} is not an NPU index")))?;
    let v: NpuValue = serde_json::from_str(value).map_err(|e| {
        npu(format!(
            "{e}; expected {{\"state\": \"healthy\", \"until\": \"<RFC 3339>\"}}"
        ))
    })?;
    let until = parse_time(&v.until).ok_or(OverrideError::Until {
        key: key.into(),
        value: v.until.clone(),
    })?;
    Ok((
        i,
        Override {
            state: v.state,
            until,
            reason: v.reason,
            by: v.by,
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_and_npu_overrides_parse_and_expire() {
        let a = map(&[
            (OVERRIDE, "healthy"),
            (OVERRIDE_UNTIL, "2030-01-01T00:00:00Z"),
            (OVERRIDE_BY, "alice"),
            (
                "hcclwatch.io/override.npu.3",
                r#"{"state":"quarantined","until":"2030-01-01T01:00:00Z"}"#,
            ),
            ("hcclwatch.io/override.npu.x", r#"{"state":"healthy"}"#),
            ("hcclwatch.io/quarantined-by", "hcclwatch"),
        ]);
        let (o, errors) = parse(&a);
        let until = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let node = o.node.clone().unwrap();
        assert_eq!(node.state, Held::Healthy);
        assert_eq!(node.until, until);
        assert_eq!(node.by, "alice");
        assert!(o.node_at(until - Duration::from_secs(1)).is_some());
        assert!(o.node_at(until).is_none(), "over at its end");
        let npu = o.npus.get(&3).unwrap();
        assert_eq!(npu.state, Held::Quarantined);
        assert_eq!(npu.until, until + Duration::from_secs(3600));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(matches!(&errors[0], OverrideError::Npu { key, .. } if key.ends_with(".x")));
    }

    fn held(state: Held) -> Override {
        Override {
            state,
            until: SystemTime::UNIX_EPOCH,
            reason: String::new(),
            by: String::new(),
        }
    }

    #[test]
    fn the_exported_reason_follows_the_node_then_the_npus_then_the_engine() {
        let mut o = Overrides::default();
        assert_eq!(o.apply(Some("hard_fault"), &[]), Some("hard_fault"));
        o.npus.insert(2, held(Held::Healthy));
        // Only NPU 2's port is bad, and it is held healthy: withheld.
        assert_eq!(o.apply(Some("npu_port"), &[2]), None);
        // NPU 5's is bad too, and not held: kept.
        assert_eq!(o.apply(Some("npu_port"), &[2, 5]), Some("npu_port"));
        // A healthy NPU says nothing about a hard fault.
        assert_eq!(o.apply(Some("hard_fault"), &[]), Some("hard_fault"));
        o.npus.insert(3, held(Held::Quarantined));
        assert_eq!(o.apply(None, &[]), Some(OPERATOR));
        o.node = Some(held(Held::Healthy));
        assert_eq!(o.apply(Some("hard_fault"), &[]), None, "the node's decides");
        o.node = Some(held(Held::Quarantined));
        assert_eq!(o.apply(None, &[]), Some(OPERATOR));
    }

    #[test]
    fn an_override_without_an_end_or_state_is_refused() {
        let (o, e) = parse(&map(&[(OVERRIDE, "healthy")]));
        assert!(o.node.is_none());
        assert!(matches!(e[0], OverrideError::Until { .. }));
        let (o, e) = parse(&map(&[
            (OVERRIDE, "fine"),
            (OVERRIDE_UNTIL, "2030-01-01T00:00:00Z"),
        ]));
        assert!(o.node.is_none());
        assert!(matches!(e[0], OverrideError::State { .. }));
    }
}
