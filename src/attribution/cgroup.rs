//! The pod and container of a host process, from `/proc/<pid>/cgroup`.
//!
//! kubelet puts every pod in a cgroup named after the pod UID, and the container runtime
//! puts each container in a child cgroup named after the container ID. The file has one
//! `hierarchy:controllers:path` line per hierarchy (cgroup v1: many lines; v2: one `0::`
//! line). The path forms differ by cgroup driver and runtime:
//!
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/`
//!   `kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<id>.scope` (containerd),
//!   `.../crio-<id>.scope` (CRI-O), `.../docker-<id>.scope` (cri-dockerd);
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>`;
//! - seen from another cgroup namespace, the path is relative and starts with `/../..`.
//!
//! So the path is read segment by segment, whatever comes before: a `pod<uid>` segment,
//! then the first later segment that holds a 64-hex-digit container ID. CRI-O's
//! `crio-conmon-<id>.scope` is the container's monitor process, not the container.

use std::io;
use std::path::Path;

/// What a process's cgroup says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupOwner {
    /// The pod UID (dashes restored from the systemd form).
    pub pod_uid: String,
    /// The container ID (64 hex digits), when the process is inside a container's cgroup.
    pub container_id: Option<String>,
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pod UID: 36 characters in the 8-4-4-4-12 form, or 32 hex digits (a static pod's UID
/// is a hash of its manifest).
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-");
    let dashed = uid.len() == 36
        && uid
            .char_indices()
            .all(|(i, c)| matches!(i, 8 | 13 | 18 | 23) == (c == '-'))
        && is_hex(&uid.replace('-', ""));
    let plain = uid.len() == 32 && is_hex(&uid);
    (dashed || plain).then_some(uid)
}

/// The pod UID a path segment names: `pod<uid>` or `kubepods-<qos>-pod<uid>.slice`.
fn pod_segment(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".slice").unwrap_or(seg);
    let at = seg.rfind("pod")?;
    if at != 0 && !seg[..at].ends_with('-') {
        return None;
    }
    pod_uid(&seg[at + 3..])
}

/// The container ID a path segment names.
fn container_segment(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".scope").unwrap_or(seg);
    if seg.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["cri-containerd-", "crio-", "docker-", "containerd-"]
        .iter()
        .find_map(|p| seg.strip_prefix(p))
        .unwrap_or(seg);
    (id.len() == 64 && is_hex(id)).then(|| id.to_ascii_lowercase())
}

fn parse_path(path: &str) -> Option<CgroupOwner> {
    let segs: Vec<&str> = path.split('/').collect();
    let (at, pod_uid) = segs
        .iter()
        .enumerate()
        .find_map(|(i, s)| pod_segment(s).map(|u| (i, u)))?;
    let container_id = segs[at + 1..].iter().find_map(|s| container_segment(s));
    Some(CgroupOwner {
        pod_uid,
        container_id,
    })
}

/// Reads the owner out of a `/proc/<pid>/cgroup` text: the first line whose path names a
/// container, else the first that names a pod; `None` for a process outside any pod.
pub fn parse(text: &str) -> Option<CgroupOwner> {
    let owners: Vec<CgroupOwner> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .filter_map(parse_path)
        .collect();
    owners
        .iter()
        .find(|o| o.container_id.is_some())
        .or_else(|| owners.first())
        .cloned()
}

/// Reads `<proc_root>/<pid>/cgroup`. `Ok(None)`: the process is not in a pod.
pub fn read(proc_root: &Path, pid: u32) -> io::Result<Option<CgroupOwner>> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup"))?;
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f6d2c4a-1b2e-4c3d-9e8f-a1b2c3d4e5f6";
    const ID: &str = "4f1c7e2a9b3d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7";

    fn owner(id: Option<&str>) -> Option<CgroupOwner> {
        Some(CgroupOwner {
            pod_uid: UID.into(),
            container_id: id.map(str::to_string),
        })
    }

    #[test]
    fn cgroup_v2_systemd_containerd() {
        let u = UID.replace('-', "_");
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(parse(&text), owner(Some(ID)));
    }

    #[test]
    fn cgroup_v2_systemd_crio_and_guaranteed_qos() {
        let u = UID.replace('-', "_");
        let text = format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-{ID}.scope\n");
        assert_eq!(parse(&text), owner(Some(ID)));
        // The conmon scope is the runtime's monitor, not the container.
        let conmon = format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-{ID}.scope\n");
        assert_eq!(parse(&conmon), owner(None));
    }

    #[test]
    fn cgroup_v2_seen_from_another_namespace() {
        let u = UID.replace('-', "_");
        let text =
            format!("0::/../../kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope/init\n");
        assert_eq!(parse(&text), owner(Some(ID)));
    }

    #[test]
    fn cgroup_v1_cgroupfs_driver() {
        let text = format!(
            "12:pids:/kubepods/burstable/pod{UID}/{ID}\n\
             11:memory:/kubepods/burstable/pod{UID}/{ID}\n\
             1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n\
             0::/\n"
        );
        assert_eq!(parse(&text), owner(Some(ID)));
    }

    #[test]
    fn cgroup_v1_systemd_crio_with_a_root_line_first() {
        let u = UID.replace('-', "_");
        let text = format!(
            "13:misc:/\n\
             5:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope\n"
        );
        assert_eq!(parse(&text), owner(Some(ID)));
    }

    #[test]
    fn static_pod_uid_is_a_hash() {
        let hash = "3c1f0ad86b2a4e5f9d8c7b6a5f4e3d2c";
        let text = format!("0::/kubepods/pod{hash}/{ID}\n");
        assert_eq!(
            parse(&text),
            Some(CgroupOwner {
                pod_uid: hash.into(),
                container_id: Some(ID.into()),
            })
        );
    }

    #[test]
    fn host_processes_and_lookalikes_are_not_pods() {
        for text in [
            "0::/system.slice/containerd.service\n",
            "0::/user.slice/user-0.slice/session-1.scope\n",
            "0::/\n",
            // "pod" inside a word, and a UID of the wrong shape.
            &format!("0::/kubepods/ipod{UID}/{ID}\n"),
            "0::/kubepods/pod1234/abc\n",
            // A docker container outside Kubernetes.
            &format!("0::/system.slice/docker-{ID}.scope\n"),
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }

    #[test]
    fn reads_under_a_proc_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("4242")).unwrap();
        std::fs::write(
            dir.path().join("4242/cgroup"),
            format!("0::/kubepods/besteffort/pod{UID}/{ID}\n"),
        )
        .unwrap();
        assert_eq!(read(dir.path(), 4242).unwrap(), owner(Some(ID)));
        let missing = read(dir.path(), 4243).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
