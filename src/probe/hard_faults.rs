//! Hard faults read from the NPU telemetry, which skip the engine's hysteresis: card
//! dropped, health critical, an increase of uncorrectable ECC errors, RoCE network down.

use crate::snapshot::Store;

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
        _ => "NPU hard fault",
    }
}
