//! The Helm chart (`deploy/helm/hcclwatch`) under test: finding `helm`, rendering the
//! chart with a value set, and reading the rendered objects.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_yaml::Value;

/// The Prometheus Operator kinds the chart renders only while their CRD is served.
pub const OPERATOR_KINDS: [&str; 3] = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chart directory.
pub fn chart() -> PathBuf {
    repo().join("deploy/helm/hcclwatch")
}

/// The `helm` binary: on PATH, else where `scripts/install-helm.sh` puts it by default.
pub fn helm_bin() -> PathBuf {
    if Command::new("helm").arg("version").output().is_ok() {
        return PathBuf::from("helm");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let p = home.join(".local/share/hcclwatch/bin/helm");
    assert!(
        p.exists(),
        "helm is not installed: run scripts/install-helm.sh (scripts/test.sh does)"
    );
    p
}

/// Runs helm with `args` in the repository root.
pub fn helm(args: &[&str]) -> Output {
    Command::new(helm_bin())
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running helm")
}

/// Stdout and stderr of a finished command, as one text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One test value set: a file of the chart's `ci/` directory, and whether the cluster it
/// is rendered for serves the Prometheus Operator's CRDs.
#[derive(Debug, Clone, Copy)]
pub struct ValueSet {
    /// File name in `deploy/helm/hcclwatch/ci/`.
    pub file: &'static str,
    /// Render with `--api-versions` for the three Prometheus Operator kinds.
    pub operator_crds: bool,
}

/// Every value set the tests render (each file of `ci/` exactly once).
pub const VALUE_SETS: [ValueSet; 8] = [
    ValueSet {
        file: "default-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "remediation-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "tls-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "mtls-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "no-monitoring-crds-values.yaml",
        operator_crds: false,
    },
    ValueSet {
        file: "host-plane-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "a3-values.yaml",
        operator_crds: true,
    },
    ValueSet {
        file: "fault-levels-values.yaml",
        operator_crds: true,
    },
];

/// The `helm template` arguments for a value set plus `extra` (e.g. `--set k=v`).
pub fn template_args(set: ValueSet, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "template",
        "hcclwatch",
        "deploy/helm/hcclwatch",
        "--namespace",
        "hcclwatch",
        "--values",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("deploy/helm/hcclwatch/ci/{}", set.file));
    if set.operator_crds {
        for kind in OPERATOR_KINDS {
            args.push("--api-versions".into());
            args.push(format!("monitoring.coreos.com/v1/{kind}"));
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `helm template` of a value set: the rendered text, or helm's error output.
pub fn render_text(set: ValueSet, extra: &[&str]) -> Result<String, String> {
    let args = template_args(set, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = helm(&args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    } else {
        Err(text(&out))
    }
}

/// The objects of a multi-document YAML text (empty documents dropped).
pub fn docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// `helm template` of a value set, parsed; panics with helm's message on failure.
pub fn render(set: ValueSet, extra: &[&str]) -> Vec<Value> {
    match render_text(set, extra) {
        Ok(t) => docs(&t),
        Err(e) => panic!("helm template with {}: {e}", set.file),
    }
}

/// The value set named `file`.
pub fn set(file: &str) -> ValueSet {
    *VALUE_SETS
        .iter()
        .find(|s| s.file == file)
        .unwrap_or_else(|| panic!("no value set {file}"))
}

/// The object of `kind` named `name`, if rendered.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// The object of `kind` named `name`; panics when it was not rendered.
pub fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(docs, kind, name).unwrap_or_else(|| {
        let have: Vec<String> = docs
            .iter()
            .map(|d| format!("{}/{}", kind_of(d), name_of(d)))
            .collect();
        panic!("no {kind} {name} rendered; rendered: {have:?}")
    })
}

/// An object's kind.
pub fn kind_of(d: &Value) -> &str {
    d["kind"].as_str().unwrap_or("?")
}

/// An object's name.
pub fn name_of(d: &Value) -> &str {
    d["metadata"]["name"].as_str().unwrap_or("?")
}

/// The TOML text a ConfigMap holds under `key`, parsed.
pub fn toml_of(cm: &Value, key: &str) -> toml::Table {
    let text = cm["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no data.{key}", name_of(cm)));
    text.parse()
        .unwrap_or_else(|e| panic!("{}/{key} is not TOML: {e}\n{text}", name_of(cm)))
}

/// A file of the repository, read.
pub fn read(rel: &str) -> String {
    let p = repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// `path` relative to the repository root, for messages.
pub fn rel(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Writes what `container` of `pod` sees through its ConfigMap and Secret volumes under
/// `root`, as the kubelet projects them (each key a file in the mount directory, or the
/// one `subPath` key at the mount path; Secret data decoded, `defaultMode` applied).
/// Objects the chart does not render (an `existingSecret`) come from `external`:
/// (kind, name) -> key -> bytes. Every text file written has the container paths under
/// `/etc/hcclwatch` rewritten to lie under `root`, so the daemon run here finds them.
pub fn project_volumes(
    docs: &[Value],
    pod: &Value,
    container: &Value,
    root: &Path,
    external: &std::collections::BTreeMap<
        (String, String),
        std::collections::BTreeMap<String, Vec<u8>>,
    >,
) {
    use base64::Engine as _;
    use std::os::unix::fs::PermissionsExt as _;
    let volumes = pod["volumes"].as_sequence().expect("volumes");
    for m in container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
    {
        let name = m["name"].as_str().unwrap();
        let vol = volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("mount {name} has no volume"));
        let (kind, obj, mode) = if let Some(n) = vol["configMap"]["name"].as_str() {
            ("ConfigMap", n, vol["configMap"]["defaultMode"].as_u64())
        } else if let Some(n) = vol["secret"]["secretName"].as_str() {
            ("Secret", n, vol["secret"]["defaultMode"].as_u64())
        } else {
            continue;
        };
        let mut data: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        if let Some(d) = find(docs, kind, obj) {
            for (k, v) in d["data"].as_mapping().into_iter().flatten() {
                let v = v.as_str().unwrap();
                let bytes = if kind == "Secret" {
                    base64::engine::general_purpose::STANDARD
                        .decode(v)
                        .expect("Secret data is base64")
                } else {
                    v.as_bytes().to_vec()
                };
                data.insert(k.as_str().unwrap().to_string(), bytes);
            }
            for (k, v) in d["stringData"].as_mapping().into_iter().flatten() {
                data.insert(
                    k.as_str().unwrap().to_string(),
                    v.as_str().unwrap().as_bytes().to_vec(),
                );
            }
        } else {
            data = external
                .get(&(kind.to_string(), obj.to_string()))
                .unwrap_or_else(|| panic!("{kind} {obj} is neither rendered nor given"))
                .clone();
        }
        let at = root.join(m["mountPath"].as_str().unwrap().trim_start_matches('/'));
        let files: Vec<(PathBuf, &Vec<u8>)> = match m["subPath"].as_str() {
            Some(sub) => vec![(
                at.clone(),
                data.get(sub)
                    .unwrap_or_else(|| panic!("{obj} has no key {sub}")),
            )],
            None => data.iter().map(|(k, v)| (at.join(k), v)).collect(),
        };
        for (path, bytes) in files {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let bytes = match std::str::from_utf8(bytes) {
                Ok(t) => t
                    .replace(
                        "\"/etc/hcclwatch",
                        &format!("\"{}/etc/hcclwatch", root.display()),
                    )
                    .into_bytes(),
                Err(_) => bytes.clone(),
            };
            std::fs::write(&path, bytes).unwrap();
            let mode = mode.unwrap_or(0o644) as u32;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
}

/// The pod template spec and first container of the workload `kind`/`name`.
pub fn pod_of<'a>(docs: &'a [Value], kind: &str, name: &str) -> (&'a Value, &'a Value) {
    let w = get(docs, kind, name);
    let pod = &w["spec"]["template"]["spec"];
    (pod, &pod["containers"][0])
}
