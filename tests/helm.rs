//! The Helm chart (`deploy/helm/hcclwatch`), checked with the real tools: `helm lint
//! --strict` and `helm template` (helm v3.17, installed by scripts/install-helm.sh) for the
//! default values and every value set in the chart's `ci/` directory; every rendered
//! Kubernetes object through `kubernetes-validate --strict`; the Prometheus Operator
//! objects against the operator's own CRD schemas (vendored in
//! tests/data/prometheus-operator); the PrometheusRule against alerts/; the values schema
//! against the daemon's and the receiver's configuration keys; the receiver's RBAC against
//! the API calls in src/remediate/kube.rs; and NOTES.txt's Alertmanager snippet with
//! `amtool`. What each value set must render is in tests/helm_values.rs; the chart against
//! the kustomize base in tests/helm_parity.rs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::helm::{
    OPERATOR_KINDS, VALUE_SETS, chart, docs, get, helm, kind_of, name_of, read, render,
    render_text, repo, set, text,
};
use serde_json::{Value as Json, json};
use serde_yaml::Value;

#[test]
fn chart_lints_strict_with_every_value_set() {
    for s in VALUE_SETS {
        let values = format!("deploy/helm/hcclwatch/ci/{}", s.file);
        let out = helm(&[
            "lint",
            "--strict",
            "deploy/helm/hcclwatch",
            "--namespace",
            "hcclwatch",
            "--values",
            &values,
        ]);
        let t = text(&out);
        assert!(
            out.status.success(),
            "helm lint --strict with {}:\n{t}",
            s.file
        );
        assert!(t.contains("1 chart(s) linted, 0 chart(s) failed"), "{t}");
    }
}

/// The vendored CRD schema of a Prometheus Operator kind, made strict the way
/// `kubernetes-validate --strict` treats the built-in kinds: an object schema that lists
/// its properties and does not ask to keep unknown fields refuses any other field. (The API
/// server would prune such a field silently, which is exactly the typo to catch.)
fn operator_schema(kind: &str) -> jsonschema::Validator {
    let path = repo().join(format!(
        "tests/data/prometheus-operator/{}.v1.schema.json",
        kind.to_lowercase()
    ));
    let mut schema: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    fn strict(s: &mut Json) {
        match s {
            Json::Object(m) => {
                let keeps_unknown =
                    m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
                if m.contains_key("properties")
                    && !m.contains_key("additionalProperties")
                    && !keeps_unknown
                {
                    m.insert("additionalProperties".into(), json!(false));
                }
                m.values_mut().for_each(strict);
            }
            Json::Array(a) => a.iter_mut().for_each(strict),
            _ => {}
        }
    }
    strict(&mut schema);
    // One pattern (partial_response_strategy) uses the inline flag `(?i)`, which the
    // ECMA-262 regexes of JSON Schema lack: the draft-4 meta-schema refuses it. It is
    // rewritten to the same language spelled with case classes ([aA][bB]...).
    fn ecma(s: &mut Json) {
        match s {
            Json::Object(m) => {
                if let Some(Json::String(p)) = m.get_mut("pattern")
                    && let Some(rest) = p.strip_prefix("^(?i)")
                {
                    assert!(!rest.contains(['\\', '[']), "rewrite {p} by hand");
                    let classes: String = rest
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphabetic() {
                                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                            } else {
                                c.to_string()
                            }
                        })
                        .collect();
                    *p = format!("^{classes}");
                }
                m.values_mut().for_each(ecma);
            }
            Json::Array(a) => a.iter_mut().for_each(ecma),
            _ => {}
        }
    }
    ecma(&mut schema);
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn to_json(v: &Value) -> Json {
    serde_json::to_value(v).expect("YAML object as JSON")
}

