//! From an alert to changes on a node, through every safety rail.
//!
//! A firing alert that matches a rule passes, in order: the killswitch, the node's
//! existence, the allow/deny selectors, ownership (already quarantined by us means nothing
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
//! mode would make, only recorded as `would_apply` instead of `applied`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::audit::{AuditLog, Record};
use super::config::{Action, RemediateConfig, Rule};
use super::kube::{self as k, ApiError, Kube};
use super::metrics::Metrics;
use super::payload::{Alert, Notification, Status, valid_label_value};
use super::safety::{Breaker, NodeFilter, RateLimit, SelectorError};

/// Attempts of a conditional update before giving up on a busy node.
const UPDATE_ATTEMPTS: usize = 5;

/// The decision-maker.
pub struct Remediator {
    cfg: RemediateConfig,
    kube: Kube,
    filter: NodeFilter,
    audit: AuditLog,
    metrics: Metrics,
    inner: std::sync::Mutex<Inner>,
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

struct Inner {
    breaker: Breaker,
    rate: RateLimit,
    fleet: usize,
    /// Dry run only: each node as live mode would have left it.
    shadow: BTreeMap<String, Node>,
}

/// Why a notification needs a retry.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// A Kubernetes call failed transiently.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The audit record could not be written; nothing was changed.
    #[error("the audit log cannot be written ({0}); no action is taken without its record")]
    Audit(String),
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
            rate: RateLimit::new(cfg.limits.max_actions_per_minute),
            fleet: 0,
            shadow: BTreeMap::new(),
        };
        metrics.dry_run.set(i64::from(cfg.dry_run));
        Ok(Self {
            cfg,
            kube,
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
        action: &str,
        result: &str,
        detail: &str,
    ) -> Result<(), HandleError> {
        let dry = self.cfg.dry_run;
        let result = if dry && result == "applied" {
            "would_apply"
        } else {
            result
        };
        self.metrics.action(action, result, dry);
        let r = Record {
            ts: Timestamp::now().to_string(),
            who: c.who.to_string(),
            action: action.to_string(),
            node: c.node.to_string(),
            alertname: c.alert.name().to_string(),
            reason: c.alert.labels.get("reason").cloned().unwrap_or_default(),
            fingerprint: c.alert.fingerprint.clone(),
            status: c.alert.status.as_str().to_string(),
            dry_run: dry,
            result: result.to_string(),
            detail: detail.to_string(),
        };
        tracing::info!(
            node = c.node, action, result, dry_run = dry, alertname = c.alert.name(),
            fingerprint = %c.alert.fingerprint, who = c.who, detail, "remediation decision"
        );
        if let Err(e) = self.audit.append(r).await {
            self.metrics.audit_failures.inc();
            tracing::error!(error = %e, path = %self.audit.path().display(), "cannot write the audit log");
            return Err(HandleError::Audit(e.to_string()));
        }
        Ok(())
    }

    async fn record_all(
        &self,
        c: &Ctx<'_>,
        actions: &[Action],
        result: &str,
        detail: &str,
    ) -> Result<(), HandleError> {
        for a in actions {
            self.record(c, a.as_str(), result, detail).await?;
        }
        Ok(())
    }

    // === the node API, live or against the dry-run shadow ===

    async fn get(&self, name: &str) -> Result<Node, ApiError> {
        if self.cfg.dry_run
            && let Some(n) = self.inner().shadow.get(name).cloned()
        {
            return Ok(n);
        }
        self.kube.get(name).await
    }

    async fn list(&self) -> Result<Vec<Node>, ApiError> {
        let mut nodes = self.kube.list().await?;
        if self.cfg.dry_run {
            let inner = self.inner();
            for n in &mut nodes {
                if let Some(s) = n.metadata.name.as_ref().and_then(|x| inner.shadow.get(x)) {
                    *n = s.clone();
                }
            }
        }
        Ok(nodes)
    }

    /// Stores a node as live mode's conditional replace would (conflict on a stale
    /// resourceVersion).
    async fn replace(&self, node: &Node) -> Result<Node, ApiError> {
        if !self.cfg.dry_run {
            return self.kube.replace(node).await;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let current = self.get(&name).await?;
        if current.metadata.resource_version != node.metadata.resource_version {
            return Err(ApiError::Conflict(format!("update node {name}: stale")));
        }
        let mut next = node.clone();
        bump(&mut next);
        self.inner().shadow.insert(name, next.clone());
        Ok(next)
    }

    async fn patch_json(&self, name: &str, patch: json_patch::Patch) -> Result<Node, ApiError> {
        if !self.cfg.dry_run {
            return self.kube.patch_json(name, patch).await;
        }
        let current = self.get(name).await?;
        let mut v = serde_json::to_value(&current).map_err(|e| ApiError::Other(e.to_string()))?;
        json_patch::patch(&mut v, &patch)
            .map_err(|e| ApiError::Conflict(format!("patch node {name}: {e}")))?;
        let mut next: Node =
            serde_json::from_value(v).map_err(|e| ApiError::Other(e.to_string()))?;
        bump(&mut next);
        self.inner().shadow.insert(name.to_string(), next.clone());
        Ok(next)
    }

    async fn annotate(&self, name: &str, key: &str, value: String) -> Result<(), ApiError> {
        if !self.cfg.dry_run {
            let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
            return self.kube.patch_strategic(name, patch).await.map(|_| ());
        }
        let mut n = self.get(name).await?;
        n.metadata
            .annotations
            .get_or_insert_default()
            .insert(key.to_string(), value);
        bump(&mut n);
        self.inner().shadow.insert(name.to_string(), n);
        Ok(())
    }

    async fn set_condition(
        &self,
        name: &str,
        kind: &str,
        status: bool,
        reason: &str,
        message: &str,
        transition: bool,
    ) -> Result<(), ApiError> {
        if self.cfg.dry_run {
            return Ok(());
        }
        self.kube
            .set_condition(name, kind, status, reason, message, transition)
            .await
    }

    async fn event(
        &self,
        node: &Node,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ApiError> {
        if self.cfg.dry_run {
            return Ok(());
        }
        self.kube.event(node, kind, reason, message).await
    }

    async fn exec(&self, x: &super::config::ExecConfig, c: &Ctx<'_>) -> Result<String, String> {
        if self.cfg.dry_run {
            return Ok(format!("dry run: would exec {:?}", x.argv));
        }
        super::hooks::run_exec(x, c.node, c.alert)
            .await
            .map_err(|e| e.to_string())
    }

    async fn webhook(
        &self,
        w: &super::config::WebhookConfig,
        c: &Ctx<'_>,
    ) -> Result<String, String> {
        if self.cfg.dry_run {
            return Ok(format!("dry run: would POST {}", w.url));
        }
        super::hooks::run_webhook(w, c.node, c.alert)
            .await
            .map_err(|e| e.to_string())
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
            let r = match alert.status {
                Status::Firing => self.fire(rule, &c).await,
                Status::Resolved => self.resolve(rule, &c).await,
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
        match self.get(c.node).await {
            Ok(n) => Ok(Some(n)),
            Err(e @ (ApiError::NotFound(_) | ApiError::Forbidden(_))) => {
                let result = if matches!(e, ApiError::NotFound(_)) {
                    "not_found"
                } else {
                    "forbidden"
                };
                self.record_all(c, actions, result, &e.to_string()).await?;
                Ok(None)
            }
            Err(e) => {
                self.record_all(c, actions, "failed", &e.to_string())
                    .await?;
                Err(e.into())
            }
        }
    }

    async fn fire(&self, rule: &Rule, c: &Ctx<'_>) -> Result<(), HandleError> {
        let actions = &rule.actions;
        if self.paused() {
            self.record_all(
                c,
                actions,
                "paused",
                "the killswitch file exists; nothing is done while it does",
            )
            .await?;
            return Ok(());
        }
        let Some(node) = self.read(c, actions).await? else {
            return Ok(());
        };
        if let Some(why) = self.filter.refuse(&k::labels(&node)) {
            self.record_all(c, actions, "refused", why).await?;
            return Ok(());
        }
        let now = SystemTime::now();
        if let Some(own) = k::ownership(&node) {
            return self.already_ours(rule, c, &node, &own, now).await;
        }
        if let Some(t) = k::time_annotation(&node, k::MANUAL_AT)
            && age(now, t) < self.cfg.limits.manual_override_cooldown
        {
            self.record_all(c, actions, "manual_override_cooldown", &format!("someone uncordoned this node at {}; hcclwatch waits limits.manual_override_cooldown ({:?})", k::time_value(t), self.cfg.limits.manual_override_cooldown)).await?;
            return Ok(());
        }
        if let Some(t) = k::time_annotation(&node, k::RELEASED_AT)
            && age(now, t) < self.cfg.limits.node_cooldown
        {
            self.record_all(
                c,
                actions,
                "cooldown",
                &format!(
                    "hcclwatch released this node at {}; limits.node_cooldown is {:?}",
                    k::time_value(t),
                    self.cfg.limits.node_cooldown
                ),
            )
            .await?;
            return Ok(());
        }
        // Reserve a rate-limit and a breaker slot under the short lock; both are given
        // back if the quarantine does not happen.
        let admitted = {
            let mut inner = self.inner();
            let fleet = inner.fleet.max(1);
            match inner.rate.take(now) {
                Err(e) => Err(("rate_limited", e.to_string())),
                Ok(()) => match inner.breaker.admit(c.node, fleet, now) {
                    Err(e) => {
                        inner.rate.give_back(now);
                        Err(("breaker_open", e.to_string()))
                    }
                    Ok(()) => Ok(()),
                },
            }
        };
        if let Err((result, why)) = admitted {
            if result == "breaker_open" {
                tracing::error!(node = c.node, error = %why, "CIRCUIT BREAKER OPEN: hcclwatch stops quarantining nodes until the window passes; check the fleet, the fabric and the monitor");
                self.metrics.breaker_open.set(1);
            }
            return self.record_all(c, actions, result, &why).await;
        }
        let give_back = || {
            let mut inner = self.inner();
            inner.breaker.forget(c.node);
            inner.rate.give_back(now);
        };
        if self.cfg.dry_run {
            tracing::warn!(
                node = c.node,
                "dry run: hcclwatch would quarantine this node (set dry_run = false to act)"
            );
        } else {
            // The record comes first: no change to a node without it on disk.
            let planned: Vec<&str> = actions.iter().map(|a| a.as_str()).collect();
            if let Err(e) = self
                .record(c, "quarantine", "intent", &planned.join(","))
                .await
            {
                give_back();
                return Err(e);
            }
        }

        let own = match self.mark(rule, c, now, node.clone()).await {
            Ok(own) => own,
            Err(e) => {
                give_back();
                let result = if matches!(e, ApiError::Forbidden(_)) {
                    "forbidden"
                } else {
                    "failed"
                };
                self.record_all(c, actions, result, &e.to_string()).await?;
                return if e.retryable() { Err(e.into()) } else { Ok(()) };
            }
        };
        self.apply(rule, c, &node, &own).await?;
        self.metrics.nodes_quarantined.inc();
        tracing::warn!(
            node = c.node,
            alertname = c.alert.name(),
            "node quarantined"
        );
        Ok(())
    }

    /// A firing alert for a node hcclwatch already quarantined: a manual uncordon since is
    /// recorded and respected; otherwise the alert is a repeat (Alertmanager resends), so
    /// only the condition's heartbeat is refreshed.
    async fn already_ours(
        &self,
        rule: &Rule,
        c: &Ctx<'_>,
        node: &Node,
        own: &k::Ownership,
        now: SystemTime,
    ) -> Result<(), HandleError> {
        let actions = &rule.actions;
        if own.actions.iter().any(|a| a == "cordon") && !k::cordoned(node) {
            self.note_manual_override(node, own, now, c.who).await;
            return self.record_all(c, actions, "manual_override", "someone uncordoned this node after hcclwatch cordoned it; hcclwatch does not cordon it again during limits.manual_override_cooldown").await;
        }
        if let Some(kind) = &own.condition {
            // Alertmanager repeats a firing alert: refresh the condition's heartbeat.
            let _ = self
                .set_condition(
                    c.node,
                    kind,
                    true,
                    &rule.condition.reason,
                    &message(c.alert),
                    false,
                )
                .await;
        }
        let detail = format!(
            "already quarantined by hcclwatch ({}) for alert {}",
            own.reason, own.fingerprint
        );
        self.record_all(c, actions, "already_done", &detail).await
    }

    /// After the node is marked: the rule's other actions (condition, event, hooks), each
    /// audited. Cordon and taint were done by [`Remediator::mark`]; `own` says which of
    /// them were hcclwatch's. A failure here is audited and does not undo the quarantine.
    async fn apply(
        &self,
        rule: &Rule,
        c: &Ctx<'_>,
        node: &Node,
        own: &[String],
    ) -> Result<(), HandleError> {
        for a in &rule.actions {
            let r = match a {
                Action::Cordon | Action::Taint => {
                    if own.iter().any(|x| x == a.as_str()) {
                        Ok(self.describe(*a, rule, c.alert))
                    } else {
                        self.record(
                            c,
                            a.as_str(),
                            "already_done",
                            "the node already had it before hcclwatch; not hcclwatch's to undo",
                        )
                        .await?;
                        continue;
                    }
                }
                Action::Condition => self
                    .set_condition(
                        c.node,
                        &rule.condition.kind,
                        true,
                        &rule.condition.reason,
                        &message(c.alert),
                        true,
                    )
                    .await
                    .map(|_| format!("{}=True", rule.condition.kind))
                    .map_err(|e| e.to_string()),
                Action::Event => self
                    .event(node, "Warning", "HcclwatchQuarantine", &message(c.alert))
                    .await
                    .map(|_| "event written".to_string())
                    .map_err(|e| e.to_string()),
                Action::Exec => match &rule.exec {
                    Some(x) => self.exec(x, c).await,
                    None => continue,
                },
                Action::Webhook => match &rule.webhook {
                    Some(w) => self.webhook(w, c).await,
                    None => continue,
                },
            };
            // Either way the audit detail is the text: what was done, or why it failed.
            match r {
                Ok(d) => self.record(c, a.as_str(), "applied", &d).await?,
                Err(d) => self.record(c, a.as_str(), "failed", &d).await?,
            }
        }
        Ok(())
    }

    /// Cordon, taint and ownership annotations in one conditional replace; returns the
    /// changes that were hcclwatch's own. `read` is the node as just read: the first
    /// attempt uses it, a conflict reads it again.
    async fn mark(
        &self,
        rule: &Rule,
        c: &Ctx<'_>,
        now: SystemTime,
        read: Node,
    ) -> Result<Vec<String>, ApiError> {
        let taint = self.taint(rule, c.alert);
        let mut last = None;
        let mut fresh = Some(read);
        for _ in 0..UPDATE_ATTEMPTS {
            let mut node = match fresh.take() {
                Some(n) => n,
                None => self.get(c.node).await?,
            };
            if let Some(o) = k::ownership(&node) {
                return Ok(o.actions);
            }
            let spec = node.spec.get_or_insert_default();
            let mut own = Vec::new();
            if rule.actions.contains(&Action::Cordon) && !spec.unschedulable.unwrap_or(false) {
                spec.unschedulable = Some(true);
                own.push("cordon".to_string());
            }
            if rule.actions.contains(&Action::Taint) {
                let taints = spec.taints.get_or_insert_default();
                if !taints
                    .iter()
                    .any(|t| t.key == taint.key && t.effect == taint.effect)
                {
                    let mut t = taint.clone();
                    t.time_added = Some(Time(Timestamp::now()));
                    taints.push(t);
                    own.push("taint".to_string());
                }
            }
            if rule.actions.contains(&Action::Condition) {
                own.push("condition".to_string());
            }
            let a = node.metadata.annotations.get_or_insert_default();
            a.insert(k::BY.into(), k::OWNER.into());
            a.insert(k::REASON.into(), reason_text(c.alert));
            a.insert(k::AT.into(), k::time_value(now));
            a.insert(k::FINGERPRINT.into(), c.alert.fingerprint.clone());
            a.insert(k::ACTIONS.into(), own.join(","));
            if own.iter().any(|x| x == "taint") {
                a.insert(k::TAINT.into(), k::taint_string(&taint));
            }
            if own.iter().any(|x| x == "condition") {
                a.insert(k::CONDITION.into(), rule.condition.kind.clone());
            }
            match self.replace(&node).await {
                Ok(_) => return Ok(own),
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::Conflict(format!("node {} kept changing", c.node))))
    }

    async fn resolve(&self, rule: &Rule, c: &Ctx<'_>) -> Result<(), HandleError> {
        let release = [Action::Cordon];
        let rec = |result: &'static str, detail: String| async move {
            self.record(c, "release", result, &detail).await
        };
        if self.paused() {
            rec(
                "paused",
                "the killswitch file exists; nothing is done while it does".into(),
            )
            .await?;
            return Ok(());
        }
        let Some(node) = self.read(c, &release).await? else {
            return Ok(());
        };
        let Some(own) = k::ownership(&node) else {
            return rec(
                "not_ours",
                "hcclwatch did not quarantine this node; leaving it alone".into(),
            )
            .await;
        };
        if own.fingerprint != c.alert.fingerprint {
            rec(
                "kept",
                format!(
                    "quarantined for another alert ({}); only that alert's resolution releases it",
                    own.fingerprint
                ),
            )
            .await?;
            return Ok(());
        }
        if !self.cfg.dry_run {
            // The record comes first: no change to a node without it on disk.
            rec("intent", format!("undo {}", own.actions.join(","))).await?;
        }
        let mut done = None;
        let mut last = None;
        // The first attempt uses the node as just read; a conflict reads it again.
        let mut fresh = Some(node.clone());
        for _ in 0..UPDATE_ATTEMPTS {
            let node = match fresh.take() {
                Some(n) => n,
                None => self.get(c.node).await?,
            };
            let Some(own) = k::ownership(&node).filter(|o| o.fingerprint == c.alert.fingerprint)
            else {
                rec(
                    "not_ours",
                    "the ownership annotations were removed meanwhile; leaving the node alone"
                        .into(),
                )
                .await?;
                return Ok(());
            };
            let (patch, manual, undone) = release_patch(&node, &own, SystemTime::now());
            match self.patch_json(c.node, patch).await {
                Ok(_) => {
                    done = Some((own, manual, undone));
                    break;
                }
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => {
                    rec("failed", e.to_string()).await?;
                    return if e.retryable() { Err(e.into()) } else { Ok(()) };
                }
            }
        }
        let Some((own, manual, undone)) = done else {
            let e = last.unwrap_or_else(|| ApiError::Conflict("node kept changing".into()));
            rec("failed", e.to_string()).await?;
            return Err(e.into());
        };
        if manual {
            self.metrics.manual_overrides.inc();
            rec("manual_override", "someone had uncordoned the node by hand; left as it is, and not cordoned again during the cooldown".into()).await?;
        }
        rec(
            "applied",
            format!(
                "undid {}",
                if undone.is_empty() {
                    "nothing (already changed by someone else)".into()
                } else {
                    undone.join(",")
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
            match self
                .set_condition(
                    c.node,
                    kind,
                    false,
                    "Recovered",
                    &format!("{} resolved", c.alert.name()),
                    true,
                )
                .await
            {
                Ok(()) => {
                    self.record(c, "condition", "applied", &format!("{kind}=False"))
                        .await?
                }
                Err(e) => {
                    self.record(c, "condition", "failed", &e.to_string())
                        .await?
                }
            }
        }
        if rule.actions.contains(&Action::Event) {
            let r = self
                .event(
                    node,
                    "Normal",
                    "HcclwatchReleased",
                    &format!("{} resolved; hcclwatch released the node", c.alert.name()),
                )
                .await;
            match r {
                Ok(()) => {
                    self.record(c, "event", "applied", "release event written")
                        .await?
                }
                Err(e) => self.record(c, "event", "failed", &e.to_string()).await?,
            }
        }
        if let Some(x) = rule
            .exec
            .as_ref()
            .filter(|x| x.on_resolved && rule.actions.contains(&Action::Exec))
        {
            match self.exec(x, c).await {
                Ok(d) => self.record(c, "exec", "applied", &d).await?,
                Err(e) => self.record(c, "exec", "failed", &e).await?,
            }
        }
        if let Some(w) = rule
            .webhook
            .as_ref()
            .filter(|w| w.on_resolved && rule.actions.contains(&Action::Webhook))
        {
            match self.webhook(w, c).await {
                Ok(d) => self.record(c, "webhook", "applied", &d).await?,
                Err(e) => self.record(c, "webhook", "failed", &e).await?,
            }
        }
        Ok(())
    }

    /// Records a manual uncordon on the node once (an annotation newer than the quarantine
    /// says it is recorded).
    async fn note_manual_override(
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
        self.metrics.manual_overrides.inc();
        tracing::warn!(node = %name, who, "manual uncordon detected: hcclwatch will not cordon this node again during the cooldown");
        if let Err(e) = self.annotate(&name, k::MANUAL_AT, k::time_value(now)).await {
            tracing::error!(node = %name, error = %e, "cannot record the manual override on the node");
        }
    }

    /// Re-reads every node: fleet size, hcclwatch's quarantines (the breaker window after a
    /// restart), manual uncordons, condition heartbeats.
    pub async fn reconcile(&self) -> Result<(), ApiError> {
        let nodes = self.list().await?;
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
            if own.actions.iter().any(|a| a == "cordon") && !k::cordoned(n) {
                self.note_manual_override(n, &own, now, "reconcile").await;
            }
            if let Some(kind) = &own.condition {
                let reason = self
                    .cfg
                    .rules
                    .iter()
                    .find(|r| r.condition.kind == *kind)
                    .map_or("HcclwatchQuarantine", |r| r.condition.reason.as_str());
                let _ = self
                    .set_condition(&name, kind, true, reason, &own.reason, false)
                    .await;
            }
        }
        let fleet = nodes.len();
        let (closed, open) = {
            let mut inner = self.inner();
            inner.fleet = fleet;
            inner.breaker.rebuild(recent, now);
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
        self.metrics.reconciled();
        self.paused();
        Ok(())
    }

    fn taint(&self, rule: &Rule, alert: &Alert) -> Taint {
        let reason = alert
            .labels
            .get("reason")
            .filter(|r| !r.is_empty() && valid_label_value(r))
            .map_or("quarantine", String::as_str);
        Taint {
            key: rule.taint.key.clone(),
            value: Some(rule.taint.value.replace("{reason}", reason)).filter(|v| !v.is_empty()),
            effect: rule.taint.effect.as_str().to_string(),
            time_added: None,
        }
    }

    fn describe(&self, a: Action, rule: &Rule, alert: &Alert) -> String {
        match a {
            Action::Cordon => "spec.unschedulable=true".into(),
            Action::Taint => format!("taint {}", k::taint_string(&self.taint(rule, alert))),
            Action::Condition => format!("condition {}=True", rule.condition.kind),
            Action::Event => "Warning event HcclwatchQuarantine".into(),
            Action::Exec => format!("exec {:?}", rule.exec.as_ref().map(|x| &x.argv)),
            Action::Webhook => format!(
                "POST {}",
                rule.webhook.as_ref().map_or("", |w| w.url.as_str())
            ),
        }
    }
}

fn reason_text(alert: &Alert) -> String {
    match alert.labels.get("reason") {
        Some(r) => format!("{}: {r}", alert.name()),
        None => alert.name().to_string(),
    }
}

fn message(alert: &Alert) -> String {
    let summary = alert
        .annotations
        .get("summary")
        .map(String::as_str)
        .unwrap_or("");
    format!(
        "{} ({}): {summary}",
        alert.name(),
        alert
            .labels
            .get("reason")
            .map(String::as_str)
            .unwrap_or("-")
    )
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
) -> (json_patch::Patch, bool, Vec<String>) {
    let noted = manual_override_noted(node, own);
    let rv = node.metadata.resource_version.clone().unwrap_or_default();
    let mut ops =
        vec![serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    let mut manual = false;
    let mut undone = Vec::new();
    if own.actions.iter().any(|a| a == "cordon") {
        if k::cordoned(node) {
            ops.push(
                serde_json::json!({"op": "replace", "path": "/spec/unschedulable", "value": false}),
            );
            undone.push("cordon".to_string());
        } else {
            manual = true;
        }
    }
    if let (true, Some(t)) = (own.actions.iter().any(|a| a == "taint"), &own.taint) {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if let Some(i) = taints.iter().position(|x| k::same_taint(x, t)) {
            ops.push(serde_json::json!({"op": "remove", "path": format!("/spec/taints/{i}")}));
            undone.push("taint".to_string());
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
