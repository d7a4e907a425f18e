//! The resolved side: a resolved alert undoes only what hcclwatch recorded as its own, and
//! only for the alert that caused it, through a JSON patch guarded by the node's
//! `resourceVersion`; then the condition, the release event and the resolved-side hooks.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;

use super::nodes::Condition;
use super::{Ctx, HandleError, Remediator, UPDATE_ATTEMPTS};
use crate::remediate::audit::AuditAction;
use crate::remediate::config::{Action, Rule};
use crate::remediate::kube::{self as k, ApiError};
use crate::remediate::outcome::Outcome;

impl Remediator {
    pub(super) async fn resolve(&self, rule: &Rule, c: &Ctx<'_>) -> Result<(), HandleError> {
        let release = [Action::Cordon];
        let rec = |result: Outcome, detail: String| async move {
            self.record(c, AuditAction::Release, result, &detail).await
        };
        if self.paused() {
            return rec(
                Outcome::Paused,
                "the killswitch file exists; nothing is done while it does".into(),
            )
            .await;
        }
        let Some(node) = self.read(c, &release).await? else {
            return Ok(());
        };
        let Some(own) = k::ownership(&node) else {
            return rec(
                Outcome::NotOurs,
                "hcclwatch did not quarantine this node; leaving it alone".into(),
            )
            .await;
        };
        if self.held_on_resolve(c, &node, &own).await? {
            return Ok(());
        }
        if own.fingerprint != c.alert.fingerprint {
            return rec(
                Outcome::Kept,
                format!(
                    "quarantined for another alert ({}); only that alert's resolution releases it",
                    own.fingerprint
                ),
            )
            .await;
        }
        if self.nodes.changes_cluster() {
            // The record comes first: no change to a node without it on disk.
            rec(
                Outcome::Intent,
                format!("undo {}", k::actions_value(&own.actions)),
            )
            .await?;
        }
        let mut done = None;
        let mut last = None;
        // The first attempt uses the node as just read; a conflict reads it again.
        let mut fresh = Some(node.clone());
        for _ in 0..UPDATE_ATTEMPTS {
            let node = match fresh.take() {
                Some(n) => n,
                None => self.nodes.get(c.node).await?,
            };
            let Some(own) = k::ownership(&node).filter(|o| o.fingerprint == c.alert.fingerprint)
            else {
                rec(
                    Outcome::NotOurs,
                    "the ownership annotations were removed meanwhile; leaving the node alone"
                        .into(),
                )
                .await?;
                return Ok(());
            };
            let (patch, manual, undone) = release_patch(&node, &own, SystemTime::now());
            match self.nodes.patch_json(c.node, patch).await {
                Ok(_) => {
                    done = Some((own, manual, undone));
                    break;
                }
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => {
                    rec(Outcome::Failed, e.to_string()).await?;
                    return if e.retryable() { Err(e.into()) } else { Ok(()) };
                }
            }
        }
        let Some((own, manual, undone)) = done else {
            let e = last.unwrap_or_else(|| ApiError::Conflict("node kept changing".into()));
            rec(Outcome::Failed, e.to_string()).await?;
            return Err(e.into());
        };
        if manual {
            self.metrics.manual_overrides.inc();
            rec(Outcome::ManualOverride, "someone had uncordoned the node by hand; left as it is, and not cordoned again during the cooldown".into()).await?;
        }
        rec(
            Outcome::Applied,
            format!(
                "undid {}",
                if undone.is_empty() {
                    "nothing (already changed by someone else)".into()
                } else {
                    k::actions_value(&undone)
                }
            ),
        )
        .await?;
        self.after_release(rule, c, &node, &own).await?;
        self.metrics.nodes_quarantined.dec();
        Ok(())
    }

    /// What follows a release: the node condition back to False, the release event, and
    /// the resolved-side exec hook and webhook the rule asks for; each outcome recorded.
    async fn after_release(
        &self,
        rule: &Rule,
        c: &Ctx<'_>,
        node: &Node,
        own: &k::Ownership,
    ) -> Result<(), HandleError> {
        if let Some(kind) = &own.condition {
            let recovered = Condition {
                kind,
                status: false,
                reason: "Recovered",
                message: &format!("{} resolved", c.alert.name()),
                transition: true,
            };
            match self.nodes.set_condition(c.node, &recovered).await {
                Ok(()) => {
                    self.record(
                        c,
                        AuditAction::Condition,
                        Outcome::Applied,
                        &format!("{kind}=False"),
                    )
                    .await?
                }
                Err(e) => {
                    self.record(c, AuditAction::Condition, Outcome::Failed, &e.to_string())
                        .await?
                }
            }
        }
        if rule.actions.contains(&Action::Event) {
            let r = self
                .nodes
                .event(
                    node,
                    "Normal",
                    "HcclwatchReleased",
                    &format!("{} resolved; hcclwatch released the node", c.alert.name()),
                )
                .await;
            match r {
                Ok(()) => {
                    self.record(
                        c,
                        AuditAction::Event,
                        Outcome::Applied,
                        "release event written",
                    )
                    .await?
                }
                Err(e) => {
                    self.record(c, AuditAction::Event, Outcome::Failed, &e.to_string())
                        .await?
                }
            }
        }
        if let Some(x) = rule
            .exec
            .as_ref()
            .filter(|x| x.on_resolved && rule.actions.contains(&Action::Exec))
        {
            match self.nodes.exec(x, c.node, c.alert).await {
                Ok(d) => {
                    self.record(c, AuditAction::Exec, Outcome::Applied, &d)
                        .await?
                }
                Err(e) => {
                    self.record(c, AuditAction::Exec, Outcome::Failed, &e.to_string())
                        .await?
                }
            }
        }
        if let Some(w) = rule
            .webhook
            .as_ref()
            .filter(|w| w.on_resolved && rule.actions.contains(&Action::Webhook))
        {
            match self.nodes.webhook(w, c.node, c.alert).await {
                Ok(d) => {
                    self.record(c, AuditAction::Webhook, Outcome::Applied, &d)
                        .await?
                }
                Err(e) => {
                    self.record(c, AuditAction::Webhook, Outcome::Failed, &e.to_string())
                        .await?
                }
            }
        }
        Ok(())
    }

