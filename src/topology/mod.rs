//! Where this node sits in the network: a source, like attribution, that publishes its part
//! of the snapshot ([`crate::snapshot::topology`]) on its own thread, every
//! `topology.refresh`.
//!
//! Each refresh reads every configured source, in order of precedence:
//!
//! - [`file`]: the topology file (`topology.file`), our own TOML format;
//! - [`kube`]: this node's Kubernetes labels (`topology.*_label`) and Volcano `HyperNode`
//!   objects, through the API where a client configuration exists;
//! - the rank table (`collective.rank_table_file`, v1.2 `super_pod_list`): the super pod.
//!
//! [`overrides`] reads this node's operator-override annotations with the same client, on
//! its own thread and at its own pace (`topology.overrides_refresh`).
//!
//! and merges them field by field ([`crate::snapshot::topology::merge`]). A source that
//! fails gives nothing (never a stale or half-read answer), is reported in the part
//! (`hcclwatch_topology_source_up{source} 0`) and logged once per change of reason; the
//! daemon runs on without it. Only this node's own place is published: the probe group
//! shares the members' places among themselves (`probe::group`), so every member judges
//! with the same topology, each member's place said by that member alone.

pub mod file;
pub mod kube;
pub mod overrides;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::collective::bootstrap::ranktable;
use crate::config::Config;
use crate::snapshot::Store;
use crate::snapshot::topology::{Place, SourceState, TopologySnapshot, TopologySource, merge};

use self::kube::{KubeError, LabelKeys, TopologyApi};

/// What the topology source needs from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// This node's name (as Kubernetes and the topology file know it).
    pub node: String,
    /// `topology.file`.
    pub file: Option<PathBuf>,
    /// Node-label keys, when `topology.node_labels` is on.
    pub labels: Option<LabelKeys>,
    /// `topology.hypernodes`.
    pub hypernodes: bool,
    /// The rank table, when `topology.rank_table` is on and one is configured.
    pub rank_table: Option<PathBuf>,
    /// A kubeconfig (`attribution.kubeconfig`), else in-cluster or `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// `topology.refresh`.
    pub refresh: Duration,
    /// `topology.deadline`.
    pub deadline: Duration,
}

impl Settings {
    /// From `[topology]`; the node name is `attribution.node_name`, else `NODE_NAME`, else
    /// the host name (as for attribution, so both ask the API about the same node).
    pub fn from_config(c: &Config) -> Self {
        let t = &c.topology;
        let node = [
            c.attribution.node_name.clone(),
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
            node,
            file: t.file.clone(),
            labels: t.node_labels.then(|| LabelKeys {
                tor: t.tor_label.clone(),
                spine: t.spine_label.clone(),
                super_pod: t.super_pod_label.clone(),
            }),
            hypernodes: t.hypernodes,
            rank_table: c
                .collective
                .rank_table_file
                .clone()
                .filter(|_| t.rank_table),
            kubeconfig: c.attribution.kubeconfig.clone(),
            refresh: t.refresh,
            deadline: t.deadline,
        }
    }
}

/// One source's answer: its map, or why there is none; `None` when the source is off.
type Answer = Option<Result<BTreeMap<String, Place>, String>>;

/// The source's state between refreshes.
#[derive(Debug)]
pub struct Poller {
    settings: Settings,
    api: Option<TopologyApi>,
    /// The reason last logged per source ("" when it answered).
    logged: BTreeMap<TopologySource, String>,
}

