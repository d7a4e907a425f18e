//! The host part of the snapshot: CPU, memory and network interface readings.

use std::collections::BTreeMap;

use super::status::CollectorStatus;

/// Per-interface counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterfaceCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

/// One host reading.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostReadings {
    /// CPU busy ratio over all cores since the previous reading, 0..=1.
    pub cpu_usage_ratio: Option<f64>,
    /// Logical CPUs.
    pub cpus: usize,
    /// Memory, bytes.
    pub memory_total_bytes: u64,
    /// Available memory, bytes.
    pub memory_available_bytes: u64,
    /// Counters by interface name.
    pub interfaces: BTreeMap<String, InterfaceCounters>,
}

/// The host part of the snapshot: what the host poller last published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostSnapshot {
    /// Latest readings.
    pub readings: Option<HostReadings>,
    /// Collector status.
    pub collector: Option<CollectorStatus>,
}
