//! The Kubernetes side: nodes and events through the kube client, and the ownership
//! annotations that make the receiver restart-safe.
//!
//! Everything the receiver did to a node is written on the node itself, in
//! `hcclwatch.io/*` annotations: who quarantined it, why, when, for which alert, and which
//! of the changes were its own (a node that was already cordoned is not "ours" to
//! uncordon). A restarted receiver rebuilds its state from those annotations; nothing is
//! kept only in memory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Event, Node, ObjectReference, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::config::Action;

/// Set to [`OWNER`] on every node hcclwatch quarantined.
pub const BY: &str = "hcclwatch.io/quarantined-by";
/// The reason (alert name and reason label).
pub const REASON: &str = "hcclwatch.io/quarantined-reason";
/// When (RFC 3339).
pub const AT: &str = "hcclwatch.io/quarantined-at";
/// The alert's fingerprint.
pub const FINGERPRINT: &str = "hcclwatch.io/quarantined-fingerprint";
/// The changes that were hcclwatch's own: `cordon`, `taint`, `condition`.
pub const ACTIONS: &str = "hcclwatch.io/quarantined-actions";
/// The taint hcclwatch added (`key=value:effect`).
pub const TAINT: &str = "hcclwatch.io/quarantined-taint";
/// The condition type hcclwatch set.
pub const CONDITION: &str = "hcclwatch.io/quarantined-condition";
/// When someone uncordoned a node hcclwatch had cordoned.
pub const MANUAL_AT: &str = "hcclwatch.io/manual-override-at";
/// When hcclwatch last released the node.
pub const RELEASED_AT: &str = "hcclwatch.io/released-at";
/// When the quarantine that hcclwatch last released had started (kept after the release so
/// that the circuit breaker's window survives a restart).
pub const LAST_AT: &str = "hcclwatch.io/last-quarantined-at";
/// The value of [`BY`].
pub const OWNER: &str = "hcclwatch";

/// A failed API call, classified for the caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the object, or the resource itself (a cluster that does not serve it).
    #[error("{0}: not found")]
    NotFound(String),
    /// 403: the RBAC does not allow the verb.
    #[error(
        "forbidden: {0}; grant the receiver's service account this verb (see deploy/kubernetes/remediate)"
    )]
    Forbidden(String),
    /// 409 or a failed JSON-patch test: somebody changed the object.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Anything else (network, 5xx, bad response).
    #[error("{0}")]
    Other(String),
}

impl ApiError {
    pub(crate) fn from_kube(e: kube::Error, what: &str) -> Self {
        match &e {
            kube::Error::Api(s) if s.code == 404 => ApiError::NotFound(what.to_string()),
            kube::Error::Api(s) if s.code == 403 => {
                ApiError::Forbidden(format!("{what}: {}", s.message))
            }
            kube::Error::Api(s) if s.code == 409 || s.code == 422 => {
                ApiError::Conflict(format!("{what}: {}", s.message))
            }
            _ => ApiError::Other(format!("{what}: {e}")),
        }
    }

    /// Whether Alertmanager should retry (the failure may be transient).
    pub fn retryable(&self) -> bool {
        matches!(self, ApiError::Other(_) | ApiError::Conflict(_))
    }
}

/// Why no Kubernetes client could be built at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The configured kubeconfig file cannot be read or parsed.
    #[error("reading kubeconfig {path}: {error}")]
    ReadKubeconfig {
        /// `kubernetes.kubeconfig`.
        path: PathBuf,
        /// Why.
        error: kube::config::KubeconfigError,
    },
    /// The kubeconfig file is read but unusable (context, cluster or user missing).
    #[error("kubeconfig {path}: {error}")]
    Kubeconfig {
        /// `kubernetes.kubeconfig`.
        path: PathBuf,
        /// Why.
        error: kube::config::KubeconfigError,
    },
    /// No kubeconfig configured, and neither in-cluster nor `KUBECONFIG` works.
    #[error("no in-cluster service account and no kubeconfig: {0}")]
    Infer(kube::config::InferConfigError),
    /// The client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    Client(kube::Error),
}

/// Nodes and events; every call bounded by the configured timeout.
#[derive(Clone)]
pub struct Kube {
    nodes: Api<Node>,
    events: Api<Event>,
    client: Client,
    timeout: std::time::Duration,
}

