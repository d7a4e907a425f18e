//! A daemon's hard-fault push (`/v1/push`): the fast path beside Alertmanager.
//!
//! A daemon that reads a hard fault on its own chips posts the verdict here at once, over
//! the same authenticated (and, with `web_config_file`, TLS) listener as the webhook. The
//! body is checked whole (a bad field rejects the request with a typed error, nothing is
//! acted on), then turned into the alert the shipped rules already act on for a hard fault
//! (`HcclwatchQuarantineRecommended`, `reason="hard_fault"`), so it walks exactly the
//! Alertmanager path's rule matching, guards, audit-before-act and idempotence. The
//! Alertmanager notification that follows for the same verdict finds the node already
//! quarantined; each release needs the fingerprint that quarantined the node.

use std::collections::BTreeMap;

use super::payload::{Alert, Notification, Source, Status, valid_node_name};
use crate::export::push::wire::{MAX_SUMMARY, Push, PushStatus, VERSION};

/// The alert a push becomes: the one Prometheus raises for the same verdict.
pub const ALERTNAME: &str = "HcclwatchQuarantineRecommended";

/// The reason of a pushed node verdict (and the generic one of an NPU's).
pub const REASON: &str = "hard_fault";

/// The alert an NPU's own pushed verdict becomes (`health.hard_npu_scoped`): the one
/// Prometheus raises for it, which the shipped `isolate_npu` rule acts on.
pub const NPU_ALERTNAME: &str = "HcclwatchNpuIsolationRecommended";

/// Why a push was rejected (nothing in it is acted on).
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Not the JSON body of a push (or an unknown field).
    #[error("not a hard-fault push: {0}")]
    NotPush(serde_json::Error),
    /// A version other than [`VERSION`].
    #[error("push version {0:?}; only version \"1\" is understood")]
    Version(String),
    /// The node is not a node name.
    #[error("node {0:?} is not a Kubernetes node name (RFC 1123 subdomain)")]
    BadNode(String),
    /// A reason that is not pushed.
    #[error(
        "reason {0:?}: a node's verdict is \"hard_fault\", an NPU's \"hard_fault\", \"health_critical\" or \"separate_npu_fault\""
    )]
    Reason(String),
    /// An NPU id out of range.
    #[error("npu {0}: not an NPU physical id (0 to 65535)")]
    BadNpu(u32),
    /// The onset is not a time.
    #[error("onset {0:?} is not an RFC 3339 time")]
    BadOnset(String),
    /// The fingerprint is not a hex id.
    #[error("fingerprint {0:?} is not a hex id of 1 to 64 digits")]
    BadFingerprint(String),
    /// The summary is too long.
    #[error("summary of {0} bytes; at most {MAX_SUMMARY}")]
    LongSummary(usize),
}

