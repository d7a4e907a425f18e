//! Host CPU, memory and network interface readings through sysinfo.
//!
//! sysinfo is built with default features off: its default `gpu` feature would dlopen
//! NVIDIA's library on its own, which has no place on an Ascend node.

use std::collections::BTreeMap;

use crate::snapshot::host::{HostReadings, InterfaceCounters};

/// The host collector.
pub struct HostSource {
    system: Option<sysinfo::System>,
    networks: Option<sysinfo::Networks>,
    primed: bool,
}

impl std::fmt::Debug for HostSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSource").finish_non_exhaustive()
    }
}

impl Default for HostSource {
    fn default() -> Self {
        Self::new()
    }
}

impl HostSource {
    /// Creates the collector; failures show up as unsuccessful collections.
    pub fn new() -> Self {
        let system = sysinfo::System::new().ok();
        let networks = sysinfo::Networks::new_with_refreshed_list().ok();
        Self {
            system,
            networks,
            primed: false,
        }
    }

    /// One reading, or `None` if the host could not be read at all.
    pub fn collect(&mut self) -> Option<HostReadings> {
        let system = self.system.as_mut()?;
        system.refresh_cpu_usage();
        system.refresh_memory();
        // CPU usage is a difference between two refreshes; the first one has no baseline,
        // so it is not reported.
        let cpu = if self.primed {
            let pct = f64::from(system.global_cpu_usage());
            (pct.is_finite() && (0.0..=100.0).contains(&pct)).then_some(pct / 100.0)
        } else {
            None
        };
        self.primed = true;
        let mut interfaces = BTreeMap::new();
        if let Some(n) = self.networks.as_mut() {
            n.refresh(true);
            for (name, data) in n.iter() {
                interfaces.insert(
                    name.to_string_lossy().into_owned(),
                    InterfaceCounters {
                        rx_bytes: data.total_received(),
                        tx_bytes: data.total_transmitted(),
                        rx_errors: data.total_errors_on_received(),
                        tx_errors: data.total_errors_on_transmitted(),
                    },
                );
            }
        }
        Some(HostReadings {
            cpu_usage_ratio: cpu,
            cpus: system.cpus().len(),
            memory_total_bytes: system.total_memory(),
            memory_available_bytes: system.available_memory(),
            interfaces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_host() {
        let mut h = HostSource::new();
        let first = h.collect().expect("sysinfo works on Linux");
        assert!(
            first.cpu_usage_ratio.is_none(),
            "no baseline on the first reading"
        );
        assert!(first.memory_total_bytes > 0);
        assert!(first.memory_available_bytes <= first.memory_total_bytes);
        assert!(
            first.interfaces.contains_key("lo"),
            "{:?}",
            first.interfaces.keys()
        );
        let second = h.collect().unwrap();
        let cpu = second
            .cpu_usage_ratio
            .expect("second reading has a baseline");
        assert!((0.0..=1.0).contains(&cpu));
    }
}
