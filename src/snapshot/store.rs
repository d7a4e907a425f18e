//! The latest snapshot of everything collected, shared between the sources and the readers.
//!
//! Each source publishes an immutable `Arc` of its part; the store keeps every part's
//! latest `Arc` in one [`View`] behind one lock. A reader takes the whole view under the
//! lock (a copy of a few pointers) and reads it without any lock. So a scrape never waits
//! for a collection, a collection never waits for a scrape, and everything one reader
//! encodes comes from the same moment: the NPU series and the pod labels they carry can
//! never come from two different attribution passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use super::attribution::AttributionSnapshot;
use super::host::HostSnapshot;
use super::npu::NpuSnapshot;
use super::overrides::OverridesSnapshot;
use super::port::{HccnCallStats, PortSnapshot};
use super::probe::ProbeSnapshot;
use super::status::{OtlpSnapshot, ReloadStatus, SelfSnapshot};
use super::topology::TopologySnapshot;

/// Every part of the store as it was at one moment, and that moment's generation. Cheap
/// to clone (a handful of `Arc`s); a scrape or an OTLP collection takes one with
/// [`Store::view`] and encodes everything from it.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Grows with every change to the store (a part published, readiness changed), so a
    /// reader can tell whether what it encoded from an earlier view is still current.
    pub generation: u64,
    /// The NPU part.
    pub npu: Arc<NpuSnapshot>,
    /// The host part.
    pub host: Arc<HostSnapshot>,
    /// The probing part, if probing is configured.
    pub probe: Option<Arc<ProbeSnapshot>>,
    /// The daemon's own part.
    pub status: Arc<SelfSnapshot>,
    /// The port and optics part, if the `hccn_tool` poller runs.
    pub ports: Option<Arc<PortSnapshot>>,
    /// `hccn_tool` call statistics, once a call was made.
    pub hccn_calls: Option<Arc<HccnCallStats>>,
    /// Pod attribution, once attribution has a source to work with.
    pub attribution: Option<Arc<AttributionSnapshot>>,
    /// This node's place in the network and its sources, once the topology source ran.
    pub topology: Option<Arc<TopologySnapshot>>,
    /// This node's operator overrides, once their source ran.
    pub overrides: Option<Arc<OverridesSnapshot>>,
}

/// The shared store.
///
/// A source publishes its part whole; a reader takes one [`View`] and reads everything
/// from it, so a later publish never changes what it is encoding:
///
/// ```
/// use hcclwatch::snapshot::Store;
/// use hcclwatch::snapshot::host::HostSnapshot;
///
/// let store = Store::new(false, true);
/// let before = store.view();
/// store.publish_host(HostSnapshot::default());
/// let after = store.view();
/// // The publish is one change: one generation later, and the view taken before it still
/// // holds the part as it was (the same `Arc`), while the new view has the new one.
/// assert_eq!(after.generation, before.generation + 1);
/// assert!(!std::sync::Arc::ptr_eq(&before.host, &after.host));
/// assert!(std::sync::Arc::ptr_eq(&before.host, &before.clone().host));
/// ```
#[derive(Debug, Default)]
pub struct Store {
    /// The latest parts. Every change replaces parts whole and bumps the generation under
    /// the write lock, so a view is never half of one change.
    current: RwLock<View>,
    npu_ready: AtomicBool,
    host_ready: AtomicBool,
    /// Components that are not ready, with why (the prober when it cannot listen or its
    /// thread died).
    not_ready: std::sync::Mutex<std::collections::BTreeMap<&'static str, String>>,
}

impl Store {
    /// An empty store. `npu_expected`/`host_expected` say which pollers will run; one
    /// that will not run counts as ready.
    pub fn new(npu_expected: bool, host_expected: bool) -> Self {
        Self {
            npu_ready: AtomicBool::new(!npu_expected),
            host_ready: AtomicBool::new(!host_expected),
            ..Self::default()
        }
    }

