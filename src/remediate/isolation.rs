//! Per-NPU isolation: which DRA device an NPU alert names, and the `DeviceTaintRule` that
//! takes exactly that device out of scheduling.
//!
//! Kubernetes' dynamic resource allocation (DRA) lets an administrator taint one device
//! instead of a whole node (`resource.k8s.io/v1` `DeviceTaintRule`, KEP-5055). The rule
//! selects a device by driver, pool and device name, the three names the node's DRA driver
//! publishes in its `ResourceSlice`s. Ascend's DRA driver registers as `npu.huawei.com`,
//! publishes one pool per node named after the node, and names each physical NPU
//! `npu-<physical id>` (older releases: `Ascend910-<physical id>`). hcclwatch's alerts name
//! the NPU by its DCMI physical id (the `npu` label), so the default templates are
//! `{node}` for the pool and `npu-{npu}` for the device; both are configurable for other
//! drivers or releases.
//!
//! The rule's name is derived from the node and the device, so the same alert always
//! names the same rule: a repeated notification finds it and does nothing, a resolved one
//! deletes exactly it. Labels mark it as hcclwatch's and say which node it is on, so the
//! receiver can count a node's isolated NPUs with one list.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::config::Action;
use crate::config::Problem;
use crate::config::enums::config_enum;

/// The label every rule hcclwatch creates carries, with value [`MANAGER`].
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY`].
pub const MANAGER: &str = "hcclwatch";
/// The label that says which node's NPU a rule isolates (a label-safe form of the name).
pub const NODE_LABEL: &str = "hcclwatch.io/node";
/// Annotation: the node's full name.
pub const NODE: &str = "hcclwatch.io/node";
/// Annotation: the NPU's physical id as the alert gave it.
pub const NPU: &str = "hcclwatch.io/npu";
/// Annotation: the fingerprint of the alert that caused the rule.
pub const FINGERPRINT: &str = "hcclwatch.io/fingerprint";
/// Annotation: the alert's name and reason.
pub const REASON: &str = "hcclwatch.io/reason";
/// Annotation: when the rule was created (RFC 3339).
pub const AT: &str = "hcclwatch.io/quarantined-at";

config_enum! {
    /// The effect of a device taint.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum DeviceTaintEffect {
        /// New claims do not get the device; running pods stay.
        #[default]
        NoSchedule = "NoSchedule",
        /// As NoSchedule, and pods already using the device are evicted.
        NoExecute = "NoExecute",
    }
}

/// A rule's `[rules.npu]` section: how an alert's NPU maps to a DRA device, and what the
/// device taint is.
#[derive(Debug, Clone)]
pub struct NpuIsolation {
    /// The alert label that holds the NPU's physical id.
    pub label: String,
    /// The DRA driver (`ResourceSlice.spec.driver`).
    pub driver: String,
    /// The pool template; `{node}` and `{npu}` are replaced.
    pub pool: String,
    /// The device-name template; `{node}` and `{npu}` are replaced.
    pub device: String,
    /// The taint key.
    pub taint_key: String,
    /// The taint value; `{reason}` is the alert's `reason` label.
    pub taint_value: String,
    /// NoSchedule or NoExecute.
    pub effect: DeviceTaintEffect,
    /// The device must appear in one of the driver's ResourceSlices for the node, or the
    /// isolation is refused (a typo in a template then shows as a refusal, not as a rule
    /// that selects nothing).
    pub require_slice: bool,
    /// A node with more than this share of its NPUs isolated is quarantined as a whole
    /// with `node_actions`.
    pub max_share: f64,
    /// What is done to the node over the share (cordon, taint, condition, event, hooks).
    pub node_actions: Vec<Action>,
    /// When the NPU cannot be isolated (the cluster serves no ResourceSlices, or the
    /// driver does not publish the device), quarantine the node with `node_actions`
    /// instead of doing nothing: a cluster on the device plugin, or without DRA, still
    /// gets the bad NPU out of its jobs' way.
    pub fallback_to_node: bool,
}

/// `[rules.npu]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NpuIsolationFile {
    #[serde(default = "default_label")]
    label: String,
    #[serde(default = "default_driver")]
    driver: String,
    #[serde(default = "default_pool")]
    pool: String,
    #[serde(default = "default_device")]
    device: String,
    #[serde(default = "default_taint_key")]
    taint_key: String,
    #[serde(default = "default_taint_value")]
    taint_value: String,
    #[serde(default = "default_effect")]
    effect: String,
    #[serde(default = "default_true")]
    require_slice: bool,
    #[serde(default = "default_max_share")]
    max_share: f64,
    #[serde(default = "default_node_actions")]
    node_actions: Vec<Action>,
    #[serde(default = "default_true")]
    fallback_to_node: bool,
}

