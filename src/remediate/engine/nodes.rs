//! The node API the engine acts through, chosen once at start: live (the Kubernetes API
//! and the hooks) or the dry-run shadow.
//!
//! The shadow keeps what live mode would have written: the nodes it would have changed
//! are kept in memory as live mode would have left them, reads see the shadow, and so
//! every decision (idempotence, breaker, cooldown, release, fingerprints) is the one live
//! mode would make. Conditions, events and hooks are not kept: nothing reads them back.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;

use crate::remediate::config::{ExecConfig, WebhookConfig};
use crate::remediate::hooks::{self, HookError};
use crate::remediate::kube::{ApiError, Kube};
use crate::remediate::payload::Alert;

/// The node reads and writes, conditions, events and hooks of the engine.
#[async_trait]
pub(super) trait NodeApi: Send + Sync {
    /// Whether a write changes the cluster (live) or only the shadow (dry run): only a
    /// real change needs its intent on disk first.
    fn changes_cluster(&self) -> bool;
    /// Reads one node.
    async fn get(&self, name: &str) -> Result<Node, ApiError>;
    /// Reads every node.
    async fn list(&self) -> Result<Vec<Node>, ApiError>;
    /// Replaces a node, conditional on its `resourceVersion` (conflict when stale).
    async fn replace(&self, node: &Node) -> Result<Node, ApiError>;
    /// Applies a JSON patch (its `test` operations guard it).
    async fn patch_json(&self, name: &str, patch: json_patch::Patch) -> Result<Node, ApiError>;
    /// Sets one annotation.
    async fn annotate(&self, name: &str, key: &str, value: String) -> Result<(), ApiError>;
    /// Sets a node condition (see [`Kube::set_condition`]).
    async fn set_condition(&self, name: &str, c: &Condition<'_>) -> Result<(), ApiError>;
    /// Writes an event about a node.
    async fn event(
        &self,
        node: &Node,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ApiError>;
    /// Runs the exec hook; the text says what it did.
    async fn exec(&self, x: &ExecConfig, node: &str, alert: &Alert) -> Result<String, HookError>;
    /// Posts the generic webhook; the text says what it did.
    async fn webhook(
        &self,
        w: &WebhookConfig,
        node: &str,
        alert: &Alert,
    ) -> Result<String, HookError>;
}

/// A node condition to set.
pub(super) struct Condition<'a> {
    /// Its type.
    pub kind: &'a str,
    /// `True` or `False`.
    pub status: bool,
    /// Its reason.
    pub reason: &'a str,
    /// Its message.
    pub message: &'a str,
    /// Whether the status changes now (a transition), or only the heartbeat.
    pub transition: bool,
}

/// The node API for `dry_run`: the shadow, or the cluster itself.
pub(super) fn for_mode(kube: Kube, dry_run: bool) -> Box<dyn NodeApi> {
    if dry_run {
        Box::new(Shadow {
            kube,
            nodes: Mutex::new(BTreeMap::new()),
        })
    } else {
        Box::new(Live(kube))
    }
}

/// The cluster: every call reaches the API server or runs the hook.
struct Live(Kube);

#[async_trait]
impl NodeApi for Live {
    fn changes_cluster(&self) -> bool {
        true
    }

    async fn get(&self, name: &str) -> Result<Node, ApiError> {
        self.0.get(name).await
    }

    async fn list(&self) -> Result<Vec<Node>, ApiError> {
        self.0.list().await
    }

    async fn replace(&self, node: &Node) -> Result<Node, ApiError> {
        self.0.replace(node).await
    }

    async fn patch_json(&self, name: &str, patch: json_patch::Patch) -> Result<Node, ApiError> {
        self.0.patch_json(name, patch).await
    }

    async fn annotate(&self, name: &str, key: &str, value: String) -> Result<(), ApiError> {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        self.0.patch_strategic(name, patch).await.map(|_| ())
    }