#[test]
fn every_rendered_object_validates() {
    let dir = tempfile::tempdir().unwrap();
    let validators: BTreeMap<&str, jsonschema::Validator> = OPERATOR_KINDS
        .iter()
        .map(|k| (*k, operator_schema(k)))
        .collect();
    let mut files = Vec::new();
    let mut expected: Vec<(String, String)> = Vec::new();
    let mut operator_objects = BTreeSet::new();
    for s in VALUE_SETS {
        let rendered = render(s, &[]);
        assert!(!rendered.is_empty(), "{} rendered nothing", s.file);
        let mut core = Vec::new();
        for d in &rendered {
            let kind = kind_of(d);
            if let Some(v) = validators.get(kind) {
                // A strict schema is only a check if it can refuse: an unknown field must fail.
                let mut probe = to_json(d);
                probe["spec"]["noSuchField"] = json!(1);
                assert!(
                    !v.is_valid(&probe),
                    "the {kind} schema accepts an unknown field"
                );
                let errors: Vec<String> = v
                    .iter_errors(&to_json(d))
                    .map(|e| format!("{} at {}", e, e.instance_path()))
                    .collect();
                assert!(
                    errors.is_empty(),
                    "{}: {kind} {}: {errors:#?}",
                    s.file,
                    name_of(d)
                );
                operator_objects.insert(kind.to_string());
            } else {
                core.push(serde_yaml::to_string(d).unwrap());
                expected.push((
                    s.file.to_string(),
                    format!("{}/{}", kind.to_lowercase(), name_of(d)),
                ));
            }
        }
        let f = dir.path().join(s.file);
        std::fs::write(&f, core.join("---\n")).unwrap();
        files.push(f);
    }
    assert_eq!(
        operator_objects,
        OPERATOR_KINDS.iter().map(|k| k.to_string()).collect(),
        "every Prometheus Operator kind must be rendered (and validated) by some value set"
    );
    // The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest
    // kubernetes-validate knows.
    for version in ["1.29.0", "1.37.0"] {
        let mut args = vec!["--strict", "--kubernetes-version", version];
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        let out = Command::new("kubernetes-validate")
            .args(&args)
            .output()
            .expect("kubernetes-validate (pip install kubernetes-validate; scripts/test.sh does)");
        let t = text(&out);
        assert!(
            out.status.success() && !t.contains("ERROR"),
            "kubernetes-validate {version}:\n{t}"
        );
        for (file, obj) in &expected {
            assert!(
                t.lines().any(|l| l.contains(file.as_str())
                    && l.contains(&format!("passed for resource {obj} "))),
                "{file}: {obj} not validated against {version}:\n{t}"
            );
        }
    }
}

