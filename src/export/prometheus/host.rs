//! Host families: CPU, memory and per-interface network counters.

use super::family::{Labels, Render, Sink};
use crate::snapshot::View;
use crate::snapshot::host::InterfaceCounters;
use std::fmt;

/// Renders the host part of the snapshot.
#[derive(Debug, Default)]
pub struct HostCollector;

impl Render for HostCollector {
    fn render(&self, view: &View, f: &mut dyn Sink) -> fmt::Result {
        let host = &view.host;
        let Some(h) = &host.readings else {
            return Ok(());
        };
        f.gauge(
            "hcclwatch_host_cpu_usage_ratio",
            "Host CPU busy ratio over all cores since the previous host collection.",
            h.cpu_usage_ratio.map(|r| (vec![], r)).into_iter().collect(),
        )?;
        f.gauge(
            "hcclwatch_host_cpus",
            "Logical CPUs on the host.",
            vec![(vec![], h.cpus as f64)],
        )?;
        f.gauge(
            "hcclwatch_host_memory_total_bytes",
            "Host memory.",
            vec![(vec![], h.memory_total_bytes as f64)],
        )?;
        f.gauge(
            "hcclwatch_host_memory_available_bytes",
            "Host memory available to new work.",
            vec![(vec![], h.memory_available_bytes as f64)],
        )?;
        let ifaces = |get: fn(&InterfaceCounters) -> u64| -> Vec<(Labels, u64)> {
            h.interfaces
                .iter()
                .map(|(name, c)| (vec![("interface", name.clone())], get(c)))
                .collect()
        };
        f.counter(
            "hcclwatch_host_network_receive_bytes",
            "Bytes received per interface.",
            ifaces(|c| c.rx_bytes),
        )?;
        f.counter(
            "hcclwatch_host_network_transmit_bytes",
            "Bytes sent per interface.",
            ifaces(|c| c.tx_bytes),
        )?;
        f.counter(
            "hcclwatch_host_network_receive_errors",
            "Receive errors per interface.",
            ifaces(|c| c.rx_errors),
        )?;
        f.counter(
            "hcclwatch_host_network_transmit_errors",
            "Transmit errors per interface.",
            ifaces(|c| c.tx_errors),
        )
    }
}
