//! The alert chain as the shipped files wire it, with Debian's real Prometheus and
//! Alertmanager: Prometheus scrapes the daemons (each labelled `node-<i>`, in the
//! `cluster` "e2e") and the remediation receiver every second and evaluates the given
//! rules; Alertmanager runs the shipped example config with the remediation webhook's URL
//! and token file pointed at the test's receiver. Both are killed on drop.

use std::path::Path;

use super::{KillOnDrop, free_port};

/// A running Prometheus and Alertmanager.
pub struct AlertChain {
    /// Prometheus' `127.0.0.1:PORT`.
    pub prometheus: String,
    _alertmanager: KillOnDrop,
    _prometheus: KillOnDrop,
}

impl AlertChain {
    /// Starts both in `dir`: `rules` is the rule file's text, `daemons` the daemons'
    /// addresses in node order, `receiver` the receiver's address and `token` its token
    /// file.
    pub fn start(dir: &Path, rules: &str, daemons: &[&str], receiver: &str, token: &Path) -> Self {
        let am_addr = format!("127.0.0.1:{}", free_port());
        let am_cfg = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/alertmanager/alertmanager.yml"),
        )
        .unwrap()
        .replace(
            "http://hcclwatch-remediate.hcclwatch.svc:9479/webhook",
            &format!("http://{receiver}/webhook"),
        )
        .replace(
            "/etc/alertmanager/secrets/hcclwatch-remediate-token",
            token.to_str().unwrap(),
        );
        assert!(
            am_cfg.contains(receiver),
            "the example's remediation URL changed; update tests/common/alert_chain.rs"
        );
        std::fs::write(dir.join("alertmanager.yml"), am_cfg).unwrap();
        let alertmanager = super::start_alertmanager(dir, &am_addr);
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        let targets: String = daemons
            .iter()
            .enumerate()
            .map(|(i, a)| {
                format!("      - targets: [\"{a}\"]\n        labels: {{node: node-{i}}}\n")
            })
            .collect();
        let prom_cfg = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n  external_labels: {{cluster: e2e}}\n\
             rule_files: [\"{rules}\"]\n\
             alerting:\n  alertmanagers:\n    - static_configs: [{{targets: [\"{am_addr}\"]}}]\n\
             scrape_configs:\n  - job_name: hcclwatch\n    honor_labels: true\n    static_configs:\n{targets}  - job_name: hcclwatch-remediate\n    static_configs: [{{targets: [\"{receiver}\"]}}]\n",
            rules = dir.join("rules.yml").display(),
        );
        std::fs::write(dir.join("prometheus.yml"), prom_cfg).unwrap();
        let prometheus = format!("127.0.0.1:{}", free_port());
        let prom = super::start_prometheus(dir, &prometheus);
        AlertChain {
            prometheus,
            _alertmanager: alertmanager,
            _prometheus: prom,
        }
    }
}
