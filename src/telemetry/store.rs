//! The latest snapshot of everything collected, shared between pollers and scrapes.
//!
//! Each producer publishes an immutable `Arc` of its part; a scrape takes the `Arc`s under
//! a lock held for a pointer copy and encodes without any lock. So a scrape never waits
//! for a collection, and a collection never waits for a scrape.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::host::HostReadings;
use super::{NpuState, SourceStats};

/// How the last run of one collector went.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorStatus {
    /// `collector` label value.
    pub name: String,
    /// No reading of the last run failed.
    pub success: bool,
    /// How long the last run took.
    pub duration: Duration,
    /// When the collector last succeeded.
    pub last_success: Option<SystemTime>,
}

/// NPU part of the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NpuPart {
    /// Backend name, when an NPU backend is configured.
    pub backend: Option<&'static str>,
    /// Backend loaded and initialised.
    pub backend_up: bool,
    /// Chips and driver version.
    pub state: NpuState,
    /// Per-group collector status.
    pub collectors: BTreeMap<String, CollectorStatus>,
    /// Source counters.
    pub stats: SourceStats,
}

/// Host part of the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostPart {
    /// Latest readings.
    pub readings: Option<HostReadings>,
    /// Collector status.
    pub collector: Option<CollectorStatus>,
}

/// The last configuration check: whether the file on disk loaded and validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReloadStatus {
    /// The last check passed.
    pub ok: bool,
    /// When a check last passed.
    pub last_success: Option<SystemTime>,
}

/// The shared store.
#[derive(Debug, Default)]
pub struct Store {
    npu: RwLock<Arc<NpuPart>>,
    host: RwLock<Arc<HostPart>>,
    probe: RwLock<Option<Arc<crate::probe::ProbePart>>>,
    reload: RwLock<Option<ReloadStatus>>,
    otlp: RwLock<Option<Arc<crate::export::otlp::OtlpStatus>>>,
    npu_ready: AtomicBool,
    host_ready: AtomicBool,
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

    /// The latest NPU part.
    pub fn npu(&self) -> Arc<NpuPart> {
        self.npu.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The latest host part.
    pub fn host(&self) -> Arc<HostPart> {
        self.host.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The latest probing part, if probing is configured.
    pub fn probe(&self) -> Option<Arc<crate::probe::ProbePart>> {
        self.probe.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Publishes a new probing part.
    pub fn publish_probe(&self, part: crate::probe::ProbePart) {
        *self.probe.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(part));
    }

    /// The outcome of the last configuration check (start-up or SIGHUP).
    pub fn reload(&self) -> Option<ReloadStatus> {
        *self.reload.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a configuration check. A failure keeps the last success time.
    pub fn record_reload(&self, ok: bool, at: SystemTime) {
        let mut r = self.reload.write().unwrap_or_else(|p| p.into_inner());
        let last_success = if ok {
            Some(at)
        } else {
            r.and_then(|x| x.last_success)
        };
        *r = Some(ReloadStatus { ok, last_success });
    }

    /// The OTLP export outcomes, when OTLP export runs.
    pub fn otlp(&self) -> Option<Arc<crate::export::otlp::OtlpStatus>> {
        self.otlp.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Attaches the OTLP export outcomes, so `/metrics` shows them.
    pub fn set_otlp(&self, s: Arc<crate::export::otlp::OtlpStatus>) {
        *self.otlp.write().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }

    /// Publishes a new NPU part.
    pub fn publish_npu(&self, part: NpuPart) {
        *self.npu.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(part);
    }

    /// Publishes a new host part.
    pub fn publish_host(&self, part: HostPart) {
        *self.host.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(part);
    }

    /// Marks the NPU poller's first full pass done.
    pub fn set_npu_ready(&self) {
        self.npu_ready.store(true, Ordering::SeqCst);
    }

    /// Marks the host poller's first pass done.
    pub fn set_host_ready(&self) {
        self.host_ready.store(true, Ordering::SeqCst);
    }

    /// Every expected poller has completed a first full collection.
    pub fn ready(&self) -> bool {
        self.npu_ready.load(Ordering::SeqCst) && self.host_ready.load(Ordering::SeqCst)
    }
}
