//! The latest snapshot of everything collected, shared between the sources and the readers.
//!
//! Each source publishes an immutable `Arc` of its part; a reader takes the `Arc`s under a
//! lock held for a pointer copy and reads without any lock. So a scrape never waits for a
//! collection, and a collection never waits for a scrape.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use super::attribution::AttributionSnapshot;
use super::host::HostSnapshot;
use super::npu::NpuSnapshot;
use super::port::{HccnCallStats, PortSnapshot};
use super::probe::ProbeSnapshot;
use super::status::{OtlpSnapshot, ReloadStatus, SelfSnapshot};

/// Reads a lock's value, recovering it from a panicked writer: every part is replaced
/// whole, so a poisoned lock still holds a complete (if older) value.
fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The shared store.
#[derive(Debug, Default)]
pub struct Store {
    npu: RwLock<Arc<NpuSnapshot>>,
    host: RwLock<Arc<HostSnapshot>>,
    probe: RwLock<Option<Arc<ProbeSnapshot>>>,
    status: RwLock<Arc<SelfSnapshot>>,
    ports: RwLock<Option<Arc<PortSnapshot>>>,
    hccn_calls: RwLock<Option<Arc<HccnCallStats>>>,
    attribution: RwLock<Option<Arc<AttributionSnapshot>>>,
    npu_ready: AtomicBool,
    host_ready: AtomicBool,
    /// Components that are not ready, with why (the prober when it cannot listen or its
    /// thread died).
    not_ready: std::sync::Mutex<std::collections::BTreeMap<&'static str, String>>,
    /// Bumped after every change to any part, so a reader can tell whether what it
    /// encoded earlier is still current (the `/metrics` cache) without comparing parts.
    generation: AtomicU64,
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

    /// A number that grows whenever any part changes. Read it before reading the parts:
    /// whatever is read afterwards is at least as new as this generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks a change: after the value is in place, so a reader that sees the new
    /// generation also sees the value.
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Replaces a part (recovering a poisoned lock: every part is replaced whole) and
    /// marks the change.
    fn write<T>(&self, lock: &RwLock<T>, value: T) {
        *lock.write().unwrap_or_else(|p| p.into_inner()) = value;
        self.changed();
    }

    /// The latest NPU part.
    pub fn npu(&self) -> Arc<NpuSnapshot> {
        read(&self.npu)
    }

    /// The latest host part.
    pub fn host(&self) -> Arc<HostSnapshot> {
        read(&self.host)
    }

    /// The latest probing part, if probing is configured.
    pub fn probe(&self) -> Option<Arc<ProbeSnapshot>> {
        read(&self.probe)
    }

    /// The latest pod attribution part, once attribution has a source to work with.
    pub fn attribution(&self) -> Option<Arc<AttributionSnapshot>> {
        read(&self.attribution)
    }

    /// The daemon's own part.
    pub fn status(&self) -> Arc<SelfSnapshot> {
        read(&self.status)
    }

    /// Publishes a new NPU part.
    pub fn publish_npu(&self, part: NpuSnapshot) {
        self.write(&self.npu, Arc::new(part));
    }

    /// Publishes a new host part.
    pub fn publish_host(&self, part: HostSnapshot) {
        self.write(&self.host, Arc::new(part));
    }

    /// Publishes a new probing part.
    pub fn publish_probe(&self, part: ProbeSnapshot) {
        self.write(&self.probe, Some(Arc::new(part)));
    }

    /// The latest port and optics part, if the `hccn_tool` poller runs.
    pub fn ports(&self) -> Option<Arc<PortSnapshot>> {
        read(&self.ports)
    }

    /// Publishes a new port and optics part.
    pub fn publish_ports(&self, part: PortSnapshot) {
        self.write(&self.ports, Some(Arc::new(part)));
    }

    /// The latest `hccn_tool` call statistics, once a call was made.
    pub fn hccn_calls(&self) -> Option<Arc<HccnCallStats>> {
        read(&self.hccn_calls)
    }

    /// Publishes `hccn_tool` call statistics. They have their own slot because every user
    /// of the tool (the port poller, the device prober) updates them, not one poller.
    pub fn publish_hccn_calls(&self, stats: HccnCallStats) {
        self.write(&self.hccn_calls, Some(Arc::new(stats)));
    }

    /// Publishes a new pod attribution part.
    pub fn publish_attribution(&self, part: AttributionSnapshot) {
        self.write(&self.attribution, Some(Arc::new(part)));
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

    /// Replaces the daemon's own part with `f` applied to a copy of it. The write lock is
    /// held across the copy, so two updates never lose each other's change.
    fn update_status(&self, f: impl FnOnce(&mut SelfSnapshot)) {
        let mut guard = self.status.write().unwrap_or_else(|p| p.into_inner());
        let mut next = guard.as_ref().clone();
        f(&mut next);
        *guard = Arc::new(next);
        drop(guard);
        self.changed();
    }

    /// Marks the NPU poller's first full pass done.
    pub fn set_npu_ready(&self) {
        self.npu_ready.store(true, Ordering::SeqCst);
        self.changed();
    }

    /// Marks the host poller's first pass done.
    pub fn set_host_ready(&self) {
        self.host_ready.store(true, Ordering::SeqCst);
        self.changed();
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
        self.changed();
    }

    /// Marks `component` ready again.
    pub fn set_ready(&self, component: &'static str) {
        self.not_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(component);
        self.changed();
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
