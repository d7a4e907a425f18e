//! What each of the chart's value sets (deploy/helm/hcclwatch/ci/) must render, and that
//! what it renders works: the daemon's configuration passes `hcclwatch check-config` with
//! the files its volumes project (written here as the kubelet would), the receiver's
//! passes `hcclwatch remediate --check`, the TLS set's certificate, CA and basic-auth hash
//! serve a real TLS scrape with curl, and the fault-level set's table is the one the
//! daemon loads.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::helm::{
    find, get, kind_of, name_of, pod_of, project_volumes, render, set, text, toml_of,
};
use common::{Daemon, Start};
use serde_yaml::Value;

type External = BTreeMap<(String, String), BTreeMap<String, Vec<u8>>>;

fn mount_paths(c: &Value) -> BTreeSet<String> {
    c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_string())
        .collect()
}

fn host_paths(pod: &Value) -> BTreeSet<String> {
    pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str().map(str::to_string))
        .collect()
}

fn env_names(c: &Value) -> Vec<String> {
    c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn has_kind(docs: &[Value], kind: &str) -> bool {
    docs.iter().any(|d| kind_of(d) == kind)
}

/// Projects the DaemonSet's volumes under a temporary root and runs `hcclwatch
/// check-config` (every file the configuration names opened and checked) on the config.
fn check_daemon_config(docs: &[Value], name: &str, external: &External) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let (pod, c) = pod_of(docs, "DaemonSet", name);
    project_volumes(docs, pod, c, root.path(), external);
    let cfg = root.path().join("etc/hcclwatch/hcclwatch.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check-config of {name}'s rendered config:\n{}\n{}",
        text(&out),
        std::fs::read_to_string(&cfg).unwrap()
    );
    root
}

/// The daemon started on the projected files of a value set, on a loopback port.
fn start_rendered(root: &Path) -> Daemon {
    let cfg = std::fs::read_to_string(root.join("etc/hcclwatch/hcclwatch.toml")).unwrap();
    let mut s = Start::new(&cfg);
    s.args = vec!["--web.listen-address=127.0.0.1:0"];
    Daemon::start(s)
}