impl Default for NpuIsolationFile {
    fn default() -> Self {
        Self {
            label: default_label(),
            driver: default_driver(),
            pool: default_pool(),
            device: default_device(),
            taint_key: default_taint_key(),
            taint_value: default_taint_value(),
            effect: default_effect(),
            require_slice: true,
            max_share: default_max_share(),
            node_actions: default_node_actions(),
            fallback_to_node: true,
        }
    }
}

fn default_label() -> String {
    "npu".into()
}
fn default_driver() -> String {
    "npu.huawei.com".into()
}
fn default_pool() -> String {
    "{node}".into()
}
fn default_device() -> String {
    "npu-{npu}".into()
}
fn default_taint_key() -> String {
    "hcclwatch.io/npu-unhealthy".into()
}
fn default_taint_value() -> String {
    "{reason}".into()
}
fn default_effect() -> String {
    "NoSchedule".into()
}
const fn default_true() -> bool {
    true
}
const fn default_max_share() -> f64 {
    // More than one NPU of an eight-NPU server: the second bad NPU takes the node out.
    0.125
}
/// The node's actions over the share when `[rules.npu]` does not list them.
pub(super) fn default_node_actions() -> Vec<Action> {
    vec![Action::Cordon, Action::Event]
}

/// Whether a template uses only the placeholders it may.
fn template_ok(t: &str) -> Result<(), String> {
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("{t:?} has an unclosed '{{'"));
        };
        let name = &rest[open + 1..open + close];
        if name != "node" && name != "npu" {
            return Err(format!(
                "{t:?} uses {{{name}}}; only {{node}} and {{npu}} are replaced"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    Ok(())
}

impl NpuIsolationFile {
    /// The node's actions over the share, as written (checked in [`Self::check`]).
    pub(super) fn node_actions(&self) -> &[Action] {
        &self.node_actions
    }

    /// The section, or its problems (each key under `at`) added to `p`.
    pub(super) fn check(self, at: &str, p: &mut Vec<Problem>) -> Option<NpuIsolation> {
        let before = p.len();
        let mut push =
            |key: &str, reason: String| p.push(Problem::key(format!("{at}.{key}"), reason));
        if self.label.is_empty() {
            push(
                "label",
                "must name the alert label that holds the NPU's physical id".into(),
            );
        }
        if !super::payload::valid_qualified_name(&self.driver) {
            push(
                "driver",
                format!("{:?} is not a DRA driver name", self.driver),
            );
        }
        for (key, t) in [("pool", &self.pool), ("device", &self.device)] {
            if let Err(e) = template_ok(t) {
                push(key, e);
            }
        }
        if !super::payload::valid_qualified_name(&self.taint_key) {
            push(
                "taint_key",
                format!("{:?} is not a valid taint key", self.taint_key),
            );
        }
        let effect = DeviceTaintEffect::from_name(&self.effect);
        if effect.is_none() {
            push(
                "effect",
                format!("{:?}; use NoSchedule or NoExecute", self.effect),
            );
        }
        if !(self.max_share > 0.0 && self.max_share <= 1.0) {
            push(
                "max_share",
                format!(
                    "{} is not in (0, 1]; 1 never quarantines the node for its NPUs",
                    self.max_share
                ),
            );
        }
        if self.node_actions.is_empty() {
            push(
                "node_actions",
                "list at least one action (cordon, for instance)".into(),
            );
        }
        (p.len() == before).then(|| NpuIsolation {
            label: self.label,
            driver: self.driver,
            pool: self.pool,
            device: self.device,
            taint_key: self.taint_key,
            taint_value: self.taint_value,
            effect: effect.unwrap_or_default(),
            require_slice: self.require_slice,
            max_share: self.max_share,
            node_actions: self.node_actions,
            fallback_to_node: self.fallback_to_node,
        })
    }
}

/// The DRA device an NPU alert names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRef {
    /// The node.
    pub node: String,
    /// The NPU's physical id.
    pub npu: String,
    /// The driver.
    pub driver: String,
    /// The pool.
    pub pool: String,
    /// The device name.
    pub device: String,
}

impl NpuIsolation {
    /// The device for NPU `npu` on `node`. `npu` must be a physical id (digits), which keeps
    /// whatever an alert carries out of object names.
    pub fn device_for(&self, node: &str, npu: &str) -> Result<DeviceRef, String> {
        if npu.is_empty() || npu.len() > 5 || !npu.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "alert label {}={npu:?} is not an NPU physical id (digits)",
                self.label
            ));
        }
        let fill = |t: &str| t.replace("{node}", node).replace("{npu}", npu);
        Ok(DeviceRef {
            node: node.to_string(),
            npu: npu.to_string(),
            driver: self.driver.clone(),
            pool: fill(&self.pool),
            device: fill(&self.device),
        })
    }

    /// The taint value for an alert's `reason` label.
    pub fn taint_value(&self, reason: Option<&str>) -> String {
        let reason = reason
            .filter(|r| !r.is_empty() && super::payload::valid_label_value(r))
            .unwrap_or("quarantine");
        self.taint_value.replace("{reason}", reason)
    }

    /// The share of a node's `total` NPUs that `isolated` is, and whether it is over
    /// `max_share`. A node whose NPU count is unknown (0) is never over.
    pub fn over_share(&self, isolated: usize, total: usize) -> bool {
        total > 0 && isolated as f64 / total as f64 > self.max_share
    }
}

