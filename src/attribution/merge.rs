//! Combines what the sources said into one answer per NPU. Pure: no I/O.
//!
//! The rules, in order:
//!
//! 1. **Allocation** comes from pod-resources: each Ascend device ID a container holds
//!    names a chip by physical id.
//! 2. **Volcano**: a pod with the `huawei.com/AscendReal` annotation is attributed to the
//!    chips the annotation names, and its pod-resources device IDs are dropped (under
//!    Volcano, kubelet's IDs are not the mounted devices). The container is the pod's only
//!    NPU container where there is one; otherwise it is left unnamed. An annotation that
//!    names no chip (empty, not yet written) changes nothing.
//! 3. **Processes** add what actually runs: a process DCMI lists on a chip belongs to the
//!    container its cgroup names. Its pod is named through the Kubernetes API (UID →
//!    namespace/name, container ID → container name); without the API only the UID and
//!    container ID are known.
//!
//! Sources never remove each other's users (except rule 2): an allocated pod with no
//! process yet, and a process on a chip its pod was not allocated, are both listed. An ID
//! naming a chip DCMI does not list is dropped and counted, rather than shown as a
//! phantom NPU.

use std::collections::{BTreeMap, BTreeSet};

use super::cgroup::CgroupOwner;
use super::device_id;
use super::kube_api::NodePod;
use super::pod_resources::ContainerDevices;
use crate::snapshot::attribution::{Evidence, NpuUser, PodName, PodRef, ProcessOwner};

/// What one pass gathered.
#[derive(Debug, Default)]
pub struct Inputs<'a> {
    /// pod-resources `List`, when it answered.
    pub pod_resources: Option<&'a [ContainerDevices]>,
    /// Pods on this node from the Kubernetes API, when it answered.
    pub pods: Option<&'a [NodePod]>,
    /// Every NPU process and its cgroup owner: (npu, pid, owner).
    pub processes: &'a [(u32, u32, CgroupOwner)],
    /// Physical ids DCMI lists; empty when unknown (then every parsed id is kept).
    pub known_npus: BTreeSet<u32>,
    /// `attribution.resource_prefixes`.
    pub prefixes: &'a [String],
}

/// What the pass concluded.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// Users by NPU.
    pub users: BTreeMap<u32, Vec<NpuUser>>,
    /// Processes with their container.
    pub processes: Vec<ProcessOwner>,
    /// Device IDs that named no NPU, by reason.
    pub unmapped_ids: BTreeMap<&'static str, u64>,
}

/// A user's identity while merging: the pod by name where known, else by UID.
type Key = (PodKey, Option<String>);

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PodKey {
    Name(PodName),
    Uid(String),
}

#[derive(Default)]
struct Builder {
    users: BTreeMap<u32, BTreeMap<Key, NpuUser>>,
    unmapped: BTreeMap<&'static str, u64>,
}

impl Builder {
    /// Maps device IDs to chips, counting the ones that name none.
    fn chips<'a>(&mut self, ids: impl Iterator<Item = &'a str>, known: &BTreeSet<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        for id in ids {
            match device_id::parse(id) {
                None => *self.unmapped.entry("unparsed").or_default() += 1,
                Some(d) if !known.is_empty() && !known.contains(&d.phy) => {
                    *self.unmapped.entry("unknown_npu").or_default() += 1;
                }
                Some(d) => out.push(d.phy),
            }
        }
        out
    }

    fn add(
        &mut self,
        npu: u32,
        pod: PodRef,
        container: Option<String>,
        ev: Evidence,
        pid: Option<u32>,
    ) {
        let key = match &pod.name {
            Some(n) => PodKey::Name(n.clone()),
            None => PodKey::Uid(pod.uid.clone().unwrap_or_default()),
        };
        let u = self
            .users
            .entry(npu)
            .or_default()
            .entry((key, container.clone()))
            .or_insert_with(|| NpuUser {
                pod: pod.clone(),
                container,
                evidence: BTreeSet::new(),
                pids: BTreeSet::new(),
            });
        if u.pod.uid.is_none() {
            u.pod.uid = pod.uid;
        }
        u.evidence.insert(ev);
        u.pids.extend(pid);
    }

    /// Folds a pod's container-less entry into its one named-container entry on the same
    /// NPU (an AscendReal attribution without a container, and the process that names it).
    fn fold_unnamed_containers(&mut self) {
        for users in self.users.values_mut() {
            let pods: BTreeSet<PodKey> = users.keys().map(|(p, _)| p.clone()).collect();
            for pod in pods {
                let named: Vec<Key> = users
                    .keys()
                    .filter(|(p, c)| *p == pod && c.is_some())
                    .cloned()
                    .collect();
                let bare = (pod.clone(), None);
                if named.len() == 1
                    && let Some(b) = users.remove(&bare)
                {
                    let target = users.get_mut(&named[0]).expect("listed above");
                    target.evidence.extend(b.evidence);
                    target.pids.extend(b.pids);
                    if target.pod.uid.is_none() {
                        target.pod.uid = b.pod.uid;
                    }
                }
            }
        }
    }
}