    /// Every part as it is now, with the generation it is at: one consistent reading for
    /// everything a scrape or an export encodes.
    pub fn view(&self) -> View {
        // A poisoned lock still holds a complete (if older) view: every change replaces
        // parts whole.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A number that grows whenever anything in the store changes.
    pub fn generation(&self) -> u64 {
        self.read(|v| v.generation)
    }

    /// Reads one thing from the current view under the read lock.
    fn read<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        f(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Applies `f` to the current view and bumps the generation, under the write lock: a
    /// reader sees all of a change or none of it, and two changes never lose each other's
    /// part.
    fn change(&self, f: impl FnOnce(&mut View)) {
        let mut v = self.current.write().unwrap_or_else(|p| p.into_inner());
        f(&mut v);
        v.generation += 1;
    }

    /// The latest NPU part.
    pub fn npu(&self) -> Arc<NpuSnapshot> {
        self.read(|v| v.npu.clone())
    }

    /// The latest host part.
    pub fn host(&self) -> Arc<HostSnapshot> {
        self.read(|v| v.host.clone())
    }

    /// The latest probing part, if probing is configured.
    pub fn probe(&self) -> Option<Arc<ProbeSnapshot>> {
        self.read(|v| v.probe.clone())
    }

    /// The latest pod attribution part, once attribution has a source to work with.
    pub fn attribution(&self) -> Option<Arc<AttributionSnapshot>> {
        self.read(|v| v.attribution.clone())
    }

    /// The daemon's own part.
    pub fn status(&self) -> Arc<SelfSnapshot> {
        self.read(|v| v.status.clone())
    }

    /// Publishes a new NPU part.
    pub fn publish_npu(&self, part: NpuSnapshot) {
        let part = Arc::new(part);
        self.change(|v| v.npu = part);
    }

    /// Publishes a new host part.
    pub fn publish_host(&self, part: HostSnapshot) {
        let part = Arc::new(part);
        self.change(|v| v.host = part);
    }

    /// Publishes a new probing part.
    pub fn publish_probe(&self, part: ProbeSnapshot) {
        let part = Some(Arc::new(part));
        self.change(|v| v.probe = part);
    }

    /// The latest port and optics part, if the `hccn_tool` poller runs.
    pub fn ports(&self) -> Option<Arc<PortSnapshot>> {
        self.read(|v| v.ports.clone())
    }

    /// Publishes a new port and optics part.
    pub fn publish_ports(&self, part: PortSnapshot) {
        let part = Some(Arc::new(part));
        self.change(|v| v.ports = part);
    }

    /// The latest `hccn_tool` call statistics, once a call was made.
    pub fn hccn_calls(&self) -> Option<Arc<HccnCallStats>> {
        self.read(|v| v.hccn_calls.clone())
    }

    /// Publishes `hccn_tool` call statistics. They have their own slot because every user
    /// of the tool (the port poller, the device prober) updates them, not one poller.
    pub fn publish_hccn_calls(&self, stats: HccnCallStats) {
        let part = Some(Arc::new(stats));
        self.change(|v| v.hccn_calls = part);
    }

    /// Publishes a new pod attribution part.
    pub fn publish_attribution(&self, part: AttributionSnapshot) {
        let part = Some(Arc::new(part));
        self.change(|v| v.attribution = part);
    }

    /// The latest topology part, once the topology source ran.
    pub fn topology(&self) -> Option<Arc<TopologySnapshot>> {
        self.read(|v| v.topology.clone())
    }

    /// Publishes a new topology part.
    pub fn publish_topology(&self, part: TopologySnapshot) {
        let part = Some(Arc::new(part));
        self.change(|v| v.topology = part);
    }

    /// This node's operator overrides, once their source ran.
    pub fn overrides(&self) -> Option<Arc<OverridesSnapshot>> {
        self.read(|v| v.overrides.clone())
    }

    /// Publishes this node's operator overrides.
    pub fn publish_overrides(&self, part: OverridesSnapshot) {
        let part = Some(Arc::new(part));
        self.change(|v| v.overrides = part);
    }

    /// Records a configuration check. A failure keeps the last success time.
    pub fn record_reload(&self, ok: bool, at: SystemTime) {
        self.update_status(|s| {
            let last_success = if ok {
                Some(at)
            } else {
                s.reload.and_then(|r| r.last_success)
            };
            s.reload = Some(ReloadStatus { ok, last_success });
        });
    }

    /// Publishes the OTLP export outcomes, so `/metrics` shows them.
    pub fn publish_otlp(&self, otlp: OtlpSnapshot) {
        self.update_status(|s| s.otlp = Some(otlp));
    }

    /// Publishes the hard-fault pushes' outcomes, so `/metrics` shows them.
    pub fn publish_push(&self, push: super::status::PushStatus) {
        self.update_status(|s| s.push = Some(push));
    }

    /// Replaces the daemon's own part with `f` applied to a copy of it. The write lock is
    /// held across the copy, so two updates never lose each other's change.
    fn update_status(&self, f: impl FnOnce(&mut SelfSnapshot)) {
        self.change(|v| {
            let mut next = v.status.as_ref().clone();
            f(&mut next);
            v.status = Arc::new(next);
        });
    }

    /// Marks the NPU poller's first full pass done.
    pub fn set_npu_ready(&self) {
        self.npu_ready.store(true, Ordering::SeqCst);
        self.change(|_| {});
    }

    /// Marks the host poller's first pass done.
    pub fn set_host_ready(&self) {
        self.host_ready.store(true, Ordering::SeqCst);
        self.change(|_| {});
    }

    /// Every expected poller has completed a first full collection and no component says
    /// it is not ready.
    pub fn ready(&self) -> bool {
        self.not_ready().is_empty()
    }

    /// Marks `component` not ready, with why; [`Store::set_ready`] clears it.
    pub fn set_not_ready(&self, component: &'static str, why: String) {
        self.not_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(component, why);
        self.change(|_| {});
    }

    /// Marks `component` ready again.
    pub fn set_ready(&self, component: &'static str) {
        self.not_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(component);
        self.change(|_| {});
    }

    /// Every component that is not ready, with why, in name order.
    pub fn not_ready(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        if !self.npu_ready.load(Ordering::SeqCst) {
            out.push(("npu", "first collection still running".into()));
        }
        if !self.host_ready.load(Ordering::SeqCst) {
            out.push(("host", "first collection still running".into()));
        }
        out.extend(
            self.not_ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(k, v)| (*k, v.clone())),
        );
        out.sort_by_key(|(k, _)| *k);
        out
    }
}
