//! Which pods and containers use each NPU: a source, like telemetry, that publishes its
//! part of the snapshot ([`crate::snapshot::attribution`]) on its own thread and interval.
//!
//! Each pass asks every source that is available right now, each call bounded by
//! `attribution.deadline`:
//!
//! - [`pod_resources`]: the kubelet's `v1.PodResourcesLister/List` on its unix socket,
//!   used while the socket exists;
//! - [`kube_api`]: pods on this node through the Kubernetes API (the Volcano
//!   `huawei.com/AscendReal` annotation, pod UIDs, container IDs), used where a client
//!   configuration exists and the API answers;
//! - [`cgroup`]: `/proc/<pid>/cgroup` of each process DCMI lists on an NPU.
//!
//! [`merge`] combines the answers (what wins when they disagree is documented there and in
//! `docs/attribution.md`). A source that turns on, off or starts failing is logged once,
//! with the reason, not every pass. Nothing is published until some source has something
//! to say (a kubelet socket, an API, or an NPU process inside a pod), so a host outside
//! Kubernetes exports no attribution series at all; from then on every pass publishes, and
//! `hcclwatch_pod_attribution_up` says whether every source in use answered.

pub(crate) mod cgroup;
pub(crate) mod device_id;
pub(crate) mod kube_api;
pub(crate) mod merge;
pub mod pod_resources;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use crate::snapshot::Store;
use crate::snapshot::attribution::{AttributionSnapshot, Source, SourceStatus};
use crate::snapshot::npu::NpuSnapshot;

use self::cgroup::CgroupOwner;
use self::kube_api::KubeApi;

/// What the attribution poller needs from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The kubelet pod-resources socket.
    pub socket: PathBuf,
    /// Extended-resource name prefixes that are Ascend NPUs.
    pub prefixes: Vec<String>,
    /// Time between passes.
    pub interval: Duration,
    /// Bound on each call.
    pub deadline: Duration,
    /// Whether to use the Kubernetes API.
    pub kubernetes_api: bool,
    /// A kubeconfig for it (else in-cluster or `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (empty: unknown, so the Kubernetes API cannot be used).
    pub node: String,
    /// Where the host's `/proc` is.
    pub proc_root: PathBuf,
    /// `web.pod_labels`.
    pub pod_labels: bool,
}

impl Settings {
    /// From `[attribution]` and `web.pod_labels`; the node name falls back to `NODE_NAME`,
    /// then the host name.
    pub fn from_config(c: &Config) -> Self {
        let a = &c.attribution;
        let node = [
            a.node_name.clone(),
            std::env::var("NODE_NAME").unwrap_or_default(),
        ]
        .into_iter()
        .find(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_default();
        Self {
            socket: a.pod_resources_socket.clone(),
            prefixes: a.resource_prefixes.clone(),
            interval: a.interval,
            deadline: a.deadline,
            kubernetes_api: a.kubernetes_api,
            kubeconfig: a.kubeconfig.clone(),
            node,
            proc_root: a.proc_root.clone(),
            pod_labels: c.web.pod_labels,
        }
    }
}

/// A source's state as last logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Off,
    On,
    Failing,
}

/// Why a source gave no answer this pass (its `SourceStatus` error is this text).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The kubelet pod-resources call failed.
    #[error(transparent)]
    PodResources(#[from] pod_resources::PodResourcesError),
    /// The Kubernetes API call failed.
    #[error(transparent)]
    KubernetesApi(#[from] kube_api::KubeApiError),
    /// No NPU process DCMI lists is visible under the configured `/proc`.
    #[error(
        "none of the {count} NPU processes DCMI lists is under {}: run in the host PID namespace (hostPID) or point attribution.proc_root at the host's /proc",
        root.display()
    )]
    NoProcessVisible {
        /// The processes DCMI lists.
        count: usize,
        /// `attribution.proc_root`.
        root: PathBuf,
    },
    /// Some processes' cgroup files could not be read.
    #[error(
        "{count} cgroup files unreadable, e.g. {}/{pid}/cgroup: {source}; check that hcclwatch may read the host's /proc",
        root.display()
    )]
    CgroupUnreadable {
        /// How many could not be read.
        count: usize,
        /// `attribution.proc_root`.
        root: PathBuf,
        /// The first process whose file could not be read.
        pid: u32,
        /// Why.
        source: std::io::Error,
    },
}

