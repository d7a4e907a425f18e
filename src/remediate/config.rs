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
use crate::config::enums::config_enum;
use crate::config::types::ListenAddr;
use crate::config::{Problem, file, web};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why: missing, not a regular file, too large, or the read hung.
        source: file::FileError,
    },
    /// The file is not valid TOML for this schema, or its values are inconsistent.
    #[error("{}", Problem::lines(problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found, each placed in the file.
        problems: Vec<Problem>,
    },
}

/// The whole receiver configuration, checked and parsed ([`RemediateConfig::load`]).
#[derive(Debug, Clone)]
pub struct RemediateConfig {
    /// Address of the webhook, `/metrics` and the health endpoints.
    pub listen_address: ListenAddr,
    /// Log and count what would be done, but change nothing. On unless set to false.
    pub dry_run: bool,
    /// The alert label that names the Kubernetes node.
    pub node_label: String,
    /// Append-only JSON-lines audit log, fsynced per record.
    pub audit_log: PathBuf,
    /// While this file exists, every action is paused (logged and audited as `paused`).
    pub killswitch_file: Option<PathBuf>,
    /// Largest accepted webhook body.
    pub max_body_bytes: usize,
    /// How often node state is re-read (manual uncordons, fleet size, breaker window).
    pub reconcile_interval: Duration,
    /// Who may call the webhook.
    pub auth: AuthConfig,
    /// A Prometheus exporter-toolkit web config file: TLS for every endpoint, and basic
    /// auth for `/metrics` (the webhook keeps its own `[auth]`).
    pub web_config_file: Option<PathBuf>,
    /// Open connections at most.
    pub max_connections: u32,
    /// Time a client has to send a request head.
    pub header_read_timeout: Duration,
    /// How to reach the Kubernetes API.
    pub kubernetes: KubernetesConfig,
    /// The fleet-wide circuit breaker.
    pub breaker: BreakerConfig,
    /// Per-node cooldowns and the global rate limit.
    pub limits: LimitsConfig,
    /// Which nodes may be acted on.
    pub selectors: SelectorConfig,
    /// When a node that keeps coming back is escalated instead of released.
    pub escalation: EscalationConfig,
    /// Alert-to-action rules; the first rule that matches an alert applies.
    pub rules: Vec<Rule>,
}

/// The file as written, before its values are checked and parsed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RemediateFile {
    #[serde(default = "default_listen")]
    listen_address: String,
    #[serde(default = "default_true")]
    dry_run: bool,
    #[serde(default = "default_node_label")]
    node_label: String,
    audit_log: PathBuf,
    #[serde(default)]
    killswitch_file: Option<PathBuf>,
    #[serde(default = "default_max_body")]
    max_body_bytes: usize,
    #[serde(default = "default_reconcile", with = "duration::serde_str")]
    reconcile_interval: Duration,
    auth: AuthConfig,
    #[serde(default)]
    web_config_file: Option<PathBuf>,
    #[serde(default = "default_max_connections")]
    max_connections: u32,
    #[serde(default = "default_header_read_timeout", with = "duration::serde_str")]
    header_read_timeout: Duration,
    #[serde(default)]
    kubernetes: KubernetesConfig,
    #[serde(default)]
    breaker: BreakerConfig,
    #[serde(default)]
    limits: LimitsConfig,
    #[serde(default)]
    selectors: SelectorConfig,
    #[serde(default)]
    escalation: EscalationConfig,
    #[serde(default)]
    rules: Vec<RuleFile>,
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
    /// NPUs isolated (`isolate_npu`) in the window, fleet-wide.
    #[serde(default = "default_max_npus")]
    pub max_npus: usize,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            max_nodes: default_max_nodes(),
            max_percent: default_max_percent(),
            window: default_window(),
            max_npus: default_max_npus(),
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

/// Recurrence: a node hcclwatch quarantined `max_incidents` times within `window` is
/// escalated, and only a person releases it (`hcclwatch override release`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EscalationConfig {
    /// Quarantines within `window` that escalate the node (0: never escalate).
    #[serde(default = "default_max_incidents")]
    pub max_incidents: u32,
    /// The sliding window the quarantines are counted in.
    #[serde(default = "default_escalation_window", with = "duration::serde_str")]
    pub window: Duration,
}

