//! The Alertmanager webhook payload (version 4) and its validation.
//!
//! Everything here comes from the network, so nothing is trusted: the body is parsed into
//! typed structs (unknown fields are tolerated, as Alertmanager adds fields over time), then
//! checked as a whole before anything is acted on. One bad alert rejects the request: a
//! payload that is partly nonsense is not a basis for cordoning nodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Largest number of alerts accepted in one notification.
pub const MAX_ALERTS: usize = 1000;

/// The webhook body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Payload version; only "4" exists.
    pub version: String,
    /// Alertmanager's group key.
    #[serde(default)]
    pub group_key: String,
    /// Group status.
    pub status: Status,
    /// The Alertmanager receiver name.
    #[serde(default)]
    pub receiver: String,
    /// The alerts of the group.
    pub alerts: Vec<Alert>,
}

/// Firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The alert fires.
    Firing,
    /// The alert stopped firing.
    Resolved,
}

impl Status {
    /// `firing` or `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Firing => "firing",
            Status::Resolved => "resolved",
        }
    }
}

/// One alert.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// This alert's status.
    pub status: Status,
    /// Its labels (`alertname` among them).
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// When it started firing.
    #[serde(default)]
    pub starts_at: String,
    /// Alertmanager's identity of the label set.
    pub fingerprint: String,
    /// Which way it came: an Alertmanager notification, or a daemon's push (never read
    /// from the network: a webhook body is always Alertmanager's).
    #[serde(skip)]
    pub source: Source,
}

/// The way an alert reached the receiver (the `source` label of its latency histogram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// An Alertmanager webhook notification.
    #[default]
    Alertmanager,
    /// A daemon's hard-fault push (`/v1/push`).
    Push,
    /// The receiver itself, for an operator override or a release (no alert, no start).
    Operator,
}

impl Source {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Alertmanager => "alertmanager",
            Source::Push => "push",
            Source::Operator => "operator",
        }
    }
}

impl Alert {
    /// When it started, if `startsAt` was sent (an RFC 3339 time; [`parse`] rejects any
    /// other text).
    pub fn started(&self) -> Option<jiff::Timestamp> {
        self.starts_at.parse().ok()
    }

    /// The `alertname` label.
    pub fn name(&self) -> &str {
        self.labels
            .get("alertname")
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// Why a webhook body was rejected (the whole request: nothing in it is acted on).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The body is not the JSON Alertmanager sends.
    #[error("not an Alertmanager webhook payload: {0}")]
    NotAlertmanager(serde_json::Error),
    /// A payload version other than 4.
    #[error("payload version {0:?}; only version \"4\" is understood")]
    Version(String),
    /// `alerts` is empty.
    #[error("no alerts in the payload")]
    NoAlerts,
    /// More than [`MAX_ALERTS`] alerts.
    #[error("{0} alerts in one payload; at most {MAX_ALERTS}")]
    TooManyAlerts(usize),
    /// An alert without the `alertname` label.
    #[error("alerts[{index}] has no alertname label")]
    NoAlertname {
        /// Position in `alerts`.
        index: usize,
    },
    /// A fingerprint that is not a hex id.
    #[error("alerts[{index}] ({alertname}): fingerprint {fingerprint:?} is not a hex id")]
    BadFingerprint {
        /// Position in `alerts`.
        index: usize,
        /// The alert's name.
        alertname: String,
        /// The fingerprint sent.
        fingerprint: String,
    },
    /// A `startsAt` that is not an RFC 3339 time.
    #[error("alerts[{index}] ({alertname}): startsAt {starts_at:?} is not an RFC 3339 time")]
    BadStartsAt {
        /// Position in `alerts`.
        index: usize,
        /// The alert's name.
        alertname: String,
        /// The value sent.
        starts_at: String,
    },
    /// An alert a rule acts on lacks the node label.
    #[error("alerts[{index}] ({alertname}) matches a rule but has no {label:?} label")]
    NoNode {
        /// Position in `alerts`.
        index: usize,
        /// The alert's name.
        alertname: String,
        /// The configured `node_label`.
        label: String,
    },
    /// The node label is not a node name.
    #[error(
        "alerts[{index}] ({alertname}): {label}={node:?} is not a Kubernetes node name (RFC 1123 subdomain)"
    )]
    BadNodeName {
        /// Position in `alerts`.
        index: usize,
        /// The alert's name.
        alertname: String,
        /// The configured `node_label`.
        label: String,
        /// The value sent.
        node: String,
    },
}

