//! Beyond one alert: operator overrides and the escalation of recurring nodes (the
//! annotations are described in `remediate::lifecycle` and `snapshot::overrides`).
//!
//! - A `healthy` override refuses every quarantine while it holds (`override_healthy`,
//!   audited and counted like any refusal), and the reconcile loop undoes a quarantine an
//!   alert had caused (not an escalation: only `hcclwatch override release` ends that).
//! - A `quarantined` override is applied by the reconcile loop, as a quarantine for a
//!   stand-in alert `HcclwatchOperatorOverride` (fingerprint `override`) through the same
//!   rails as an alert's (killswitch, selectors, breaker: a refusal is retried at the next
//!   reconcile). While it holds, the resolution of an alert that had quarantined the node
//!   does not release it: the quarantine is handed to the override (its fingerprint becomes
//!   `override`). Once the override ends, by its time or by `hcclwatch override clear`,
//!   the reconcile loop releases what it holds.
//! - Each quarantine is recorded as an incident; the one that reaches
//!   `escalation.max_incidents` within `escalation.window` escalates the node: audited
//!   (intent first), marked, an Event written, `hcclwatch_node_escalated` set. The alert's
//!   resolution then keeps it; once a person removes the escalation (`hcclwatch override
//!   release`), the reconcile loop releases it.
//!
//! Every change is made through the engine's node API, so dry-run records the same
//! decisions as `would_apply`, and each is audited before it is made.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;

use super::{Ctx, HandleError, Remediator, UPDATE_ATTEMPTS};
use crate::remediate::audit::AuditAction;
use crate::remediate::kube::{self as k, ApiError};
use crate::remediate::lifecycle as life;
use crate::remediate::outcome::Outcome;
use crate::remediate::payload::{Alert, Source, Status};
use crate::snapshot::overrides::{self, Held};

/// The stand-in alert's name for what an operator override (or release) makes the
/// receiver do.
pub(super) const OPERATOR_ALERT: &str = "HcclwatchOperatorOverride";
/// Who the reconcile loop's decisions are recorded as.
const RECONCILE: &str = "reconcile";

/// A stand-in alert for a quarantine or release the receiver makes on its own.
fn operator_alert(status: Status, fingerprint: &str) -> Alert {
    Alert {
        status,
        labels: BTreeMap::from([
            ("alertname".to_string(), OPERATOR_ALERT.to_string()),
            ("reason".to_string(), fingerprint.to_string()),
        ]),
        annotations: BTreeMap::new(),
        starts_at: String::new(),
        fingerprint: fingerprint.to_string(),
        source: Source::Operator,
    }
}

fn node_override(node: &Node, now: SystemTime) -> Option<overrides::Override> {
    let (o, errors) = overrides::parse(&k::annotations(node));
    for e in errors {
        tracing::warn!(node = node.metadata.name.as_deref().unwrap_or(""), error = %e, "override annotation ignored");
    }
    o.node_at(now).cloned()
}

fn describe(o: &overrides::Override) -> String {
    format!(
        "operator override {} until {} (by {:?}: {:?})",
        o.state.as_str(),
        o.until_text(),
        o.by,
        o.reason
    )
}

impl Remediator {
    /// Why a quarantine is refused: a `healthy` override holds the node.
    pub(super) fn held_healthy(&self, node: &Node, now: SystemTime) -> Option<String> {
        node_override(node, now)
            .filter(|o| o.state == Held::Healthy)
            .map(|o| format!("{}; no quarantine before it ends", describe(&o)))
    }

    /// Why isolating NPU `npu` is refused: a `healthy` override holds it (its own, or its
    /// node's).
    pub(super) fn npu_held_healthy(
        &self,
        node: &Node,
        npu: u32,
        now: SystemTime,
    ) -> Option<String> {
        if let Some(why) = self.held_healthy(node, now) {
            return Some(why);
        }
        let (o, _) = overrides::parse(&k::annotations(node));
        o.npu_at(npu, now)
            .filter(|o| o.state == Held::Healthy)
            .map(|o| format!("NPU {npu}: {}; not isolated before it ends", describe(o)))
    }

    /// Whether a resolved alert must leave the node quarantined: it is escalated, or a
    /// `quarantined` override holds it (the quarantine is then handed to the override).
    /// Each such decision is recorded.
    pub(super) async fn held_on_resolve(
        &self,
        c: &Ctx<'_>,
        node: &Node,
        own: &k::Ownership,
    ) -> Result<bool, HandleError> {
        let a = k::annotations(node);
        if a.contains_key(life::ESCALATED_AT) {
            let why = a.get(life::ESCALATED_REASON).cloned().unwrap_or_default();
            let detail = format!(
                "escalated ({why}); only a person releases it: hcclwatch override release {}",
                c.node
            );
            self.record(c, AuditAction::Release, Outcome::Escalated, &detail)
                .await?;
            return Ok(true);
        }
        let now = SystemTime::now();
        let Some(o) = node_override(node, now).filter(|o| o.state == Held::Quarantined) else {
            return Ok(false);
        };
        if own.fingerprint != c.alert.fingerprint || own.fingerprint == life::OVERRIDE {
            return Ok(false);
        }
        let detail = format!("{}; kept until it ends", describe(&o));
        if self.nodes.changes_cluster() {
            self.record(
                c,
                AuditAction::Release,
                Outcome::Intent,
                &format!(
                    "hand the quarantine to the override: {} = {}",
                    k::FINGERPRINT,
                    life::OVERRIDE
                ),
            )
            .await?;
        }
        if let Err(e) = self
            .nodes
            .annotate(c.node, k::FINGERPRINT, life::OVERRIDE.into())
            .await
        {
            self.record(c, AuditAction::Release, Outcome::Failed, &e.to_string())
                .await?;
            return if e.retryable() {
                Err(e.into())
            } else {
                Ok(true)
            };
        }
        self.record(
            c,
            AuditAction::Release,
            Outcome::OverrideQuarantined,
            &detail,
        )
        .await?;
        Ok(true)
    }

