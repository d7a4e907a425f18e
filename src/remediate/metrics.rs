//! The receiver's own metrics, served on its `/metrics`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Upper bounds of the alert-to-action histogram, seconds: 1 s to 1 h, about ×2 a step
/// (a daemon's push acts within seconds; an Alertmanager notification within a minute or
/// two; a retried or held one within the hour).
pub const LATENCY_BUCKETS: [f64; 14] = [
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every metric of the receiver, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    actions: Family<Labels, Counter>,
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    /// 1 while the circuit breaker is open.
    pub breaker_open: Gauge,
    /// Nodes that carry hcclwatch's quarantine annotations.
    pub nodes_quarantined: Gauge,
    /// NPUs taken out of scheduling by hcclwatch's `DeviceTaintRule`s.
    pub npus_isolated: Gauge,
    /// Manual uncordons of nodes hcclwatch had cordoned.
    pub manual_overrides: Counter,
    /// 1 while the killswitch file exists.
    pub killswitch: Gauge,
    /// 1 in dry-run mode.
    pub dry_run: Gauge,
    /// Nodes the API lists.
    pub fleet_nodes: Gauge,
    /// Audit records that could not be written (the request was answered 503).
    pub audit_failures: Counter,
    last_reconcile: Gauge<f64, AtomicU64>,
    /// 1 for each node escalated (quarantined too often; a person must release it).
    escalated: Family<Labels, Gauge>,
    /// 1 for each active operator override, by node and state.
    overrides: Family<Labels, Gauge>,
    /// The label sets of `escalated` and `overrides` shown, each with when it was last
    /// set, so a rebuild removes only those that went (a scrape never sees the families
    /// empty halfway through) and never one set after the nodes it is built from were read.
    shown: std::sync::Mutex<[BTreeMap<Labels, Instant>; 2]>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            actions: Family::default(),
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            breaker_open: Gauge::default(),
            nodes_quarantined: Gauge::default(),
            npus_isolated: Gauge::default(),
            manual_overrides: Counter::default(),
            killswitch: Gauge::default(),
            dry_run: Gauge::default(),
            fleet_nodes: Gauge::default(),
            audit_failures: Counter::default(),
            last_reconcile: Gauge::default(),
            escalated: Family::default(),
            overrides: Family::default(),
            shown: std::sync::Mutex::default(),
            registry: Registry::default(),
        };
        registry.register(
            "hcclwatch_remediation_actions",
            "Remediation decisions by action, result (applied, would_apply, already_done, refused, breaker_open, rate_limited, cooldown, manual_override, paused, not_found, forbidden, failed, ...) and dry_run.",
            m.actions.clone(),
        );
        registry.register(
            "hcclwatch_remediation_webhook_requests",
            "Webhook requests by HTTP status code answered.",
            m.requests.clone(),
        );
        registry.register(
            "hcclwatch_remediation_alert_to_action_seconds",
            "From an alert's start (Alertmanager's startsAt, or a daemon push's onset) to the node quarantined (in dry-run: to the decision that live mode would have quarantined it), by alertname, reason and source (alertmanager or push).",
            m.latency.clone(),
        );
        registry.register(
            "hcclwatch_remediation_breaker_open",
            "1 while the circuit breaker refuses new quarantines.",
            m.breaker_open.clone(),
        );
        registry.register(
            "hcclwatch_remediation_nodes_quarantined",
            "Nodes currently carrying hcclwatch's quarantine annotations.",
            m.nodes_quarantined.clone(),
        );
        registry.register(
            "hcclwatch_remediation_npus_isolated",
            "NPUs currently taken out of scheduling by hcclwatch's DeviceTaintRules (isolate_npu).",
            m.npus_isolated.clone(),
        );
        registry.register(
            "hcclwatch_remediation_manual_overrides",
            "Nodes someone uncordoned by hand after hcclwatch cordoned them.",
            m.manual_overrides.clone(),
        );
        registry.register(
            "hcclwatch_remediation_killswitch_active",
            "1 while the killswitch file exists (every action paused).",
            m.killswitch.clone(),
        );
        registry.register(
            "hcclwatch_remediation_dry_run",
            "1 when the receiver only logs and audits what it would do.",
            m.dry_run.clone(),
        );
        registry.register(
            "hcclwatch_remediation_fleet_nodes",
            "Nodes the Kubernetes API listed at the last reconcile (the breaker's fleet size).",
            m.fleet_nodes.clone(),
        );
        registry.register(
            "hcclwatch_remediation_audit_failures",
            "Audit records that could not be written and synced; the request was answered 503 and nothing was changed.",
            m.audit_failures.clone(),
        );
        registry.register(
            "hcclwatch_remediation_last_reconcile_timestamp_seconds",
            "Unix time of the last successful read of every node.",
            m.last_reconcile.clone(),
        );
        registry.register(
            "hcclwatch_node_escalated",
            "1 while a node is escalated: quarantined escalation.max_incidents times within escalation.window, kept until a person releases it (hcclwatch override release).",
            m.escalated.clone(),
        );
        registry.register(
            "hcclwatch_remediation_override",
            "1 for each active operator override on a node (hcclwatch.io/override), by state (healthy or quarantined).",
            m.overrides.clone(),
        );
        Self { registry, ..m }
    }

    /// Counts one decision.
    pub fn action(&self, action: &str, result: &str, dry_run: bool) {
        self.actions
            .get_or_create_owned(&vec![
                ("action".to_string(), action.to_string()),
                ("result".to_string(), result.to_string()),
                ("dry_run".to_string(), dry_run.to_string()),
            ])
            .inc();
    }

    /// Records the time from an alert's start to its quarantine. A start in the future
    /// (a clock ahead of this one) is no duration and is not recorded.
    pub fn alert_to_action(&self, alertname: &str, reason: &str, source: &str, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        self.latency
            .get_or_create_owned(&vec![
                ("alertname".to_string(), alertname.to_string()),
                ("reason".to_string(), reason.to_string()),
                ("source".to_string(), source.to_string()),
            ])
            .observe(seconds);
    }

    /// Counts one webhook request by the status answered.
    pub fn request(&self, code: u16) {
        self.requests
            .get_or_create_owned(&vec![("code".to_string(), code.to_string())])
            .inc();
    }

    /// Marks a successful reconcile now.
    pub fn reconciled(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_reconcile.set(now);
    }

    /// Marks a node escalated (the gauge is rebuilt from the annotations at each reconcile).
    pub fn escalate(&self, node: &str) {
        let l = vec![("node".to_string(), node.to_string())];
        self.escalated.get_or_create_owned(&l).set(1);
        self.shown_sets()[0].insert(l, Instant::now());
    }

    /// Rebuilds `hcclwatch_node_escalated` and `hcclwatch_remediation_override` from the
    /// nodes read at `read_at`: escalated node names, and (node, state) of each override
    /// that holds. A series set after `read_at` stays (the read could not see it).
    pub fn rebuild(
        &self,
        read_at: Instant,
        escalated: BTreeSet<String>,
        overrides: BTreeSet<(String, String)>,
    ) {
        let escalated: BTreeSet<Labels> = escalated
            .into_iter()
            .map(|n| vec![("node".to_string(), n)])
            .collect();
        let overrides: BTreeSet<Labels> = overrides
            .into_iter()
            .map(|(n, s)| vec![("node".to_string(), n), ("state".to_string(), s)])
            .collect();
        let mut shown = self.shown_sets();
        let [e, o] = &mut *shown;
        for (family, now, before) in [
            (&self.escalated, escalated, e),
            (&self.overrides, overrides, o),
        ] {
            before.retain(|l, at| {
                let keep = now.contains(l) || *at > read_at;
                if !keep {
                    family.remove(l);
                }
                keep
            });
            for l in now {
                family.get_or_create_owned(&l).set(1);
                before.insert(l, read_at);
            }
        }
    }

    fn shown_sets(&self) -> std::sync::MutexGuard<'_, [BTreeMap<Labels, Instant>; 2]> {
        self.shown.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registry, for encoding.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
