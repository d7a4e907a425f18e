//! The Helm chart and the kustomize base deploy the same thing for the default values.
//!
//! Rendered: `kubectl kustomize deploy/kubernetes` and `helm template` of the chart with
//! its default values, the Prometheus Operator's CRDs served and `remediation.enabled`
//! (the kustomize base deploys the receiver; the chart does on request). Compared:
//!
//! - the objects: the same (kind, name) pairs, except the kustomize Namespace (a chart
//!   installs into a namespace, it does not own it) and the content-hash suffix kustomize
//!   puts on generated ConfigMaps; and without `remediation.enabled` the chart leaves out
//!   exactly the receiver's objects;
//! - DaemonSet: update strategy type and maxUnavailable; the pod's host network, host
//!   PID, DNS policy, priority class, tolerations, grace period, service account and token
//!   mount; the container's name, image, pull policy, args, env, ports, probes,
//!   resources, securityContext and volume mounts; the volumes (ConfigMap names without
//!   the hash);
//! - Deployment (receiver): replicas, strategy, pod securityContext, tolerations, service
//!   account, the same container fields, the volumes;
//! - Services: type (headless or not), publishNotReadyAddresses, ports;
//! - ServiceMonitor: jobLabel and the endpoints (a missing `path` is Prometheus'
//!   `/metrics`); PrometheusRule: the spec; dashboard ConfigMaps: the data and the
//!   Grafana label; ServiceAccounts: the token mount; ClusterRoles: the rules;
//!   ClusterRoleBindings: roleRef and subjects; Secrets: type and keys (the chart fills
//!   them with random values, the kustomize base ships them empty);
//! - the daemon's and the receiver's configuration files: equal as TOML (numbers as
//!   numbers: the chart writes 10.0 as 10);
//! - every selector (workloads, Service, ServiceMonitor) selects its own pods in both.
//!
//! Labels other than app.kubernetes.io/name and component differ by design (the chart adds
//! Helm's), as do the selectors' exact label sets (the chart adds the release instance).

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::helm::{docs, kind_of, name_of, render, repo, set, text};
use serde_yaml::Value;

fn kustomize() -> Vec<Value> {
    let out = Command::new("kubectl")
        .args(["kustomize", "deploy/kubernetes"])
        .current_dir(repo())
        .output()
        .expect("kubectl (scripts/test.sh installs it)");
    assert!(out.status.success(), "{}", text(&out));
    docs(&String::from_utf8_lossy(&out.stdout))
}

/// A kustomize-generated ConfigMap's name without its content hash.
fn unhashed(name: &str) -> String {
    for base in ["hcclwatch-remediate-config", "hcclwatch-config"] {
        if let Some(rest) = name.strip_prefix(base)
            && (rest.is_empty() || (rest.len() == 11 && rest.starts_with('-')))
        {
            return base.to_string();
        }
    }
    name.to_string()
}

fn key(d: &Value) -> (String, String) {
    (kind_of(d).to_string(), unhashed(name_of(d)))
}

fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind_of(d) == kind && unhashed(name_of(d)) == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Volumes with generated ConfigMap names unhashed.
fn volumes(pod: &Value) -> Value {
    let mut v = pod["volumes"].clone();
    for vol in v.as_sequence_mut().unwrap() {
        if let Some(n) = vol["configMap"]["name"].as_str() {
            vol["configMap"]["name"] = unhashed(n).into();
        }
    }
    v
}

/// `selector` (matchLabels, or a Service's plain map) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let m = selector.get("matchLabels").unwrap_or(selector);
    let m = m.as_mapping().expect("selector labels");
    !m.is_empty() && m.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn same(what: &str, a: &Value, b: &Value) {
    assert!(
        a == b,
        "{what} differs:\nkustomize: {a:?}\nchart:     {b:?}"
    );
}

fn same_pod(what: &str, k: &Value, c: &Value, pod_keys: &[&str]) {
    let (kp, cp) = (
        &k["spec"]["template"]["spec"],
        &c["spec"]["template"]["spec"],
    );
    for f in pod_keys {
        same(&format!("{what} pod {f}"), &kp[*f], &cp[*f]);
    }
    let (kc, cc) = (&kp["containers"][0], &cp["containers"][0]);
    for f in [
        "name",
        "image",
        "imagePullPolicy",
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ] {
        same(&format!("{what} container {f}"), &kc[f], &cc[f]);
    }
    same(&format!("{what} volumes"), &volumes(kp), &volumes(cp));
    for l in ["app.kubernetes.io/name", "app.kubernetes.io/component"] {
        same(
            &format!("{what} pod label {l}"),
            &k["spec"]["template"]["metadata"]["labels"][l],
            &c["spec"]["template"]["metadata"]["labels"][l],
        );
    }
    for (who, w) in [("kustomize", k), ("chart", c)] {
        assert!(
            selects(
                &w["spec"]["selector"],
                &w["spec"]["template"]["metadata"]["labels"]
            ),
            "{who}'s {what} selector"
        );
    }
}

/// A TOML document as JSON with every number a float, so 10 and 10.0 compare equal.
fn toml_json(text: &str) -> serde_json::Value {
    fn norm(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
            serde_json::Value::Array(a) => a.into_iter().map(norm).collect(),
            serde_json::Value::Object(m) => m.into_iter().map(|(k, v)| (k, norm(v))).collect(),
            v => v,
        }
    }
    let t: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
    norm(serde_json::to_value(t).unwrap())
}

fn config_of(d: &Value, file: &str) -> serde_json::Value {
    toml_json(
        d["data"][file]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no {file}", name_of(d))),
    )
}

