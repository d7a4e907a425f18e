//! The receiver's configuration file (`hcclwatch remediate --config.file PATH`).
//!
//! It is a file of its own, not a section of the daemon's: the receiver runs once per
//! cluster with Kubernetes credentials, the daemon once per node with none. Every table
//! denies unknown keys, and [`RemediateConfig::load`] reports *every* problem at once, each
//! naming the file and the key, so a bad rule is found before the receiver acts on
//! anything. Defaults are the safe ones: dry-run on, a breaker of 3 nodes or 10 % per hour.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::duration;

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: missing, not a regular file, too large, or the read hung.
        source: crate::config::file::FileError,
    },
    /// The file is not valid TOML for this schema, or its values are inconsistent.
    #[error("{path}: {}", problems.join(&format!("\n{}: ", path.display())))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found, as `key: reason`.
        problems: Vec<String>,
    },
}

/// The whole receiver configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemediateConfig {
    /// Address of the webhook, `/metrics` and the health endpoints.
    #[serde(default = "default_listen")]
    pub listen_address: String,
    /// Log and count what would be done, but change nothing. On unless set to false.
    #[serde(default = "default_true")]
    pub dry_run: bool,
    /// The alert label that names the Kubernetes node.
    #[serde(default = "default_node_label")]
    pub node_label: String,
    /// Append-only JSON-lines audit log, fsynced per record.
    pub audit_log: PathBuf,
    /// While this file exists, every action is paused (logged and audited as `paused`).
    #[serde(default)]
    pub killswitch_file: Option<PathBuf>,
    /// Largest accepted webhook body.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// How often node state is re-read (manual uncordons, fleet size, breaker window).
    #[serde(default = "default_reconcile", with = "duration::serde_str")]
    pub reconcile_interval: Duration,
    /// Who may call the webhook.
    pub auth: AuthConfig,
    /// A Prometheus exporter-toolkit web config file: TLS for every endpoint, and basic
    /// auth for `/metrics` (the webhook keeps its own `[auth]`).
    #[serde(default)]
    pub web_config_file: Option<PathBuf>,
    /// Open connections at most.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Time a client has to send a request head.
    #[serde(default = "default_header_read_timeout", with = "duration::serde_str")]
    pub header_read_timeout: Duration,
    /// How to reach the Kubernetes API.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// The fleet-wide circuit breaker.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// Per-node cooldowns and the global rate limit.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Which nodes may be acted on.
    #[serde(default)]
    pub selectors: SelectorConfig,
    /// Alert-to-action rules; the first rule that matches an alert applies.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// Webhook authentication: a bearer token or HTTP basic auth, secrets read from files.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// File holding the bearer token Alertmanager sends (`http_config.authorization`).
    pub bearer_token_file: Option<PathBuf>,
    /// Basic-auth user name.
    pub basic_username: Option<String>,
    /// File holding the basic-auth password.
    pub basic_password_file: Option<PathBuf>,
}

/// Kubernetes API access.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// A kubeconfig file; unset: in-cluster service account (or `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// Namespace the node Events are written to.
    #[serde(default = "default_event_namespace")]
    pub event_namespace: String,
    /// Bound on every API call; past it the call counts as a transient failure (503).
    #[serde(default = "default_api_timeout", with = "duration::serde_str")]
    pub timeout: Duration,
}

/// At most `max_nodes` nodes, or `max_percent` of the fleet, quarantined in `window`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Nodes.
    #[serde(default = "default_max_nodes")]
    pub max_nodes: usize,
    /// Percent of the nodes the API lists.
    #[serde(default = "default_max_percent")]
    pub max_percent: f64,
    /// The sliding window.
    #[serde(default = "default_window", with = "duration::serde_str")]
    pub window: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            max_nodes: default_max_nodes(),
            max_percent: default_max_percent(),
            window: default_window(),
        }
    }
}

