//! One NPU out of scheduling instead of its node: the `isolate_npu` action.
//!
//! A firing NPU alert walks the same rails as a node quarantine (killswitch, the node's
//! existence, the selectors on the node's labels, the global rate limit) and a circuit
//! breaker of its own that counts NPUs (`breaker.max_npus`). The NPU is named as a DRA
//! device (see `isolation`); unless `npu.require_slice` is off, the device must be one the
//! node's driver publishes, so a wrong template is a refusal in the audit log rather than
//! a rule that selects nothing. The intent is audited (and synced) before the rule is
//! created, as for a node.
//!
//! After the NPU, its node: when more than `npu.max_share` of the node's NPUs are isolated,
//! the node is quarantined with `npu.node_actions` through the node path (so every node
//! rail, the node breaker and the cooldowns included, applies), owned by the alert that
//! crossed the share. A resolved NPU alert deletes exactly its rule (guarded by the rule's
//! `resourceVersion`), and releases the node only if that alert is the one that
//! quarantined it.

use std::time::SystemTime;

use k8s_openapi::api::resource::v1::{
    DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Ctx, HandleError, Remediator};
use crate::remediate::audit::AuditAction;
use crate::remediate::config::{Action, Rule};
use crate::remediate::isolation::{self as iso, DeviceRef, NpuIsolation};
use crate::remediate::kube::{self as k, ApiError};
use crate::remediate::outcome::Outcome;

/// The NPU breaker refused an isolation.
#[derive(Debug, thiserror::Error)]
#[error(
    "NPU circuit breaker open: {limit} NPU(s) isolated in the last {window:?} (breaker.max_npus); not isolating {device}"
)]
struct NpuBreakerOpen {
    limit: usize,
    window: std::time::Duration,
    device: String,
}

/// The distinct devices of `pool` in `slices` (of the pool's newest generation), sorted.
pub(super) fn pool_devices(slices: &[ResourceSlice], pool: &str) -> Vec<String> {
    let of_pool = || slices.iter().filter(|s| s.spec.pool.name == pool);
    let Some(newest) = of_pool().map(|s| s.spec.pool.generation).max() else {
        return Vec::new();
    };
    let mut names: Vec<String> = of_pool()
        .filter(|s| s.spec.pool.generation == newest)
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn rule_object(cfg: &NpuIsolation, d: &DeviceRef, c: &Ctx<'_>, now: SystemTime) -> DeviceTaintRule {
    let reason = c.alert.labels.get("reason").map(String::as_str);
    let annotations = [
        (iso::NODE, d.node.clone()),
        (iso::NPU, d.npu.clone()),
        (iso::FINGERPRINT, c.alert.fingerprint.clone()),
        (
            iso::REASON,
            match reason {
                Some(r) => format!("{}: {r}", c.alert.name()),
                None => c.alert.name().to_string(),
            },
        ),
        (iso::AT, k::time_value(now)),
    ];
    DeviceTaintRule {
        metadata: ObjectMeta {
            name: Some(d.rule_name()),
            labels: Some(iso::rule_labels(d)),
            annotations: Some(
                annotations
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                driver: Some(d.driver.clone()),
                pool: Some(d.pool.clone()),
                device: Some(d.device.clone()),
            }),
            taint: DeviceTaint {
                key: cfg.taint_key.clone(),
                value: Some(cfg.taint_value(reason)).filter(|v| !v.is_empty()),
                effect: cfg.effect.as_str().to_string(),
                time_added: None,
            },
        },
        status: None,
    }
}

fn describe(cfg: &NpuIsolation, d: &DeviceRef) -> String {
    format!(
        "DeviceTaintRule {}: taint {}={}:{} on device {}/{}/{} (NPU {} of node {})",
        d.rule_name(),
        cfg.taint_key,
        cfg.taint_value.as_str(),
        cfg.effect.as_str(),
        d.driver,
        d.pool,
        d.device,
        d.npu,
        d.node
    )
}

