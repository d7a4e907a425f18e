//! Simulated NPUs for the demo and tests.
//!
//! The simulator runs only when `telemetry.backend = "sim"` is configured; it is never a
//! silent fallback. It produces values in DCMI's own integer units and converts them with
//! the same functions as the DCMI backend, so its output has the shape of real readings.
//! Values are a deterministic function of (seed, chip, collection count).

use super::dcmi::convert;
use super::{DeviceSource, Group, GroupReport, NpuState};
use crate::snapshot::npu::{
    self as model, ChipAddress, Ecc, Hbm, Identity, PacketCounters, UtilUnit,
};

/// The simulated backend.
#[derive(Debug, Clone)]
pub struct SimSource {
    chips: u32,
    seed: u64,
    tick: u64,
}

impl SimSource {
    /// `chips` simulated chips, values derived from `seed`.
    pub fn new(chips: u32, seed: u64) -> Self {
        Self {
            chips,
            seed,
            tick: 0,
        }
    }

    /// A reproducible pseudo-random number in `0..n` for (chip, salt).
    fn noise(&self, phy: u32, salt: u64, n: u64) -> u64 {
        // SplitMix64 over the inputs: cheap, well mixed, no dependency.
        let mut z = self
            .seed
            .wrapping_add(u64::from(phy).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_add(salt.wrapping_mul(0xBF58_476D_1CE4_E5B9))
            .wrapping_add(self.tick.wrapping_mul(0x94D0_49BB_1331_11EB));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        z % n.max(1)
    }
}

impl DeviceSource for SimSource {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn available(&self) -> bool {
        true
    }

    fn collect(&mut self, group: Group, state: &mut NpuState) -> GroupReport {
        self.tick += 1;
        match group {
            Group::Inventory => self.inventory(state),
            Group::Health => Self::health(state),
            Group::Sensors => self.sensors(state),
            Group::Utilization => self.utilization(state),
            Group::Memory => self.memory(state),
            Group::Network => self.network(state),
        }
        GroupReport { errors: 0 }
    }
}

/// The groups, one method each.
impl SimSource {
    /// One card of two chips per pair of physical ids, with stable made-up identities.
    fn inventory(&mut self, state: &mut NpuState) {
        state.driver_version = Some("sim-24.1.rc2".into());
        let mut chips = std::collections::BTreeMap::new();
        for phy in 0..self.chips {
            let mut c = state.chips.remove(&phy).unwrap_or_default();
            c.address = ChipAddress {
                card: (phy / 2) as i32,
                device: (phy % 2) as i32,
                logic: phy,
                phy,
            };
            c.identity = Identity {
                model: Some("910B3-Ascend-V1".into()),
                uuid: Some(model::format_vdie([
                    0x5100_0000 | phy,
                    (self.seed & 0xFFFF_FFFF) as u32,
                    0xA0C4_ED94,
                    0x14CC_040A,
                    0x5610_2003,
                ])),
                pci_bus_id: Some(model::format_bdf(0, 0x01 + phy * 0x20, 0, 0)),
                serial: Some(format!("SIM{:04}{:04}", self.seed % 10_000, phy / 2)),
                ..Identity::default()
            };
            chips.insert(phy, c);
        }
        state.chips = chips;
        state.mark_enumerated();
    }

    /// Every chip healthy, up, with no faults.
    fn health(state: &mut NpuState) {
        for c in state.chips.values_mut() {
            c.health = Some(0);
            c.up = Some(true);
            c.dropped = false;
            c.faults = Some(Vec::new());
            c.network_health = Some(0);
        }
    }

    /// Temperature, power, voltage and AI-core clock, each with its own noise.
    fn sensors(&mut self, state: &mut NpuState) {
        let readings: Vec<(u32, f64, f64, f64, f64)> = state
            .chips
            .keys()
            .map(|&phy| {
                let temp = 42 + (phy % 5) as i32 + self.noise(phy, 1, 4) as i32;
                let dw = 1800 + (phy as i32 % 4) * 50 + self.noise(phy, 2, 300) as i32;
                let cv = 80 + self.noise(phy, 3, 6) as u32;
                (
                    phy,
                    convert::temperature_celsius(temp).unwrap_or_default(),
                    convert::power_watts(dw).unwrap_or_default(),
                    convert::voltage_volts(cv),
                    convert::mhz_to_hertz(1800),
                )
            })
            .collect();
        for (phy, t, p, v, f) in readings {
            if let Some(c) = state.chips.get_mut(&phy) {
                c.temperature_celsius = Some(t);
                c.power_watts = Some(p);
                c.voltage_volts = Some(v);
                c.aicore_frequency_hertz = Some(f);
            }
        }
    }

    /// AI-core, vector, overall and HBM utilisation.
    fn utilization(&mut self, state: &mut NpuState) {
        let phys: Vec<u32> = state.chips.keys().copied().collect();
        for phy in phys {
            let aicore = 30 + self.noise(phy, 4, 50) as u32;
            let vector = self.noise(phy, 5, 20) as u32;
            let hbm = 10 + self.noise(phy, 6, 40) as u32;
            if let Some(c) = state.chips.get_mut(&phy) {
                c.utilization.clear();
                for (u, pct) in [
                    (UtilUnit::Aicore, aicore),
                    (UtilUnit::Vector, vector),
                    (UtilUnit::Overall, aicore.max(vector)),
                    (UtilUnit::Hbm, hbm),
                ] {
                    if let Some(r) = convert::percent_to_ratio(pct) {
                        c.utilization.insert(u, r);
                    }
                }
            }
        }
    }

    /// HBM use and a small, steady ECC count.
    fn memory(&mut self, state: &mut NpuState) {
        let phys: Vec<u32> = state.chips.keys().copied().collect();
        for phy in phys {
            let used_mb = 8192 + self.noise(phy, 7, 16384);
            let bw = self.noise(phy, 8, 30) as u32;
            if let Some(c) = state.chips.get_mut(&phy) {
                c.hbm = Some(Hbm {
                    total_bytes: convert::mb_to_bytes(65536).unwrap_or_default(),
                    used_bytes: convert::mb_to_bytes(used_mb).unwrap_or_default(),
                    temperature_celsius: 40.0,
                    bandwidth_utilization_ratio: convert::percent_to_ratio(bw).unwrap_or_default(),
                });
                c.ddr = None;
                c.ecc = Some(Ecc {
                    enabled: true,
                    total_single: u64::from(phy % 3),
                    ..Ecc::default()
                });
            }
        }
    }

    /// RoCE packet counters that grow by 1,000 a tick.
    fn network(&mut self, state: &mut NpuState) {
        let tick = self.tick;
        for c in state.chips.values_mut() {
            c.packets = Some(PacketCounters {
                roce_rx_all: tick * 1000,
                roce_tx_all: tick * 1000,
                ..PacketCounters::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed() {
        let mut a = SimSource::new(4, 7);
        let mut b = SimSource::new(4, 7);
        let (mut sa, mut sb) = (NpuState::default(), NpuState::default());
        for g in Group::ALL {
            a.collect(g, &mut sa);
            b.collect(g, &mut sb);
        }
        assert_eq!(sa, sb);
        assert_eq!(sa.chips.len(), 4);
        let c = &sa.chips[&0];
        assert!(c.temperature_celsius.is_some() && c.hbm.is_some());
        // Values are in DCMI's quantisation: whole degrees, tenths of watts.
        assert_eq!(c.temperature_celsius.unwrap().fract(), 0.0);
        assert_eq!((c.power_watts.unwrap() * 10.0).fract(), 0.0);
    }
}