/// Bounds one API call: past `timeout` it fails as a transient error (Alertmanager
/// retries) instead of holding the node's lock and the request.
pub(crate) async fn bounded<T>(
    timeout: std::time::Duration,
    what: String,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r.map_err(|e| ApiError::from_kube(e, &what)),
        Err(_) => Err(ApiError::Other(format!(
            "{what}: no answer within {timeout:?} (kubernetes.timeout)"
        ))),
    }
}

impl Kube {
    /// Connects with a kubeconfig file, or in-cluster (or `KUBECONFIG`) without one.
    pub async fn connect(
        kubeconfig: Option<&Path>,
        event_namespace: &str,
        timeout: std::time::Duration,
    ) -> Result<Self, ConnectError> {
        let cfg = match kubeconfig {
            Some(p) => {
                let kc = kube::config::Kubeconfig::read_from(p).map_err(|error| {
                    ConnectError::ReadKubeconfig {
                        path: p.to_path_buf(),
                        error,
                    }
                })?;
                kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .map_err(|error| ConnectError::Kubeconfig {
                        path: p.to_path_buf(),
                        error,
                    })?
            }
            None => kube::Config::infer().await.map_err(ConnectError::Infer)?,
        };
        let client = Client::try_from(cfg).map_err(ConnectError::Client)?;
        Ok(Self {
            nodes: Api::all(client.clone()),
            events: Api::namespaced(client.clone(), event_namespace),
            client,
            timeout,
        })
    }

    /// The client, for the other resources the receiver touches (`dra`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The bound on one API call (`kubernetes.timeout`).
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout
    }

    /// GET a node.
    pub async fn get(&self, name: &str) -> Result<Node, ApiError> {
        bounded(
            self.timeout,
            format!("get node {name}"),
            self.nodes.get(name),
        )
        .await
    }

    /// List every node.
    pub async fn list(&self) -> Result<Vec<Node>, ApiError> {
        bounded(
            self.timeout,
            "list nodes".into(),
            self.nodes.list(&ListParams::default()),
        )
        .await
        .map(|l| l.items)
    }

    /// PUT a node; fails with [`ApiError::Conflict`] if its resourceVersion is stale.
    pub async fn replace(&self, node: &Node) -> Result<Node, ApiError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        bounded(
            self.timeout,
            format!("update node {name}"),
            self.nodes.replace(&name, &PostParams::default(), node),
        )
        .await
    }

    /// A JSON patch (RFC 6902); its `test` operations make it conditional.
    pub async fn patch_json(&self, name: &str, patch: json_patch::Patch) -> Result<Node, ApiError> {
        bounded(
            self.timeout,
            format!("patch node {name}"),
            self.nodes
                .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)),
        )
        .await
    }

    /// A strategic-merge patch of the node's metadata or spec.
    pub async fn patch_strategic(
        &self,
        name: &str,
        patch: serde_json::Value,
    ) -> Result<Node, ApiError> {
        bounded(
            self.timeout,
            format!("patch node {name}"),
            self.nodes
                .patch(name, &PatchParams::default(), &Patch::Strategic(patch)),
        )
        .await
    }

    /// Sets one condition (merged by type) on `nodes/{name}/status`.
    pub async fn set_condition(
        &self,
        name: &str,
        kind: &str,
        status: bool,
        reason: &str,
        message: &str,
        transition: bool,
    ) -> Result<(), ApiError> {
        let now = Timestamp::now().to_string();
        let mut c = serde_json::json!({
            "type": kind,
            "status": if status { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
        });
        if transition {
            c["lastTransitionTime"] = serde_json::Value::String(now);
        }
        let patch = serde_json::json!({"status": {"conditions": [c]}});
        bounded(
            self.timeout,
            format!("patch node {name} status"),
            self.nodes
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)),
        )
        .await
        .map(|_| ())
    }

    /// Writes an Event about the node.
    pub async fn event(
        &self,
        node: &Node,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ApiError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let now = Time(Timestamp::now());
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}.hcclwatch.")),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                uid: node.metadata.uid.clone(),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(kind.into()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            reporting_component: Some("hcclwatch-remediate".into()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("hcclwatch-remediate".into()),
                host: None,
            }),
            ..Event::default()
        };
        bounded(
            self.timeout,
            format!("create event for node {name}"),
            self.events.create(&PostParams::default(), &ev),
        )
        .await
        .map(|_| ())
    }
}