/// Cooldowns and the global rate limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// A node released by hcclwatch is not quarantined again for this long.
    #[serde(default = "default_node_cooldown", with = "duration::serde_str")]
    pub node_cooldown: Duration,
    /// A node someone uncordoned by hand is not cordoned again for this long.
    #[serde(default = "default_manual_cooldown", with = "duration::serde_str")]
    pub manual_override_cooldown: Duration,
    /// Quarantines per minute across the fleet.
    #[serde(default = "default_rate")]
    pub max_actions_per_minute: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            node_cooldown: default_node_cooldown(),
            manual_override_cooldown: default_manual_cooldown(),
            max_actions_per_minute: default_rate(),
        }
    }
}

/// Node label selectors (`key=value`, `key!=value`, `key`, `!key`, comma = and).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectorConfig {
    /// A node must match at least one (empty: every node).
    #[serde(default)]
    pub allow: Vec<String>,
    /// A node that matches any is never acted on.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// One alert-to-actions rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Alert name to match.
    pub alertname: String,
    /// Further labels the alert must carry with these values.
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Actions, applied in this order: `cordon`, `taint`, `condition`, `event`, `exec`,
    /// `webhook`.
    pub actions: Vec<Action>,
    /// The taint (for `taint`).
    #[serde(default)]
    pub taint: TaintConfig,
    /// The node condition (for `condition`).
    #[serde(default)]
    pub condition: ConditionConfig,
    /// The command (for `exec`).
    pub exec: Option<ExecConfig>,
    /// The HTTP endpoint (for `webhook`).
    pub webhook: Option<WebhookConfig>,
}

/// What a rule can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// `spec.unschedulable = true`.
    Cordon,
    /// Add the rule's taint.
    Taint,
    /// Set the rule's node condition True (False on recovery).
    Condition,
    /// Write an Event on the node.
    Event,
    /// Run a command.
    Exec,
    /// POST the alert to an HTTP endpoint.
    Webhook,
}

impl Action {
    /// The label value in metrics and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Cordon => "cordon",
            Action::Taint => "taint",
            Action::Condition => "condition",
            Action::Event => "event",
            Action::Exec => "exec",
            Action::Webhook => "webhook",
        }
    }
}

/// A taint; `{reason}` in the value is replaced by the alert's `reason` label (made
/// label-safe), or `quarantine` without one.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaintConfig {
    /// Key.
    #[serde(default = "default_taint_key")]
    pub key: String,
    /// Value.
    #[serde(default = "default_taint_value")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default = "default_taint_effect")]
    pub effect: String,
}

impl Default for TaintConfig {
    fn default() -> Self {
        Self {
            key: default_taint_key(),
            value: default_taint_value(),
            effect: default_taint_effect(),
        }
    }
}

/// A node condition hcclwatch owns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    /// CamelCase type, e.g. `NPUStraggler`, `NPUHardFault`.
    #[serde(rename = "type", default = "default_condition_type")]
    pub kind: String,
    /// CamelCase reason while True.
    #[serde(default = "default_condition_reason")]
    pub reason: String,
}

impl Default for ConditionConfig {
    fn default() -> Self {
        Self {
            kind: default_condition_type(),
            reason: default_condition_reason(),
        }
    }
}

/// An external command: argv, the alert as `HCCLWATCH_*` variables and JSON on stdin.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// Program and arguments (no shell).
    pub argv: Vec<String>,
    /// Killed after this long.
    #[serde(default = "default_exec_timeout", with = "duration::serde_str")]
    pub timeout: Duration,
    /// Run it for resolved alerts too (with `HCCLWATCH_STATUS=resolved`).
    #[serde(default)]
    pub on_resolved: bool,
}

/// A generic JSON webhook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `http://` URL.
    pub url: String,
    /// Retries after the first attempt (with doubling backoff).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// First backoff.
    #[serde(default = "default_backoff", with = "duration::serde_str")]
    pub backoff: Duration,
    /// Per-attempt timeout.
    #[serde(default = "default_webhook_timeout", with = "duration::serde_str")]
    pub timeout: Duration,
    /// Post resolved alerts too.
    #[serde(default)]
    pub on_resolved: bool,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            event_namespace: default_event_namespace(),
            timeout: default_api_timeout(),
        }
    }
}