/// Parses and checks a push body, and returns it as the one-alert notification the engine
/// handles, labelled with `node_label`.
pub fn parse(body: &[u8], node_label: &str) -> Result<Notification, PushError> {
    let p: Push = serde_json::from_slice(body).map_err(PushError::NotPush)?;
    if p.version != VERSION {
        return Err(PushError::Version(p.version));
    }
    if !valid_node_name(&p.node) {
        return Err(PushError::BadNode(p.node));
    }
    let reason_ok = p.reason == REASON
        || (p.npu.is_some() && crate::export::push::wire::NPU_REASONS.contains(&p.reason.as_str()));
    if !reason_ok {
        return Err(PushError::Reason(p.reason));
    }
    if let Some(n) = p.npu.filter(|n| *n > 65_535) {
        return Err(PushError::BadNpu(n));
    }
    if p.onset.parse::<jiff::Timestamp>().is_err() {
        return Err(PushError::BadOnset(p.onset));
    }
    if p.fingerprint.is_empty()
        || p.fingerprint.len() > 64
        || !p.fingerprint.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Err(PushError::BadFingerprint(p.fingerprint));
    }
    if p.summary.len() > MAX_SUMMARY {
        return Err(PushError::LongSummary(p.summary.len()));
    }
    let status = match p.status {
        PushStatus::Firing => Status::Firing,
        PushStatus::Resolved => Status::Resolved,
    };
    let alertname = if p.npu.is_some() {
        NPU_ALERTNAME
    } else {
        ALERTNAME
    };
    let mut labels = BTreeMap::from([
        ("alertname".to_string(), alertname.to_string()),
        (node_label.to_string(), p.node),
        ("reason".to_string(), p.reason),
        ("severity".to_string(), "critical".to_string()),
    ]);
    if let Some(n) = p.npu {
        labels.insert("npu".to_string(), n.to_string());
    }
    let annotations = BTreeMap::from([("summary".to_string(), p.summary)]);
    Ok(Notification {
        version: "4".into(),
        group_key: format!("push:{}", p.fingerprint),
        status,
        receiver: "push".into(),
        alerts: vec![Alert {
            status,
            labels,
            annotations,
            starts_at: p.onset,
            fingerprint: p.fingerprint,
            source: Source::Push,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> serde_json::Value {
        json!({"version": "1", "node": "npu-node-6", "status": "firing", "reason": "hard_fault",
               "onset": "2026-12-02T10:00:00.5Z", "fingerprint": "0a1b2c3d4e5f6071",
               "summary": "NPU hard fault: a fault code at level SeparateNPU is active"})
    }

    #[test]
    fn a_push_becomes_the_alert_the_shipped_rule_acts_on() {
        let n = parse(good().to_string().as_bytes(), "node").unwrap();
        let a = &n.alerts[0];
        assert_eq!(a.name(), "HcclwatchQuarantineRecommended");
        assert_eq!(a.labels["node"], "npu-node-6");
        assert_eq!(a.labels["reason"], "hard_fault");
        assert_eq!(a.status, Status::Firing);
        assert_eq!(a.source, Source::Push);
        assert_eq!(a.fingerprint, "0a1b2c3d4e5f6071");
        // 10:00:00.5 on 2 December 2026.
        assert_eq!(
            a.started().map(|t| t.as_millisecond()),
            Some(1_796_205_600_500)
        );
        let mut r = good();
        r["status"] = json!("resolved");
        let n = parse(r.to_string().as_bytes(), "kubernetes_node").unwrap();
        assert_eq!(n.alerts[0].status, Status::Resolved);
        assert_eq!(n.alerts[0].labels["kubernetes_node"], "npu-node-6");
    }

    /// Pins: an NPU's own verdict becomes the NPU isolation alert with its `npu` label,
    /// with its own reasons; a node verdict may not carry them.
    #[test]
    fn an_npu_push_becomes_the_npu_isolation_alert() {
        let mut b = good();
        b["npu"] = json!(3);
        b["reason"] = json!("separate_npu_fault");
        let n = parse(b.to_string().as_bytes(), "node").unwrap();
        let a = &n.alerts[0];
        assert_eq!(a.name(), "HcclwatchNpuIsolationRecommended");
        assert_eq!(a.labels["npu"], "3");
        assert_eq!(a.labels["reason"], "separate_npu_fault");
        let mut b = good();
        b["reason"] = json!("separate_npu_fault");
        let e = parse(b.to_string().as_bytes(), "node")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reason \"separate_npu_fault\""), "{e}");
        let mut b = good();
        b["npu"] = json!(70_000);
        let e = parse(b.to_string().as_bytes(), "node")
            .unwrap_err()
            .to_string();
        assert!(e.contains("npu 70000"), "{e}");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let cases: [(&str, serde_json::Value, &str); 8] = [
            ("version", json!("2"), "push version \"2\""),
            ("node", json!("Node_6"), "not a Kubernetes node name"),
            (
                "reason",
                json!("straggler"),
                "a node's verdict is \"hard_fault\"",
            ),
            (
                "onset",
                json!("soon"),
                "onset \"soon\" is not an RFC 3339 time",
            ),
            ("fingerprint", json!("xyz"), "not a hex id"),
            ("fingerprint", json!("a".repeat(65)), "not a hex id"),
            ("status", json!("pending"), "not a hard-fault push"),
            (
                "summary",
                json!("x".repeat(MAX_SUMMARY + 1)),
                "summary of 1025 bytes",
            ),
        ];
        for (key, value, want) in cases {
            let mut b = good();
            b[key] = value;
            let e = parse(b.to_string().as_bytes(), "node")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{key}: {e}");
        }
        let mut b = good();
        b["extra"] = json!(1);
        let e = parse(b.to_string().as_bytes(), "node")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = parse(b"{", "node").unwrap_err().to_string();
        assert!(e.contains("not a hard-fault push"), "{e}");
    }
}
