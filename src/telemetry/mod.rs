//! Device and host telemetry: the sources of the NPU and host parts of the snapshot.
//!
//! A [`DeviceSource`] reads NPUs in *groups* (inventory, health, sensors, …), each on its
//! own interval, because the readings differ in cost and urgency: health every few
//! seconds, identity once a minute. A [`poller`] thread owns the source, runs the groups
//! on schedule and publishes the results to the [`crate::snapshot::Store`]. Scrapes only
//! read the store, so a slow or hung device can never slow a scrape.
//!
//! This module knows nothing about the network, the probe group or Prometheus.

pub mod dcmi;
pub(crate) mod fault_overrides;
pub(crate) mod faults;
pub mod hccn;
pub mod host;
pub(crate) mod poller;
pub(crate) mod setup;
pub mod sim;

pub use crate::snapshot::npu::{ChipReadings, NpuState, SourceStats};

/// Wakes a source's poller ahead of its schedule. Called from any thread (a driver
/// callback included), so it must not block.
pub type Waker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// A group of NPU readings collected together on one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Chip list and identity.
    Inventory,
    /// Health, fault codes, network health.
    Health,
    /// Temperature, power, voltage, clock.
    Sensors,
    /// Utilisation.
    Utilization,
    /// HBM, DDR, ECC.
    Memory,
    /// Port counters, HCCS.
    Network,
}

impl Group {
    /// All groups, inventory first (the others need its chip list).
    pub const ALL: [Group; 6] = [
        Group::Inventory,
        Group::Health,
        Group::Sensors,
        Group::Utilization,
        Group::Memory,
        Group::Network,
    ];

    /// The `collector` label value.
    pub fn collector(self) -> &'static str {
        match self {
            Group::Inventory => "npu_inventory",
            Group::Health => "npu_health",
            Group::Sensors => "npu_sensors",
            Group::Utilization => "npu_utilization",
            Group::Memory => "npu_memory",
            Group::Network => "npu_network",
        }
    }
}

/// The result of collecting one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupReport {
    /// Readings that failed (unsupported readings are not failures).
    pub errors: u32,
}

/// Something that reads NPUs: DCMI on a real node, the simulator in demos and tests.
///
/// Calls are synchronous and may block (up to the source's own deadlines); they run on
/// the poller's thread, never on an async runtime or a scrape.
pub trait DeviceSource: Send {
    /// Backend name, e.g. `dcmi`.
    fn name(&self) -> &'static str;
    /// Whether the backend is loaded and initialised.
    fn available(&self) -> bool;
    /// Collects one group for every chip, updating `state` in place. Readings of the
    /// group that fail are set to `None`, never left at an older value.
    fn collect(&mut self, group: Group, state: &mut NpuState) -> GroupReport;
    /// The source's own counters.
    fn stats(&self) -> SourceStats {
        SourceStats::default()
    }
    /// Gives the source a way to wake its poller early, for readings the device pushes
    /// (DCMI fault events). Sources without pushed readings ignore it.
    fn set_waker(&mut self, _wake: Waker) {}
    /// Called when the waker rang: reads what the pushed news concerns (a chip's health and
    /// fault codes) and updates `state`. `None` when there was nothing to do.
    fn on_wake(&mut self, _state: &mut NpuState) -> Option<GroupReport> {
        None
    }
    /// A handle on the DCMI HCCS ping mesh, for the device prober; `None` from sources
    /// without DCMI.
    fn ping_mesh(&self) -> Option<dcmi::PingMesh> {
        None
    }
}