const fn default_api_timeout() -> Duration {
    Duration::from_secs(10)
}
const fn default_max_connections() -> u32 {
    256
}
const fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_listen() -> String {
    ":9479".into()
}
const fn default_true() -> bool {
    true
}
fn default_node_label() -> String {
    "node".into()
}
const fn default_max_body() -> usize {
    1 << 20
}
const fn default_reconcile() -> Duration {
    Duration::from_secs(60)
}
fn default_event_namespace() -> String {
    "default".into()
}
const fn default_max_nodes() -> usize {
    3
}
const fn default_max_percent() -> f64 {
    10.0
}
const fn default_window() -> Duration {
    Duration::from_secs(3600)
}
const fn default_node_cooldown() -> Duration {
    Duration::from_secs(1800)
}
const fn default_manual_cooldown() -> Duration {
    Duration::from_secs(86_400)
}
const fn default_rate() -> u32 {
    5
}
fn default_taint_key() -> String {
    "hcclwatch.io/quarantine".into()
}
fn default_taint_value() -> String {
    "{reason}".into()
}
fn default_taint_effect() -> String {
    "NoSchedule".into()
}
fn default_condition_type() -> String {
    "NPUStraggler".into()
}
fn default_condition_reason() -> String {
    "HcclwatchQuarantine".into()
}
const fn default_exec_timeout() -> Duration {
    Duration::from_secs(30)
}
const fn default_retries() -> u32 {
    3
}
const fn default_backoff() -> Duration {
    Duration::from_millis(500)
}
const fn default_webhook_timeout() -> Duration {
    Duration::from_secs(10)
}