    /// Records a manual uncordon on the node once (an annotation newer than the quarantine
    /// says it is recorded).
    pub(super) async fn note_manual_override(
        &self,
        node: &Node,
        own: &k::Ownership,
        now: SystemTime,
        who: &str,
    ) {
        if manual_override_noted(node, own) {
            return;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        tracing::warn!(node = %name, who, "manual uncordon detected: hcclwatch will not cordon this node again during the cooldown");
        if let Err(e) = self
            .nodes
            .annotate(&name, k::MANUAL_AT, k::time_value(now))
            .await
        {
            tracing::error!(node = %name, error = %e, "cannot record the manual override on the node");
        }
        // Counted once the annotation is written (or failed): whoever sees the count can
        // read the node's record of it.
        self.metrics.manual_overrides.inc();
    }
}

/// RFC 6901 escaping of one path segment.
fn pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that undoes hcclwatch's own changes, guarded by the node's
/// resourceVersion; also whether the node had been uncordoned by hand, and what is undone.
fn release_patch(
    node: &Node,
    own: &k::Ownership,
    now: SystemTime,
) -> (json_patch::Patch, bool, Vec<Action>) {
    let noted = manual_override_noted(node, own);
    let rv = node.metadata.resource_version.clone().unwrap_or_default();
    let mut ops =
        vec![serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    let mut manual = false;
    let mut undone = Vec::new();
    if own.actions.contains(&Action::Cordon) {
        if k::cordoned(node) {
            ops.push(
                serde_json::json!({"op": "replace", "path": "/spec/unschedulable", "value": false}),
            );
            undone.push(Action::Cordon);
        } else {
            manual = true;
        }
    }
    if let (true, Some(t)) = (own.actions.contains(&Action::Taint), &own.taint) {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if let Some(i) = taints.iter().position(|x| k::same_taint(x, t)) {
            ops.push(serde_json::json!({"op": "remove", "path": format!("/spec/taints/{i}")}));
            undone.push(Action::Taint);
        }
    }
    let a = k::annotations(node);
    for key in [
        k::BY,
        k::REASON,
        k::AT,
        k::FINGERPRINT,
        k::ACTIONS,
        k::TAINT,
        k::CONDITION,
    ] {
        if a.contains_key(key) {
            ops.push(serde_json::json!({"op": "remove", "path": format!("/metadata/annotations/{}", pointer(key))}));
        }
    }
    ops.push(serde_json::json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k::RELEASED_AT)), "value": k::time_value(now)}));
    if let Some(at) = own.at {
        ops.push(serde_json::json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k::LAST_AT)), "value": k::time_value(at)}));
    }
    if manual && !noted {
        ops.push(serde_json::json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k::MANUAL_AT)), "value": k::time_value(now)}));
    }
    let patch = serde_json::from_value(serde_json::Value::Array(ops))
        .unwrap_or_else(|_| json_patch::Patch(Vec::new()));
    (patch, manual && !noted, undone)
}

/// Whether a manual uncordon of this quarantine was already recorded (and counted).
fn manual_override_noted(node: &Node, own: &k::Ownership) -> bool {
    k::time_annotation(node, k::MANUAL_AT).is_some_and(|m| own.at.is_none_or(|at| m >= at))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn release_patch_undoes_only_what_is_ours_and_is_guarded() {
        let mut node = Node::default();
        node.metadata.resource_version = Some("42".into());
        let ours = k::parse_taint("hcclwatch.io/quarantine=straggler:NoSchedule").unwrap();
        let theirs = k::parse_taint("team/maintenance=yes:NoSchedule").unwrap();
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            unschedulable: Some(true),
            taints: Some(vec![theirs, ours.clone()]),
            ..Default::default()
        });
        node.metadata.annotations = Some(BTreeMap::from([
            (k::BY.into(), k::OWNER.into()),
            (k::ACTIONS.into(), "cordon,taint".into()),
            (k::TAINT.into(), k::taint_string(&ours)),
        ]));
        let own = k::ownership(&node).unwrap();
        let (patch, manual, undone) = release_patch(&node, &own, SystemTime::now());
        assert!(!manual);
        assert_eq!(undone, vec!["cordon", "taint"]);
        let v = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            v[0],
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        let text = v.to_string();
        assert!(text.contains("/spec/taints/1"), "{text}");
        assert!(!text.contains("/spec/taints/0"), "{text}");
        assert!(text.contains("hcclwatch.io~1quarantined-by"), "{text}");

        // Uncordoned by hand meanwhile: the cordon is not touched, and it is a manual override.
        node.spec.as_mut().unwrap().unschedulable = Some(false);
        let (patch, manual, undone) = release_patch(&node, &own, SystemTime::now());
        assert!(manual);
        assert_eq!(undone, vec!["taint"]);
        assert!(
            !serde_json::to_string(&patch)
                .unwrap()
                .contains("/spec/unschedulable")
        );
    }
}
