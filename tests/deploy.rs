//! What hcclwatch ships besides the binary, checked with the real tools: the alert and
//! recording rules (`promtool check rules` / `test rules`), the Grafana dashboards (every
//! panel expression parsed with promql-parser, every metric name one the daemon exports),
//! the kustomize base (`kubectl kustomize`, then `kubernetes-validate --strict`), the
//! Alertmanager example (`amtool check-config` and its routing), the Prometheus example
//! (`promtool check config`), the systemd unit (`systemd-analyze verify`), and the
//! generated Kubernetes objects against their sources.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use promql_parser::parser::Expr;
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_yaml::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let p = repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Runs a tool the test script installs; a missing tool fails with the package to install.
fn run(tool: &str, package: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running {tool}: {e}; install {package} (scripts/test.sh installs it when missing)"
            )
        })
}

fn ok(out: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn rules() -> Value {
    serde_yaml::from_str(&read("alerts/hcclwatch-rules.yml")).expect("rules parse as YAML")
}

fn rule_list(rules: &Value) -> Vec<Value> {
    rules["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").clone())
        .collect()
}

/// Metric names the daemon and the remediation receiver can export, read from the
/// collectors' sources (`src/export/prometheus/`, `src/remediate/metrics.rs`): gauges as named, counters with `_total`, histograms with
/// their series suffixes.
fn exported_names() -> BTreeSet<String> {
    let dir = repo().join("src/export/prometheus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    // The remediation receiver's own registry (its histogram feeds the latency rules).
    files.push(repo().join("src/remediate/metrics.rs"));
    files.sort();
    // The remediation receiver's metrics (hcclwatch_node_escalated) are alerted on too.
    files.push(repo().join("src/remediate/metrics.rs"));
    let src: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut names = BTreeSet::new();
    for (i, _) in src.match_indices("\"hcclwatch_") {
        let rest = &src[i + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        for suffix in ["", "_total", "_bucket", "_sum", "_count"] {
            names.insert(format!("{name}{suffix}"));
        }
    }
    assert!(
        names.contains("hcclwatch_npu_temperature_celsius"),
        "{names:?}"
    );
    names
}

struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = ();
    fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
        match e {
            Expr::VectorSelector(v) => self.0.extend(v.name.clone()),
            Expr::MatrixSelector(m) => self.0.extend(m.vs.name.clone()),
            _ => {}
        }
        Ok(true)
    }
}

fn metric_names(expr: &str, whence: &str) -> BTreeSet<String> {
    let e = promql_parser::parser::parse(expr)
        .unwrap_or_else(|err| panic!("{whence}: {expr:?} does not parse: {err}"));
    let mut v = Names(BTreeSet::new());
    walk_expr(&mut v, &e).unwrap();
    v.0
}

fn recorded_names(rules: &Value) -> BTreeSet<String> {
    rule_list(rules)
        .iter()
        .filter_map(|r| r["record"].as_str().map(str::to_string))
        .collect()
}