impl Default for EscalationConfig {
    fn default() -> Self {
        Self {
            max_incidents: default_max_incidents(),
            window: default_escalation_window(),
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
#[derive(Debug, Clone)]
pub struct Rule {
    /// Alert name to match.
    pub alertname: String,
    /// Further labels the alert must carry with these values.
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Actions, applied in this order: `cordon`, `taint`, `condition`, `event`, `exec`,
    /// `webhook`.
    pub actions: Vec<Action>,
    /// The taint (for `taint`).
    pub taint: TaintConfig,
    /// The node condition (for `condition`).
    pub condition: ConditionConfig,
    /// The command (for `exec`).
    pub exec: Option<ExecConfig>,
    /// The HTTP endpoint (for `webhook`).
    pub webhook: Option<WebhookConfig>,
    /// How the alert's NPU maps to a DRA device (for `isolate_npu`).
    pub npu: Option<super::isolation::NpuIsolation>,
}

/// A rule as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    alertname: String,
    #[serde(default)]
    match_labels: std::collections::BTreeMap<String, String>,
    actions: Vec<Action>,
    #[serde(default)]
    taint: TaintFile,
    #[serde(default)]
    condition: ConditionConfig,
    exec: Option<ExecConfig>,
    webhook: Option<WebhookConfig>,
    npu: Option<super::isolation::NpuIsolationFile>,
}

config_enum! {
    /// What a rule can do.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Action {
        /// `spec.unschedulable = true`.
        Cordon = "cordon",
        /// Add the rule's taint.
        Taint = "taint",
        /// Set the rule's node condition True (False on recovery).
        Condition = "condition",
        /// Write an Event on the node.
        Event = "event",
        /// Run a command.
        Exec = "exec",
        /// POST the alert to an HTTP endpoint.
        Webhook = "webhook",
        /// Take the alert's NPU out of scheduling with a DRA `DeviceTaintRule` (see
        /// `[rules.npu]`); the node follows only over `npu.max_share`.
        IsolateNpu = "isolate_npu",
    }
}

config_enum! {
    /// A taint's effect.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum TaintEffect {
        /// New pods are not scheduled on the node.
        #[default]
        NoSchedule = "NoSchedule",
        /// The scheduler avoids the node.
        PreferNoSchedule = "PreferNoSchedule",
        /// Running pods that do not tolerate it are evicted too.
        NoExecute = "NoExecute",
    }
}

/// A taint; `{reason}` in the value is replaced by the alert's `reason` label (made
/// label-safe), or `quarantine` without one.
#[derive(Debug, Clone)]
pub struct TaintConfig {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A taint as written. Its effect is checked only for a rule that taints: a rule that does
/// not never uses it, and a file with a stray one has always loaded.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaintFile {
    #[serde(default = "default_taint_key")]
    key: String,
    #[serde(default = "default_taint_value")]
    value: String,
    #[serde(default = "default_taint_effect")]
    effect: String,
}

impl Default for TaintFile {
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
const fn default_max_npus() -> usize {
    8
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
const fn default_max_incidents() -> u32 {
    3
}
const fn default_escalation_window() -> Duration {
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
        let text =
            file::read_text(path, file::CONFIG_LIMIT).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_str(&text, path)
    }

    /// Parses and validates TOML text; `path` names the file in errors.
    pub fn from_str(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let invalid = |problems: Vec<Problem>| {
            let at = path.display().to_string();
            ConfigError::Invalid {
                path: path.to_path_buf(),
                problems: problems.into_iter().map(|p| p.at(at.clone())).collect(),
            }
        };
        let file: RemediateFile = toml::from_str(text).map_err(|e| {
            invalid(vec![Problem::reason(
                e.to_string().trim().replace('\n', " "),
            )])
        })?;
        file.check().map_err(invalid)
    }
}

impl RemediateFile {
    /// The configuration, or every inconsistency, each naming its key.
    fn check(self) -> Result<RemediateConfig, Vec<Problem>> {
        let mut p = Vec::new();
        let listen_address = self.listen_address.parse::<ListenAddr>().map_err(|_| {
            Problem::key(
                "listen_address",
                format!(
                    "{:?} is not an address such as \":9479\" or \"127.0.0.1:9479\"",
                    self.listen_address
                ),
            )
        });
        if let Err(e) = &listen_address {
            p.push(e.clone());
        }
        self.check_settings(&mut p);
        if self.rules.is_empty() {
            p.push(Problem::key(
                "rules",
                "no [[rules]]; nothing would ever be done",
            ));
        }
        let rules: Vec<Rule> = self
            .rules
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.check(&format!("rules[{i}]"), &mut p))
            .collect();
        match listen_address {
            Ok(listen_address) if p.is_empty() => Ok(RemediateConfig {
                listen_address,
                dry_run: self.dry_run,
                node_label: self.node_label,
                audit_log: self.audit_log,
                killswitch_file: self.killswitch_file,
                max_body_bytes: self.max_body_bytes,
                reconcile_interval: self.reconcile_interval,
                auth: self.auth,
                web_config_file: self.web_config_file,
                max_connections: self.max_connections,
                header_read_timeout: self.header_read_timeout,
                kubernetes: self.kubernetes,
                breaker: self.breaker,
                limits: self.limits,
                selectors: self.selectors,
                escalation: self.escalation,
                rules,
            }),
            _ => Err(p),
        }
    }