#[test]
fn chart_and_kustomize_render_the_same_objects() {
    let k = kustomize();
    let c = render(
        set("default-values.yaml"),
        &["--set", "remediation.enabled=true"],
    );
    let kinds = |ds: &[Value]| -> BTreeSet<(String, String)> { ds.iter().map(key).collect() };
    let mut want = kinds(&k);
    assert!(
        want.remove(&("Namespace".into(), "hcclwatch".into())),
        "the kustomize base lost its Namespace"
    );
    assert_eq!(
        kinds(&c),
        want,
        "the chart and the kustomize base render different objects"
    );
    assert!(want.len() >= 20, "{want:?}");
    // Without the receiver, the chart leaves out exactly the receiver's objects.
    let plain = kinds(&render(set("default-values.yaml"), &[]));
    let receiver: BTreeSet<_> = want
        .iter()
        .filter(|(_, n)| n.starts_with("hcclwatch-remediate"))
        .cloned()
        .collect();
    assert_eq!(receiver.len(), 7, "{receiver:?}");
    assert_eq!(plain, want.difference(&receiver).cloned().collect());

    for (kind, name) in &want {
        let (kd, cd) = (one(&k, kind, name), one(&c, kind, name));
        if !kind.starts_with("Cluster") {
            assert_eq!(cd["metadata"]["namespace"], "hcclwatch", "{kind} {name}");
        }
        let what = format!("{kind} {name}");
        match kind.as_str() {
            "DaemonSet" => {
                let (ku, cu) = (&kd["spec"]["updateStrategy"], &cd["spec"]["updateStrategy"]);
                same("update strategy", &ku["type"], &cu["type"]);
                same(
                    "maxUnavailable",
                    &ku["rollingUpdate"]["maxUnavailable"],
                    &cu["rollingUpdate"]["maxUnavailable"],
                );
                assert!(
                    matches!(ku["rollingUpdate"]["maxSurge"].as_i64(), None | Some(0))
                        && cu["rollingUpdate"]["maxSurge"] == 0
                );
                same_pod(
                    &what,
                    kd,
                    cd,
                    &[
                        "hostNetwork",
                        "hostPID",
                        "dnsPolicy",
                        "priorityClassName",
                        "tolerations",
                        "terminationGracePeriodSeconds",
                        "serviceAccountName",
                        "automountServiceAccountToken",
                    ],
                );
            }
            "Deployment" => {
                for f in ["replicas", "strategy"] {
                    same(&format!("{what} {f}"), &kd["spec"][f], &cd["spec"][f]);
                }
                same_pod(
                    &what,
                    kd,
                    cd,
                    &["securityContext", "tolerations", "serviceAccountName"],
                );
            }
            "Service" => {
                for f in ["clusterIP", "publishNotReadyAddresses", "ports"] {
                    same(&format!("{what} {f}"), &kd["spec"][f], &cd["spec"][f]);
                }
                let target = if name == "hcclwatch" {
                    "DaemonSet"
                } else {
                    "Deployment"
                };
                for (who, ds) in [("kustomize", &k), ("chart", &c)] {
                    let w = one(ds, target, name);
                    assert!(
                        selects(
                            &one(ds, "Service", name)["spec"]["selector"],
                            &w["spec"]["template"]["metadata"]["labels"]
                        ),
                        "{who}'s Service {name} selector"
                    );
                }
            }
            "ServiceMonitor" => {
                same("jobLabel", &kd["spec"]["jobLabel"], &cd["spec"]["jobLabel"]);
                let mut ke = kd["spec"]["endpoints"].clone();
                for e in ke.as_sequence_mut().unwrap() {
                    if e.get("path").is_none() {
                        e["path"] = "/metrics".into();
                    }
                }
                same("ServiceMonitor endpoints", &ke, &cd["spec"]["endpoints"]);
                for (who, ds) in [("kustomize", &k), ("chart", &c)] {
                    assert!(
                        selects(
                            &one(ds, "ServiceMonitor", name)["spec"]["selector"],
                            &one(ds, "Service", "hcclwatch")["metadata"]["labels"]
                        ),
                        "{who}'s ServiceMonitor selector"
                    );
                }
            }
            "PrometheusRule" => same("PrometheusRule spec", &kd["spec"], &cd["spec"]),
            "ConfigMap" if name.starts_with("hcclwatch-dashboard-") => {
                same(&format!("{what} data"), &kd["data"], &cd["data"]);
                same(
                    &format!("{what} label"),
                    &kd["metadata"]["labels"]["grafana_dashboard"],
                    &cd["metadata"]["labels"]["grafana_dashboard"],
                );
            }
            "ConfigMap" => {
                let file = if name == "hcclwatch-config" {
                    "hcclwatch.toml"
                } else {
                    "remediate.toml"
                };
                let (kc, cc) = (config_of(kd, file), config_of(cd, file));
                assert!(
                    kc == cc,
                    "{what}: {file} differs:\nkustomize: {kc:#}\nchart:     {cc:#}"
                );
            }
            "ServiceAccount" => same(
                &what,
                &kd["automountServiceAccountToken"],
                &cd["automountServiceAccountToken"],
            ),
            "ClusterRole" => same(&what, &kd["rules"], &cd["rules"]),
            "ClusterRoleBinding" => {
                same(&what, &kd["roleRef"], &cd["roleRef"]);
                same(&what, &kd["subjects"], &cd["subjects"]);
            }
            "Secret" => {
                same(&what, &kd["type"], &cd["type"]);
                let keys = |d: &Value| -> Vec<String> {
                    d["data"]
                        .as_mapping()
                        .unwrap()
                        .keys()
                        .map(|k| k.as_str().unwrap().to_string())
                        .collect()
                };
                assert_eq!(keys(kd), keys(cd), "{what} keys");
            }
            other => panic!("{other} {name}: not compared; add it here"),
        }
    }
}