/// What hcclwatch recorded on a node it quarantined.
#[derive(Debug, Clone, PartialEq)]
pub struct Ownership {
    /// Reason recorded.
    pub reason: String,
    /// When.
    pub at: Option<SystemTime>,
    /// The alert's fingerprint.
    pub fingerprint: String,
    /// The changes that were hcclwatch's own (cordon, taint, condition).
    pub actions: Vec<Action>,
    /// The taint hcclwatch added, if any.
    pub taint: Option<Taint>,
    /// The condition type hcclwatch set, if any.
    pub condition: Option<String>,
}

/// The node's annotations.
pub fn annotations(node: &Node) -> BTreeMap<String, String> {
    node.metadata.annotations.clone().unwrap_or_default()
}

/// Parses an RFC 3339 annotation value.
pub fn time_annotation(node: &Node, key: &str) -> Option<SystemTime> {
    annotations(node)
        .get(key)
        .and_then(|v| v.parse::<Timestamp>().ok())
        .map(SystemTime::from)
}

/// Renders a time as an annotation value.
pub fn time_value(t: SystemTime) -> String {
    Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The [`ACTIONS`] annotation's value: the names, comma-separated.
pub fn actions_value(actions: &[Action]) -> String {
    let names: Vec<&str> = actions.iter().map(|a| a.as_str()).collect();
    names.join(",")
}

/// The actions an [`ACTIONS`] value names. hcclwatch writes only action names; a name it
/// does not know (a hand edit) is no change of its own, so it is skipped.
fn parse_actions(value: &str) -> Vec<Action> {
    value
        .split(',')
        .filter(|x| !x.is_empty())
        .filter_map(Action::from_name)
        .collect()
}

/// hcclwatch's record on the node, if hcclwatch quarantined it.
pub fn ownership(node: &Node) -> Option<Ownership> {
    let a = annotations(node);
    if a.get(BY).map(String::as_str) != Some(OWNER) {
        return None;
    }
    Some(Ownership {
        reason: a.get(REASON).cloned().unwrap_or_default(),
        at: time_annotation(node, AT),
        fingerprint: a.get(FINGERPRINT).cloned().unwrap_or_default(),
        actions: a.get(ACTIONS).map(|s| parse_actions(s)).unwrap_or_default(),
        taint: a.get(TAINT).and_then(|s| parse_taint(s)),
        condition: a.get(CONDITION).cloned(),
    })
}

/// `key=value:effect`.
pub fn taint_string(t: &Taint) -> String {
    format!(
        "{}={}:{}",
        t.key,
        t.value.clone().unwrap_or_default(),
        t.effect
    )
}

/// Parses `key=value:effect`.
pub fn parse_taint(s: &str) -> Option<Taint> {
    let (kv, effect) = s.rsplit_once(':')?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    Some(Taint {
        key: key.into(),
        value: (!value.is_empty()).then(|| value.to_string()),
        effect: effect.into(),
        time_added: None,
    })
}

/// Same key, value and effect.
pub fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key
        && a.effect == b.effect
        && a.value.as_deref().unwrap_or("") == b.value.as_deref().unwrap_or("")
}

/// The node's labels.
pub fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// Whether `spec.unschedulable` is true.
pub fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_round_trip_and_ownership() {
        let t = parse_taint("hcclwatch.io/quarantine=straggler:NoSchedule").unwrap();
        assert_eq!(t.key, "hcclwatch.io/quarantine");
        assert_eq!(t.value.as_deref(), Some("straggler"));
        assert_eq!(
            taint_string(&t),
            "hcclwatch.io/quarantine=straggler:NoSchedule"
        );
        let mut n = Node::default();
        assert!(ownership(&n).is_none());
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        n.metadata.annotations = Some(BTreeMap::from([
            (BY.to_string(), OWNER.to_string()),
            (AT.to_string(), time_value(at)),
            (ACTIONS.to_string(), "cordon,taint".to_string()),
            (TAINT.to_string(), taint_string(&t)),
        ]));
        let o = ownership(&n).unwrap();
        assert_eq!(o.at, Some(at));
        assert_eq!(o.actions, vec!["cordon", "taint"]);
        assert!(same_taint(o.taint.as_ref().unwrap(), &t));
    }
}