    /// Everything but the listen address and the rules.
    fn check_settings(&self, p: &mut Vec<Problem>) {
        let a = &self.auth;
        match (&a.bearer_token_file, &a.basic_username, &a.basic_password_file) {
            (Some(_), None, None) | (None, Some(_), Some(_)) => {}
            (None, None, None) => p.push(Problem::key(
                "auth",
                "set bearer_token_file, or basic_username with basic_password_file; the webhook never runs unauthenticated",
            )),
            _ => p.push(Problem::key(
                "auth",
                "set either bearer_token_file, or basic_username with basic_password_file, not a mix",
            )),
        }
        let mut at_least = |bad: bool, key: &str, reason: &str| {
            if bad {
                p.push(Problem::key(key, reason));
            }
        };
        at_least(
            self.node_label.is_empty(),
            "node_label",
            "must not be empty",
        );
        at_least(
            self.max_body_bytes < 1024,
            "max_body_bytes",
            "at least 1024",
        );
        at_least(
            self.kubernetes.timeout < Duration::from_millis(100),
            "kubernetes.timeout",
            "at least 100ms",
        );
        at_least(self.max_connections < 16, "max_connections", "at least 16");
        at_least(
            self.header_read_timeout < Duration::from_millis(100),
            "header_read_timeout",
            "at least 100ms",
        );
        if let Some(w) = &self.web_config_file
            && let Err(problems) = web::WebConfigFile::load(w)
        {
            p.extend(
                problems
                    .into_iter()
                    .map(|e| Problem::key("web_config_file", e)),
            );
        }
        if self.reconcile_interval < Duration::from_secs(1) {
            p.push(Problem::key("reconcile_interval", "at least 1s"));
        }
        let b = &self.breaker;
        if b.max_nodes == 0 {
            p.push(Problem::key(
                "breaker.max_nodes",
                "at least 1 (use dry_run to act on nothing)",
            ));
        }
        if !(b.max_percent > 0.0 && b.max_percent <= 100.0) {
            p.push(Problem::key(
                "breaker.max_percent",
                format!("{} is not in (0, 100]", b.max_percent),
            ));
        }
        if b.max_npus == 0 {
            p.push(Problem::key(
                "breaker.max_npus",
                "at least 1 (leave isolate_npu out of the rules to isolate no NPU)",
            ));
        }
        if b.window.is_zero() {
            p.push(Problem::key("breaker.window", "must be positive"));
        }
        if self.limits.max_actions_per_minute == 0 {
            p.push(Problem::key("limits.max_actions_per_minute", "at least 1"));
        }
        let e = &self.escalation;
        if e.max_incidents > crate::remediate::lifecycle::MAX_KEPT as u32 {
            p.push(Problem::key(
                "escalation.max_incidents",
                format!(
                    "at most {} (the incidents a node keeps); 0 turns escalation off",
                    crate::remediate::lifecycle::MAX_KEPT
                ),
            ));
        }
        if e.max_incidents > 0 && e.window.is_zero() {
            p.push(Problem::key("escalation.window", "must be positive"));
        }
        for (list, selectors) in [
            ("allow", &self.selectors.allow),
            ("deny", &self.selectors.deny),
        ] {
            for (i, s) in selectors.iter().enumerate() {
                if let Err(e) = super::safety::Selector::parse(s) {
                    p.push(Problem::key(format!("selectors.{list}[{i}]"), e));
                }
            }
        }
    }
}

