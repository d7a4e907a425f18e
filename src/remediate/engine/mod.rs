//! From an alert to changes on a node, through every safety rail.
//!
//! A firing alert that matches a rule passes, in order: the killswitch, the node's
//! existence, the allow/deny selectors, an operator's `healthy` override, ownership
//! (already quarantined by us means nothing
//! to do: Alertmanager retries and repeats are idempotent), the manual-override cooldown,
//! the per-node cooldown, the global rate limit and the circuit breaker. Only then, and
//! only outside dry-run, does it touch the node: cordon, taint and the ownership
//! annotations in one read-modify-replace guarded by `resourceVersion` (retried on 409),
//! then the condition, the event and the hooks. Every decision, including each refusal
//! and each dry-run "would", is audited and counted.
//!
//! A resolved alert undoes only what hcclwatch recorded as its own, and only for the alert
//! that caused it, through a JSON patch whose `test` on `resourceVersion` fails if anybody
//! changed the node since it was read. A node that someone uncordoned by hand is recorded
//! as a manual override, counted, and not cordoned again for a cooldown.
//!
//! Requests for different nodes run concurrently; requests for one node are serialised by
//! a per-node lock held across its API calls and hooks. The breaker and the rate limit
//! live behind a short lock that is never held across an await, and admit a quarantine by
//! reserving its slot (given back if the action does not happen), so they stay exact.
//!
//! Every Kubernetes call is bounded by `kubernetes.timeout` (see `kube`), every hook by its
//! own timeout. Before a node is changed, an `intent` record is written to the audit log and
//! synced; if it cannot be, nothing is changed and the request is answered 503 (counted in
//! `hcclwatch_remediation_audit_failures_total`). Every other decision is audited too, and a
//! failure to audit it also answers 503, so Alertmanager retries until the record exists.
//!
//! Dry-run keeps a shadow of what live mode would have written: the nodes it would have
//! changed are kept in memory as live mode would have left them, reads see the shadow, and
//! so every decision (idempotence, breaker, cooldown, release, fingerprints) is the one live
//! mode would make, only recorded as `would_apply` instead of `applied`. The choice is made
//! once, at start: the engine acts through a node API that is either the cluster or the
//! shadow (`nodes`).
//!
//! The firing side is in `quarantine`, the resolved side in `release`; operator overrides
//! and the escalation of recurring nodes in `lifecycle`; one NPU instead of its node
//! (`isolate_npu`) in `npu`.

mod lifecycle;
mod nodes;
mod npu;
mod quarantine;
mod release;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use self::nodes::{Condition, NodeApi};
use super::audit::{AuditAction, AuditLog, Record};
use super::config::{Action, RemediateConfig, Rule};
use super::dra::DraApi;
use super::kube::{self as k, ApiError, Kube};
use super::metrics::Metrics;
use super::outcome::Outcome;
use super::payload::{Alert, Notification, Status};
use super::safety::{Breaker, NodeFilter, RateLimit, SelectorError};

/// Attempts of a conditional update before giving up on a busy node.
const UPDATE_ATTEMPTS: usize = 5;

/// The decision-maker.
pub struct Remediator {
    cfg: RemediateConfig,
    nodes: Box<dyn NodeApi>,
    dra: Box<dyn DraApi>,
    filter: NodeFilter,
    audit: AuditLog,
    metrics: Metrics,
    inner: std::sync::Mutex<Inner>,
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

struct Inner {
    breaker: Breaker,
    /// NPUs isolated in the window, keyed by rule name (`breaker.max_npus`).
    npu_breaker: Breaker,
    rate: RateLimit,
    fleet: usize,
}

/// Why a notification needs a retry.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// A Kubernetes call failed transiently.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The audit record could not be written; nothing was changed.
    #[error("the audit log cannot be written ({0}); no action is taken without its record")]
    Audit(std::io::Error),
}

/// Who asked and about what, for the audit log.
struct Ctx<'a> {
    who: &'a str,
    node: &'a str,
    alert: &'a Alert,
}

fn age(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or_default()
}

