//! The firing side: an alert for a node walks the safety rails and, once admitted, the
//! node is marked (cordon, taint, ownership annotations in one conditional replace) and
//! the rule's other actions follow, each audited.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::nodes::Condition;
use super::{Ctx, HandleError, Remediator, UPDATE_ATTEMPTS, age};
use crate::remediate::audit::AuditAction;
use crate::remediate::config::{Action, Rule};
use crate::remediate::hooks::HookError;
use crate::remediate::kube::{self as k, ApiError};
use crate::remediate::lifecycle as life;
use crate::remediate::outcome::Outcome;
use crate::remediate::payload::{Alert, valid_label_value};
use crate::remediate::safety::{BreakerOpen, RateLimited};

/// Why one of the rule's actions after the mark failed; its text is the audit detail.
#[derive(Debug, thiserror::Error)]
enum StepError {
    /// A Kubernetes call.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A hook.
    #[error(transparent)]
    Hook(#[from] HookError),
}

/// Why a quarantine is held back after every check of the node passed.
#[derive(Debug, thiserror::Error)]
enum Held {
    /// `limits.max_actions_per_minute` is reached.
    #[error(transparent)]
    Rate(#[from] RateLimited),
    /// The circuit breaker is open.
    #[error(transparent)]
    Breaker(#[from] BreakerOpen),
}

impl Held {
    /// The outcome it is recorded as.
    fn outcome(&self) -> Outcome {
        match self {
            Held::Rate(_) => Outcome::RateLimited,
            Held::Breaker(_) => Outcome::BreakerOpen,
        }
    }
}

impl Remediator {
    pub(super) async fn fire(&self, rule: &Rule, c: &Ctx<'_>) -> Result<(), HandleError> {
        let actions = &rule.actions;
        if self.paused() {
            self.record_all(
                c,
                actions,
                Outcome::Paused,
                "the killswitch file exists; nothing is done while it does",
            )
            .await?;
            return Ok(());
        }
        let Some(node) = self.read(c, actions).await? else {
            return Ok(());
        };
        if let Some(why) = self.filter.refuse(&k::labels(&node)) {
            self.record_all(c, actions, Outcome::Refused, why).await?;
            return Ok(());
        }
        let now = SystemTime::now();
        if let Some(why) = self.held_healthy(&node, now) {
            self.record_all(c, actions, Outcome::OverrideHealthy, &why)
                .await?;
            return Ok(());
        }
        if let Some(own) = k::ownership(&node) {
            self.already_ours(rule, c, &node, &own, now).await?;
            return self.escalate_if_due(c).await;
        }
        // A person's quarantine (a `quarantined` override) does not wait for a cooldown.
        let operator = c.alert.fingerprint == life::OVERRIDE;
        if let Some((result, why)) = self.cooling_down(&node, now).filter(|_| !operator) {
            self.record_all(c, actions, result, &why).await?;
            return Ok(());
        }
        if let Err(held) = self.admit(c.node, now) {
            if let Held::Breaker(why) = &held {
                tracing::error!(node = c.node, error = %why, "CIRCUIT BREAKER OPEN: hcclwatch stops quarantining nodes until the window passes; check the fleet, the fabric and the monitor");
                self.metrics.breaker_open.set(1);
            }
            return self
                .record_all(c, actions, held.outcome(), &held.to_string())
                .await;
        }
        let give_back = || {
            let mut inner = self.inner();
            inner.breaker.forget(c.node);
            inner.rate.give_back(now);
        };
        if self.nodes.changes_cluster() {
            // The record comes first: no change to a node without it on disk.
            let planned = k::actions_value(actions);
            if let Err(e) = self
                .record(c, AuditAction::Quarantine, Outcome::Intent, &planned)
                .await
            {
                give_back();
                return Err(e);
            }
        } else {
            tracing::warn!(
                node = c.node,
                "dry run: hcclwatch would quarantine this node (set dry_run = false to act)"
            );
        }
        let own = match self.mark(rule, c, now, node.clone()).await {
            Ok(own) => own,
            Err(e) => {
                give_back();
                let result = if matches!(e, ApiError::Forbidden(_)) {
                    Outcome::Forbidden
                } else {
                    Outcome::Failed
                };
                self.record_all(c, actions, result, &e.to_string()).await?;
                return if e.retryable() { Err(e.into()) } else { Ok(()) };
            }
        };
        self.apply(rule, c, &node, &own).await?;
        self.metrics.nodes_quarantined.inc();
        self.observe_latency(c.alert);
        tracing::warn!(
            node = c.node,
            alertname = c.alert.name(),
            "node quarantined"
        );
        self.escalate_if_due(c).await
    }

    /// The alert's start to now, into the latency histogram (nothing when no start was
    /// sent).
    fn observe_latency(&self, alert: &Alert) {
        let Some(start) = alert.started() else {
            return;
        };
        let seconds = (Timestamp::now().as_nanosecond() - start.as_nanosecond()) as f64 / 1e9;
        let reason = alert.labels.get("reason").map_or("", String::as_str);
        self.metrics
            .alert_to_action(alert.name(), reason, alert.source.as_str(), seconds);
    }

    /// A cooldown that holds the node back: a manual uncordon within
    /// `limits.manual_override_cooldown`, or a release by hcclwatch within
    /// `limits.node_cooldown`; with the audit detail.
    fn cooling_down(&self, node: &Node, now: SystemTime) -> Option<(Outcome, String)> {
        let limits = &self.cfg.limits;
        if let Some(t) = k::time_annotation(node, k::MANUAL_AT)
            && age(now, t) < limits.manual_override_cooldown
        {
            return Some((
                Outcome::ManualOverrideCooldown,
                format!(
                    "someone uncordoned this node at {}; hcclwatch waits limits.manual_override_cooldown ({:?})",
                    k::time_value(t),
                    limits.manual_override_cooldown
                ),
            ));
        }
        if let Some(t) = k::time_annotation(node, k::RELEASED_AT)
            && age(now, t) < limits.node_cooldown
        {
            return Some((
                Outcome::Cooldown,
                format!(
                    "hcclwatch released this node at {}; limits.node_cooldown is {:?}",
                    k::time_value(t),
                    limits.node_cooldown
                ),
            ));
        }
        None
    }

    /// Reserves a rate-limit and a breaker slot under the short lock (both are given back
    /// if the quarantine does not happen), or says which refused, and why.
    fn admit(&self, node: &str, now: SystemTime) -> Result<(), Held> {
        let mut inner = self.inner();
        let fleet = inner.fleet.max(1);
        inner.rate.take(now)?;
        if let Err(e) = inner.breaker.admit(node, fleet, now) {
            inner.rate.give_back(now);
            return Err(e.into());
        }
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
        if own.actions.contains(&Action::Cordon) && !k::cordoned(node) {
            self.note_manual_override(node, own, now, c.who).await;
            return self.record_all(c, actions, Outcome::ManualOverride, "someone uncordoned this node after hcclwatch cordoned it; hcclwatch does not cordon it again during limits.manual_override_cooldown").await;
        }
        if let Some(kind) = &own.condition {
            // Alertmanager repeats a firing alert: refresh the condition's heartbeat.
            let heartbeat = Condition {
                kind,
                status: true,
                reason: &rule.condition.reason,
                message: &message(c.alert),
                transition: false,
            };
            let _ = self.nodes.set_condition(c.node, &heartbeat).await;
        }
        let detail = format!(
            "already quarantined by hcclwatch ({}) for alert {}",
            own.reason, own.fingerprint
        );
        self.record_all(c, actions, Outcome::AlreadyDone, &detail)
            .await
    }

    /// After the node is marked: the rule's other actions (condition, event, hooks), each
    /// audited. Cordon and taint were done by [`Remediator::mark`]; `own` says which of
    /// them were hcclwatch's. A failure here is audited and does not undo the quarantine.
    async fn apply(
        &self,
        rule: &Rule,
        c: &Ctx<'_>,
        node: &Node,
        own: &[Action],
    ) -> Result<(), HandleError> {
        for a in &rule.actions {
            let r = match a {
                Action::Cordon | Action::Taint => {
                    if own.contains(a) {
                        Ok(self.describe(*a, rule, c.alert))
                    } else {
                        self.record(
                            c,
                            (*a).into(),
                            Outcome::AlreadyDone,
                            "the node already had it before hcclwatch; not hcclwatch's to undo",
                        )
                        .await?;
                        continue;
                    }
                }
                Action::Condition => {
                    let set = Condition {
                        kind: &rule.condition.kind,
                        status: true,
                        reason: &rule.condition.reason,
                        message: &message(c.alert),
                        transition: true,
                    };
                    self.nodes
                        .set_condition(c.node, &set)
                        .await
                        .map(|_| format!("{}=True", rule.condition.kind))
                        .map_err(StepError::from)
                }
                Action::Event => self
                    .nodes
                    .event(node, "Warning", "HcclwatchQuarantine", &message(c.alert))
                    .await
                    .map(|_| "event written".to_string())
                    .map_err(StepError::from),
                Action::Exec => match &rule.exec {
                    Some(x) => self
                        .nodes
                        .exec(x, c.node, c.alert)
                        .await
                        .map_err(StepError::from),
                    None => continue,
                },
                Action::Webhook => match &rule.webhook {
                    Some(w) => self
                        .nodes
                        .webhook(w, c.node, c.alert)
                        .await
                        .map_err(StepError::from),
                    None => continue,
                },
                // Never a node action: a rule that isolates NPUs goes through `npu`.
                Action::IsolateNpu => continue,
            };
            // Either way the audit detail is the text: what was done, or why it failed.
            match r {
                Ok(d) => self.record(c, (*a).into(), Outcome::Applied, &d).await?,
                Err(e) => {
                    self.record(c, (*a).into(), Outcome::Failed, &e.to_string())
                        .await?
                }
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
    ) -> Result<Vec<Action>, ApiError> {
        let taint = self.taint(rule, c.alert);
        let mut last = None;
        let mut fresh = Some(read);
        for _ in 0..UPDATE_ATTEMPTS {
            let mut node = match fresh.take() {
                Some(n) => n,
                None => self.nodes.get(c.node).await?,
            };
            if let Some(o) = k::ownership(&node) {
                return Ok(o.actions);
            }
            let spec = node.spec.get_or_insert_default();
            let mut own = Vec::new();
            if rule.actions.contains(&Action::Cordon) && !spec.unschedulable.unwrap_or(false) {
                spec.unschedulable = Some(true);
                own.push(Action::Cordon);
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
                    own.push(Action::Taint);
                }
            }
            if rule.actions.contains(&Action::Condition) {
                own.push(Action::Condition);
            }
            let a = node.metadata.annotations.get_or_insert_default();
            a.insert(k::BY.into(), k::OWNER.into());
            a.insert(k::REASON.into(), reason_text(c.alert));
            a.insert(k::AT.into(), k::time_value(now));
            a.insert(k::FINGERPRINT.into(), c.alert.fingerprint.clone());
            a.insert(k::ACTIONS.into(), k::actions_value(&own));
            if c.alert.fingerprint != life::OVERRIDE {
                // Recurrence: each quarantine an alert caused is an incident.
                let window = self.cfg.escalation.window;
                let v = life::with_incident(a, now, &reason_text(c.alert), window);
                a.insert(life::INCIDENTS.into(), v);
            }
            if own.contains(&Action::Taint) {
                a.insert(k::TAINT.into(), k::taint_string(&taint));
            }
            if own.contains(&Action::Condition) {
                a.insert(k::CONDITION.into(), rule.condition.kind.clone());
            }
            match self.nodes.replace(&node).await {
                Ok(_) => return Ok(own),
                Err(e @ ApiError::Conflict(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::Conflict(format!("node {} kept changing", c.node))))
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
            Action::IsolateNpu => "isolate_npu".into(),
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
