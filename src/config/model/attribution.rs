//! `[attribution]`: which pods and containers use each NPU.

use std::path::PathBuf;
use std::time::Duration;

use super::section;
use crate::config::duration;
use crate::config::schema::{Spec, ms, secs};

section! {
    /// `[attribution]`: which pods and containers use each NPU, from the kubelet's
    /// pod-resources API, the Kubernetes API (Volcano's `huawei.com/AscendReal`
    /// annotation, pod names for UIDs) and `/proc/<pid>/cgroup` of the NPU processes.
    pub struct AttributionConfig in "attribution" {
        /// Master switch; when on, each source is used where it is available.
        enabled: bool = true, Spec::BOOL;
        /// The kubelet pod-resources socket; used while it exists.
        pod_resources_socket: PathBuf = "/var/lib/kubelet/pod-resources/kubelet.sock".into(),
            Spec::PATH;
        /// Extended-resource names (prefixes) that are Ascend NPUs, e.g.
        /// `huawei.com/Ascend910` also matches the vNPU resource `huawei.com/Ascend910-2c`.
        resource_prefixes: Vec<String> = [
                "huawei.com/Ascend910",
                "huawei.com/Ascend310P",
                "huawei.com/Ascend310",
                "huawei.com/npu",
            ]
            .map(String::from)
            .to_vec(),
            Spec::STR_LIST;
        /// Time between attribution passes.
        #[serde(with = "duration::serde_str")]
        interval: Duration = secs(15), Spec::duration(ms(1000), ms(3_600_000));
        /// Bound on each call of a pass (pod-resources `List`, the Kubernetes pod list).
        #[serde(with = "duration::serde_str")]
        deadline: Duration = secs(2), Spec::duration(ms(100), ms(60_000));
        /// Read pods on this node through the Kubernetes API (in-cluster service account or
        /// `KUBECONFIG`), where one can be reached.
        kubernetes_api: bool = true, Spec::BOOL;
        /// A kubeconfig file for that API; when unset, the in-cluster service account or
        /// `KUBECONFIG`.
        #[serde(skip_serializing_if = "Option::is_none")]
        kubeconfig: Option<PathBuf> = None, Spec::PATH;
        /// This node's Kubernetes name, for the pod list's `spec.nodeName` field selector.
        /// Empty: the `NODE_NAME` environment variable, else the host name.
        node_name: String = String::new(), Spec::STR;
        /// Where the host's `/proc` is (the NPU processes' cgroups are read there).
        proc_root: PathBuf = "/proc".into(), Spec::PATH;
    }
}
