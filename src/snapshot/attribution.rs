//! Which pods and containers use each NPU, and how each was learned.
//!
//! The attribution poller (`crate::attribution`) fills this from up to three sources: the
//! kubelet's pod-resources API (what kubelet allocated), the Volcano `huawei.com/AscendReal`
//! pod annotation read through the Kubernetes API (what the device plugin really mounted),
//! and `/proc/<pid>/cgroup` of the processes DCMI lists on each NPU (what actually runs
//! there). NPUs are keyed by physical id, the `npu` label of every per-NPU series.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

/// How a use of an NPU was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Evidence {
    /// The kubelet pod-resources API allocated the NPU's device ID to the container.
    PodResources,
    /// The pod's `huawei.com/AscendReal` annotation (Volcano) names the NPU; it replaces
    /// what pod-resources reported for that pod.
    AscendReal,
    /// A process DCMI lists on the NPU belongs to the container (`/proc/<pid>/cgroup`).
    Process,
}

impl Evidence {
    /// A short name for logs and the state API.
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::PodResources => "pod_resources",
            Evidence::AscendReal => "ascend_real_annotation",
            Evidence::Process => "process",
        }
    }
}

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodName {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
}

/// A pod as far as it is known: by name, by UID, or both. At least one is set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// Namespace and name, when a source named them (pod-resources or the Kubernetes API).
    pub name: Option<PodName>,
    /// The pod UID, when known (the cgroup path or the Kubernetes API).
    pub uid: Option<String>,
}

/// One pod (and container, when known) using one NPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuUser {
    /// The pod.
    pub pod: PodRef,
    /// Container name, when known.
    pub container: Option<String>,
    /// Every way this use was learned.
    pub evidence: BTreeSet<Evidence>,
    /// Host PIDs of its processes on the NPU (from DCMI), when any were seen.
    pub pids: BTreeSet<u32>,
}

/// A process DCMI lists on an NPU, with the container its cgroup names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProcessOwner {
    /// Physical id of the NPU.
    pub npu: u32,
    /// Host PID.
    pub pid: u32,
    /// Container runtime ID (64 hex digits, without the runtime's `containerd://` scheme),
    /// when the process is inside a container's cgroup.
    pub container_id: Option<String>,
    /// The pod.
    pub pod: PodRef,
    /// Container name, when the Kubernetes API resolved the ID.
    pub container: Option<String>,
}

/// A source of attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The kubelet pod-resources gRPC API.
    PodResources,
    /// The Kubernetes API (pods on this node).
    KubernetesApi,
    /// `/proc/<pid>/cgroup` of the NPU processes.
    Cgroup,
}

impl Source {
    /// The `source` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::PodResources => "pod_resources",
            Source::KubernetesApi => "kubernetes_api",
            Source::Cgroup => "cgroup",
        }
    }
}

/// How one source fared in the last pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// Whether the last call (or read) succeeded.
    pub ok: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// The attribution part of the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttributionSnapshot {
    /// Users of each NPU, by physical id; each pod (and container) once per NPU.
    pub users: BTreeMap<u32, Vec<NpuUser>>,
    /// NPU processes whose cgroup names a container, by (npu, pid).
    pub processes: Vec<ProcessOwner>,
    /// The sources in use this pass and how each fared. A source that is off (no socket,
    /// no API) is absent.
    pub sources: BTreeMap<Source, SourceStatus>,
    /// Ascend device IDs of the last pass that named no NPU, by reason (`unparsed`: not a
    /// device ID form hcclwatch knows; `unknown_npu`: a physical id DCMI does not list).
    pub unmapped_ids: BTreeMap<&'static str, u64>,
    /// `web.pod_labels`: also put `namespace`, `pod`, `container` on every per-NPU series.
    /// Carried here so that every reader of the snapshot (Prometheus and OTLP) applies the
    /// same choice.
    pub pod_labels: bool,
    /// When every source in use last succeeded in the same pass.
    pub last_success: Option<SystemTime>,
}

impl AttributionSnapshot {
    /// Whether every source in use succeeded in the last pass (false with no source).
    pub fn up(&self) -> bool {
        !self.sources.is_empty() && self.sources.values().all(|s| s.ok)
    }

    /// The one named pod using `npu`, with its container when that is unique too; `None`
    /// when no named pod or several pods use it (the `web.pod_labels` rule: one value per
    /// series, never a made-up one).
    pub fn sole_pod(&self, npu: u32) -> Option<(&PodName, Option<&str>)> {
        let users = self.users.get(&npu)?;
        let mut pods = users.iter().filter_map(|u| u.pod.name.as_ref());
        let first = pods.next()?;
        if pods.any(|p| p != first) || users.iter().any(|u| u.pod.name.is_none()) {
            return None;
        }
        let mut containers = users.iter().map(|u| u.container.as_deref());
        let c = containers.next().flatten();
        let container = if containers.all(|x| x == c) { c } else { None };
        Some((first, container))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(ns: &str, pod: &str, container: Option<&str>) -> NpuUser {
        NpuUser {
            pod: PodRef {
                name: Some(PodName {
                    namespace: ns.into(),
                    name: pod.into(),
                }),
                uid: None,
            },
            container: container.map(str::to_string),
            evidence: [Evidence::PodResources].into(),
            pids: BTreeSet::new(),
        }
    }

    #[test]
    fn sole_pod_only_for_one_named_pod() {
        let mut s = AttributionSnapshot::default();
        s.users.insert(0, vec![user("ml", "a", Some("main"))]);
        s.users.insert(
            1,
            vec![user("ml", "a", Some("main")), user("ml", "b", Some("main"))],
        );
        s.users.insert(
            2,
            vec![user("ml", "c", Some("x")), user("ml", "c", Some("y"))],
        );
        let unnamed = NpuUser {
            pod: PodRef {
                name: None,
                uid: Some("u".into()),
            },
            ..user("ml", "d", None)
        };
        s.users.insert(3, vec![user("ml", "d", None), unnamed]);
        let p0 = s.sole_pod(0).unwrap();
        assert_eq!((p0.0.name.as_str(), p0.1), ("a", Some("main")));
        assert!(s.sole_pod(1).is_none(), "two pods share NPU 1");
        let p2 = s.sole_pod(2).unwrap();
        assert_eq!((p2.0.name.as_str(), p2.1), ("c", None), "two containers");
        assert!(s.sole_pod(3).is_none(), "an unnamed pod may be another pod");
        assert!(s.sole_pod(9).is_none());
    }

    #[test]
    fn up_needs_a_source_and_all_ok() {
        let mut s = AttributionSnapshot::default();
        assert!(!s.up());
        s.sources.insert(
            Source::Cgroup,
            SourceStatus {
                ok: true,
                error: None,
            },
        );
        assert!(s.up());
        s.sources.insert(
            Source::PodResources,
            SourceStatus {
                ok: false,
                error: Some("x".into()),
            },
        );
        assert!(!s.up());
    }
}