fn named(namespace: &str, name: &str) -> PodRef {
    PodRef {
        name: Some(PodName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }),
        uid: None,
    }
}

/// Step 3: every process on a chip counts as its pod's use of that chip; the returned
/// owners (sorted) name the pod even where the API server does not know it (by uid).
fn add_processes(
    b: &mut Builder,
    procs: &[(u32, u32, CgroupOwner)],
    pods: &[NodePod],
) -> Vec<ProcessOwner> {
    let mut processes = Vec::new();
    for (npu, pid, owner) in procs {
        let api_pod = pods.iter().find(|p| p.uid == owner.pod_uid);
        let pod = PodRef {
            name: api_pod.map(|p| PodName {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            }),
            uid: Some(owner.pod_uid.clone()),
        };
        let container = owner.container_id.as_ref().and_then(|id| {
            api_pod?
                .container_ids
                .iter()
                .find(|(_, cid)| cid == id)
                .map(|(n, _)| n.clone())
        });
        b.add(
            *npu,
            pod.clone(),
            container.clone(),
            Evidence::Process,
            Some(*pid),
        );
        processes.push(ProcessOwner {
            npu: *npu,
            pid: *pid,
            container_id: owner.container_id.clone(),
            pod,
            container,
        });
    }
    processes.sort();
    processes
}

