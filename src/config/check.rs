//! The checks that need more than one value's type: relations between keys (the device
//! plane against the probe interval, thresholds against each other, per-member lists
//! against the member list), what probing needs, and the files a configuration names.
//!
//! A value that did not parse into its type ([`super::schema::Key::parse`]) is reported
//! here too, among its section's checks: `check-config` has always listed a bad listen
//! address before a bad metrics path, and a bad traffic class after a bad rank.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::model::HARDWARE_SIGN_NAMES;
use super::schema::ValueError;
use super::types::RankSpec;
use super::{Config, Problem, RESERVED_PATHS, duration, file, web};

/// The problems of values that did not parse into their types, by key, waiting for their
/// place among the checks.
#[derive(Debug, Default)]
pub struct Unparsed(BTreeMap<&'static str, Vec<ValueError>>);

impl Unparsed {
    /// Records why `key`'s value did not parse.
    pub fn insert(&mut self, key: &'static str, errors: Vec<ValueError>) {
        self.0.entry(key).or_default().extend(errors);
    }

    fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
}

/// Every problem of a loaded configuration, as `key: reason` (the caller places them),
/// with the problems of the values in `unparsed` among them.
pub fn problems(config: &Config, unparsed: Unparsed) -> Vec<Problem> {
    let mut c = Checks {
        config,
        unparsed,
        out: Vec::new(),
    };
    c.all();
    // A value that did not parse and that no check placed still gets reported.
    for (key, errors) in std::mem::take(&mut c.unparsed.0) {
        for e in errors {
            c.push(key, e);
        }
    }
    c.out
}

struct Checks<'a> {
    config: &'a Config,
    unparsed: Unparsed,
    out: Vec<Problem>,
}

