//! The kubelet pod-resources API: which devices kubelet allocated to which container.
//!
//! `v1.PodResourcesLister/List` over the kubelet's unix socket, with the client generated
//! at build time from `proto/podresources/v1/api.proto`. Each pass opens a fresh
//! connection (a kubelet restart replaces the socket, so a kept connection would go stale),
//! bounds the whole call by a deadline, and refuses a response larger than
//! [`MAX_RESPONSE_BYTES`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

/// The generated pod-resources v1 messages, client and server (the tests stand in for the
/// kubelet with the server).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::ListPodResourcesRequest;
use proto::pod_resources_lister_client::PodResourcesListerClient;

/// The largest `List` response accepted: 16 MiB, the kubelet's own limit for this API.
/// A node's pods and devices take a few kilobytes; more means something is wrong.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The devices of one resource allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDevices {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Extended-resource name, e.g. `huawei.com/Ascend910`.
    pub resource: String,
    /// Device IDs, as the device plugin named them.
    pub ids: Vec<String>,
}

/// Why `List` failed.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// No connection could be made.
    #[error("connecting to {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The call returned an error status (including a response over the size limit).
    #[error("List on {path}: {status}")]
    Call {
        /// The socket.
        path: PathBuf,
        /// The gRPC status.
        status: Box<tonic::Status>,
    },
    /// The deadline passed.
    #[error("List on {path} did not answer within {deadline:?}")]
    Deadline {
        /// The socket.
        path: PathBuf,
        /// The deadline.
        deadline: Duration,
    },
}

/// Calls `List` on the kubelet socket at `path`, all of it within `deadline`.
pub async fn list(
    path: &Path,
    deadline: Duration,
) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    match tokio::time::timeout(deadline, list_unbounded(path, deadline)).await {
        Ok(r) => r,
        Err(_) => Err(PodResourcesError::Deadline {
            path: path.to_path_buf(),
            deadline,
        }),
    }
}

async fn list_unbounded(
    path: &Path,
    deadline: Duration,
) -> Result<Vec<ContainerDevices>, PodResourcesError> {
    let socket = path.to_path_buf();
    // The URI is a placeholder that the connector ignores: the socket is the address.
    let channel = Endpoint::from_static("http://kubelet.pod-resources")
        .connect_timeout(deadline)
        .timeout(deadline)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| PodResourcesError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    let mut client =
        PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
    let response = client
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|status| PodResourcesError::Call {
            path: path.to_path_buf(),
            status: Box::new(status),
        })?;
    Ok(flatten(response.into_inner()))
}

/// One entry per (pod, container, resource) that has devices.
fn flatten(r: proto::ListPodResourcesResponse) -> Vec<ContainerDevices> {
    let mut out = Vec::new();
    for pod in r.pod_resources {
        for c in pod.containers {
            for d in c.devices {
                if d.device_ids.is_empty() {
                    continue;
                }
                out.push(ContainerDevices {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: c.name.clone(),
                    resource: d.resource_name,
                    ids: d.device_ids,
                });
            }
        }
    }
    out
}