/// Applies the rules above.
pub fn merge(inp: &Inputs<'_>) -> Outcome {
    let mut b = Builder::default();
    let pods = inp.pods.unwrap_or_default();
    let real: BTreeMap<(&str, &str), &NodePod> = pods
        .iter()
        .filter(|p| {
            p.ascend_real
                .as_deref()
                .is_some_and(|v| device_id::split_list(v).any(|id| device_id::parse(id).is_some()))
        })
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
        .collect();
    let uid_of = |ns: &str, name: &str| {
        pods.iter()
            .find(|p| p.namespace == ns && p.name == name)
            .map(|p| p.uid.clone())
    };

    // 1. pod-resources, except for pods whose AscendReal annotation wins.
    let mut npu_containers: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for d in inp.pod_resources.unwrap_or_default() {
        if !device_id::is_npu_resource(&d.resource, inp.prefixes) {
            continue;
        }
        let key = (d.namespace.as_str(), d.pod.as_str());
        npu_containers.entry(key).or_default().insert(&d.container);
        if real.contains_key(&key) {
            continue;
        }
        let mut pod = named(&d.namespace, &d.pod);
        pod.uid = uid_of(&d.namespace, &d.pod);
        for phy in b.chips(d.ids.iter().map(String::as_str), &inp.known_npus) {
            b.add(
                phy,
                pod.clone(),
                Some(d.container.clone()),
                Evidence::PodResources,
                None,
            );
        }
    }

    // 2. Volcano's record of the devices really mounted.
    for ((ns, name), p) in &real {
        let from_kubelet = npu_containers.get(&(*ns, *name));
        let container = match from_kubelet {
            Some(c) if c.len() == 1 => c.first().map(|c| c.to_string()),
            Some(_) => None,
            None if p.npu_containers.len() == 1 => Some(p.npu_containers[0].clone()),
            None => None,
        };
        let mut pod = named(ns, name);
        pod.uid = Some(p.uid.clone());
        let ids = device_id::split_list(p.ascend_real.as_deref().unwrap_or(""));
        for phy in b.chips(ids, &inp.known_npus) {
            b.add(
                phy,
                pod.clone(),
                container.clone(),
                Evidence::AscendReal,
                None,
            );
        }
    }

    // 3. The processes on each chip.
    let processes = add_processes(&mut b, inp.processes, pods);
    b.fold_unnamed_containers();
    Outcome {
        users: b
            .users
            .into_iter()
            .map(|(npu, m)| (npu, m.into_values().collect()))
            .collect(),
        processes,
        unmapped_ids: b.unmapped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ID_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn prefixes() -> Vec<String> {
        ["huawei.com/Ascend910", "huawei.com/Ascend310P"]
            .map(String::from)
            .to_vec()
    }

    fn devices(pod: &str, container: &str, resource: &str, ids: &[&str]) -> ContainerDevices {
        ContainerDevices {
            namespace: "ml".into(),
            pod: pod.into(),
            container: container.into(),
            resource: resource.into(),
            ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn api_pod(name: &str, uid: &str, real: Option<&str>, containers: &[(&str, &str)]) -> NodePod {
        NodePod {
            namespace: "ml".into(),
            name: name.into(),
            uid: uid.into(),
            ascend_real: real.map(str::to_string),
            container_ids: containers
                .iter()
                .map(|(n, id)| (n.to_string(), id.to_string()))
                .collect(),
            npu_containers: containers.iter().map(|(n, _)| n.to_string()).collect(),
        }
    }

    /// (npu, pod name or uid, container, evidence) of every user.
    fn summary(o: &Outcome) -> Vec<(u32, String, Option<String>, Vec<&'static str>)> {
        o.users
            .iter()
            .flat_map(|(npu, us)| {
                us.iter().map(move |u| {
                    (
                        *npu,
                        u.pod
                            .name
                            .as_ref()
                            .map(|n| n.name.clone())
                            .or(u.pod.uid.clone())
                            .unwrap(),
                        u.container.clone(),
                        u.evidence.iter().map(|e| e.as_str()).collect(),
                    )
                })
            })
            .collect()
    }

    #[test]
    fn pod_resources_whole_chips_and_vnpus() {
        let pr = vec![
            devices(
                "train",
                "main",
                "huawei.com/Ascend910",
                &["Ascend910-0", "Ascend910-1"],
            ),
            devices(
                "infer",
                "srv",
                "huawei.com/Ascend310P-4c.3cpu",
                &["Ascend310P-4c.3cpu-100-2"],
            ),
            devices(
                "infer2",
                "srv",
                "huawei.com/Ascend310P-2c",
                &["Ascend310P-2c-101-2"],
            ),
            // Not an NPU resource: ignored, not counted.
            devices("gpu", "x", "nvidia.com/gpu", &["GPU-1"]),
            devices(
                "odd",
                "x",
                "huawei.com/Ascend910",
                &["weird", "Ascend910-9"],
            ),
        ];
        let p = prefixes();
        let o = merge(&Inputs {
            pod_resources: Some(&pr),
            known_npus: [0, 1, 2, 3].into(),
            prefixes: &p,
            ..Inputs::default()
        });
        let c = |s: &str| Some(s.to_string());
        assert_eq!(
            summary(&o),
            vec![
                (0, "train".into(), c("main"), vec!["pod_resources"]),
                (1, "train".into(), c("main"), vec!["pod_resources"]),
                (2, "infer".into(), c("srv"), vec!["pod_resources"]),
                (2, "infer2".into(), c("srv"), vec!["pod_resources"]),
            ]
        );
        assert_eq!(o.unmapped_ids.get("unparsed"), Some(&1));
        assert_eq!(o.unmapped_ids.get("unknown_npu"), Some(&1));
    }

    #[test]
    fn ascend_real_wins_over_kubelet_ids() {
        // Volcano: kubelet allocated Ascend910-0, the plugin mounted chips 6 and 7.
        let pr = vec![
            devices("vc-job", "worker", "huawei.com/Ascend910", &["Ascend910-0"]),
            devices("plain", "main", "huawei.com/Ascend910", &["Ascend910-3"]),
        ];
        let pods = vec![
            api_pod("vc-job", "u-vc", Some("Ascend910-6,Ascend910-7"), &[]),
            // An annotation naming no chip yet changes nothing.
            api_pod("plain", "u-plain", Some(""), &[]),
        ];
        let p = prefixes();
        let o = merge(&Inputs {
            pod_resources: Some(&pr),
            pods: Some(&pods),
            prefixes: &p,
            ..Inputs::default()
        });
        let c = |s: &str| Some(s.to_string());
        assert_eq!(
            summary(&o),
            vec![
                (3, "plain".into(), c("main"), vec!["pod_resources"]),
                (
                    6,
                    "vc-job".into(),
                    c("worker"),
                    vec!["ascend_real_annotation"]
                ),
                (
                    7,
                    "vc-job".into(),
                    c("worker"),
                    vec!["ascend_real_annotation"]
                ),
            ]
        );
        // The UID came from the API.
        assert_eq!(o.users[&6][0].pod.uid.as_deref(), Some("u-vc"));
    }

    #[test]
    fn ascend_real_without_pod_resources_names_the_only_npu_container() {
        let pods = vec![
            api_pod("one", "u1", Some("Ascend910-2"), &[("main", ID_A)]),
            api_pod(
                "two",
                "u2",
                Some("Ascend910-3"),
                &[("a", ID_A), ("b", ID_B)],
            ),
        ];
        let p = prefixes();
        let o = merge(&Inputs {
            pods: Some(&pods),
            prefixes: &p,
            ..Inputs::default()
        });
        assert_eq!(o.users[&2][0].container.as_deref(), Some("main"));
        assert_eq!(
            o.users[&3][0].container, None,
            "two NPU containers: unnamed"
        );
    }

    #[test]
    fn processes_named_through_the_api_or_by_uid() {
        let owner = |uid: &str, id: &str| CgroupOwner {
            pod_uid: uid.into(),
            container_id: Some(id.into()),
        };
        let procs = vec![
            (0, 100, owner("u-train", ID_A)),
            (0, 101, owner("u-train", ID_A)),
            (1, 200, owner("u-unknown", ID_B)),
        ];
        let pods = vec![api_pod("train", "u-train", None, &[("main", ID_A)])];
        let pr = vec![devices(
            "train",
            "main",
            "huawei.com/Ascend910",
            &["Ascend910-0"],
        )];
        let p = prefixes();
        let o = merge(&Inputs {
            pod_resources: Some(&pr),
            pods: Some(&pods),
            processes: &procs,
            prefixes: &p,
            ..Inputs::default()
        });
        let c = |s: &str| Some(s.to_string());
        // pod-resources and the processes agree: one user with both kinds of evidence.
        assert_eq!(
            summary(&o),
            vec![
                (
                    0,
                    "train".into(),
                    c("main"),
                    vec!["pod_resources", "process"]
                ),
                (1, "u-unknown".into(), None, vec!["process"]),
            ]
        );
        assert_eq!(o.users[&0][0].pids, [100, 101].into());
        assert_eq!(o.processes.len(), 3);
        let unknown = o.processes.iter().find(|p| p.pid == 200).unwrap();
        assert_eq!(unknown.pod.name, None);
        assert_eq!(unknown.pod.uid.as_deref(), Some("u-unknown"));
        assert_eq!(unknown.container_id.as_deref(), Some(ID_B));
        assert_eq!(unknown.container, None);
    }

    #[test]
    fn a_containerless_attribution_folds_into_the_named_one() {
        // AscendReal with two NPU containers leaves the container unnamed; the process
        // then names it.
        let pods = vec![api_pod(
            "vc",
            "u-vc",
            Some("Ascend910-4"),
            &[("a", ID_A), ("b", ID_B)],
        )];
        let procs = vec![(
            4,
            300,
            CgroupOwner {
                pod_uid: "u-vc".into(),
                container_id: Some(ID_B.into()),
            },
        )];
        let p = prefixes();
        let o = merge(&Inputs {
            pods: Some(&pods),
            processes: &procs,
            prefixes: &p,
            ..Inputs::default()
        });
        assert_eq!(
            summary(&o),
            vec![(
                4,
                "vc".into(),
                Some("b".into()),
                vec!["ascend_real_annotation", "process"]
            )]
        );
    }
}