/// Parses and checks a body. `node_label` names the label that carries the node; it must
/// be present and a valid node name on every alert `needs_node` selects.
pub fn parse(
    body: &[u8],
    node_label: &str,
    needs_node: impl Fn(&Alert) -> bool,
) -> Result<Notification, PayloadError> {
    let n: Notification = serde_json::from_slice(body).map_err(PayloadError::NotAlertmanager)?;
    if n.version != "4" {
        return Err(PayloadError::Version(n.version));
    }
    if n.alerts.is_empty() {
        return Err(PayloadError::NoAlerts);
    }
    if n.alerts.len() > MAX_ALERTS {
        return Err(PayloadError::TooManyAlerts(n.alerts.len()));
    }
    for (index, a) in n.alerts.iter().enumerate() {
        if a.name().is_empty() {
            return Err(PayloadError::NoAlertname { index });
        }
        if a.fingerprint.is_empty()
            || a.fingerprint.len() > 64
            || !a.fingerprint.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Err(PayloadError::BadFingerprint {
                index,
                alertname: a.name().into(),
                fingerprint: a.fingerprint.clone(),
            });
        }
        if !a.starts_at.is_empty() && a.started().is_none() {
            return Err(PayloadError::BadStartsAt {
                index,
                alertname: a.name().into(),
                starts_at: a.starts_at.clone(),
            });
        }
        if needs_node(a) {
            match a.labels.get(node_label) {
                None => {
                    return Err(PayloadError::NoNode {
                        index,
                        alertname: a.name().into(),
                        label: node_label.into(),
                    });
                }
                Some(node) if !valid_node_name(node) => {
                    return Err(PayloadError::BadNodeName {
                        index,
                        alertname: a.name().into(),
                        label: node_label.into(),
                        node: node.clone(),
                    });
                }
                Some(_) => {}
            }
        }
    }
    Ok(n)
}

/// A Kubernetes node name: an RFC 1123 DNS subdomain.
pub fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A label or taint key: optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
pub fn valid_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(valid_node_name) && valid_label_value(name) && !name.is_empty()
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, starting and ending
/// alphanumeric.
pub fn valid_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(node: &str, fp: &str) -> Vec<u8> {
        format!(
            r#"{{"version":"4","status":"firing","receiver":"r","groupKey":"g","alerts":[
            {{"status":"firing","labels":{{"alertname":"Q","node":"{node}"}},"annotations":{{}},
              "startsAt":"2026-11-29T00:00:00Z","fingerprint":"{fp}","extra":1}}]}}"#
        )
        .into_bytes()
    }

    #[test]
    fn accepts_alertmanager_v4_and_rejects_what_it_must() {
        let n = parse(&body("npu-node-1", "a1b2c3d4e5f60718"), "node", |_| true).unwrap();
        assert_eq!(n.alerts[0].labels["node"], "npu-node-1");
        for (node, fp, want) in [
            ("Bad_Node", "a1", "not a Kubernetes node name"),
            ("10.0.0.1:60100", "a1", "not a Kubernetes node name"),
            ("n1", "zz", "not a hex id"),
            ("n1", "", "not a hex id"),
        ] {
            let e = parse(&body(node, fp), "node", |_| true)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{node} {fp}: {e}");
        }
        let e = parse(
            b"{\"version\":\"3\",\"status\":\"firing\",\"alerts\":[]}",
            "node",
            |_| true,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version"), "{e}");
        let late = String::from_utf8(body("n1", "a1"))
            .unwrap()
            .replace("2026-11-29T00:00:00Z", "yesterday");
        let e = parse(late.as_bytes(), "node", |_| true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("startsAt \"yesterday\""), "{e}");
        let n = parse(&body("n1", "a1"), "node", |_| true).unwrap();
        assert_eq!(
            n.alerts[0].started().map(|t| t.as_second()),
            Some(1_795_910_400)
        );
        let e = parse(b"[1,2]", "node", |_| true).unwrap_err().to_string();
        assert!(e.contains("not an Alertmanager webhook payload"), "{e}");
        // An alert no rule acts on needs no node.
        assert!(parse(&body("Bad_Node", "a1"), "node", |_| false).is_ok());
    }

    #[test]
    fn names() {
        assert!(valid_node_name("ip-10-0-0-1.ec2.internal"));
        assert!(!valid_node_name("-a"));
        assert!(!valid_node_name(""));
        assert!(valid_qualified_name("hcclwatch.io/quarantine"));
        assert!(!valid_qualified_name("hcclwatch.io/"));
        assert!(!valid_qualified_name("a b"));
        assert!(valid_label_value("straggler"));
        assert!(!valid_label_value("-x"));
    }
}
