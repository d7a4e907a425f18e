//! Hard faults read from the NPU telemetry, which skip the engine's hysteresis: card
//! dropped, health critical, an increase of uncorrectable ECC errors, RoCE network down, and
//! an active fault code whose handling level is SeparateNPU (the fault-level table says
//! "isolate the chip"; ManuallySeparateNPU, more serious still, counts too). A fault code
//! never counts by itself at any other level, NotHandleFault least of all.

use crate::snapshot::Store;
use crate::snapshot::npu::{ChipReadings, FaultLevel};

/// Whether the chip has an active fault code at a level that isolates it.
fn has_separating_fault(c: &ChipReadings) -> bool {
    c.faults.iter().flatten().any(|f| {
        matches!(
            f.level,
            FaultLevel::SeparateNPU | FaultLevel::ManuallySeparateNPU
        )
    })
}

/// Hard faults that skip the hysteresis, as a code shared through the round's all-gather
/// (0: none). Ordered by severity: the first that applies is reported.
#[derive(Debug, Default)]
pub struct HardFaults {
    /// Double-bit ECC count per chip when probing started (or the chip first reported).
    ecc_base: std::collections::BTreeMap<u32, u64>,
}

impl HardFaults {
    /// The most severe hard fault the store shows now (0: none).
    pub fn code(&mut self, store: &Store) -> u8 {
        let npu = store.npu();
        let mut code = 0u8;
        for (id, c) in &npu.state.chips {
            let ecc = c.ecc.as_ref().map(|e| e.total_double.max(e.double));
            let base = ecc.map(|v| *self.ecc_base.entry(*id).or_insert(v));
            let this = if c.dropped {
                1
            } else if c.health == Some(3) {
                2
            } else if ecc.zip(base).is_some_and(|(v, b)| v > b) {
                3
            } else if c.network_health.is_some_and(|h| h != 0 && h != 6) {
                4
            } else if has_separating_fault(c) {
                5
            } else {
                0
            };
            if this != 0 && (code == 0 || this < code) {
                code = this;
            }
        }
        code
    }
}

/// The reason a hard-fault code stands for.
pub fn hard_fault_reason(code: u8) -> &'static str {
    match code {
        1 => "NPU hard fault: card dropped",
        2 => "NPU hard fault: health critical",
        3 => "NPU hard fault: uncorrectable (double-bit) HBM ECC errors increased",
        4 => "NPU hard fault: RoCE network health down",
        5 => "NPU hard fault: a fault code at level SeparateNPU is active",
        _ => "NPU hard fault",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::npu::{Fault, LevelSource, NpuSnapshot, NpuState};

    /// A store with one healthy chip carrying `faults` (codes with their levels).
    fn store(faults: &[(u32, FaultLevel)]) -> Store {
        let chip = ChipReadings {
            health: Some(0),
            up: Some(true),
            faults: Some(
                faults
                    .iter()
                    .map(|(code, level)| Fault {
                        code: *code,
                        level: *level,
                        source: LevelSource::Table,
                        description: None,
                    })
                    .collect(),
            ),
            ..ChipReadings::default()
        };
        let store = Store::new(true, false);
        store.publish_npu(NpuSnapshot {
            state: NpuState {
                chips: [(0, chip)].into_iter().collect(),
                ..NpuState::default()
            },
            ..NpuSnapshot::default()
        });
        store
    }

    #[test]
    fn a_separate_npu_code_is_a_hard_fault() {
        let mut h = HardFaults::default();
        let code = h.code(&store(&[
            (0x8107_8603, FaultLevel::NotHandleFault),
            (0x80E3_A201, FaultLevel::SeparateNPU),
        ]));
        assert_eq!(code, 5);
        assert!(hard_fault_reason(code).contains("SeparateNPU"));
    }

    #[test]
    fn codes_at_other_levels_are_not() {
        let mut h = HardFaults::default();
        for level in [
            FaultLevel::NotHandleFault,
            FaultLevel::SubHealthFault,
            FaultLevel::RestartRequest,
            FaultLevel::RestartBusiness,
            FaultLevel::FreeRestartNPU,
            FaultLevel::RestartNPU,
            FaultLevel::PreSeparateNPU,
        ] {
            assert_eq!(h.code(&store(&[(0x8107_8603, level)])), 0, "{level:?}");
        }
        assert_eq!(h.code(&store(&[])), 0);
    }
}