fn failed(e: &ApiError) -> Outcome {
    if matches!(e, ApiError::Forbidden(_)) {
        Outcome::Forbidden
    } else {
        Outcome::Failed
    }
}

impl Remediator {
    /// The device an NPU alert names, or the refusal (audited) when the alert does not name
    /// one.
    async fn device(
        &self,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
        action: AuditAction,
    ) -> Result<Option<DeviceRef>, HandleError> {
        let npu = c.alert.labels.get(&cfg.label).map_or("", String::as_str);
        match cfg.device_for(c.node, npu) {
            Ok(d) => Ok(Some(d)),
            Err(why) => {
                self.record(c, action, Outcome::Refused, &why).await?;
                Ok(None)
            }
        }
    }

    /// The firing side of `isolate_npu`.
    pub(super) async fn isolate(
        &self,
        rule: &Rule,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
    ) -> Result<(), HandleError> {
        let act = AuditAction::IsolateNpu;
        if self.paused() {
            let why = "the killswitch file exists; nothing is done while it does";
            return self.record(c, act, Outcome::Paused, why).await;
        }
        let Some(d) = self.device(cfg, c, act).await? else {
            return Ok(());
        };
        let Some(node) = self.read(c, &[Action::IsolateNpu]).await? else {
            return Ok(());
        };
        if let Some(why) = self.filter.refuse(&k::labels(&node)) {
            return self.record(c, act, Outcome::Refused, why).await;
        }
        let npu: u32 = d.npu.parse().unwrap_or(u32::MAX);
        if let Some(why) = self.npu_held_healthy(&node, npu, SystemTime::now()) {
            return self.record(c, act, Outcome::OverrideHealthy, &why).await;
        }
        let name = d.rule_name();
        let existing = match self.dra.get_rule(&name).await {
            Ok(r) => r,
            Err(e) => return self.api_failed(c, act, e).await,
        };
        let slices = match self.dra.slices(&d.driver, c.node).await {
            Ok(s) => s,
            Err(ApiError::NotFound(_)) if existing.is_none() => {
                let why = "the cluster serves no resource.k8s.io/v1 ResourceSlices (DRA is off, or the Kubernetes version predates it)";
                return self.cannot_isolate(rule, cfg, c, why.into()).await;
            }
            Err(e) => return self.api_failed(c, act, e).await,
        };
        let devices = pool_devices(&slices, &d.pool);
        if existing.is_some() {
            let why = format!(
                "NPU {} is already isolated by DeviceTaintRule {name}",
                d.npu
            );
            self.record(c, act, Outcome::AlreadyDone, &why).await?;
            return self.over_share(rule, cfg, c, &d, devices.len()).await;
        }
        if cfg.require_slice && !devices.contains(&d.device) {
            let why = format!(
                "driver {} publishes no device {:?} in pool {:?} for node {} ({} device(s) there); check [rules.npu] device and pool templates, or set npu.require_slice = false",
                d.driver,
                d.device,
                d.pool,
                d.node,
                devices.len()
            );
            return self.cannot_isolate(rule, cfg, c, why).await;
        }
        if !self.create_isolation(cfg, c, &d).await? {
            return Ok(());
        }
        self.over_share(rule, cfg, c, &d, devices.len()).await
    }

    /// The NPU cannot be isolated: refused (audited with why), and with
    /// `npu.fallback_to_node` its node is quarantined instead through the node path.
    async fn cannot_isolate(
        &self,
        rule: &Rule,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
        why: String,
    ) -> Result<(), HandleError> {
        if !cfg.fallback_to_node {
            return self
                .record(c, AuditAction::IsolateNpu, Outcome::Refused, &why)
                .await;
        }
        let why = format!("{why}; quarantining the node instead (npu.fallback_to_node)");
        self.record(c, AuditAction::IsolateNpu, Outcome::Refused, &why)
            .await?;
        self.fire(&node_rule(rule, cfg), c).await
    }