impl Checks<'_> {
    fn all(&mut self) {
        self.web();
        self.membership();
        self.health();
        self.device_interval();
        self.hccs();
        self.otlp();
        self.group();
        self.engine();
        self.telemetry();
        self.attribution();
        self.topology();
        self.remediation_push();
    }

    fn push(&mut self, key: &str, reason: impl ToString) {
        self.out.push(Problem::key(key, reason));
    }

    /// Here is where `key`'s parse problems are listed.
    fn parsed(&mut self, key: &str) {
        for e in self.unparsed.0.remove(key).unwrap_or_default() {
            self.push(key, e);
        }
    }

    /// `[web]`: the listen address, the node label and the metrics path.
    fn web(&mut self) {
        self.parsed("web.listen_address");
        // Set but empty is a mistake (an unset NODE_NAME expanded, say): an empty label
        // value is no label to Prometheus, so the series would silently lose it.
        if self
            .config
            .web
            .node_label
            .as_ref()
            .is_some_and(|n| n.trim().is_empty())
        {
            self.push(
                "web.node_label",
                "is set but empty; give the node's name (in Kubernetes the downward API's spec.nodeName) or remove the key",
            );
        }
        let p = &self.config.web.telemetry_path;
        let reason = if !p.starts_with('/') {
            format!("{p:?} must start with '/'")
        } else if RESERVED_PATHS.contains(&p.as_str()) {
            format!("{p:?} is reserved for another endpoint; use e.g. \"/metrics\"")
        } else if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        {
            format!("{p:?} may only contain letters, digits, '/', '_', '.' and '-'")
        } else {
            return;
        };
        self.push("web.telemetry_path", reason);
    }

    /// Where the members come from, and what probing needs of them.
    fn membership(&mut self) {
        let (c, probe) = (&self.config.collective, &self.config.probe);
        // A name that did not parse was still given: the other sources are still refused
        // next to it.
        let dns = c.peers_dns.is_some() || self.unparsed.contains("collective.peers_dns");
        if dns {
            self.parsed("collective.peers_dns");
            if !c.peers.is_empty() || c.rank_table_file.is_some() {
                self.push(
                    "collective.peers_dns",
                    "set one of collective.peers, collective.rank_table_file and collective.peers_dns",
                );
            }
        }
        self.parsed("probe.inject_peer_throttle");
        self.parsed("probe.inject_forge_relayed");
        for (k, s) in probe.inject_hardware_signs.iter().enumerate() {
            if !HARDWARE_SIGN_NAMES.contains(&s.as_str()) {
                self.push(
                    "probe.inject_hardware_signs",
                    format!(
                        "element {k} ({s:?}) is not a hardware sign; one of {}",
                        HARDWARE_SIGN_NAMES.join(", ")
                    ),
                );
            }
        }
        self.parsed("collective.own_address");
        if probe.enabled && !dns && c.peers.len() < 2 {
            self.push(
                "probe.enabled",
                "probing needs at least 2 members in collective.peers (or the rank table, or collective.peers_dns)",
            );
        }
        let identity = [
            c.identity_cert_file.is_some(),
            c.identity_key_file.is_some(),
            c.identity_ca_file.is_some(),
        ];
        if identity.iter().any(|x| *x) && !identity.iter().all(|x| *x) {
            self.push(
                "collective.identity_cert_file",
                "set collective.identity_cert_file, identity_key_file and identity_ca_file together (certificate mode), or none of them",
            );
        }
        if probe.enabled && c.key_file.is_none() {
            self.push(
                "probe.enabled",
                "probing needs collective.key_file (the peers authenticate with it)",
            );
        }
    }

    /// `[device_probe]` HCCS intervals the ping-mesh task cannot take.
    fn hccs(&mut self) {
        let d = &self.config.device_probe;
        if d.hccs_round_interval.subsec_nanos() != 0 {
            self.push(
                "device_probe.hccs_round_interval",
                format!(
                    "{:?} is not whole seconds (the DCMI task interval is in seconds)",
                    d.hccs_round_interval
                ),
            );
        }
        if d.hccs_read_interval < d.hccs_round_interval + Duration::from_secs(1) {
            self.push(
                "device_probe.hccs_read_interval",
                format!(
                    "{:?} is shorter than device_probe.hccs_round_interval ({:?}) plus 1 s; a read would find no new round",
                    d.hccs_read_interval, d.hccs_round_interval
                ),
            );
        }
    }

    /// `[device_probe] interval` against the probe rounds it runs on.
    fn device_interval(&mut self) {
        let (d, p) = (
            self.config.device_probe.interval,
            self.config.probe.interval,
        );
        if d < p {
            self.push(
                "device_probe.interval",
                format!(
                    "{} is shorter than probe.interval ({}); the device plane runs on probe rounds, at most once each",
                    duration::format(d),
                    duration::format(p)
                ),
            );
        }
    }

    /// `[health]` thresholds that contradict each other.
    fn health(&mut self) {
        let h = &self.config.health;
        if h.fabric_rounds > h.window {
            self.push(
                "health.fabric_rounds",
                format!(
                    "{} is more than health.window ({}); a fabric verdict could never form",
                    h.fabric_rounds, h.window
                ),
            );
        }
        if h.congested_hold < h.confirm_hold {
            self.push(
                "health.congested_hold",
                format!(
                    "{} is less than health.confirm_hold ({}); congestion on a node's uplink \
                     would shorten its hold instead of lengthening it",
                    h.congested_hold, h.confirm_hold
                ),
            );
        }
        if h.uncorroborated_hold < h.confirm_hold {
            self.push(
                "health.uncorroborated_hold",
                format!(
                    "{} is less than health.confirm_hold ({}); a slowness nothing corroborates \
                     would be recommended sooner than one its hardware explains",
                    h.uncorroborated_hold, h.confirm_hold
                ),
            );
        }
    }

    /// `[otlp]`: the endpoint and headers.
    fn otlp(&mut self) {
        let e = &self.config.otlp.endpoint;
        let http = e.starts_with("http://") || e.starts_with("https://");
        if !(e.is_empty() || http) {
            self.push(
                "otlp.endpoint",
                format!(
                    "{e:?} is not an http:// or https:// URL (e.g. \"http://otel-collector:4318\")"
                ),
            );
        }
        self.parsed("otlp.headers");
    }

    /// `[remediation.push]`: when on, a receiver URL, its token, and for https its CA.
    fn remediation_push(&mut self) {
        let p = &self.config.remediation.push;
        if !p.enabled {
            return;
        }
        let https = p.url.starts_with("https://");
        if !(https || p.url.starts_with("http://")) {
            self.push(
                "remediation.push.url",
                format!(
                    "{:?} is not an https:// URL of the remediation receiver (e.g. \"https://hcclwatch-remediate.hcclwatch:9479\")",
                    p.url
                ),
            );
        }
        if p.bearer_token_file.is_none() {
            self.push(
                "remediation.push.bearer_token_file",
                "remediation.push.enabled needs the receiver's bearer token file",
            );
        }
        if https && p.ca_file.is_none() {
            self.push(
                "remediation.push.ca_file",
                "an https receiver needs the CA that signed its certificate (the only one trusted)",
            );
        }
    }

    /// Per-member lists (topology, names) against the member list, and the rank.
    fn group(&mut self) {
        let (c, probe) = (&self.config.collective, &self.config.probe);
        if !c.peer_topology.is_empty() && c.peer_topology.len() != c.peers.len() {
            self.push(
                "collective.peer_topology",
                format!(
                    "{} labels for {} members; give one label per member of collective.peers, in the same order",
                    c.peer_topology.len(),
                    c.peers.len()
                ),
            );
        } else if probe.enabled && !c.peer_topology.is_empty() {
            let mut count: HashMap<&str, usize> = HashMap::new();
            for label in &c.peer_topology {
                *count.entry(label.as_str()).or_default() += 1;
            }
            // The first lonely label in member order, as before.
            if let Some(label) = c.peer_topology.iter().find(|l| count[l.as_str()] < 2) {
                self.push(
                    "collective.peer_topology",
                    format!(
                        "label {label:?} has a single member, which would have nobody to probe"
                    ),
                );
            }
        }
        if !c.peer_names.is_empty() && c.peer_names.len() != c.peers.len() {
            self.push(
                "collective.peer_names",
                format!(
                    "{} names for {} members; give one name per member of collective.peers (or the rank table), in the same order",
                    c.peer_names.len(),
                    c.peers.len()
                ),
            );
        }
        if let RankSpec::Fixed(rank) = c.rank
            && usize::from(rank) >= c.peers.len()
        {
            self.push(
                "collective.rank",
                format!(
                    "rank {rank} but collective.peers lists {} members",
                    c.peers.len()
                ),
            );
        }
    }

    /// The engine's traffic class and algorithm override.
    fn engine(&mut self) {
        self.parsed("collective.traffic_class");
        self.parsed("collective.algo");
    }

    /// `[attribution]`: a prefix list that could never match, and a deadline that the next
    /// pass would overtake.
    fn attribution(&mut self) {
        let a = &self.config.attribution;
        if a.resource_prefixes.is_empty() {
            self.push(
                "attribution.resource_prefixes",
                "empty: no device would ever be attributed; remove the key for the default",
            );
        }
        if a.deadline >= a.interval {
            self.push(
                "attribution.deadline",
                format!(
                    "{} is not shorter than attribution.interval ({})",
                    duration::format(a.deadline),
                    duration::format(a.interval)
                ),
            );
        }
    }

    /// `[topology]`: a deadline that the next refresh would overtake, and label keys that
    /// are not valid Kubernetes label keys.
    fn topology(&mut self) {
        let t = &self.config.topology;
        if t.deadline >= t.refresh {
            self.push(
                "topology.deadline",
                format!(
                    "{} is not shorter than topology.refresh ({})",
                    duration::format(t.deadline),
                    duration::format(t.refresh)
                ),
            );
        }
        for (key, v) in [
            ("topology.tor_label", &t.tor_label),
            ("topology.spine_label", &t.spine_label),
            ("topology.super_pod_label", &t.super_pod_label),
        ] {
            if !v.is_empty() && !label_key_ok(v) {
                self.push(
                    key,
                    format!("{v:?} is not a Kubernetes label key such as \"example.com/tor\""),
                );
            }
        }
    }

    /// `[telemetry]`: the DCMI library path and the `hccn_tool` paths.
    fn telemetry(&mut self) {
        let t = &self.config.telemetry;
        if t.dcmi_library
            .as_ref()
            .is_some_and(|lib| lib.as_os_str().is_empty())
        {
            self.push(
                "telemetry.dcmi_library",
                "empty path; remove the key to search the standard locations",
            );
        }
        for (key, path) in [
            ("telemetry.hccn_tool", &t.hccn_tool),
            ("telemetry.hccn_conf", &t.hccn_conf),
        ] {
            if !path.is_absolute() {
                self.push(
                    key,
                    format!(
                        "{:?} is not an absolute path; the tool is run without a shell or PATH lookup",
                        path.display()
                    ),
                );
            }
        }
        if t.fault_levels_file
            .as_ref()
            .is_some_and(|f| f.as_os_str().is_empty())
        {
            self.push(
                "telemetry.fault_levels_file",
                "empty path; remove the key to use the built-in fault-level table",
            );
        }
    }
}