impl Remediator {
    /// A remediator over a connected client.
    pub fn new(
        cfg: RemediateConfig,
        kube: Kube,
        audit: AuditLog,
        metrics: Metrics,
    ) -> Result<Self, SelectorError> {
        let filter = NodeFilter::new(&cfg.selectors.allow, &cfg.selectors.deny)?;
        let inner = Inner {
            breaker: Breaker::new(
                cfg.breaker.max_nodes,
                cfg.breaker.max_percent,
                cfg.breaker.window,
            ),
            npu_breaker: Breaker::new(cfg.breaker.max_npus, 100.0, cfg.breaker.window),
            rate: RateLimit::new(cfg.limits.max_actions_per_minute),
            fleet: 0,
        };
        metrics.dry_run.set(i64::from(cfg.dry_run));
        let dra = super::dra::for_mode(&kube, cfg.dry_run);
        let nodes = nodes::for_mode(kube, cfg.dry_run);
        Ok(Self {
            cfg,
            nodes,
            dra,
            filter,
            audit,
            metrics,
            inner: std::sync::Mutex::new(inner),
            locks: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &RemediateConfig {
        &self.cfg
    }

    /// The first rule that matches the alert.
    pub fn rule_for(&self, alert: &Alert) -> Option<&Rule> {
        self.cfg.rules.iter().find(|r| {
            r.alertname == alert.name()
                && r.match_labels
                    .iter()
                    .all(|(k, v)| alert.labels.get(k) == Some(v))
        })
    }

    fn paused(&self) -> bool {
        let on = self
            .cfg
            .killswitch_file
            .as_ref()
            .is_some_and(|p| p.exists());
        self.metrics.killswitch.set(i64::from(on));
        on
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Audits, logs and counts one decision. In dry-run an `applied` is a `would_apply`.
    async fn record(
        &self,
        c: &Ctx<'_>,
        action: AuditAction,
        result: Outcome,
        detail: &str,
    ) -> Result<(), HandleError> {
        let dry = self.cfg.dry_run;
        let result = result.recorded(dry);
        let r = Record {
            ts: Timestamp::now(),
            who: c.who.to_string(),
            action,
            node: c.node.to_string(),
            alertname: c.alert.name().to_string(),
            reason: c.alert.labels.get("reason").cloned().unwrap_or_default(),
            fingerprint: c.alert.fingerprint.clone(),
            status: c.alert.status,
            dry_run: dry,
            result,
            detail: detail.to_string(),
        };
        tracing::info!(
            node = c.node, action = action.as_str(), result = result.as_str(), dry_run = dry, alertname = c.alert.name(),
            fingerprint = %c.alert.fingerprint, who = c.who, detail, "remediation decision"
        );
        let appended = self.audit.append(r).await;
        // Counted once the record is on disk (or failed to be): whoever sees the count
        // finds the record in the audit log.
        self.metrics.action(action.as_str(), result.as_str(), dry);
        if let Err(e) = appended {
            self.metrics.audit_failures.inc();
            tracing::error!(error = %e, path = %self.audit.path().display(), "cannot write the audit log");
            return Err(HandleError::Audit(e));
        }
        Ok(())
    }

    async fn record_all(
        &self,
        c: &Ctx<'_>,
        actions: &[Action],
        result: Outcome,
        detail: &str,
    ) -> Result<(), HandleError> {
        for a in actions {
            self.record(c, (*a).into(), result, detail).await?;
        }
        Ok(())
    }

    /// The lock that serialises everything done to one node.
    fn node_lock(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Drop the locks nobody holds, so names from many alerts do not accumulate.
        if locks.len() > 1024 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(node.to_string()).or_default().clone()
    }

    /// Handles one notification. `Err` means a transient failure (the last one, when
    /// several alerts failed): answer 5xx so that Alertmanager retries (every step is
    /// idempotent).
    pub async fn handle(&self, n: &Notification, who: &str) -> Result<(), HandleError> {
        let mut retry = None;
        for alert in &n.alerts {
            let Some(rule) = self.rule_for(alert) else {
                continue;
            };
            let Some(node) = alert.labels.get(&self.cfg.node_label) else {
                continue;
            };
            let lock = self.node_lock(node);
            let _held = lock.lock().await;
            let c = Ctx { who, node, alert };
            let r = match (alert.status, &rule.npu) {
                (Status::Firing, Some(npu)) => self.isolate(rule, npu, &c).await,
                (Status::Resolved, Some(npu)) => self.restore(rule, npu, &c).await,
                (Status::Firing, None) => self.fire(rule, &c).await,
                (Status::Resolved, None) => self.resolve(rule, &c).await,
            };
            if let Err(e) = r {
                retry = Some(e);
            }
        }
        let open = self.inner().breaker.is_open();
        self.metrics.breaker_open.set(i64::from(open));
        retry.map_or(Ok(()), Err)
    }

    /// Reads a node, auditing the failures that end the decision.
    async fn read(&self, c: &Ctx<'_>, actions: &[Action]) -> Result<Option<Node>, HandleError> {
        match self.nodes.get(c.node).await {
            Ok(n) => Ok(Some(n)),
            Err(e @ (ApiError::NotFound(_) | ApiError::Forbidden(_))) => {
                let result = if matches!(e, ApiError::NotFound(_)) {
                    Outcome::NotFound
                } else {
                    Outcome::Forbidden
                };
                self.record_all(c, actions, result, &e.to_string()).await?;
                Ok(None)
            }
            Err(e) => {
                self.record_all(c, actions, Outcome::Failed, &e.to_string())
                    .await?;
                Err(e.into())
            }
        }
    }

    /// Re-reads every node: fleet size, hcclwatch's quarantines (the breaker window after a
    /// restart), manual uncordons, condition heartbeats.
    pub async fn reconcile(&self) -> Result<(), ApiError> {
        let read_at = std::time::Instant::now();
        let nodes = self.nodes.list().await?;
        let now = SystemTime::now();
        let mut recent = Vec::new();
        let mut owned = 0;
        for n in &nodes {
            let Some(own) = k::ownership(n) else {
                // Released quarantines still count in the breaker's window.
                if let Some(at) = k::time_annotation(n, k::LAST_AT) {
                    recent.push((n.metadata.name.clone().unwrap_or_default(), at));
                }
                continue;
            };
            owned += 1;
            let name = n.metadata.name.clone().unwrap_or_default();
            if let Some(at) = own.at {
                recent.push((name.clone(), at));
            }
            if own.actions.contains(&Action::Cordon) && !k::cordoned(n) {
                self.note_manual_override(n, &own, now, "reconcile").await;
            }
            if let Some(kind) = &own.condition {
                let reason = self
                    .cfg
                    .rules
                    .iter()
                    .find(|r| r.condition.kind == *kind)
                    .map_or("HcclwatchQuarantine", |r| r.condition.reason.as_str());
                let heartbeat = Condition {
                    kind,
                    status: true,
                    reason,
                    message: &own.reason,
                    transition: false,
                };
                let _ = self.nodes.set_condition(&name, &heartbeat).await;
            }
        }
        let fleet = nodes.len();
        let isolations = self.isolations(now).await;
        let (closed, open) = {
            let mut inner = self.inner();
            inner.fleet = fleet;
            inner.breaker.rebuild(recent, now);
            if let Some(recent_npus) = isolations {
                inner.npu_breaker.rebuild(recent_npus, now);
            }
            let closed = inner.breaker.refresh(fleet, now);
            (closed, inner.breaker.is_open())
        };
        if closed {
            tracing::warn!(
                "circuit breaker closed: the window has slid past; hcclwatch acts again"
            );
        }
        self.metrics.breaker_open.set(i64::from(open));
        self.metrics.nodes_quarantined.set(owned);
        self.metrics.fleet_nodes.set(fleet as i64);
        self.lifecycle(&nodes, read_at, now).await;
        self.metrics.reconciled();
        self.paused();
        Ok(())
    }

    /// hcclwatch's NPU isolations with their start, for the NPU breaker's window after a
    /// restart; `None` (logged) when they cannot be listed, or when no rule isolates NPUs
    /// (a cluster without DRA need not serve the resource).
    async fn isolations(&self, now: SystemTime) -> Option<Vec<(String, SystemTime)>> {
        if !self.cfg.rules.iter().any(|r| r.npu.is_some()) {
            return None;
        }
        match self.dra.list_rules(None).await {
            Ok(rules) => {
                self.metrics.npus_isolated.set(rules.len() as i64);
                let started = |r: &k8s_openapi::api::resource::v1::DeviceTaintRule| {
                    let at = r.metadata.annotations.as_ref()?.get(super::isolation::AT)?;
                    super::isolation::parse_at(at)
                };
                Some(
                    rules
                        .iter()
                        .map(|r| {
                            let name = r.metadata.name.clone().unwrap_or_default();
                            (name, started(r).unwrap_or(now))
                        })
                        .collect(),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list hcclwatch's DeviceTaintRules; the NPU breaker keeps its own count");
                None
            }
        }
    }
}