impl Poller {
    /// A poller that has not run yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            api: None,
            logged: BTreeMap::new(),
        }
    }

    /// Logs a source's change of outcome, once per change.
    fn note(&mut self, source: TopologySource, outcome: &Result<BTreeMap<String, Place>, String>) {
        let now = outcome.as_ref().err().cloned().unwrap_or_default();
        if self.logged.get(&source) == Some(&now) {
            return;
        }
        self.logged.insert(source, now.clone());
        let s = source.as_str();
        match outcome {
            Ok(m) => tracing::info!(source = s, nodes = m.len(), "topology: source read"),
            Err(e) => tracing::warn!(
                source = s,
                reason = %e,
                "topology: source failing; its part of the topology is left out until it reads again"
            ),
        }
    }

    /// Reads every source once and merges them.
    pub async fn pass(&mut self) -> TopologySnapshot {
        let d = self.settings.deadline;
        let file = self
            .settings
            .file
            .clone()
            .map(|p| file::read(&p, d).map_err(|e| e.to_string()));
        let (labels, hypernodes) = self.kube().await;
        let ranks = self.rank_table();
        let mut sources = BTreeMap::new();
        let mut layers = Vec::new();
        let answers = [
            (TopologySource::File, file),
            (TopologySource::NodeLabels, labels),
            (TopologySource::HyperNode, hypernodes),
            (TopologySource::RankTable, ranks),
        ];
        for (source, answer) in &answers {
            let Some(outcome) = answer else { continue };
            self.note(*source, outcome);
            sources.insert(
                *source,
                SourceState {
                    ok: outcome.is_ok(),
                    error: outcome.as_ref().err().cloned(),
                    nodes: outcome.as_ref().map_or(0, BTreeMap::len),
                },
            );
            if let Ok(m) = outcome {
                layers.push((*source, m));
            }
        }
        let merged = merge(&layers);
        TopologySnapshot {
            node: self.settings.node.clone(),
            own: merged.get(&self.settings.node).cloned(),
            sources,
        }
    }

    /// The node-label and HyperNode answers (each `None` when off, or when there is no
    /// Kubernetes API to ask: outside a cluster they are not sources, not failures).
    async fn kube(&mut self) -> (Answer, Answer) {
        let s = self.settings.clone();
        if s.labels.is_none() && !s.hypernodes {
            return (None, None);
        }
        if s.node.is_empty() {
            let e = Err(
                "this node's name is unknown (attribution.node_name, NODE_NAME, host name)"
                    .to_string(),
            );
            return (
                s.labels.as_ref().map(|_| e.clone()),
                s.hypernodes.then_some(e),
            );
        }
        if self.api.is_none() {
            match TopologyApi::connect(&s.node, s.kubeconfig.as_deref(), s.deadline).await {
                Ok(a) => self.api = Some(a),
                Err(KubeError::NoConfig(why)) => {
                    if self
                        .logged
                        .insert(TopologySource::None, why.clone())
                        .as_ref()
                        != Some(&why)
                    {
                        tracing::info!(reason = %why, "topology: no Kubernetes API; node labels and HyperNodes are not read");
                    }
                    return (None, None);
                }
                Err(e) => {
                    let e = Err(e.to_string());
                    return (
                        s.labels.as_ref().map(|_| e.clone()),
                        s.hypernodes.then_some(e),
                    );
                }
            }
        }
        let Some(api) = self.api.clone() else {
            return (None, None);
        };
        let node = s.node.clone();
        let node_labels = api.node_labels(s.deadline).await.map_err(|e| e.to_string());
        let labels = s.labels.as_ref().map(|keys| {
            node_labels
                .as_ref()
                .map(|l| one(&node, kube::place_from_labels(l, keys)))
                .map_err(Clone::clone)
        });
        let hypernodes = if s.hypernodes {
            match api.hypernodes(s.deadline).await {
                // Without Volcano's CRD there is nothing to read: off, not failing.
                Err(KubeError::NoHyperNodes) => None,
                Err(e) => Some(Err(e.to_string())),
                Ok(all) => {
                    let l = node_labels.as_ref().ok();
                    Some(
                        kube::place_from_hypernodes(&node, l, &all)
                            .map(|p| one(&node, p))
                            .map_err(|e| e.to_string()),
                    )
                }
            }
        } else {
            None
        };
        (labels, hypernodes)
    }

    /// The rank table's super pods, keyed by server id and, for the server whose host
    /// address is this machine's, by this node's name too.
    fn rank_table(&self) -> Answer {
        let path = self.settings.rank_table.as_ref()?;
        let limit = crate::config::file::RANK_TABLE_LIMIT;
        let read = crate::config::file::read_regular_within(path, limit, self.settings.deadline)
            .map_err(|e| format!("collective.rank_table_file: {e}"))
            .and_then(|c| {
                String::from_utf8(c.bytes)
                    .map_err(|_| format!("{} is not UTF-8 text", path.display()))
            })
            .and_then(|t| ranktable::parse(&t).map_err(|e| format!("{}: {e}", path.display())));
        let table = match read {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let local: Vec<IpAddr> = crate::collective::bootstrap::env::interfaces()
            .into_iter()
            .map(|i| i.addr)
            .collect();
        let mut out: BTreeMap<String, Place> = BTreeMap::new();
        let place = |sp: &String| Place {
            super_pod: file::name_problem(sp).is_none().then(|| sp.clone()),
            ..Place::default()
        };
        for (server, sp) in &table.super_pods {
            out.insert(server.clone(), place(sp));
            let here = table
                .ranks
                .iter()
                .any(|r| &r.server_id == server && r.host_ip.is_some_and(|ip| local.contains(&ip)));
            if here && !self.settings.node.is_empty() {
                out.insert(self.settings.node.clone(), place(sp));
            }
        }
        Some(Ok(out))
    }
}

/// A map with one node.
fn one(node: &str, p: Place) -> BTreeMap<String, Place> {
    BTreeMap::from([(node.to_string(), p)])
}

/// Starts the topology thread: a refresh at once and every `settings.refresh`, each on the
/// thread's own single-threaded runtime (the Kubernetes client is async), published to the
/// store. A receive on `shutdown` is the wait between refreshes, so stopping is immediate;
/// a refresh itself is bounded by the per-call deadlines.
pub fn spawn(
    settings: Settings,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tracing::info!(
        node = %settings.node,
        file = ?settings.file,
        node_labels = settings.labels.is_some(),
        hypernodes = settings.hypernodes,
        rank_table = ?settings.rank_table,
        refresh = ?settings.refresh,
        "topology on; each source is read where it is available"
    );
    std::thread::Builder::new()
        .name("hcclwatch-topology".into())
        .spawn(move || {
            let refresh = settings.refresh;
            let mut poller = Poller::new(settings);
            let mut due = Instant::now();
            loop {
                let timeout = due.saturating_duration_since(Instant::now());
                match shutdown.recv_timeout(timeout) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let part = rt.block_on(poller.pass());
                store.publish_topology(part);
                due = (due + refresh).max(Instant::now());
            }
        })
}