/// Problems with the files a configuration names.
#[derive(Debug, Default)]
pub struct FileProblems {
    /// Files that cannot be used.
    pub errors: Vec<Problem>,
    /// Files that work but should be fixed.
    pub warnings: Vec<Problem>,
}

impl Config {
    /// Semantic checks that need more than one value's type: addresses, paths, and
    /// relations between keys. Each problem names its key; its location is left empty.
    pub fn validate(&self) -> Vec<Problem> {
        problems(self, Unparsed::default())
    }

    /// Opens and checks every file the configuration names: the shared key (a regular
    /// file, one token of at least 16 bytes, not world-readable), the identity files (the
    /// key belongs to the certificate, which chains to the CA today) and the web config.
    pub fn file_problems(&self) -> FileProblems {
        let mut out = FileProblems::default();
        if let Some(path) = &self.collective.key_file {
            match file::read_key(path) {
                Ok(k) if k.world_readable => out.warnings.push(Problem::key(
                    "collective.key_file",
                    format!(
                        "{} is readable by every user (mode o+r); chmod 0400 it (Kubernetes: defaultMode: 0400)",
                        path.display()
                    ),
                )),
                Ok(_) => {}
                Err(e) => out.errors.push(Problem::key("collective.key_file", e)),
            }
        }
        if let Some(files) = self.collective.identity_files()
            && let Err(e) = files.load()
        {
            out.errors
                .push(Problem::key("collective.identity_cert_file", e));
        }
        if let Some(path) = &self.web.config_file
            && let Err(problems) = web::WebConfigFile::load(path)
        {
            out.errors.extend(
                problems
                    .into_iter()
                    .map(|p| Problem::key("web.config_file", p)),
            );
        }
        out
    }
}