    /// After a quarantine of `c.node` (new or repeated): escalates the node if its recent
    /// incidents reached `escalation.max_incidents`.
    pub(super) async fn escalate_if_due(&self, c: &Ctx<'_>) -> Result<(), HandleError> {
        let esc = &self.cfg.escalation;
        if esc.max_incidents == 0 || c.alert.fingerprint == life::OVERRIDE {
            return Ok(());
        }
        let mut last = None;
        for _ in 0..UPDATE_ATTEMPTS {
            let mut node = self.nodes.get(c.node).await?;
            let a = k::annotations(&node);
            let now = SystemTime::now();
            let recent = life::recent(&life::incidents(&a), now, esc.window);
            if k::ownership(&node).is_none()
                || a.contains_key(life::ESCALATED_AT)
                || recent.len() < esc.max_incidents as usize
            {
                return Ok(());
            }
            let why = life::escalation_reason(&recent, esc.window);
            if self.nodes.changes_cluster() && last.is_none() {
                self.record(c, AuditAction::Escalate, Outcome::Intent, &why)
                    .await?;
            }
            let m = node.metadata.annotations.get_or_insert_default();
            m.insert(life::ESCALATED_AT.into(), k::time_value(now));
            m.insert(life::ESCALATED_REASON.into(), why.clone());
            m.insert(k::FINGERPRINT.into(), life::ESCALATED.into());
            match self.nodes.replace(&node).await {
                Ok(n) => return self.escalated(c, &n, &why).await,
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => {
                    self.record(c, AuditAction::Escalate, Outcome::Failed, &e.to_string())
                        .await?;
                    return if e.retryable() { Err(e.into()) } else { Ok(()) };
                }
            }
        }
        let e = last.unwrap_or_else(|| ApiError::Conflict("node kept changing".into()));
        self.record(c, AuditAction::Escalate, Outcome::Failed, &e.to_string())
            .await?;
        Err(e.into())
    }

    /// What follows the escalation's mark: the event, the record, the gauge.
    async fn escalated(&self, c: &Ctx<'_>, node: &Node, why: &str) -> Result<(), HandleError> {
        let message = format!(
            "escalated: {why}; kept quarantined until a person releases it (hcclwatch override release {})",
            c.node
        );
        if let Err(e) = self
            .nodes
            .event(node, "Warning", "HcclwatchNodeEscalated", &message)
            .await
        {
            self.record(c, AuditAction::Event, Outcome::Failed, &e.to_string())
                .await?;
        }
        self.metrics.escalate(c.node);
        tracing::error!(
            node = c.node,
            reason = why,
            "node ESCALATED: it keeps coming back; hcclwatch keeps it quarantined until a person releases it"
        );
        self.record(c, AuditAction::Escalate, Outcome::Applied, why)
            .await
    }

    /// The reconcile loop's part: the gauges, and the quarantines and releases that
    /// overrides and escalation releases call for.
    pub(super) async fn lifecycle(&self, nodes: &[Node], read_at: Instant, now: SystemTime) {
        let mut escalated = BTreeSet::new();
        let mut shown = BTreeSet::new();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let a = k::annotations(n);
            if a.contains_key(life::ESCALATED_AT) {
                escalated.insert(name.clone());
            }
            let held = node_override(n, now);
            if let Some(o) = &held {
                shown.insert((name.clone(), o.state.as_str().to_string()));
            }
            let quarantined = held.as_ref().is_some_and(|o| o.state == Held::Quarantined);
            let healthy = held.as_ref().is_some_and(|o| o.state == Held::Healthy);
            let own = k::ownership(n);
            let step = match &own {
                None if quarantined => Some((Status::Firing, life::OVERRIDE)),
                Some(o) if o.fingerprint == life::OVERRIDE && !quarantined => {
                    Some((Status::Resolved, life::OVERRIDE))
                }
                // A person says the node is fine: an alert's quarantine is undone (the
                // alert's repeats are then refused). An escalation is released only by
                // `hcclwatch override release`.
                Some(o) if healthy && o.fingerprint != life::ESCALATED => {
                    Some((Status::Resolved, o.fingerprint.as_str()))
                }
                Some(o)
                    if o.fingerprint == life::ESCALATED && !a.contains_key(life::ESCALATED_AT) =>
                {
                    Some((Status::Resolved, life::ESCALATED))
                }
                _ => None,
            };
            if let Some((status, fp)) = step {
                self.operator_step(&name, status, fp).await;
            }
        }
        self.metrics.rebuild(read_at, escalated, shown);
    }

    /// Quarantines or releases `node` for an override or a release by a person.
    async fn operator_step(&self, node: &str, status: Status, fingerprint: &str) {
        let Some(rule) = self.cfg.rules.first() else {
            return;
        };
        let alert = operator_alert(status, fingerprint);
        let lock = self.node_lock(node);
        let _held = lock.lock().await;
        let c = Ctx {
            who: RECONCILE,
            node,
            alert: &alert,
        };
        let r = match status {
            Status::Firing => self.fire(rule, &c).await,
            Status::Resolved => self.resolve(rule, &c).await,
        };
        if let Err(e) = r {
            tracing::warn!(node, error = %e, "operator override step failed; retried at the next reconcile");
        }
    }
}