#[test]
fn default_values_render_the_daemon_with_npu_access() {
    let docs = render(set("default-values.yaml"), &[]);
    let (pod, c) = pod_of(&docs, "DaemonSet", "hcclwatch");
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["hostPID"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["automountServiceAccountToken"], true);
    let ds = get(&docs, "DaemonSet", "hcclwatch");
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "10%"
    );
    assert_eq!(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"], 0);
    assert_eq!(c["securityContext"]["privileged"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    for p in [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/usr/local/Ascend/driver",
        "/usr/local/dcmi",
        "/etc/hccn.conf",
        "/var/lib/kubelet/pod-resources",
    ] {
        assert!(
            host_paths(pod).contains(p),
            "{p} is not mounted from the host"
        );
        assert!(
            mount_paths(c).contains(p),
            "{p} is not mounted in the container"
        );
    }
    assert!(env_names(c).contains(&"LD_LIBRARY_PATH".to_string()));
    assert_eq!(
        get(&docs, "ServiceAccount", "hcclwatch")["automountServiceAccountToken"],
        false
    );
    let role = get(&docs, "ClusterRole", "hcclwatch-pod-reader");
    assert_eq!(role["rules"][0]["resources"][0], "pods");
    assert_eq!(
        role["rules"][0]["verbs"],
        serde_yaml::from_str::<Value>("[get, list]").unwrap()
    );
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(has_kind(&docs, kind), "no {kind}");
    }
    assert!(!has_kind(&docs, "PodMonitor") && !has_kind(&docs, "Deployment"));
    let ep = &get(&docs, "ServiceMonitor", "hcclwatch")["spec"]["endpoints"][0];
    assert_eq!(ep["honorLabels"], true);
    assert_eq!(ep["relabelings"][0]["targetLabel"], "node");
    assert_eq!(
        ep["relabelings"][0]["sourceLabels"][0],
        "__meta_kubernetes_pod_node_name"
    );
    let cfg = toml_of(
        get(&docs, "ConfigMap", "hcclwatch-config"),
        "hcclwatch.toml",
    );
    assert_eq!(
        cfg["collective"]["peers_dns"].as_str(),
        Some("hcclwatch.hcclwatch.svc.cluster.local:60100")
    );
    assert_eq!(cfg["probe"]["enabled"].as_bool(), Some(false));
    check_daemon_config(&docs, "hcclwatch", &External::new());
}

#[test]
fn remediation_values_render_a_receiver_whose_config_checks() {
    let docs = render(set("remediation-values.yaml"), &[]);
    let (pod, c) = pod_of(&docs, "Deployment", "hcclwatch-remediate");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    let state = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "state")
        .unwrap();
    assert_eq!(
        state["persistentVolumeClaim"]["claimName"],
        "hcclwatch-remediate-audit"
    );
    assert_eq!(
        get(&docs, "Deployment", "hcclwatch-remediate")["spec"]["replicas"],
        1
    );
    let svc = get(&docs, "Service", "hcclwatch-remediate");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9479);
    let root = tempfile::tempdir().unwrap();
    project_volumes(&docs, pod, c, root.path(), &External::new());
    let cfg_path = root.path().join("etc/hcclwatch-remediate/remediate.toml");
    let cfg: toml::Table = std::fs::read_to_string(&cfg_path).unwrap().parse().unwrap();
    assert_eq!(
        cfg["dry_run"].as_bool(),
        Some(true),
        "the receiver must be dry-run unless asked"
    );
    assert_eq!(
        cfg["selectors"]["allow"][0].as_str(),
        Some("accelerator-type")
    );
    // Hard faults, stragglers, and one NPU's own hard fault (isolate_npu).
    let rules = cfg["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[2]["actions"][0].as_str(), Some("isolate_npu"));
    // The token file the configuration names is where the token Secret is projected.
    let token = Path::new(cfg["auth"]["bearer_token_file"].as_str().unwrap());
    assert!(
        token.starts_with(root.path()) && token.exists(),
        "{}",
        token.display()
    );
    assert!(std::fs::read_to_string(token).unwrap().len() >= 32);
    let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["remediate", "--check", "--config.file"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "remediate --check:\n{}", text(&out));
    // And the daemon of the same release probes, with the key the chart made and its
    // byte budget written as the integer the daemon reads.
    let cfg = toml_of(
        get(&docs, "ConfigMap", "hcclwatch-config"),
        "hcclwatch.toml",
    );
    assert_eq!(
        cfg["probe"]["budget_bytes_per_hour"].as_integer(),
        Some(2_147_483_648)
    );
    // The daemons push their hard faults to this receiver's Service, with the receiver's
    // own token, projected where their configuration says.
    let push = &cfg["remediation"]["push"];
    assert_eq!(push["enabled"].as_bool(), Some(true));
    assert_eq!(
        push["url"].as_str(),
        Some("http://hcclwatch-remediate.hcclwatch.svc.cluster.local:9479")
    );
    let d = check_daemon_config(&docs, "hcclwatch", &External::new());
    let pushed_token =
        std::fs::read_to_string(d.path().join("etc/hcclwatch/remediate-token/token")).unwrap();
    assert_eq!(pushed_token, std::fs::read_to_string(token).unwrap());
    let key = std::fs::read_to_string(d.path().join("etc/hcclwatch/key/probe.key")).unwrap();
    assert!(
        key.len() >= 16 && !key.contains(char::is_whitespace),
        "{key:?}"
    );
}