    /// Admits, audits and creates the rule; `false` when it was held back or failed
    /// (audited either way).
    async fn create_isolation(
        &self,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
        d: &DeviceRef,
    ) -> Result<bool, HandleError> {
        let act = AuditAction::IsolateNpu;
        let now = SystemTime::now();
        let name = d.rule_name();
        if let Err(held) = self.admit_npu(&name, now) {
            let outcome = match held {
                Ok(_) => Outcome::BreakerOpen,
                Err(_) => Outcome::RateLimited,
            };
            let why = match held {
                Ok(b) => b.to_string(),
                Err(r) => r.to_string(),
            };
            if outcome == Outcome::BreakerOpen {
                tracing::error!(node = c.node, npu = %d.npu, error = %why, "NPU CIRCUIT BREAKER OPEN: hcclwatch stops isolating NPUs until the window passes");
            }
            self.record(c, act, outcome, &why).await?;
            return Ok(false);
        }
        let give_back = || {
            let mut inner = self.inner();
            inner.npu_breaker.forget(&name);
            inner.rate.give_back(now);
        };
        let what = describe(cfg, d);
        if self.nodes.changes_cluster() {
            // The record comes first: no change without it on disk.
            if let Err(e) = self
                .record(c, AuditAction::IsolateNpu, Outcome::Intent, &what)
                .await
            {
                give_back();
                return Err(e);
            }
        }
        match self.dra.create_rule(&rule_object(cfg, d, c, now)).await {
            Ok(_) => {
                self.metrics.npus_isolated.inc();
                tracing::warn!(node = c.node, npu = %d.npu, device = %d.device, "NPU isolated");
                self.record(c, AuditAction::IsolateNpu, Outcome::Applied, &what)
                    .await?;
                Ok(true)
            }
            Err(ApiError::Conflict(_)) => {
                // Created meanwhile (another replica, or a retry whose answer was lost).
                give_back();
                let why = format!("DeviceTaintRule {name} exists already");
                self.record(c, AuditAction::IsolateNpu, Outcome::AlreadyDone, &why)
                    .await?;
                Ok(true)
            }
            Err(e) => {
                give_back();
                self.api_failed(c, AuditAction::IsolateNpu, e).await?;
                Ok(false)
            }
        }
    }

    /// Records a failed API call; a transient one is returned for a retry.
    async fn api_failed(
        &self,
        c: &Ctx<'_>,
        act: AuditAction,
        e: ApiError,
    ) -> Result<(), HandleError> {
        self.record(c, act, failed(&e), &e.to_string()).await?;
        if e.retryable() { Err(e.into()) } else { Ok(()) }
    }

    /// Reserves a rate-limit and an NPU-breaker slot, or says which refused (`Ok`: the
    /// breaker, `Err`: the rate limit).
    fn admit_npu(
        &self,
        key: &str,
        now: SystemTime,
    ) -> Result<(), Result<NpuBreakerOpen, crate::remediate::safety::RateLimited>> {
        let mut inner = self.inner();
        inner.rate.take(now).map_err(Err)?;
        let max = self.cfg.breaker.max_npus;
        if inner.npu_breaker.admit(key, max, now).is_err() {
            inner.rate.give_back(now);
            return Err(Ok(NpuBreakerOpen {
                limit: max,
                window: self.cfg.breaker.window,
                device: key.to_string(),
            }));
        }
        Ok(())
    }

    /// Quarantines the node through the node path when more than `max_share` of its
    /// `total` NPUs are isolated.
    async fn over_share(
        &self,
        rule: &Rule,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
        d: &DeviceRef,
        total: usize,
    ) -> Result<(), HandleError> {
        let isolated = match self.dra.list_rules(Some(&d.node_label())).await {
            Ok(r) => r.len(),
            Err(e) => return self.api_failed(c, AuditAction::Quarantine, e).await,
        };
        if !cfg.over_share(isolated, total) {
            return Ok(());
        }
        tracing::warn!(
            node = c.node,
            isolated,
            total,
            max_share = cfg.max_share,
            "more of the node's NPUs are isolated than npu.max_share allows: quarantining the node"
        );
        self.fire(&node_rule(rule, cfg), c).await
    }

