//! A node's lifecycle beyond one quarantine: the incidents it had (recurrence and
//! escalation) and the operator overrides that hold it, as annotations on the node.
//!
//! Like the ownership annotations (`kube`), everything is written on the node, so a
//! restarted receiver, the `hcclwatch override` command and a person with `kubectl` all see
//! the same state:
//!
//! - [`INCIDENTS`]: the quarantines hcclwatch applied within `escalation.window`, as a JSON
//!   list of `{"at": RFC 3339, "alert": "name: reason"}`, oldest first, at most
//!   [`MAX_KEPT`] (so the annotation stays small however often a node fails);
//! - [`ESCALATED_AT`] and [`ESCALATED_REASON`]: set when a node reaches
//!   `escalation.max_incidents` quarantines within the window. The quarantine is then no
//!   longer tied to its alert (its fingerprint becomes [`ESCALATED`]), so the alert's
//!   resolution does not release it; only a person does, by removing these annotations
//!   (`hcclwatch override release`), after which the receiver undoes its quarantine at the
//!   next reconcile;
//! - the operator overrides (`crate::snapshot::overrides`): a quarantine the receiver
//!   applied because of a `quarantined` override carries the fingerprint [`OVERRIDE`], and
//!   is undone once the override is over or cleared.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// The recent quarantines (JSON list).
pub const INCIDENTS: &str = "hcclwatch.io/incidents";
/// When the node was escalated (RFC 3339).
pub const ESCALATED_AT: &str = "hcclwatch.io/escalated-at";
/// Why: the incidents, with their times and alerts.
pub const ESCALATED_REASON: &str = "hcclwatch.io/escalated-reason";
/// The ownership fingerprint of an escalated quarantine.
pub const ESCALATED: &str = "escalated";
/// The ownership fingerprint of a quarantine applied for a `quarantined` override.
pub const OVERRIDE: &str = "override";
/// The incidents a node keeps at most (and so the largest `escalation.max_incidents`).
pub const MAX_KEPT: usize = 16;

/// One quarantine hcclwatch applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// When (RFC 3339).
    pub at: String,
    /// The alert and its reason.
    pub alert: String,
}

impl Incident {
    fn time(&self) -> Option<SystemTime> {
        crate::snapshot::overrides::parse_time(&self.at)
    }
}

/// The incidents recorded on a node (an unreadable value is none: it is rewritten at the
/// next quarantine).
pub fn incidents(annotations: &BTreeMap<String, String>) -> Vec<Incident> {
    annotations
        .get(INCIDENTS)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// The incidents within `window` before `now`.
pub fn recent(incidents: &[Incident], now: SystemTime, window: Duration) -> Vec<Incident> {
    incidents
        .iter()
        .filter(|i| {
            i.time()
                .is_some_and(|t| now.duration_since(t).unwrap_or_default() <= window)
        })
        .cloned()
        .collect()
}

/// The [`INCIDENTS`] value after one more quarantine at `now`: the older ones outside
/// `window` dropped, at most [`MAX_KEPT`].
pub fn with_incident(
    annotations: &BTreeMap<String, String>,
    now: SystemTime,
    alert: &str,
    window: Duration,
) -> String {
    let mut list = recent(&incidents(annotations), now, window);
    list.push(Incident {
        at: crate::snapshot::overrides::time_text(now),
        alert: alert.to_string(),
    });
    let skip = list.len().saturating_sub(MAX_KEPT);
    serde_json::to_string(&list[skip..]).unwrap_or_default()
}

/// The escalation's reason: how many, within what, and each incident's time and alert.
pub fn escalation_reason(incidents: &[Incident], window: Duration) -> String {
    let list: Vec<String> = incidents
        .iter()
        .map(|i| format!("{} {}", i.at, i.alert))
        .collect();
    format!(
        "{} quarantines within {}: {}",
        incidents.len(),
        crate::config::duration::format(window),
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incidents_slide_out_of_the_window_and_stay_bounded() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let hour = Duration::from_secs(3600);
        let mut a = BTreeMap::new();
        for i in 0..20 {
            let v = with_incident(&a, t0 + hour * i, &format!("A{i}"), hour * 100);
            a.insert(INCIDENTS.to_string(), v);
        }
        let all = incidents(&a);
        assert_eq!(all.len(), MAX_KEPT);
        assert_eq!(all.last().unwrap().alert, "A19");
        // At 21 h, the last 3 hours hold A18 (at 18 h) and A19 (at 19 h); A17 is 4 h old.
        let r = recent(&all, t0 + hour * 21, hour * 3);
        let names: Vec<&str> = r.iter().map(|i| i.alert.as_str()).collect();
        assert_eq!(names, ["A18", "A19"]);
        let why = escalation_reason(&r, hour * 3);
        assert!(why.starts_with("2 quarantines within 3h: "), "{why}");
        assert!(why.contains("A18; "), "{why}");
    }
}