#[test]
fn tls_values_serve_metrics_over_tls_with_basic_auth() {
    let docs = render(set("tls-values.yaml"), &[]);
    let (_, c) = pod_of(&docs, "DaemonSet", "hcclwatch");
    assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTPS");
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    let ep = &get(&docs, "ServiceMonitor", "hcclwatch")["spec"]["endpoints"][0];
    assert_eq!(ep["scheme"], "https");
    assert_eq!(ep["tlsConfig"]["ca"]["secret"]["name"], "hcclwatch-tls");
    assert_eq!(ep["basicAuth"]["username"]["name"], "hcclwatch-scrape-auth");
    let server = ep["tlsConfig"]["serverName"].as_str().unwrap().to_string();
    let ca_key = ep["tlsConfig"]["ca"]["secret"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    let root = check_daemon_config(&docs, "hcclwatch", &External::new());
    // The scrape the ServiceMonitor describes, by curl: the Secret's CA, the server name,
    // the user and password of the value set.
    let d = start_rendered(root.path());
    let port = d.addr.rsplit(':').next().unwrap().to_string();
    let ca = root.path().join("etc/hcclwatch/tls").join(&ca_key);
    let curl = |extra: &[&str]| -> String {
        let url = format!("https://{server}:{port}/metrics");
        let resolve = format!("{server}:{port}:127.0.0.1");
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
                "--cacert",
                ca.to_str().unwrap(),
                "--resolve",
                &resolve,
            ])
            .args(extra)
            .arg(&url)
            .output()
            .expect("curl (scripts/test.sh installs it)");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(
        curl(&["-u", "prometheus:scrape-password-for-tests"]),
        "200",
        "log:\n{}",
        d.log()
    );
    assert_eq!(curl(&[]), "401");
    assert_eq!(curl(&["-u", "prometheus:wrong"]), "401");
    // Another name than the certificate's fails verification (curl: no HTTP status).
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            "--cacert",
            ca.to_str().unwrap(),
        ])
        .args([
            "--resolve",
            &format!("other.example:{port}:127.0.0.1"),
            &format!("https://other.example:{port}/metrics"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000");
}

#[test]
fn mtls_values_use_tcp_probes_and_the_operators_certificates() {
    let docs = render(set("mtls-values.yaml"), &[]);
    let (_, c) = pod_of(&docs, "DaemonSet", "hcclwatch");
    for p in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[p]["tcpSocket"]["port"], "metrics", "{p}");
        assert!(c[p]["httpGet"].is_null(), "{p}");
    }
    assert!(
        find(&docs, "Secret", "hcclwatch-tls").is_none(),
        "the existing Secret must not be rendered"
    );
    assert!(!has_kind(&docs, "ServiceMonitor"));
    let ep = &get(&docs, "PodMonitor", "hcclwatch")["spec"]["podMetricsEndpoints"][0];
    assert_eq!(
        ep["tlsConfig"]["cert"]["secret"]["name"],
        "prometheus-client-tls"
    );
    // The operator's Secret, made here.
    let (ca, cert, key) = common::test_ca("hcclwatch.hcclwatch.svc");
    let secret: BTreeMap<String, Vec<u8>> = [
        ("tls.crt", cert.into_bytes()),
        ("tls.key", key.into_bytes()),
        ("ca.crt", ca.into_bytes()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let external: External = [(
        ("Secret".to_string(), "hcclwatch-metrics-tls".to_string()),
        secret,
    )]
    .into_iter()
    .collect();
    let root = check_daemon_config(&docs, "hcclwatch", &external);
    let web =
        std::fs::read_to_string(root.path().join("etc/hcclwatch/web/web-config.yml")).unwrap();
    assert!(
        web.contains("client_auth_type: RequireAndVerifyClientCert"),
        "{web}"
    );
}

#[test]
fn no_monitoring_crds_renders_no_operator_objects() {
    let docs = render(set("no-monitoring-crds-values.yaml"), &[]);
    for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"] {
        assert!(!has_kind(&docs, kind), "{kind} rendered without its CRD");
    }
    // Everything else is there, the dashboards included.
    let dashboards = docs
        .iter()
        .filter(|d| name_of(d).starts_with("hcclwatch-dashboard-"))
        .count();
    assert_eq!(dashboards, 5);
    for (kind, name) in [
        ("DaemonSet", "hcclwatch"),
        ("Service", "hcclwatch"),
        ("ConfigMap", "hcclwatch-config"),
    ] {
        get(&docs, kind, name);
    }
}

#[test]
fn host_plane_values_run_unprivileged_without_host_access() {
    let docs = render(set("host-plane-values.yaml"), &[]);
    let (pod, c) = pod_of(&docs, "DaemonSet", "hcclwatch");
    assert!(
        host_paths(pod).is_empty(),
        "host paths mounted: {:?}",
        host_paths(pod)
    );
    assert!(pod["hostPID"].is_null() || pod["hostPID"] == false);
    assert_eq!(
        pod["hostNetwork"], true,
        "host-plane probing measures the host's path"
    );
    // The token is for the topology source alone (get its node, list HyperNodes): no
    // attribution, so no pod-reader role.
    assert_eq!(pod["automountServiceAccountToken"], true);
    let sc = &c["securityContext"];
    assert!(sc["privileged"].is_null(), "{sc:?}");
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    assert!(!env_names(c).contains(&"LD_LIBRARY_PATH".to_string()));
    assert!(
        find(&docs, "ClusterRole", "hcclwatch-pod-reader").is_none(),
        "no attribution: no pod-reader role"
    );
    let role = get(&docs, "ClusterRole", "hcclwatch-topology-reader");
    assert_eq!(
        role["rules"],
        serde_yaml::from_str::<Value>(
            "[{apiGroups: [''], resources: [nodes], verbs: [get]}, {apiGroups: [topology.volcano.sh], resources: [hypernodes], verbs: [list]}]"
        )
        .unwrap()
    );
    let cfg = toml_of(
        get(&docs, "ConfigMap", "hcclwatch-config"),
        "hcclwatch.toml",
    );
    assert_eq!(cfg["telemetry"]["backend"].as_str(), Some("none"));
    assert_eq!(cfg["probe"]["enabled"].as_bool(), Some(true));
    assert_eq!(cfg["device_probe"]["enabled"].as_bool(), Some(false));
    assert_eq!(cfg["attribution"]["enabled"].as_bool(), Some(false));
    check_daemon_config(&docs, "hcclwatch", &External::new());
}

#[test]
fn a3_values_render_one_super_pods_release() {
    let docs = render(set("a3-values.yaml"), &[]);
    let (pod, _) = pod_of(&docs, "DaemonSet", "hcclwatch-sp3");
    assert_eq!(
        pod["nodeSelector"]["accelerator-type"],
        "module-a3-16-super-pod"
    );
    assert_eq!(pod["nodeSelector"]["example.com/super-pod"], "3");
    // Every object of the release carries the override, so releases per super-pod coexist.
    for d in &docs {
        assert!(
            name_of(d).starts_with("hcclwatch-sp3"),
            "{}/{}",
            kind_of(d),
            name_of(d)
        );
    }
    let cfg = toml_of(
        get(&docs, "ConfigMap", "hcclwatch-sp3-config"),
        "hcclwatch.toml",
    );
    assert_eq!(cfg["device_probe"]["hccs_super_pod"].as_integer(), Some(3));
    assert_eq!(cfg["device_probe"]["hccs"].as_bool(), Some(true));
    assert_eq!(
        cfg["collective"]["peers_dns"].as_str(),
        Some("hcclwatch-sp3.hcclwatch.svc.cluster.local:60100")
    );
    check_daemon_config(&docs, "hcclwatch-sp3", &External::new());
}

#[test]
fn fault_level_values_give_the_daemon_the_sites_table() {
    let docs = render(set("fault-levels-values.yaml"), &[]);
    let (_, c) = pod_of(&docs, "DaemonSet", "hcclwatch");
    assert!(mount_paths(c).contains("/etc/hcclwatch/fault-levels"));
    assert!(
        mount_paths(c).contains("/etc/localtime"),
        "extraVolumeMounts"
    );
    assert!(env_names(c).contains(&"TZ".to_string()), "extraEnv");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "--config.file=/etc/hcclwatch/hcclwatch.toml",
            "--log.level=debug"
        ]
    );
    let cfg = toml_of(
        get(&docs, "ConfigMap", "hcclwatch-config"),
        "hcclwatch.toml",
    );
    assert_eq!(cfg["web"]["pod_labels"].as_bool(), Some(true));
    assert_eq!(cfg["compat"]["npu_exporter"].as_bool(), Some(true));
    assert_eq!(
        cfg["telemetry"]["fault_levels_file"].as_str(),
        Some("/etc/hcclwatch/fault-levels/faultCode.json")
    );
    // nodeLabel: web.node_label from the downward API's node name.
    let node_env = c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("HCCLWATCH_WEB_NODE_LABEL"))
        .expect("HCCLWATCH_WEB_NODE_LABEL in the daemon's env");
    assert_eq!(
        node_env["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("spec.nodeName"),
        "{node_env:?}"
    );
    let root = check_daemon_config(&docs, "hcclwatch", &External::new());
    let table = root
        .path()
        .join("etc/hcclwatch/fault-levels/faultCode.json");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&table).unwrap()).unwrap();
    assert_eq!(t["SeparateNPUCodes"][0], "80E18005");
    // The daemon starts on that table (a table it cannot use stops the start), with the
    // node name the kubelet would give the variable: npu-exporter's machine count (no
    // NPU here) carries it ...
    let rendered =
        std::fs::read_to_string(root.path().join("etc/hcclwatch/hcclwatch.toml")).unwrap();
    let mut s = Start::new(&rendered);
    s.args = vec!["--web.listen-address=127.0.0.1:0"];
    s.env = vec![("HCCLWATCH_WEB_NODE_LABEL", "node-7".to_string())];
    let d = Daemon::start(s);
    let text = d.scrape();
    assert!(
        text.lines()
            .any(|l| l == "machine_npu_nums{node=\"node-7\"} 0.0"),
        "{text}"
    );
    drop(d);
    // ... and refuses to start on a broken one, naming it: so the file above is read.
    std::fs::write(&table, "{\"SeparateNPUCodes\": [\"not-hex\"]}").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["run", "--web.listen-address=127.0.0.1:0", "--config.file"])
        .arg(root.path().join("etc/hcclwatch/hcclwatch.toml"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_timeout::ChildExt::wait_timeout(&mut child, Duration::from_secs(30)).unwrap();
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the daemon started on a broken fault-level table");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("faultCode.json") && err.contains("not-hex"),
        "{err}"
    );
}