    /// The resolved side of `isolate_npu`: deletes this alert's rule, then releases the
    /// node if this alert quarantined it.
    pub(super) async fn restore(
        &self,
        rule: &Rule,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
    ) -> Result<(), HandleError> {
        let act = AuditAction::Release;
        if self.paused() {
            let why = "the killswitch file exists; nothing is done while it does";
            return self.record(c, act, Outcome::Paused, why).await;
        }
        let Some(d) = self.device(cfg, c, act).await? else {
            return Ok(());
        };
        let name = d.rule_name();
        let rule_now = match self.dra.get_rule(&name).await {
            Ok(r) => r,
            Err(e) => return self.api_failed(c, act, e).await,
        };
        match rule_now {
            None => {
                let why = format!("no DeviceTaintRule {name}: NPU {} is not isolated", d.npu);
                self.record(c, act, Outcome::NotOurs, &why).await?;
            }
            Some(r) => self.delete_isolation(c, &d, &r).await?,
        }
        self.release_node_if_ours(rule, cfg, c).await
    }

    async fn delete_isolation(
        &self,
        c: &Ctx<'_>,
        d: &DeviceRef,
        r: &DeviceTaintRule,
    ) -> Result<(), HandleError> {
        let act = AuditAction::Release;
        let name = d.rule_name();
        let labels = r.metadata.labels.clone().unwrap_or_default();
        let notes = r.metadata.annotations.clone().unwrap_or_default();
        if labels.get(iso::MANAGED_BY).map(String::as_str) != Some(iso::MANAGER) {
            let why = format!("DeviceTaintRule {name} is not hcclwatch's; leaving it alone");
            return self.record(c, act, Outcome::NotOurs, &why).await;
        }
        let by = notes.get(iso::FINGERPRINT).map_or("", String::as_str);
        if by != c.alert.fingerprint {
            let why = format!(
                "NPU {} is isolated for another alert ({by}); only that alert's resolution releases it",
                d.npu
            );
            return self.record(c, act, Outcome::Kept, &why).await;
        }
        let what = format!(
            "delete DeviceTaintRule {name} (NPU {} of node {})",
            d.npu, d.node
        );
        if self.nodes.changes_cluster() {
            self.record(c, act, Outcome::Intent, &what).await?;
        }
        let rv = r.metadata.resource_version.clone().unwrap_or_default();
        match self.dra.delete_rule(&name, &rv).await {
            Ok(()) => {
                self.metrics.npus_isolated.dec();
                tracing::info!(node = c.node, npu = %d.npu, "NPU released");
                self.record(c, act, Outcome::Applied, &what).await
            }
            Err(ApiError::NotFound(_)) => {
                self.record(
                    c,
                    act,
                    Outcome::AlreadyDone,
                    "the rule was deleted meanwhile",
                )
                .await
            }
            Err(e) => self.api_failed(c, act, e).await,
        }
    }

    /// Releases the node when this alert is the one that quarantined it over the share.
    async fn release_node_if_ours(
        &self,
        rule: &Rule,
        cfg: &NpuIsolation,
        c: &Ctx<'_>,
    ) -> Result<(), HandleError> {
        let node = match self.nodes.get(c.node).await {
            Ok(n) => n,
            // Gone or unreadable: the NPU side is done; nothing on the node to undo here.
            Err(ApiError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if k::ownership(&node).is_some_and(|o| o.fingerprint == c.alert.fingerprint) {
            return self.resolve(&node_rule(rule, cfg), c).await;
        }
        Ok(())
    }
}

/// The rule the node path runs when a node's NPUs cross the share.
fn node_rule(rule: &Rule, cfg: &NpuIsolation) -> Rule {
    Rule {
        actions: cfg.node_actions.clone(),
        npu: None,
        ..rule.clone()
    }
}