    async fn set_condition(&self, name: &str, c: &Condition<'_>) -> Result<(), ApiError> {
        self.0
            .set_condition(name, c.kind, c.status, c.reason, c.message, c.transition)
            .await
    }

    async fn event(
        &self,
        node: &Node,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ApiError> {
        self.0.event(node, kind, reason, message).await
    }

    async fn exec(&self, x: &ExecConfig, node: &str, alert: &Alert) -> Result<String, HookError> {
        hooks::run_exec(x, node, alert).await
    }

    async fn webhook(
        &self,
        w: &WebhookConfig,
        node: &str,
        alert: &Alert,
    ) -> Result<String, HookError> {
        hooks::run_webhook(w, node, alert).await
    }
}

/// Dry run: reads reach the cluster, writes stay in memory.
struct Shadow {
    kube: Kube,
    /// Each node as live mode would have left it.
    nodes: Mutex<BTreeMap<String, Node>>,
}

impl Shadow {
    fn nodes(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `node` as written, with the `resourceVersion` the write gives it.
    fn keep(&self, name: String, mut node: Node) -> Node {
        bump(&mut node);
        self.nodes().insert(name, node.clone());
        node
    }
}

#[async_trait]
impl NodeApi for Shadow {
    fn changes_cluster(&self) -> bool {
        false
    }

    async fn get(&self, name: &str) -> Result<Node, ApiError> {
        let kept = self.nodes().get(name).cloned();
        match kept {
            Some(n) => Ok(n),
            None => self.kube.get(name).await,
        }
    }

    async fn list(&self) -> Result<Vec<Node>, ApiError> {
        let mut nodes = self.kube.list().await?;
        let kept = self.nodes();
        for n in &mut nodes {
            if let Some(s) = n.metadata.name.as_ref().and_then(|x| kept.get(x)) {
                *n = s.clone();
            }
        }
        Ok(nodes)
    }

    /// As live mode's conditional replace: a conflict on a stale resourceVersion.
    async fn replace(&self, node: &Node) -> Result<Node, ApiError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let current = self.get(&name).await?;
        if current.metadata.resource_version != node.metadata.resource_version {
            return Err(ApiError::Conflict(format!("update node {name}: stale")));
        }
        Ok(self.keep(name, node.clone()))
    }

    async fn patch_json(&self, name: &str, patch: json_patch::Patch) -> Result<Node, ApiError> {
        let current = self.get(name).await?;
        let mut v = serde_json::to_value(&current).map_err(|e| ApiError::Other(e.to_string()))?;
        json_patch::patch(&mut v, &patch)
            .map_err(|e| ApiError::Conflict(format!("patch node {name}: {e}")))?;
        let next: Node = serde_json::from_value(v).map_err(|e| ApiError::Other(e.to_string()))?;
        Ok(self.keep(name.to_string(), next))
    }

    async fn annotate(&self, name: &str, key: &str, value: String) -> Result<(), ApiError> {
        let mut n = self.get(name).await?;
        n.metadata
            .annotations
            .get_or_insert_default()
            .insert(key.to_string(), value);
        self.keep(name.to_string(), n);
        Ok(())
    }

    async fn set_condition(&self, _name: &str, _c: &Condition<'_>) -> Result<(), ApiError> {
        Ok(())
    }

    async fn event(
        &self,
        _node: &Node,
        _kind: &str,
        _reason: &str,
        _message: &str,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    async fn exec(&self, x: &ExecConfig, _node: &str, _alert: &Alert) -> Result<String, HookError> {
        Ok(format!("dry run: would exec {:?}", x.argv))
    }

    async fn webhook(
        &self,
        w: &WebhookConfig,
        _node: &str,
        _alert: &Alert,
    ) -> Result<String, HookError> {
        Ok(format!("dry run: would POST {}", w.url))
    }
}

/// What a write does to `metadata.resourceVersion`, for the dry-run shadow.
fn bump(node: &mut Node) {
    let v = node
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    node.metadata.resource_version = Some(format!("{}", v + 1));
}