/// One pass's answer from one source.
struct Answer<T> {
    status: Option<SourceStatus>,
    value: Option<T>,
}

impl<T> Answer<T> {
    fn off() -> Self {
        Self {
            status: None,
            value: None,
        }
    }

    fn of(r: Result<T, SourceError>) -> Self {
        match r {
            Ok(v) => Self {
                status: Some(SourceStatus {
                    ok: true,
                    error: None,
                }),
                value: Some(v),
            },
            Err(e) => Self {
                status: Some(SourceStatus {
                    ok: false,
                    error: Some(e.to_string()),
                }),
                value: None,
            },
        }
    }
}

/// The attribution source: its settings and what it remembers between passes.
#[derive(Debug)]
pub struct Poller {
    settings: Settings,
    kube: Option<KubeApi>,
    phases: BTreeMap<Source, (Phase, String)>,
    active: bool,
    idle_logged: bool,
    last_success: Option<SystemTime>,
}

impl Poller {
    /// A poller that has not run yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            kube: None,
            phases: BTreeMap::new(),
            active: false,
            idle_logged: false,
            last_success: None,
        }
    }

    /// Logs a source's change of state or of reason, once per change.
    fn note(&mut self, source: Source, phase: Phase, reason: &str) {
        let now = (phase, reason.to_string());
        if self.phases.get(&source) == Some(&now) {
            return;
        }
        self.phases.insert(source, now);
        let s = source.as_str();
        match phase {
            Phase::On => tracing::info!(source = s, "pod attribution: source on"),
            Phase::Off => tracing::info!(source = s, reason, "pod attribution: source off"),
            Phase::Failing => tracing::warn!(
                source = s,
                reason,
                "pod attribution: source failing; its attributions are withheld until it answers"
            ),
        }
    }

    fn record<T>(&mut self, source: Source, a: &Answer<T>) {
        match &a.status {
            Some(SourceStatus { ok: true, .. }) => self.note(source, Phase::On, ""),
            Some(SourceStatus { error, .. }) => {
                self.note(source, Phase::Failing, error.as_deref().unwrap_or(""))
            }
            None => {}
        }
    }

    async fn pod_resources(&mut self) -> Answer<Vec<pod_resources::ContainerDevices>> {
        let socket = self.settings.socket.clone();
        if !socket.exists() {
            let why = format!("no kubelet pod-resources socket at {}", socket.display());
            self.note(Source::PodResources, Phase::Off, &why);
            return Answer::off();
        }
        let r = pod_resources::list(&socket, self.settings.deadline).await;
        let a = Answer::of(r.map_err(SourceError::from));
        self.record(Source::PodResources, &a);
        a
    }

    async fn kubernetes(&mut self) -> Answer<Vec<kube_api::NodePod>> {
        let (enabled, deadline) = (self.settings.kubernetes_api, self.settings.deadline);
        let node = self.settings.node.clone();
        if !enabled {
            self.note(
                Source::KubernetesApi,
                Phase::Off,
                "attribution.kubernetes_api = false",
            );
            return Answer::off();
        }
        if node.is_empty() {
            self.note(
                Source::KubernetesApi,
                Phase::Off,
                "this node's name is unknown: set attribution.node_name or NODE_NAME",
            );
            return Answer::off();
        }
        if self.kube.is_none() {
            let kubeconfig = self.settings.kubeconfig.clone();
            match KubeApi::connect(&node, kubeconfig.as_deref(), deadline).await {
                Ok(k) => self.kube = Some(k),
                Err(e) => {
                    self.note(Source::KubernetesApi, Phase::Off, &e.to_string());
                    return Answer::off();
                }
            }
        }
        let Some(k) = &self.kube else {
            return Answer::off();
        };
        let r = k.pods_on_node(&self.settings.prefixes, deadline).await;
        let a = Answer::of(r.map_err(SourceError::from));
        self.record(Source::KubernetesApi, &a);
        a
    }

    /// The cgroup owner of every NPU process; off while DCMI lists no process.
    fn cgroups(&mut self, npu: &NpuSnapshot) -> Answer<Vec<(u32, u32, CgroupOwner)>> {
        let procs: Vec<(u32, u32)> = npu
            .state
            .chips
            .values()
            .flat_map(|c| {
                let phy = c.address.phy;
                c.processes.iter().flatten().map(move |p| (phy, p.pid))
            })
            .collect();
        if procs.is_empty() {
            return Answer::off();
        }
        let root = &self.settings.proc_root;
        let (mut owners, mut missing) = (Vec::new(), 0usize);
        let (mut unreadable, mut first_error) = (0usize, None);
        for &(phy, pid) in &procs {
            match cgroup::read(root, pid) {
                Ok(Some(o)) => owners.push((phy, pid, o)),
                Ok(None) => {}
                // Exited since DCMI listed it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing += 1,
                Err(e) => {
                    unreadable += 1;
                    first_error.get_or_insert((pid, e));
                }
            }
        }
        let r = if missing == procs.len() {
            Err(SourceError::NoProcessVisible {
                count: procs.len(),
                root: root.clone(),
            })
        } else if let Some((pid, source)) = first_error {
            Err(SourceError::CgroupUnreadable {
                count: unreadable,
                root: root.clone(),
                pid,
                source,
            })
        } else {
            Ok(owners)
        };
        let a = Answer::of(r);
        self.record(Source::Cgroup, &a);
        a
    }

    /// One pass over every available source. `None` while no source has anything to
    /// say (see the module documentation).
    pub async fn pass(&mut self, npu: &NpuSnapshot) -> Option<AttributionSnapshot> {
        let pr = self.pod_resources().await;
        let api = self.kubernetes().await;
        let cg = self.cgroups(npu);
        let found_pod_process = cg.value.as_ref().is_some_and(|v| !v.is_empty());
        if !self.active && (pr.status.is_some() || api.status.is_some() || found_pod_process) {
            self.active = true;
        }
        if !self.active {
            if !self.idle_logged {
                self.idle_logged = true;
                tracing::info!(
                    "pod attribution idle: no kubelet pod-resources socket, no Kubernetes API and no NPU process inside a pod; no attribution series until one appears"
                );
            }
            return None;
        }
        let mut sources = BTreeMap::new();
        for (source, status) in [
            (Source::PodResources, &pr.status),
            (Source::KubernetesApi, &api.status),
            (Source::Cgroup, &cg.status),
        ] {
            if let Some(s) = status {
                sources.insert(source, s.clone());
            }
        }
        let out = merge::merge(&merge::Inputs {
            pod_resources: pr.value.as_deref(),
            pods: api.value.as_deref(),
            processes: cg.value.as_deref().unwrap_or_default(),
            known_npus: npu.state.chips.keys().copied().collect::<BTreeSet<u32>>(),
            prefixes: &self.settings.prefixes,
        });
        let part = AttributionSnapshot {
            users: out.users,
            processes: out.processes,
            sources,
            unmapped_ids: out.unmapped_ids,
            pod_labels: self.settings.pod_labels,
            last_success: self.last_success,
        };
        if part.up() {
            self.last_success = Some(SystemTime::now());
        }
        Some(AttributionSnapshot {
            last_success: self.last_success,
            ..part
        })
    }
}

/// Starts the attribution thread: a pass every `settings.interval`, each on the thread's
/// own single-threaded runtime (the gRPC and Kubernetes clients are async), published to
/// the store. A receive on `shutdown` is the wait between passes, so stopping is
/// immediate; a pass itself is bounded by the per-call deadlines.
pub fn spawn(
    settings: Settings,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tracing::info!(
        interval = ?settings.interval,
        socket = %settings.socket.display(),
        kubernetes_api = settings.kubernetes_api,
        node = %settings.node,
        proc_root = %settings.proc_root.display(),
        "pod attribution on; each source is used while it is available"
    );
    std::thread::Builder::new()
        .name("hcclwatch-attribution".into())
        .spawn(move || {
            let interval = settings.interval;
            let mut poller = Poller::new(settings);
            let mut due = Instant::now();
            loop {
                let timeout = due.saturating_duration_since(Instant::now());
                match shutdown.recv_timeout(timeout) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let npu = store.npu();
                if let Some(part) = rt.block_on(poller.pass(&npu)) {
                    store.publish_attribution(part);
                }
                due = (due + interval).max(Instant::now());
            }
        })
}