impl RuleFile {
    /// The rule, or its problems (each key under `at`) added to `p`.
    fn check(mut self, at: &str, p: &mut Vec<Problem>) -> Option<Rule> {
        let before = p.len();
        let mut push =
            |key: &str, reason: String| p.push(Problem::key(format!("{at}.{key}"), reason));
        if self.alertname.is_empty() {
            push("alertname", "must not be empty".into());
        }
        if self.actions.is_empty() {
            push("actions", "list at least one action".into());
        }
        // What the rule may do to the node: its actions, and for isolate_npu the node's
        // actions over the share, which use the rule's taint, condition and hooks.
        let mut node_actions = self.actions.clone();
        if self.actions.contains(&Action::IsolateNpu) {
            match &self.npu {
                Some(n) => node_actions.extend_from_slice(n.node_actions()),
                None => node_actions.extend_from_slice(&super::isolation::default_node_actions()),
            }
        }
        let does = |a: Action| node_actions.contains(&a);
        let taints = does(Action::Taint);
        if taints && !super::payload::valid_qualified_name(&self.taint.key) {
            push(
                "taint.key",
                format!("{:?} is not a valid taint key", self.taint.key),
            );
        }
        // A rule that does not taint never uses its effect.
        let effect = TaintEffect::from_name(&self.taint.effect);
        if taints && effect.is_none() {
            push(
                "taint.effect",
                format!(
                    "{:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    self.taint.effect
                ),
            );
        }
        if does(Action::Condition)
            && !self
                .condition
                .kind
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_uppercase())
        {
            push(
                "condition.type",
                format!(
                    "{:?} should be CamelCase, e.g. NPUStraggler",
                    self.condition.kind
                ),
            );
        }
        match (&self.exec, does(Action::Exec)) {
            (None, true) => push("exec", "the rule lists exec but has no [rules.exec]".into()),
            (Some(e), _) if e.argv.is_empty() => push("exec.argv", "must name a program".into()),
            (Some(e), _) if e.timeout.is_zero() => push("exec.timeout", "must be positive".into()),
            _ => {}
        }
        match (&self.webhook, does(Action::Webhook)) {
            (None, true) => push(
                "webhook",
                "the rule lists webhook but has no [rules.webhook]".into(),
            ),
            (Some(w), _) if !w.url.starts_with("http://") => push(
                "webhook.url",
                format!(
                    "{:?}; only http:// URLs are supported (put a TLS proxy in front for https)",
                    w.url
                ),
            ),
            _ => {}
        }
        let npu = self.check_npu(at, p);
        (p.len() == before).then(|| Rule {
            alertname: self.alertname,
            match_labels: self.match_labels,
            actions: self.actions,
            taint: TaintConfig {
                key: self.taint.key,
                value: self.taint.value,
                effect: effect.unwrap_or_default(),
            },
            condition: self.condition,
            exec: self.exec,
            webhook: self.webhook,
            npu,
        })
    }

    /// The `[rules.npu]` section: required in effect (its defaults) by `isolate_npu`,
    /// refused without it, and its node actions must be node actions.
    fn check_npu(
        &mut self,
        at: &str,
        p: &mut Vec<Problem>,
    ) -> Option<super::isolation::NpuIsolation> {
        let isolates = self.actions.contains(&Action::IsolateNpu);
        let section = self.npu.take();
        if !isolates {
            if section.is_some() {
                p.push(Problem::key(
                    format!("{at}.npu"),
                    "the rule has [rules.npu] but does not list isolate_npu in actions",
                ));
            }
            return None;
        }
        if self.actions.len() > 1 {
            p.push(Problem::key(
                format!("{at}.actions"),
                "a rule with isolate_npu lists only isolate_npu; what is done to the node over the share goes in npu.node_actions",
            ));
        }
        let npu = section.unwrap_or_default().check(&format!("{at}.npu"), p)?;
        if npu.node_actions.contains(&Action::IsolateNpu) {
            p.push(Problem::key(
                format!("{at}.npu.node_actions"),
                "isolate_npu is not a node action",
            ));
            return None;
        }
        Some(npu)
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
