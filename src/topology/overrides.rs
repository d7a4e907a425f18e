//! This node's operator overrides: a source, on its own thread, that reads the node's
//! `hcclwatch.io/override*` annotations through the Kubernetes API (the topology source's
//! client and deadline) every `topology.overrides_refresh`, and publishes the overrides
//! that hold ([`crate::snapshot::overrides`]).
//!
//! The override enters the daemon as data, like any other reading: the health engine never
//! sees it and its verdicts stay its own (the state API shows both). The readers apply it
//! where the verdicts are exported (`export`): under a `healthy` override this node's
//! quarantine recommendation is withheld, under a `quarantined` one it is given with the
//! reason `operator_override`.
//!
//! An override ends at its time without a read: the thread wakes at the earliest end among
//! those it read and publishes again, so the exposition (which computes nothing at scrape
//! time) changes then. A failed read publishes no override and says why: a hold nobody can
//! see is not applied.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use super::kube::{KubeError, TopologyApi};
use crate::snapshot::Store;
use crate::snapshot::overrides::{self, Overrides, OverridesSnapshot};

/// What the override source needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// This node's name.
    pub node: String,
    /// A kubeconfig, else in-cluster or `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// `topology.overrides_refresh`.
    pub refresh: Duration,
    /// `topology.deadline`.
    pub deadline: Duration,
}

impl Settings {
    /// From `[topology]`, with the node name the topology source uses.
    pub fn from_config(c: &crate::config::Config) -> Self {
        let t = super::Settings::from_config(c);
        Self {
            node: t.node,
            kubeconfig: t.kubeconfig,
            refresh: c.topology.overrides_refresh,
            deadline: c.topology.deadline,
        }
    }
}

/// The source between reads.
struct Poller {
    settings: Settings,
    api: Option<TopologyApi>,
    /// The last read: all the overrides (active or not) and the refused annotations.
    read: Result<(Overrides, Vec<String>), String>,
    logged: String,
}

impl Poller {
    /// Reads the annotations; `false` when there is no Kubernetes API to read them from.
    async fn read(&mut self) -> bool {
        let s = &self.settings;
        if self.api.is_none() {
            match TopologyApi::connect(&s.node, s.kubeconfig.as_deref(), s.deadline).await {
                Ok(a) => self.api = Some(a),
                Err(KubeError::NoConfig(why)) => {
                    self.note(format!("no Kubernetes API: {why}"));
                    return false;
                }
                Err(e) => {
                    self.read = Err(e.to_string());
                    return true;
                }
            }
        }
        let Some(api) = &self.api else {
            return false;
        };
        self.read = api
            .node_annotations(s.deadline)
            .await
            .map(|a| {
                let (o, refused) = overrides::parse(&a);
                (o, refused.iter().map(ToString::to_string).collect())
            })
            .map_err(|e| e.to_string());
        true
    }

    /// Logs a change of outcome once.
    fn note(&mut self, now: String) {
        if now != self.logged {
            if now.is_empty() {
                tracing::info!(node = %self.settings.node, "operator overrides read");
            } else {
                tracing::warn!(node = %self.settings.node, reason = %now, "operator overrides not read; none is applied");
            }
            self.logged = now;
        }
    }

    /// The part to publish at `now`.
    fn part(&mut self, now: SystemTime) -> OverridesSnapshot {
        let node = self.settings.node.clone();
        let part = match &self.read {
            Ok((o, refused)) => OverridesSnapshot {
                node,
                active: o.active_at(now),
                refused: refused.clone(),
                error: None,
            },
            Err(e) => OverridesSnapshot {
                node,
                error: Some(e.clone()),
                ..OverridesSnapshot::default()
            },
        };
        for r in &part.refused {
            tracing::warn!(annotation = %r, "override annotation refused");
        }
        self.note(part.error.clone().unwrap_or_default());
        part
    }

    /// How long until the next publish: the refresh, or sooner an override's end.
    fn wait(&self, now: SystemTime) -> Duration {
        let end = match &self.read {
            Ok((o, _)) => o.next_end(now),
            Err(_) => None,
        };
        end.and_then(|t| t.duration_since(now).ok())
            .map_or(self.settings.refresh, |d| d.min(self.settings.refresh))
    }
}

/// Starts the override thread: a read at once and every `refresh` (sooner at an
/// override's end), each on the thread's own single-threaded runtime, published to the
/// store. A receive on `shutdown` is the wait, so stopping is immediate.
pub fn spawn(
    settings: Settings,
    store: Arc<Store>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tracing::info!(node = %settings.node, refresh = ?settings.refresh, "operator overrides on: this node's hcclwatch.io/override annotations are read where the Kubernetes API is reachable");
    std::thread::Builder::new()
        .name("hcclwatch-overrides".into())
        .spawn(move || {
            let mut poller = Poller {
                settings,
                api: None,
                read: Ok((Overrides::default(), Vec::new())),
                logged: String::new(),
            };
            let mut next_read = std::time::Instant::now();
            let mut wait = Duration::ZERO;
            loop {
                match shutdown.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                // A wake for an override's end publishes again without reading.
                if std::time::Instant::now() >= next_read {
                    if !rt.block_on(poller.read()) {
                        wait = poller.settings.refresh;
                        next_read = std::time::Instant::now() + wait;
                        continue;
                    }
                    next_read = std::time::Instant::now() + poller.settings.refresh;
                }
                let now = SystemTime::now();
                store.publish_overrides(poller.part(now));
                wait = poller
                    .wait(now)
                    .min(next_read.saturating_duration_since(std::time::Instant::now()));
            }
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::snapshot::overrides::{Held, OVERRIDE, OVERRIDE_UNTIL};

    #[test]
    fn the_part_holds_only_what_is_active_and_the_wait_stops_at_the_end() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let a = BTreeMap::from([
            (OVERRIDE.to_string(), "healthy".to_string()),
            (
                OVERRIDE_UNTIL.to_string(),
                overrides::time_text(t0 + Duration::from_secs(7)),
            ),
        ]);
        let (o, _) = overrides::parse(&a);
        let mut p = Poller {
            settings: Settings {
                node: "n1".into(),
                kubeconfig: None,
                refresh: Duration::from_secs(15),
                deadline: Duration::from_secs(1),
            },
            api: None,
            read: Ok((o, Vec::new())),
            logged: String::new(),
        };
        let part = p.part(t0);
        assert_eq!(part.active.node.as_ref().unwrap().state, Held::Healthy);
        assert_eq!(p.wait(t0), Duration::from_secs(7), "wakes at the end");
        let after = t0 + Duration::from_secs(7);
        assert!(p.part(after).active.is_empty(), "over at its end");
        assert_eq!(p.wait(after), Duration::from_secs(15));
        p.read = Err("boom".into());
        let failed = p.part(t0);
        assert!(failed.active.is_empty());
        assert_eq!(failed.error.as_deref(), Some("boom"));
    }
}