/// FNV-1a, 64 bits: a stable short digest for names (not a security boundary).
fn digest(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Lower-case, DNS-label-safe text, or `None` when that changes it.
fn dns_safe(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

impl DeviceRef {
    /// The `DeviceTaintRule`'s name: readable when node and device are DNS-safe and short
    /// enough, else a digest of all four names; always the same for the same device.
    pub fn rule_name(&self) -> String {
        let d = digest(&[&self.node, &self.driver, &self.pool, &self.device]);
        let readable = format!("hcclwatch-{}-{}", self.node, self.device);
        if dns_safe(&self.node) && dns_safe(&self.device) && readable.len() <= 200 {
            // The digest suffix keeps two drivers' devices of one name apart.
            format!("{readable}-{:08x}", d as u32)
        } else {
            format!("hcclwatch-npu-{d:016x}")
        }
    }

    /// The value of [`NODE_LABEL`] for the node: its name when it is a valid label value,
    /// else a digest.
    pub fn node_label(&self) -> String {
        node_label_value(&self.node)
    }
}

/// The value of [`NODE_LABEL`] for `node`.
pub fn node_label_value(node: &str) -> String {
    if node.len() <= 63 && super::payload::valid_label_value(node) {
        node.to_string()
    } else {
        format!("h-{:016x}", digest(&[node]))
    }
}

/// The labels of a rule hcclwatch creates for `d`.
pub fn rule_labels(d: &DeviceRef) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), MANAGER.to_string()),
        (NODE_LABEL.to_string(), d.node_label()),
    ])
}

/// How long ago `at` (an [`AT`] annotation) was, for the breaker's window.
pub fn parse_at(v: &str) -> Option<std::time::SystemTime> {
    let ts: jiff::Timestamp = v.parse().ok()?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NpuIsolation {
        let mut p = Vec::new();
        NpuIsolationFile::default()
            .check("rules[0].npu", &mut p)
            .unwrap()
    }

    #[test]
    fn default_templates_name_the_ascend_dra_device() {
        let d = cfg().device_for("node-7", "3").unwrap();
        assert_eq!(d.driver, "npu.huawei.com");
        assert_eq!(d.pool, "node-7");
        assert_eq!(d.device, "npu-3");
        let name = d.rule_name();
        assert!(name.starts_with("hcclwatch-node-7-npu-3-"), "{name}");
        assert!(name.len() <= 253);
        // Stable: the same alert names the same rule.
        assert_eq!(name, cfg().device_for("node-7", "3").unwrap().rule_name());
        assert_ne!(name, cfg().device_for("node-7", "4").unwrap().rule_name());
    }

    #[test]
    fn names_that_are_not_dns_safe_become_a_digest() {
        let d = cfg().device_for("Node_7", "3").unwrap();
        let name = d.rule_name();
        assert!(
            name.starts_with("hcclwatch-npu-") && name.len() == 30,
            "{name}"
        );
        let long = "n".repeat(100);
        assert_eq!(node_label_value(&long).len(), 18);
        assert_eq!(node_label_value("node-7"), "node-7");
    }

    #[test]
    fn npu_ids_must_be_digits() {
        for bad in ["", "3; rm", "abc", "123456", "-1"] {
            let e = cfg().device_for("n", bad).unwrap_err();
            assert!(e.contains("label npu="), "{e}");
        }
    }

    #[test]
    fn bad_sections_name_each_key() {
        let f = NpuIsolationFile {
            device: "dev-{card}".into(),
            pool: "{node".into(),
            effect: "PreferNoSchedule".into(),
            max_share: 0.0,
            driver: "bad driver".into(),
            node_actions: vec![],
            ..Default::default()
        };
        let mut p = Vec::new();
        assert!(f.check("rules[2].npu", &mut p).is_none());
        let text: Vec<String> = p.iter().map(|x| x.to_string()).collect();
        let all = text.join("\n");
        for key in [
            "rules[2].npu.device",
            "rules[2].npu.pool",
            "rules[2].npu.effect",
            "rules[2].npu.max_share",
            "rules[2].npu.driver",
            "rules[2].npu.node_actions",
        ] {
            assert!(all.contains(key), "{key} missing in {all}");
        }
    }

    #[test]
    fn share_is_strictly_over() {
        let c = cfg(); // 0.125
        assert!(!c.over_share(1, 8));
        assert!(c.over_share(2, 8));
        assert!(c.over_share(1, 4));
        assert!(!c.over_share(5, 0));
    }
}