#[test]
fn chart_carries_the_rules_and_dashboards_unchanged() {
    // The chart's copies of alerts/ and dashboards/ are current.
    let out = Command::new("python3")
        .args(["scripts/gen-kustomize.py", "--check"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rendered = render(set("default-values.yaml"), &[]);
    let rules: Value = serde_yaml::from_str(&read("alerts/hcclwatch-rules.yml")).unwrap();
    let pr = get(&rendered, "PrometheusRule", "hcclwatch");
    assert_eq!(
        pr["spec"], rules,
        "the rendered rule groups differ from alerts/hcclwatch-rules.yml"
    );
    let groups = rules["groups"].as_sequence().unwrap();
    assert!(groups.len() >= 5 && pr["spec"]["groups"].as_sequence().unwrap().len() == groups.len());

    let mut files: Vec<String> = std::fs::read_dir(repo().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    for f in &files {
        let name = format!("hcclwatch-dashboard-{}", f.trim_end_matches(".json"));
        let cm = get(&rendered, "ConfigMap", &name);
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1", "{name}");
        assert_eq!(
            cm["data"][f.as_str()].as_str(),
            Some(read(&format!("dashboards/{f}")).as_str()),
            "{name}"
        );
    }
    // The sidecar's label and a folder annotation are the user's to choose.
    let custom = render(
        set("default-values.yaml"),
        &[
            "--set",
            "dashboards.label=grafana_dashboards",
            "--set",
            "dashboards.labelValue=hcclwatch",
            "--set",
            "dashboards.annotations.grafana_folder=NPU",
            "--set",
            "dashboards.namespace=monitoring",
        ],
    );
    let cm = get(&custom, "ConfigMap", "hcclwatch-dashboard-npu-detail");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboards"], "hcclwatch");
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "NPU");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
}

#[test]
fn a_typo_or_a_bad_value_fails_helm_template() {
    let base = set("default-values.yaml");
    // Each of these is one mistyped or invalid value; helm must refuse it and say which.
    for (arg, names) in [
        ("serviceMonitor.intervall=1m", "intervall"),
        ("imagee.tag=1", "imagee"),
        ("config.probe.enabeld=true", "enabeld"),
        ("config.telemetri.backend=dcmi", "telemetri"),
        ("config.telemetry.backend=dmci", "backend"),
        ("config.probe.max_group_size=1", "max_group_size"),
        ("remediation.config.breaker.max_node=1", "max_node"),
        ("remediation.config.rules[0].actions[0]=evict", "actions"),
        (
            "tlsServerConfig.clientAuthType=RequireClientCert",
            "clientAuthType",
        ),
        ("rollingUpdate.maxUnavailable=ten", "maxUnavailable"),
        ("compat.npuExporer=true", "npuExporer"),
        ("nodeLabels=true", "nodeLabels"),
    ] {
        match render_text(base, &["--set", arg]) {
            Ok(_) => panic!("helm template accepted --set {arg}"),
            Err(e) => assert!(
                e.contains(names),
                "--set {arg}: the error does not name {names}:\n{e}"
            ),
        }
    }
    // The same values spelled right are accepted (so the refusals above are the typos').
    for arg in [
        "serviceMonitor.interval=1m",
        "config.probe.enabled=true",
        "config.telemetry.backend=dcmi",
        "config.probe.max_group_size=2",
        "remediation.config.breaker.max_nodes=1",
        "tlsServerConfig.clientAuthType=RequireAndVerifyClientCert",
        "compat.npuExporter=true",
        "nodeLabel=true",
    ] {
        if let Err(e) = render_text(base, &["--set", arg]) {
            panic!("--set {arg} refused: {e}");
        }
    }
}

#[test]
fn combinations_the_chart_refuses() {
    let base = set("default-values.yaml");
    let e = render_text(base, &["--set", "rollingUpdate.maxSurge=1"])
        .expect_err("maxSurge 1 with hostNetwork");
    assert!(e.contains("maxSurge must be 0 with hostNetwork"), "{e}");
    render_text(
        base,
        &[
            "--set",
            "rollingUpdate.maxSurge=1",
            "--set",
            "hostNetwork=false",
        ],
    )
    .expect("surge without the host network");
    let e = render_text(base, &["--set", "podMonitor.enabled=true"]).expect_err("both monitors");
    assert!(e.contains("choose one"), "{e}");
    let e = render_text(base, &["--set", "faultLevels.enabled=true"])
        .expect_err("a fault-level file without content");
    assert!(e.contains("faultLevels.content"), "{e}");
    let e = render_text(
        base,
        &[
            "--set",
            "tlsServerConfig.enabled=true",
            "--set",
            "tlsServerConfig.autoGenerated=false",
        ],
    )
    .expect_err("TLS without a certificate");
    assert!(e.contains("tlsServerConfig.enabled needs"), "{e}");
}

/// The JSON schema of one daemon config key, from the daemon's own key table.
fn key_schema(kind: &hcclwatch::config::schema::Kind) -> Json {
    use hcclwatch::config::schema::Kind;
    let strings = json!({"type": "array", "items": {"type": "string"}});
    match kind {
        Kind::Table => json!({"type": "object", "additionalProperties": false, "properties": {}}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::Int { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
        Kind::Float { min, max } => json!({"type": "number", "minimum": min, "maximum": max}),
        Kind::Str | Kind::Path | Kind::Duration { .. } => json!({"type": "string"}),
        Kind::Enum(values) => json!({"enum": values}),
        Kind::AddrList | Kind::NameList | Kind::StrList => strings,
    }
}

/// values.schema.json's `config`, as the daemon's key table (src/config/schema.rs) says it
/// must be: every section and key, its type and its limits, nothing else.
fn expected_config_schema() -> Json {
    let mut root = json!({
        "type": "object",
        "additionalProperties": false,
        "description": "hcclwatch.toml as YAML (docs/configuration.md); generated from src/config/schema.rs by tests/helm.rs (HCCLWATCH_BLESS=1)",
        "properties": {}
    });
    for key in hcclwatch::config::schema::SCHEMA {
        let mut node = &mut root;
        let parts: Vec<&str> = key.path.split('.').collect();
        for p in &parts[..parts.len() - 1] {
            node = &mut node["properties"][*p];
        }
        node["properties"][parts[parts.len() - 1]] = key_schema(&key.kind);
    }
    root
}

#[test]
fn values_schema_has_every_daemon_config_key_and_no_other() {
    let path = chart().join("values.schema.json");
    let mut schema: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let want = expected_config_schema();
    if std::env::var_os("HCCLWATCH_BLESS").is_some() {
        schema["properties"]["config"] = want.clone();
        std::fs::write(&path, serde_json::to_string_pretty(&schema).unwrap() + "\n").unwrap();
    }
    assert!(
        schema["properties"]["config"] == want,
        "values.schema.json's config is not the daemon's key table: run \
         HCCLWATCH_BLESS=1 cargo test --test helm values_schema_has_every_daemon_config_key_and_no_other"
    );
    // Spot checks computed apart from the generator: a section, a nested section, a limit.
    let c = &schema["properties"]["config"]["properties"];
    assert_eq!(c["probe"]["properties"]["enabled"]["type"], "boolean");
    assert_eq!(
        c["telemetry"]["properties"]["intervals"]["additionalProperties"],
        false
    );
    assert_eq!(
        c["telemetry"]["properties"]["backend"]["enum"],
        json!(["auto", "dcmi", "sim", "none"])
    );
    assert_eq!(c["probe"]["properties"]["max_group_size"]["minimum"], 2);
}

/// Field names of every `pub struct` in a Rust source: struct name -> serde names.
fn struct_fields(src: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut rename: Option<String> = None;
    for line in src.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("pub struct ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            current = rest.trim_end().ends_with('{').then_some(name);
            continue;
        }
        if l == "}" {
            current = None;
        }
        if let Some(r) = l.split("rename = \"").nth(1) {
            rename = r.split('"').next().map(str::to_string);
        }
        if let (Some(s), Some(field)) = (&current, l.strip_prefix("pub "))
            && let Some((name, _)) = field.split_once(':')
        {
            let name = rename.take().unwrap_or_else(|| name.to_string());
            out.entry(s.clone()).or_default().insert(name);
        }
    }
    out
}

#[test]
fn remediation_config_schema_is_the_receivers() {
    let mut fields = struct_fields(&read("src/remediate/config.rs"));
    fields.extend(struct_fields(&read("src/remediate/isolation.rs")));
    let schema: Json =
        serde_json::from_str(&read("deploy/helm/hcclwatch/values.schema.json")).unwrap();
    let root = &schema["properties"]["remediation"]["properties"]["config"];
    let rule = &root["properties"]["rules"]["items"];
    for (strukt, table) in [
        ("RemediateConfig", root),
        ("AuthConfig", &root["properties"]["auth"]),
        ("KubernetesConfig", &root["properties"]["kubernetes"]),
        ("BreakerConfig", &root["properties"]["breaker"]),
        ("LimitsConfig", &root["properties"]["limits"]),
        ("SelectorConfig", &root["properties"]["selectors"]),
        ("Rule", rule),
        ("TaintConfig", &rule["properties"]["taint"]),
        ("ConditionConfig", &rule["properties"]["condition"]),
        ("ExecConfig", &rule["properties"]["exec"]),
        ("WebhookConfig", &rule["properties"]["webhook"]),
        ("NpuIsolation", &rule["properties"]["npu"]),
    ] {
        let want = fields
            .get(strukt)
            .unwrap_or_else(|| panic!("no struct {strukt} in src/remediate/config.rs"));
        let have: BTreeSet<String> = table["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            &have, want,
            "values.schema.json remediation.config for {strukt}"
        );
        assert_eq!(table["additionalProperties"], false, "{strukt}");
    }
}

/// (API group, resource, verb) of every Kubernetes API call of the receiver: the kube-rs
/// `Api` method called on its clients (nodes and events in src/remediate/kube.rs,
/// DeviceTaintRules and ResourceSlices in src/remediate/dra.rs), as RBAC names it.
fn receiver_api_calls() -> BTreeSet<(String, String, String)> {
    let mut calls = BTreeSet::new();
    for (file, client, group, resource) in [
        ("src/remediate/kube.rs", "self.nodes", "", "nodes"),
        ("src/remediate/kube.rs", "self.events", "", "events"),
        (
            "src/remediate/dra.rs",
            "self.rules",
            "resource.k8s.io",
            "devicetaintrules",
        ),
        (
            "src/remediate/dra.rs",
            "self.slices",
            "resource.k8s.io",
            "resourceslices",
        ),
    ] {
        let src = read(file);
        for (i, _) in src.match_indices(client) {
            let rest = src[i + client.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('.') else {
                continue;
            };
            let method: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let (res, verb) = match method.as_str() {
                "get" => (resource.to_string(), "get"),
                "list" => (resource.to_string(), "list"),
                "watch" => (resource.to_string(), "watch"),
                "create" => (resource.to_string(), "create"),
                "replace" => (resource.to_string(), "update"),
                "patch" => (resource.to_string(), "patch"),
                "delete" => (resource.to_string(), "delete"),
                "get_status" => (format!("{resource}/status"), "get"),
                "patch_status" => (format!("{resource}/status"), "patch"),
                "replace_status" => (format!("{resource}/status"), "update"),
                // The dry-run shadow's own map, not an API call.
                "lock" | "iter" | "insert" | "remove" => continue,
                other => panic!("{file} calls {client}.{other}: map it to an RBAC verb here"),
            };
            calls.insert((group.to_string(), res, verb.to_string()));
        }
    }
    calls
}

#[test]
fn remediation_rbac_is_exactly_the_receivers_api_calls() {
    let calls = receiver_api_calls();
    // The receiver reads, lists, replaces and patches nodes, patches their status,
    // creates events, and manages DeviceTaintRules (docs/remediation.md); a parser that
    // found none would prove nothing.
    assert!(
        calls.contains(&("".into(), "nodes".into(), "update".into()))
            && calls.contains(&(
                "resource.k8s.io".into(),
                "devicetaintrules".into(),
                "delete".into()
            ))
            && calls.len() >= 9,
        "{calls:?}"
    );
    let rendered = render(set("remediation-values.yaml"), &[]);
    let role = get(&rendered, "ClusterRole", "hcclwatch-remediate");
    let mut granted = BTreeSet::new();
    for r in role["rules"].as_sequence().unwrap() {
        let groups = r["apiGroups"].as_sequence().unwrap();
        assert_eq!(groups.len(), 1, "one API group per rule: {r:?}");
        let group = groups[0].as_str().unwrap().to_string();
        for res in r["resources"].as_sequence().unwrap() {
            for verb in r["verbs"].as_sequence().unwrap() {
                granted.insert((
                    group.clone(),
                    res.as_str().unwrap().to_string(),
                    verb.as_str().unwrap().to_string(),
                ));
            }
        }
    }
    assert_eq!(
        granted, calls,
        "the receiver's ClusterRole must grant exactly the calls it makes"
    );
    let binding = get(&rendered, "ClusterRoleBinding", "hcclwatch-remediate");
    assert_eq!(binding["subjects"][0]["name"], "hcclwatch-remediate");
    assert_eq!(binding["subjects"][0]["namespace"], "hcclwatch");
    let dep = get(&rendered, "Deployment", "hcclwatch-remediate");
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "hcclwatch-remediate"
    );
}

/// NOTES.txt as `helm install` would print it for a value set. `helm template` does not
/// render NOTES.txt and `helm install --dry-run` needs a cluster, so a copy of the chart
/// renders it into a ConfigMap through `tpl`, with the chart's own helpers.
fn notes(values: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("hcclwatch");
    let out = Command::new("cp")
        .args(["-r", chart().to_str().unwrap(), copy.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::copy(
        copy.join("templates/NOTES.txt"),
        copy.join("files/NOTES.txt"),
    )
    .unwrap();
    std::fs::write(
        copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ tpl (.Files.Get \"files/NOTES.txt\") . | toJson }}\n",
    )
    .unwrap();
    let values = chart().join("ci").join(values);
    let mut args = vec![
        "template",
        "hcclwatch",
        copy.to_str().unwrap(),
        "-n",
        "hcclwatch",
        "-f",
        values.to_str().unwrap(),
        "--show-only",
        "templates/zz-notes.yaml",
    ];
    args.extend_from_slice(extra);
    let out = helm(&args);
    assert!(out.status.success(), "{}", text(&out));
    let d = docs(&String::from_utf8_lossy(&out.stdout));
    d[0]["data"]["notes"].as_str().unwrap().to_string()
}

#[test]
fn notes_give_alertmanager_a_working_receiver() {
    let n = notes("remediation-values.yaml", &[]);
    assert!(n.contains("DRY RUN"), "{n}");
    // The snippet: from "  route:" to the next blank line, indented by two.
    let start = n
        .find("\n  route:\n")
        .expect("a route snippet in NOTES.txt")
        + 1;
    let end = n[start..]
        .find("\n\n")
        .map(|e| start + e)
        .unwrap_or(n.len());
    let snippet: String = n[start..end]
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let snip: Value = serde_yaml::from_str(&snippet).unwrap_or_else(|e| panic!("{e}\n{snippet}"));
    // Into a whole Alertmanager configuration with a default receiver.
    let mut cfg: Value =
        serde_yaml::from_str("route:\n  receiver: default\nreceivers:\n  - name: default\n")
            .unwrap();
    cfg["route"]["routes"] = snip["route"]["routes"].clone();
    cfg["receivers"]
        .as_sequence_mut()
        .unwrap()
        .extend(snip["receivers"].as_sequence().unwrap().iter().cloned());
    let url = &snip["receivers"][0]["webhook_configs"][0]["url"];
    assert_eq!(url, "http://hcclwatch-remediate.hcclwatch.svc:9479/webhook");
    let dir = tempfile::tempdir().unwrap();
    // The credentials file the snippet names is where the token Secret is mounted.
    let cred = snip["receivers"][0]["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"].as_str().unwrap();
    assert!(
        n.contains(&format!(
            "secret generic {}",
            cred.split('/').nth(4).unwrap()
        )),
        "{cred}\n{n}"
    );
    let local = dir.path().join("token");
    std::fs::write(&local, "t").unwrap();
    cfg["receivers"][1]["webhook_configs"][0]["http_config"]["authorization"]["credentials_file"] =
        local.to_str().unwrap().into();
    let am = dir.path().join("alertmanager.yml");
    std::fs::write(&am, serde_yaml::to_string(&cfg).unwrap()).unwrap();
    let amtool = |args: &[&str]| {
        Command::new("amtool")
            .args(args)
            .output()
            .expect("amtool (Debian prometheus-alertmanager; scripts/test.sh installs it)")
    };
    let out = amtool(&["check-config", am.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "amtool check-config:\n{}\n{}",
        text(&out),
        serde_yaml::to_string(&cfg).unwrap()
    );
    let route = |labels: &[&str]| {
        let mut args = vec![
            "config",
            "routes",
            "test",
            "--config.file",
            am.to_str().unwrap(),
        ];
        args.extend_from_slice(labels);
        String::from_utf8_lossy(&amtool(&args).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(
        route(&[
            "alertname=HcclwatchQuarantineRecommended",
            "node=n1",
            "reason=hard_fault"
        ]),
        "hcclwatch-remediation"
    );
    assert_eq!(
        route(&["alertname=HcclwatchNodeSuspect", "node=n1"]),
        "default"
    );
    // The token the snippet tells to copy is the receiver's.
    let rendered = render(set("remediation-values.yaml"), &[]);
    assert!(
        rendered
            .iter()
            .any(|d| kind_of(d) == "Secret" && name_of(d) == "hcclwatch-remediate-token")
    );
    assert!(n.contains("get secret hcclwatch-remediate-token"), "{n}");

    // Without the CRDs, NOTES says what was not created.
    let n = notes("no-monitoring-crds-values.yaml", &[]);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(n.contains(&format!("NOT created: the {kind}")), "{n}");
    }
    assert!(!n.contains("NOT created: the PodMonitor"), "{n}");
    let with = notes(
        "no-monitoring-crds-values.yaml",
        &[
            "--api-versions",
            "monitoring.coreos.com/v1/ServiceMonitor",
            "--api-versions",
            "monitoring.coreos.com/v1/PrometheusRule",
        ],
    );
    assert!(!with.contains("NOT created"), "{with}");
    assert!(!with.contains("remediation receiver"), "{with}");
}