impl RemediateConfig {
    /// Reads, parses and validates `path`; every problem is reported, each with its key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::config::file::read_text(path, crate::config::file::CONFIG_LIMIT)
            .map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_str(&text, path)
    }

    /// Parses and validates TOML text; `path` names the file in errors.
    pub fn from_str(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let cfg: RemediateConfig = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            problems: vec![e.to_string().trim().replace('\n', " ")],
        })?;
        let problems = cfg.validate();
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                problems,
            })
        }
    }

    /// Every inconsistency, as `key: reason`.
    pub fn validate(&self) -> Vec<String> {
        let mut p = Vec::new();
        if crate::config::parse_listen_address(&self.listen_address).is_err() {
            p.push(format!(
                "listen_address: {:?} is not an address such as \":9479\" or \"127.0.0.1:9479\"",
                self.listen_address
            ));
        }
        let a = &self.auth;
        match (&a.bearer_token_file, &a.basic_username, &a.basic_password_file) {
            (Some(_), None, None) | (None, Some(_), Some(_)) => {}
            (None, None, None) => p.push(
                "auth: set bearer_token_file, or basic_username with basic_password_file; the webhook never runs unauthenticated".into(),
            ),
            _ => p.push(
                "auth: set either bearer_token_file, or basic_username with basic_password_file, not a mix".into(),
            ),
        }
        if self.node_label.is_empty() {
            p.push("node_label: must not be empty".into());
        }
        if self.max_body_bytes < 1024 {
            p.push("max_body_bytes: at least 1024".into());
        }
        if self.kubernetes.timeout < Duration::from_millis(100) {
            p.push("kubernetes.timeout: at least 100ms".into());
        }
        if self.max_connections < 16 {
            p.push("max_connections: at least 16".into());
        }
        if self.header_read_timeout < Duration::from_millis(100) {
            p.push("header_read_timeout: at least 100ms".into());
        }
        if let Some(w) = &self.web_config_file
            && let Err(problems) = crate::config::web::WebConfigFile::load(w)
        {
            for e in problems {
                p.push(format!("web_config_file: {e}"));
            }
        }
        if self.reconcile_interval < Duration::from_secs(1) {
            p.push("reconcile_interval: at least 1s".into());
        }
        let b = &self.breaker;
        if b.max_nodes == 0 {
            p.push("breaker.max_nodes: at least 1 (use dry_run to act on nothing)".into());
        }
        if !(b.max_percent > 0.0 && b.max_percent <= 100.0) {
            p.push(format!(
                "breaker.max_percent: {} is not in (0, 100]",
                b.max_percent
            ));
        }
        if b.window.is_zero() {
            p.push("breaker.window: must be positive".into());
        }
        if self.limits.max_actions_per_minute == 0 {
            p.push("limits.max_actions_per_minute: at least 1".into());
        }
        for (i, s) in self.selectors.allow.iter().enumerate() {
            if let Err(e) = super::safety::Selector::parse(s) {
                p.push(format!("selectors.allow[{i}]: {e}"));
            }
        }
        for (i, s) in self.selectors.deny.iter().enumerate() {
            if let Err(e) = super::safety::Selector::parse(s) {
                p.push(format!("selectors.deny[{i}]: {e}"));
            }
        }
        if self.rules.is_empty() {
            p.push("rules: no [[rules]]; nothing would ever be done".into());
        }
        for (i, r) in self.rules.iter().enumerate() {
            let at = format!("rules[{i}]");
            if r.alertname.is_empty() {
                p.push(format!("{at}.alertname: must not be empty"));
            }
            if r.actions.is_empty() {
                p.push(format!("{at}.actions: list at least one action"));
            }
            if r.actions.contains(&Action::Taint) {
                if !super::payload::valid_qualified_name(&r.taint.key) {
                    p.push(format!(
                        "{at}.taint.key: {:?} is not a valid taint key",
                        r.taint.key
                    ));
                }
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"]
                    .contains(&r.taint.effect.as_str())
                {
                    p.push(format!(
                        "{at}.taint.effect: {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                        r.taint.effect
                    ));
                }
            }
            if r.actions.contains(&Action::Condition)
                && !r
                    .condition
                    .kind
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
            {
                p.push(format!(
                    "{at}.condition.type: {:?} should be CamelCase, e.g. NPUStraggler",
                    r.condition.kind
                ));
            }
            match (&r.exec, r.actions.contains(&Action::Exec)) {
                (None, true) => p.push(format!(
                    "{at}.exec: the rule lists exec but has no [rules.exec]"
                )),
                (Some(e), _) if e.argv.is_empty() => {
                    p.push(format!("{at}.exec.argv: must name a program"))
                }
                (Some(e), _) if e.timeout.is_zero() => {
                    p.push(format!("{at}.exec.timeout: must be positive"))
                }
                _ => {}
            }
            match (&r.webhook, r.actions.contains(&Action::Webhook)) {
                (None, true) => p.push(format!("{at}.webhook: the rule lists webhook but has no [rules.webhook]")),
                (Some(w), _) if !w.url.starts_with("http://") => p.push(format!(
                    "{at}.webhook.url: {:?}; only http:// URLs are supported (put a TLS proxy in front for https)",
                    w.url
                )),
                _ => {}
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
audit_log = "/tmp/audit.jsonl"
[auth]
bearer_token_file = "/tmp/token"
[[rules]]
alertname = "HcclwatchQuarantineRecommended"
actions = ["cordon", "taint", "condition", "event"]
"#;

    #[test]
    fn defaults_are_the_safe_ones() {
        let c = RemediateConfig::from_str(MINIMAL, Path::new("r.toml")).unwrap();
        assert!(c.dry_run);
        assert_eq!(c.node_label, "node");
        assert_eq!(c.breaker.max_nodes, 3);
        assert_eq!(c.rules[0].taint.key, "hcclwatch.io/quarantine");
        assert_eq!(c.rules[0].taint.effect, "NoSchedule");
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let bad = r#"
audit_log = "/tmp/a"
listen_address = "nowhere"
[auth]
[breaker]
max_percent = 0.0
[selectors]
deny = ["a=b=c"]
[[rules]]
alertname = "X"
actions = ["taint", "exec", "webhook"]
taint = { effect = "Sometimes" }
webhook = { url = "https://x" }
"#;
        let e = RemediateConfig::from_str(bad, Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        for want in [
            "r.toml: listen_address",
            "r.toml: auth: set bearer_token_file",
            "breaker.max_percent",
            "selectors.deny[0]",
            "rules[0].taint.effect",
            "rules[0].exec: the rule lists exec",
            "rules[0].webhook.url",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
        let unknown = MINIMAL
            .replace("dry", "")
            .replace("audit_log", "audit_logg");
        let e = RemediateConfig::from_str(&unknown, Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("audit_logg"), "{e}");
    }
}
