//! Pods on this node, read through the Kubernetes API: Volcano's
//! `huawei.com/AscendReal` annotation, the pod UIDs and the container IDs that turn a
//! process's cgroup into names.
//!
//! Read-only (`list pods` with the field selector `spec.nodeName=<node>`, so the answer is
//! bounded by the node's pod capacity); every call is bounded by the pass deadline.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

/// The annotation in which the Ascend device plugin records the devices it really mounted
/// into the pod (under Volcano, these differ from the IDs kubelet allocated).
pub const ASCEND_REAL: &str = "huawei.com/AscendReal";

/// What the attribution needs of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The `huawei.com/AscendReal` annotation, when set.
    pub ascend_real: Option<String>,
    /// (container name, container ID without the runtime scheme) from the pod status.
    pub container_ids: Vec<(String, String)>,
    /// Containers whose resource limits or requests name an NPU resource.
    pub npu_containers: Vec<String>,
}

/// Why the API could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeApiError {
    /// No configuration: not in a cluster and no kubeconfig.
    #[error("no in-cluster service account and no kubeconfig ({0})")]
    NoConfig(String),
    /// The client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
    /// The list call failed.
    #[error("listing pods on node {node}: {error}")]
    List {
        /// This node.
        node: String,
        /// Why.
        error: String,
    },
    /// The deadline passed.
    #[error("{what} did not finish within {deadline:?}")]
    Deadline {
        /// The call.
        what: &'static str,
        /// The deadline.
        deadline: Duration,
    },
}

/// A client for pods on one node.
#[derive(Clone)]
pub struct KubeApi {
    pods: Api<Pod>,
    node: String,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi").field("node", &self.node).finish()
    }
}

impl KubeApi {
    /// Builds a client from `kubeconfig`, or else from the in-cluster service account or
    /// `KUBECONFIG` (as kubectl finds it). Must run inside a tokio runtime.
    pub async fn connect(
        node: &str,
        kubeconfig: Option<&Path>,
        deadline: Duration,
    ) -> Result<Self, KubeApiError> {
        let load = async {
            match kubeconfig {
                Some(p) => {
                    let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| {
                        KubeApiError::Client(format!("reading kubeconfig {}: {e}", p.display()))
                    })?;
                    kube::Config::from_custom_kubeconfig(kc, &Default::default())
                        .await
                        .map_err(|e| {
                            KubeApiError::Client(format!("kubeconfig {}: {e}", p.display()))
                        })
                }
                None => kube::Config::infer()
                    .await
                    .map_err(|e| KubeApiError::NoConfig(e.to_string())),
            }
        };
        let mut cfg =
            tokio::time::timeout(deadline, load)
                .await
                .map_err(|_| KubeApiError::Deadline {
                    what: "reading the Kubernetes client configuration",
                    deadline,
                })??;
        cfg.connect_timeout = Some(deadline);
        cfg.read_timeout = Some(deadline);
        let client = Client::try_from(cfg).map_err(|e| KubeApiError::Client(e.to_string()))?;
        Ok(Self {
            pods: Api::all(client),
            node: node.to_string(),
        })
    }

    /// Pods scheduled on this node.
    pub async fn pods_on_node(
        &self,
        prefixes: &[String],
        deadline: Duration,
    ) -> Result<Vec<NodePod>, KubeApiError> {
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let list = tokio::time::timeout(deadline, self.pods.list(&lp))
            .await
            .map_err(|_| KubeApiError::Deadline {
                what: "listing pods",
                deadline,
            })?
            .map_err(|e| KubeApiError::List {
                node: self.node.clone(),
                error: e.to_string(),
            })?;
        Ok(list
            .items
            .iter()
            .filter_map(|p| node_pod(p, prefixes))
            .collect())
    }
}

fn node_pod(p: &Pod, prefixes: &[String]) -> Option<NodePod> {
    let meta = &p.metadata;
    let ascend_real = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ASCEND_REAL))
        .cloned();
    let statuses = p
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten());
    let container_ids = statuses
        .filter_map(|c| {
            let id = c.container_id.as_deref()?;
            // `containerd://<id>`, `cri-o://<id>`, `docker://<id>`.
            let id = id.rsplit_once("://").map_or(id, |(_, id)| id);
            Some((c.name.clone(), id.to_ascii_lowercase()))
        })
        .collect();
    let npu_containers = p
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| {
            c.resources.as_ref().is_some_and(|r| {
                r.limits
                    .iter()
                    .chain(r.requests.iter())
                    .flat_map(|m| m.keys())
                    .any(|k| super::device_id::is_npu_resource(k, prefixes))
            })
        })
        .map(|c| c.name.clone())
        .collect();
    Some(NodePod {
        namespace: meta.namespace.clone()?,
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        ascend_real,
        container_ids,
        npu_containers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_attribution_needs_from_a_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "job-0", "namespace": "ml", "uid": "u-1",
                         "annotations": {"huawei.com/AscendReal": "Ascend910-4,Ascend910-5"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "main", "resources": {"limits": {"huawei.com/Ascend910": "2"}}},
                {"name": "sidecar"}
            ]},
            "status": {"containerStatuses": [
                {"name": "main", "containerID": "containerd://ABCDEF", "image": "i", "imageID": "",
                 "ready": true, "restartCount": 0},
                {"name": "sidecar", "image": "i", "imageID": "", "ready": false, "restartCount": 0}
            ]}
        }))
        .unwrap();
        let prefixes = vec!["huawei.com/Ascend910".to_string()];
        let np = node_pod(&pod, &prefixes).unwrap();
        assert_eq!(np.namespace, "ml");
        assert_eq!(np.name, "job-0");
        assert_eq!(np.uid, "u-1");
        assert_eq!(np.ascend_real.as_deref(), Some("Ascend910-4,Ascend910-5"));
        assert_eq!(
            np.container_ids,
            vec![("main".to_string(), "abcdef".to_string())]
        );
        assert_eq!(np.npu_containers, vec!["main".to_string()]);
    }
}