fn check_known(names: &BTreeSet<String>, known: &BTreeSet<String>, whence: &str) {
    for n in names {
        assert!(
            known.contains(n) || n == "up",
            "{whence}: metric {n} is neither exported by the daemon nor recorded by the rules"
        );
    }
}

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    let dir = repo();
    let out = run(
        "promtool",
        "prometheus",
        &["check", "rules", "alerts/hcclwatch-rules.yml"],
        &dir,
    );
    let text = ok(&out, "promtool check rules");
    assert!(text.contains("SUCCESS"), "{text}");

    let mut tests: Vec<String> = std::fs::read_dir(dir.join("alerts/tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    tests.sort();
    assert!(tests.len() >= 5, "{tests:?}");
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    let out = run("promtool", "prometheus", &args, &dir);
    let text = ok(&out, "promtool test rules");
    assert_eq!(text.matches("SUCCESS").count(), tests.len(), "{text}");
}

#[test]
fn every_alert_is_documented_tested_and_uses_real_metrics() {
    let rules = rules();
    let runbooks = read("alerts/runbooks.md");
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_lowercase())
        .collect();
    let mut known = exported_names();
    known.extend(recorded_names(&rules));

    // Which alerts have a firing case and a must-not-fire case in the promtool tests.
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for entry in std::fs::read_dir(repo().join("alerts/tests")).unwrap() {
        let p = entry.unwrap().path();
        let t: Value = serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        for case in t["tests"].as_sequence().unwrap() {
            for a in case["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = a["alertname"].as_str().unwrap().to_string();
                if a["exp_alerts"].as_sequence().is_some_and(|x| !x.is_empty()) {
                    fires.insert(name);
                } else {
                    silent.insert(name);
                }
            }
        }
    }

    let record = regex_lite_level_metric_ops();
    let mut alerts = 0;
    for r in rule_list(&rules) {
        let expr = r["expr"].as_str().expect("expr");
        if let Some(rec) = r["record"].as_str() {
            assert!(
                record(rec),
                "recording rule {rec} is not named level:metric:operations"
            );
            check_known(&metric_names(expr, rec), &known, rec);
            continue;
        }
        alerts += 1;
        let name = r["alert"].as_str().expect("alert or record");
        check_known(&metric_names(expr, name), &known, name);
        assert!(r["for"].as_str().is_some(), "{name} has no `for:`");
        let sev = r["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            ["critical", "warning", "info"].contains(&sev),
            "{name}: severity {sev:?}"
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                r["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name} lacks annotation {key}"
            );
        }
        let url = r["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = url.rsplit_once('#').map(|(_, a)| a).unwrap_or("");
        assert_eq!(anchor, name.to_lowercase(), "{name}: runbook anchor");
        assert!(
            anchors.contains(anchor),
            "{name}: alerts/runbooks.md has no section {anchor}"
        );
        assert!(
            fires.contains(name),
            "{name} has no promtool case where it fires"
        );
        assert!(
            silent.contains(name),
            "{name} has no promtool case where it must not fire"
        );
    }
    assert!(alerts >= 25, "{alerts} alerts");
}

/// `level:metric:operations`, each part lowercase words joined by `_`.
fn regex_lite_level_metric_ops() -> impl Fn(&str) -> bool {
    |name: &str| {
        let parts: Vec<&str> = name.split(':').collect();
        parts.len() == 3
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            && parts[1].starts_with("hcclwatch_")
    }
}

/// Every dashboard file, parsed.
fn dashboards() -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(repo().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().to_string(), v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn dashboards_are_well_formed_and_query_real_metrics() {
    let dash = dashboards();
    assert_eq!(
        dash.len(),
        5,
        "{:?}",
        dash.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let mut known = exported_names();
    known.extend(recorded_names(&rules()));
    let mut uids = BTreeSet::new();
    for (file, d) in &dash {
        assert!(
            uids.insert(d["uid"].as_str().unwrap().to_string()),
            "{file}: duplicate uid"
        );
        assert!(
            d["schemaVersion"].as_u64().unwrap() >= 39,
            "{file}: schemaVersion"
        );
        let vars: Vec<&str> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for v in ["datasource", "cluster", "node"] {
            assert!(vars.contains(&v), "{file}: no ${v} variable");
        }
        if file == "npu-detail.json" {
            assert!(vars.contains(&"npu"), "{file}: no $npu variable");
        }
        let panels = d["panels"].as_array().unwrap();
        let mut cells: BTreeSet<(u64, u64)> = BTreeSet::new();
        for p in panels {
            let title = p["title"].as_str().unwrap_or("?");
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_u64().unwrap(),
                g["y"].as_u64().unwrap(),
                g["w"].as_u64().unwrap(),
                g["h"].as_u64().unwrap(),
            );
            assert!(x + w <= 24, "{file}/{title}: wider than the grid");
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(
                        cells.insert((cx, cy)),
                        "{file}/{title}: overlaps another panel"
                    );
                }
            }
            if p["type"] == "row" {
                continue;
            }
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}/{title}");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}/{title}: no query");
            for t in targets {
                let expr = t["expr"].as_str().unwrap();
                let names = metric_names(
                    &common::substitute_grafana_vars(expr),
                    &format!("{file}/{title}"),
                );
                assert!(
                    !names.is_empty(),
                    "{file}/{title}: {expr} selects no metric"
                );
                check_known(&names, &known, &format!("{file}/{title}"));
                if ["timeseries", "state-timeline"].contains(&p["type"].as_str().unwrap()) {
                    let legend = t["legendFormat"].as_str().unwrap_or("");
                    assert!(
                        legend.contains("{{node}}"),
                        "{file}/{title}: legend {legend:?} does not show the node"
                    );
                }
            }
        }
    }
}

