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
//! Requests are handled one at a time (one mutex): the receiver acts rarely, and serial
//! decisions keep the breaker and the rate limit exact.

use std::collections::BTreeMap;
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
    inner: tokio::sync::Mutex<Inner>,
}

struct Inner {
    breaker: Breaker,
    rate: RateLimit,
    fleet: usize,
    /// Dry run only: nodes that would be quarantined (node → fingerprint, time), so that
    /// duplicates stay idempotent and the breaker counts them as it would for real.
    would: BTreeMap<String, (String, SystemTime)>,
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
            would: BTreeMap::new(),
        };
        metrics.dry_run.set(i64::from(cfg.dry_run));
        Ok(Self {
            cfg,
            kube,
            filter,
            audit,
            metrics,
            inner: tokio::sync::Mutex::new(inner),
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

    fn record(&self, c: &Ctx<'_>, action: &str, result: &str, detail: &str) {
        let dry = self.cfg.dry_run;
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
        if let Err(e) = self.audit.append(&r) {
            tracing::error!(error = %e, path = %self.audit.path().display(), "cannot write the audit log");
        }
    }

    fn record_all(&self, c: &Ctx<'_>, actions: &[Action], result: &str, detail: &str) {
        for a in actions {
            self.record(c, a.as_str(), result, detail);
        }
    }

    /// Handles one notification. `Err` means a transient failure (the last one, when
    /// several alerts failed): answer 5xx so that Alertmanager retries (every step is
    /// idempotent).
    pub async fn handle(&self, n: &Notification, who: &str) -> Result<(), ApiError> {
        let mut inner = self.inner.lock().await;
        let mut retry = None;
        for alert in &n.alerts {
            let Some(rule) = self.rule_for(alert) else {
                continue;
            };
            let Some(node) = alert.labels.get(&self.cfg.node_label) else {
                continue;
            };
            let c = Ctx { who, node, alert };
            let r = match alert.status {
                Status::Firing => self.fire(&mut inner, rule, &c).await,
                Status::Resolved => self.resolve(&mut inner, rule, &c).await,
            };
            if let Err(e) = r {
                retry = Some(e);
            }
        }
        self.metrics
            .breaker_open
            .set(i64::from(inner.breaker.is_open()));
        retry.map_or(Ok(()), Err)
    }

    /// Reads a node, auditing the failures that end the decision.
    async fn read(&self, c: &Ctx<'_>, actions: &[Action]) -> Result<Option<Node>, ApiError> {
        match self.kube.get(c.node).await {
            Ok(n) => Ok(Some(n)),
            Err(e @ (ApiError::NotFound(_) | ApiError::Forbidden(_))) => {
                let result = if matches!(e, ApiError::NotFound(_)) {
                    "not_found"
                } else {
                    "forbidden"
                };
                self.record_all(c, actions, result, &e.to_string());
                Ok(None)
            }
            Err(e) => {
                self.record_all(c, actions, "failed", &e.to_string());
                Err(e)
            }
        }
    }

    async fn fire(&self, inner: &mut Inner, rule: &Rule, c: &Ctx<'_>) -> Result<(), ApiError> {
        let actions = &rule.actions;
        if self.paused() {
            self.record_all(
                c,
                actions,
                "paused",
                "the killswitch file exists; nothing is done while it does",
            );
            return Ok(());
        }
        let Some(node) = self.read(c, actions).await? else {
            return Ok(());
        };
        if let Some(why) = self.filter.refuse(&k::labels(&node)) {
            self.record_all(c, actions, "refused", why);
            return Ok(());
        }
        let now = SystemTime::now();
        if let Some(own) = k::ownership(&node) {
            self.already_ours(rule, c, &node, &own, now).await;
            return Ok(());
        }
        if self.cfg.dry_run && inner.would.contains_key(c.node) {
            self.record_all(
                c,
                actions,
                "already_done",
                "dry run: already recorded as would-quarantine",
            );
            return Ok(());
        }
        if let Some(t) = k::time_annotation(&node, k::MANUAL_AT)
            && age(now, t) < self.cfg.limits.manual_override_cooldown
        {
            self.record_all(c, actions, "manual_override_cooldown", &format!("someone uncordoned this node at {}; hcclwatch waits limits.manual_override_cooldown ({:?})", k::time_value(t), self.cfg.limits.manual_override_cooldown));
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
            );
            return Ok(());
        }
        if let Err(e) = inner.rate.take(now) {
            self.record_all(c, actions, "rate_limited", &e.to_string());
            return Ok(());
        }
        if let Err(e) = inner.breaker.admit(c.node, inner.fleet.max(1), now) {
            tracing::error!(node = c.node, error = %e, "CIRCUIT BREAKER OPEN: hcclwatch stops quarantining nodes until the window passes; check the fleet, the fabric and the monitor");
            self.metrics.breaker_open.set(1);
            self.record_all(c, actions, "breaker_open", &e.to_string());
            return Ok(());
        }
        if self.cfg.dry_run {
            inner
                .would
                .insert(c.node.to_string(), (c.alert.fingerprint.clone(), now));
            for a in actions {
                self.record(
                    c,
                    a.as_str(),
                    "would_apply",
                    &self.describe(*a, rule, c.alert),
                );
            }
            tracing::warn!(
                node = c.node,
                "dry run: hcclwatch would quarantine this node (set dry_run = false to act)"
            );
            return Ok(());
        }

        let own = match self.mark(rule, c, now, node.clone()).await {
            Ok(own) => own,
            Err(e) => {
                inner.breaker.forget(c.node);
                let result = if matches!(e, ApiError::Forbidden(_)) {
                    "forbidden"
                } else {
                    "failed"
                };
                self.record_all(c, actions, result, &e.to_string());
                return if e.retryable() { Err(e) } else { Ok(()) };
            }
        };
        self.apply(rule, c, &node, &own).await;
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
    ) {
        let actions = &rule.actions;
        if own.actions.iter().any(|a| a == "cordon") && !k::cordoned(node) {
            self.note_manual_override(node, own, now, c.who).await;
            self.record_all(c, actions, "manual_override", "someone uncordoned this node after hcclwatch cordoned it; hcclwatch does not cordon it again during limits.manual_override_cooldown");
            return;
        }
        if let (Some(kind), false) = (&own.condition, self.cfg.dry_run) {
            // Alertmanager repeats a firing alert: refresh the condition's heartbeat.
            let _ = self
                .kube
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
        self.record_all(c, actions, "already_done", &detail);
    }

    /// After the node is marked: the rule's other actions (condition, event, hooks), each
    /// audited. Cordon and taint were done by [`Remediator::mark`]; `own` says which of
    /// them were hcclwatch's. A failure here is audited and does not undo the quarantine.
    async fn apply(&self, rule: &Rule, c: &Ctx<'_>, node: &Node, own: &[String]) {
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
                        );
                        continue;
                    }
                }
                Action::Condition => self
                    .kube
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
                    .kube
                    .event(node, "Warning", "HcclwatchQuarantine", &message(c.alert))
                    .await
                    .map(|_| "event written".to_string())
                    .map_err(|e| e.to_string()),
                Action::Exec => match &rule.exec {
                    Some(x) => super::hooks::run_exec(x, c.node, c.alert)
                        .await
                        .map_err(|e| e.to_string()),
                    None => continue,
                },
                Action::Webhook => match &rule.webhook {
                    Some(w) => super::hooks::run_webhook(w, c.node, c.alert)
                        .await
                        .map_err(|e| e.to_string()),
                    None => continue,
                },
            };
            // Either way the audit detail is the text: what was done, or why it failed.
            match r {
                Ok(d) => self.record(c, a.as_str(), "applied", &d),
                Err(d) => self.record(c, a.as_str(), "failed", &d),
            }
        }
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
                None => self.kube.get(c.node).await?,
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
            match self.kube.replace(&node).await {
                Ok(_) => return Ok(own),
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::Conflict(format!("node {} kept changing", c.node))))
    }

    async fn resolve(&self, inner: &mut Inner, rule: &Rule, c: &Ctx<'_>) -> Result<(), ApiError> {
        let release = [Action::Cordon];
        let rec = |result: &str, detail: &str| self.record(c, "release", result, detail);
        if self.paused() {
            rec(
                "paused",
                "the killswitch file exists; nothing is done while it does",
            );
            return Ok(());
        }
        let Some(node) = self.read(c, &release).await? else {
            return Ok(());
        };
        let Some(own) = k::ownership(&node) else {
            if self.cfg.dry_run && inner.would.remove(c.node).is_some() {
                rec("would_apply", "dry run: would release the node");
            } else {
                rec(
                    "not_ours",
                    "hcclwatch did not quarantine this node; leaving it alone",
                );
            }
            return Ok(());
        };
        if own.fingerprint != c.alert.fingerprint {
            rec(
                "kept",
                &format!(
                    "quarantined for another alert ({}); only that alert's resolution releases it",
                    own.fingerprint
                ),
            );
            return Ok(());
        }
        if self.cfg.dry_run {
            rec(
                "would_apply",
                &format!("dry run: would undo {}", own.actions.join(",")),
            );
            return Ok(());
        }
        let mut done = None;
        let mut last = None;
        // The first attempt uses the node as just read; a conflict reads it again.
        let mut fresh = Some(node.clone());
        for _ in 0..UPDATE_ATTEMPTS {
            let node = match fresh.take() {
                Some(n) => n,
                None => self.kube.get(c.node).await?,
            };
            let Some(own) = k::ownership(&node).filter(|o| o.fingerprint == c.alert.fingerprint)
            else {
                rec(
                    "not_ours",
                    "the ownership annotations were removed meanwhile; leaving the node alone",
                );
                return Ok(());
            };
            let (patch, manual, undone) = release_patch(&node, &own, SystemTime::now());
            match self.kube.patch_json(c.node, patch).await {
                Ok(_) => {
                    done = Some((own, manual, undone));
                    break;
                }
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => {
                    rec("failed", &e.to_string());
                    return if e.retryable() { Err(e) } else { Ok(()) };
                }
            }
        }
        let Some((own, manual, undone)) = done else {
            let e = last.unwrap_or_else(|| ApiError::Conflict("node kept changing".into()));
            rec("failed", &e.to_string());
            return Err(e);
        };
        if manual {
            self.metrics.manual_overrides.inc();
            rec(
                "manual_override",
                "someone had uncordoned the node by hand; left as it is, and not cordoned again during the cooldown",
            );
        }
        rec(
            "applied",
            &format!(
                "undid {}",
                if undone.is_empty() {
                    "nothing (already changed by someone else)".into()
                } else {
                    undone.join(",")
                }
            ),
        );
        if let Some(kind) = &own.condition {
            match self
                .kube
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
                Ok(()) => self.record(c, "condition", "applied", &format!("{kind}=False")),
                Err(e) => self.record(c, "condition", "failed", &e.to_string()),
            }
        }
        if rule.actions.contains(&Action::Event) {
            let r = self
                .kube
                .event(
                    &node,
                    "Normal",
                    "HcclwatchReleased",
                    &format!("{} resolved; hcclwatch released the node", c.alert.name()),
                )
                .await;
            match r {
                Ok(()) => self.record(c, "event", "applied", "release event written"),
                Err(e) => self.record(c, "event", "failed", &e.to_string()),
            }
        }
        if let Some(x) = rule
            .exec
            .as_ref()
            .filter(|x| x.on_resolved && rule.actions.contains(&Action::Exec))
        {
            match super::hooks::run_exec(x, c.node, c.alert).await {
                Ok(d) => self.record(c, "exec", "applied", &d),
                Err(e) => self.record(c, "exec", "failed", &e.to_string()),
            }
        }
        if let Some(w) = rule
            .webhook
            .as_ref()
            .filter(|w| w.on_resolved && rule.actions.contains(&Action::Webhook))
        {
            match super::hooks::run_webhook(w, c.node, c.alert).await {
                Ok(d) => self.record(c, "webhook", "applied", &d),
                Err(e) => self.record(c, "webhook", "failed", &e.to_string()),
            }
        }
        self.metrics.nodes_quarantined.dec();
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
        if self.cfg.dry_run {
            return;
        }
        let patch =
            serde_json::json!({"metadata": {"annotations": {k::MANUAL_AT: k::time_value(now)}}});
        if let Err(e) = self.kube.patch_strategic(&name, patch).await {
            tracing::error!(node = %name, error = %e, "cannot record the manual override on the node");
        }
    }

    /// Re-reads every node: fleet size, hcclwatch's quarantines (the breaker window after a
    /// restart), manual uncordons, condition heartbeats.
    pub async fn reconcile(&self) -> Result<(), ApiError> {
        let nodes = self.kube.list().await?;
        let mut inner = self.inner.lock().await;
        let now = SystemTime::now();
        inner.fleet = nodes.len();
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
            if let (Some(kind), false) = (&own.condition, self.cfg.dry_run) {
                let reason = self
                    .cfg
                    .rules
                    .iter()
                    .find(|r| r.condition.kind == *kind)
                    .map_or("HcclwatchQuarantine", |r| r.condition.reason.as_str());
                let _ = self
                    .kube
                    .set_condition(&name, kind, true, reason, &own.reason, false)
                    .await;
            }
        }
        recent.extend(inner.would.iter().map(|(n, (_, t))| (n.clone(), *t)));
        inner.breaker.rebuild(recent, now);
        let fleet = inner.fleet;
        if inner.breaker.refresh(fleet, now) {
            tracing::warn!(
                "circuit breaker closed: the window has slid past; hcclwatch acts again"
            );
        }
        self.metrics
            .breaker_open
            .set(i64::from(inner.breaker.is_open()));
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
            effect: rule.taint.effect.clone(),
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