/// Whether `k` is a Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a
/// name of at most 63 characters of `[A-Za-z0-9._-]` that starts and ends alphanumeric.
fn label_key_ok(k: &str) -> bool {
    let (prefix, name) = k.rsplit_once('/').map_or(("", k), |(p, n)| (p, n));
    let prefix_ok = k.find('/').is_none()
        || (!prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            }));
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    prefix_ok
        && k.matches('/').count() <= 1
        && name.len() <= 63
        && edge(name.bytes().next())
        && edge(name.bytes().last())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::SCHEMA;

    /// Every value with a type of its own has its place among the checks: none is left for
    /// the catch-all at the end, which would list it out of its section's order.
    #[test]
    fn every_parsed_key_has_its_place() {
        let mut c = Checks {
            config: &Config::default(),
            unparsed: Unparsed::default(),
            out: Vec::new(),
        };
        let parsed: Vec<&'static str> = SCHEMA
            .iter()
            .filter(|k| k.parse.is_some())
            .map(|k| k.path)
            .collect();
        assert!(parsed.len() >= 6, "{parsed:?}");
        for key in &parsed {
            c.unparsed.insert(key, vec![ValueError::TableFromEnv]);
        }
        c.all();
        assert!(c.unparsed.0.is_empty(), "not placed: {:?}", c.unparsed);
        assert_eq!(c.out.len(), parsed.len(), "{:?}", c.out);
    }

    /// `web.node_label`: a name is taken, from the file or the environment; set but
    /// empty (an unset variable expanded, say) is refused, naming the key.
    #[test]
    fn an_empty_node_label_is_refused() {
        use crate::config::load_str;
        let env = |v: &str| vec![("HCCLWATCH_WEB_NODE_LABEL".to_string(), v.to_string())];
        let ok = load_str("[web]\nnode_label = \"gpu-7\"\n", None, &[]).unwrap();
        assert_eq!(ok.web.node_label.as_deref(), Some("gpu-7"));
        let ok = load_str("", None, &env("node-a")).unwrap();
        assert_eq!(ok.web.node_label.as_deref(), Some("node-a"));
        assert_eq!(load_str("", None, &[]).unwrap().web.node_label, None);
        for (text, env) in [
            ("[web]\nnode_label = \"\"\n", vec![]),
            ("[web]\nnode_label = \"  \"\n", vec![]),
            ("", env("")),
        ] {
            let err = load_str(text, None, &env).unwrap_err().to_string();
            assert!(
                err.contains("web.node_label") && err.contains("set but empty"),
                "{text:?} {env:?}: {err}"
            );
        }
    }

    #[test]
    fn topology_label_keys_must_be_kubernetes_label_keys() {
        use crate::config::load_str;
        for ok in ["example.com/tor", "tor", "a.b-c/x_y.z", ""] {
            let text = format!("[topology]\ntor_label = {ok:?}\n");
            assert!(load_str(&text, None, &[]).is_ok(), "{ok:?}");
        }
        for bad in [
            "/tor",
            "Example.com/tor",
            "a/b/c",
            "tor-",
            "t or",
            &"x".repeat(64),
        ] {
            let text = format!("[topology]\nspine_label = {bad:?}\n");
            let err = load_str(&text, None, &[]).unwrap_err().to_string();
            assert!(
                err.contains("topology.spine_label") && err.contains("not a Kubernetes label key"),
                "{bad:?}: {err}"
            );
        }
        let err = load_str(
            "[topology]\nrefresh = \"2s\"\ndeadline = \"2s\"\n",
            None,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("topology.deadline"), "{err}");
    }

    #[test]
    fn remediation_push_needs_a_url_a_token_and_for_https_a_ca() {
        use crate::config::load_str;
        // Off (the default): nothing is required.
        assert!(load_str("", None, &[]).is_ok());
        let on = |rest: &str| format!("[remediation.push]\nenabled = true\n{rest}");
        let ok = on("url = \"https://r:9479\"\nbearer_token_file = \"/t\"\nca_file = \"/ca\"\n");
        assert!(load_str(&ok, None, &[]).is_ok(), "{ok}");
        for (text, key, why) in [
            (on(""), "remediation.push.url", "not an https:// URL"),
            (
                on("url = \"ftp://r\"\nbearer_token_file = \"/t\"\n"),
                "remediation.push.url",
                "not an https:// URL",
            ),
            (
                on("url = \"https://r:9479\"\nca_file = \"/ca\"\n"),
                "remediation.push.bearer_token_file",
                "needs the receiver's bearer token file",
            ),
            (
                on("url = \"https://r:9479\"\nbearer_token_file = \"/t\"\n"),
                "remediation.push.ca_file",
                "needs the CA",
            ),
        ] {
            let err = load_str(&text, None, &[]).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(why), "{text:?}: {err}");
        }
    }
}