#[test]
fn generated_kubernetes_objects_match_their_sources() {
    let out = run(
        "python3",
        "python3",
        &["scripts/gen-kustomize.py", "--check"],
        &repo(),
    );
    ok(&out, "scripts/gen-kustomize.py --check");
    // And semantically: the PrometheusRule's spec is the rules file.
    let pr: Value = serde_yaml::from_str(&read("deploy/kubernetes/prometheusrule.yaml")).unwrap();
    assert_eq!(pr["kind"], "PrometheusRule");
    assert_eq!(pr["spec"], rules());
    // Each dashboard ConfigMap holds its file, labelled for the Grafana sidecar.
    let docs: Vec<Value> =
        serde_yaml::Deserializer::from_str(&read("deploy/kubernetes/dashboards.yaml"))
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
    let dash = dashboards();
    assert_eq!(docs.len(), dash.len());
    for (file, _) in &dash {
        let cm = docs
            .iter()
            .find(|d| d["data"].get(file.as_str()).is_some())
            .unwrap_or_else(|| panic!("no ConfigMap holds {file}"));
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        assert_eq!(
            cm["data"][file.as_str()].as_str().unwrap(),
            read(&format!("dashboards/{file}"))
        );
    }
}

#[test]
fn kustomize_base_renders_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "kubectl",
        "kubectl",
        &["kustomize", "deploy/kubernetes"],
        &repo(),
    );
    ok(&out, "kubectl kustomize deploy/kubernetes");
    let rendered = String::from_utf8_lossy(&out.stdout).to_string();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).unwrap();
    let out = run(
        "kubernetes-validate",
        "kubernetes-validate (PyPI)",
        &[
            "--strict",
            "--kubernetes-version",
            "1.33.0",
            file.to_str().unwrap(),
        ],
        &repo(),
    );
    let text = ok(&out, "kubernetes-validate --strict");
    for kind in [
        "daemonset",
        "service",
        "namespace",
        "serviceaccount",
        "secret",
        "configmap",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}/")),
            "{kind} not validated:\n{text}"
        );
    }

    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let named = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
    };
    let find = |kind: &str| named(kind, "hcclwatch");
    let ds = find("DaemonSet");
    assert_eq!(ds["metadata"]["namespace"], "hcclwatch");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert!(
        spec["tolerations"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "hcclwatch.io/quarantine"),
        "the DaemonSet must tolerate its own quarantine taint"
    );
    let c = &spec["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/-/healthy");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/-/ready");
    assert!(c["resources"]["limits"]["memory"].as_str().is_some());
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let env = c["env"].as_sequence().unwrap();
    let node = env
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    // Every mount of host, configuration or secret data is read-only; only a pod-local
    // scratch directory (emptyDir, hccn_tool's log) may be written.
    let scratch: Vec<&str> = spec["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|v| !v["emptyDir"].is_null())
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(scratch, vec!["hccn-log"], "unexpected emptyDir volumes");
    for m in c["volumeMounts"].as_sequence().unwrap() {
        if scratch.contains(&m["name"].as_str().unwrap()) {
            continue;
        }
        assert_eq!(
            m["readOnly"], true,
            "mount {:?} is writable",
            m["mountPath"]
        );
    }
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for p in [
        "/usr/local/dcmi",
        "/usr/local/Ascend/driver",
        "/dev/davinci_manager",
        // hccn_tool lives under the driver mount; its configuration file and log dir.
        "/etc/hccn.conf",
        "/var/log/hccn_tool",
    ] {
        assert!(mounts.contains(&p), "{p} not mounted: {mounts:?}");
    }
    // The config's hccn_tool is under a mounted directory.
    let config: hcclwatch::config::Config = Default::default();
    assert!(
        config
            .telemetry
            .hccn_tool
            .starts_with("/usr/local/Ascend/driver"),
        "the default hccn_tool path is not under the driver mount"
    );
    // The config the DaemonSet mounts is the generated ConfigMap (name with content hash).
    let cm_name = spec["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|v| v["configMap"]["name"].as_str())
        .unwrap();
    assert!(cm_name.starts_with("hcclwatch-config-"), "{cm_name}");
    let svc = find("Service");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    let sm = find("ServiceMonitor");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["honorLabels"], true);
    assert!(
        ep["relabelings"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|r| r["targetLabel"] == "node"
                && r["sourceLabels"][0] == "__meta_kubernetes_pod_node_name"),
        "the ServiceMonitor must set `node` from the pod's node"
    );
    assert_eq!(find("PrometheusRule")["spec"], rules());

    // The remediation receiver: its own account with exactly the verbs it uses, non-root,
    // dry-run by default, reachable where the Alertmanager example sends the webhook.
    let role = named("ClusterRole", "hcclwatch-remediate");
    let verbs = |resource: &str| -> Vec<String> {
        role["rules"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| r["resources"][0] == resource)
            .map(|r| {
                r["verbs"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(verbs("nodes"), vec!["get", "list", "update", "patch"]);
    assert_eq!(verbs("nodes/status"), vec!["patch"]);
    assert_eq!(verbs("events"), vec!["create"]);
    assert!(verbs("pods/eviction").is_empty());
    let dep = named("Deployment", "hcclwatch-remediate");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "hcclwatch-remediate");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        named("Service", "hcclwatch-remediate")["spec"]["ports"][0]["port"],
        9479
    );
    let am = read("deploy/alertmanager/alertmanager.yml");
    assert!(am.contains("http://hcclwatch-remediate.hcclwatch.svc:9479/webhook"));
    let cfg = read("deploy/kubernetes/remediate/remediate.toml");
    assert!(cfg.contains("dry_run = true"));
}

#[test]
fn shipped_configs_pass_check_config() {
    for f in [
        "deploy/kubernetes/hcclwatch.toml",
        "deploy/systemd/hcclwatch.toml",
    ] {
        // --syntax-only: the key file these configs name is mounted only on the node.
        let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
            .args(["check-config", "--syntax-only", f])
            .current_dir(repo())
            .output()
            .unwrap();
        ok(&out, &format!("hcclwatch check-config {f}"));
    }
}

#[test]
fn alertmanager_example_checks_and_routes() {
    let am = "deploy/alertmanager/alertmanager.yml";
    let out = run(
        "amtool",
        "prometheus-alertmanager",
        &["check-config", am],
        &repo(),
    );
    ok(&out, "amtool check-config");
    let route = |labels: &[&str]| {
        let mut args = vec!["config", "routes", "test", "--config.file", am];
        args.extend_from_slice(labels);
        let out = run("amtool", "prometheus-alertmanager", &args, &repo());
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let q = route(&[
        "alertname=HcclwatchQuarantineRecommended",
        "severity=critical",
        "node=n1",
    ]);
    assert!(q.contains("hcclwatch-remediation"), "{q}");
    let f = route(&[
        "alertname=HcclwatchFabricDegraded",
        "severity=critical",
        "team=network",
    ]);
    assert_eq!(f, "network-oncall");
    // The fabric alert inhibits every per-node straggler and quarantine alert.
    let cfg: Value = serde_yaml::from_str(&read(am)).unwrap();
    let inhibit = cfg["inhibit_rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["source_matchers"][0] == "alertname=\"HcclwatchFabricDegraded\"")
        .expect("a fabric inhibit rule");
    let targets = inhibit["target_matchers"][0].as_str().unwrap();
    for a in [
        "HcclwatchNodeSuspect",
        "HcclwatchNodeStragglerConfirmed",
        "HcclwatchQuarantineRecommended",
    ] {
        assert!(targets.contains(a), "{a} not inhibited by the fabric alert");
    }
}

#[test]
fn prometheus_example_checks() {
    let dir = tempfile::tempdir().unwrap();
    let rules = repo().join("alerts/hcclwatch-rules.yml");
    let cfg = read("deploy/prometheus/prometheus.yml").replace(
        "/etc/prometheus/rules/hcclwatch-rules.yml",
        rules.to_str().unwrap(),
    );
    let p = dir.path().join("prometheus.yml");
    std::fs::write(&p, cfg).unwrap();
    let out = run(
        "promtool",
        "prometheus",
        &["check", "config", p.to_str().unwrap()],
        dir.path(),
    );
    let text = ok(&out, "promtool check config");
    assert!(
        text.contains("SUCCESS: 37 rules found") || text.contains("rules found"),
        "{text}"
    );
}

#[test]
fn systemd_unit_verifies() {
    // systemd-analyze verify insists that ExecStart exists, so point it at the test build.
    let dir = tempfile::tempdir().unwrap();
    let unit = read("deploy/systemd/hcclwatch.service")
        .replace("/usr/local/bin/hcclwatch", env!("CARGO_BIN_EXE_hcclwatch"));
    let p = dir.path().join("hcclwatch.service");
    std::fs::write(&p, unit).unwrap();
    let out = run(
        "systemd-analyze",
        "systemd",
        &["verify", p.to_str().unwrap()],
        dir.path(),
    );
    // verify exits 0 on unknown or malformed settings and only warns, so stderr must be empty.
    let text = ok(&out, "systemd-analyze verify");
    assert!(
        text.trim().is_empty(),
        "systemd-analyze verify warned:\n{text}"
    );
}
