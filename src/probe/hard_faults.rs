//! Hard faults read from the NPU telemetry: card dropped, health critical, uncorrectable ECC
//! errors within the last hour, RoCE network down, and an active fault code whose handling
//! level is SeparateNPU (the fault-level table says "isolate the chip"; ManuallySeparateNPU,
//! more serious still, counts too). A fault code never counts by itself at any other level,
//! NotHandleFault least of all. A hard fault is a current state: it ends when its condition
//! does, and the engine then holds the node for `health.hard_hold_down` rounds before
//! probation.
//!
//! With `health.hard_npu_scoped`, a fault that belongs to one chip (critical health,
//! uncorrectable ECC, its RoCE port down, a separating fault code) is that chip's, not the
//! node's: it is kept aside as a recommendation to isolate the NPU (exported per NPU, acted
//! on by the receiver's `isolate_npu`), and only a dropped card, which takes the node's
//! view of its chips with it, stays a node verdict. Whether enough of a node's NPUs are
//! isolated to take the node out is the receiver's call (`npu.max_share`), made where every
//! NPU isolation is known.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::snapshot::Store;
use crate::snapshot::npu::{ChipReadings, FaultLevel, network_health_bad};

/// Whether the chip has a fault code in effect at a level that isolates it: read now and
/// counted, or held by its `clear_after` (per-code overrides of the fault-level file); a
/// code still short of its `consecutive_reads` does not count yet.
fn has_separating_fault(c: &ChipReadings) -> bool {
    c.faults.iter().flatten().any(|f| {
        f.state.in_effect()
            && matches!(
                f.level,
                FaultLevel::SeparateNPU | FaultLevel::ManuallySeparateNPU
            )
    })
}

/// When a reading is a hard fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardFaultRules {
    /// Consecutive reads of critical health, or of RoCE network health not OK, that make a
    /// hard fault (one bad read is not a state).
    pub consecutive_reads: u32,
    /// Uncorrectable (double-bit) HBM ECC errors within [`ECC_WINDOW`] that make a hard
    /// fault.
    pub ecc_double_per_window: u64,
    /// A chip's own hard fault recommends isolating the chip, not quarantining the node.
    pub npu_scoped: bool,
}

impl Default for HardFaultRules {
    fn default() -> Self {
        Self {
            consecutive_reads: 3,
            ecc_double_per_window: 1,
            npu_scoped: false,
        }
    }
}

/// Whether a hard-fault code belongs to one chip (everything but a dropped card).
pub fn chip_scoped(code: u8) -> bool {
    (2..=5).contains(&code)
}

/// The window over which new uncorrectable ECC errors are counted: a hard fault clears an
/// hour after the last one (nothing is remembered forever).
pub const ECC_WINDOW: Duration = Duration::from_secs(3600);

/// Per chip: consecutive bad reads, and the double-bit ECC counts seen within the window.
#[derive(Debug, Default)]
struct ChipHistory {
    critical_reads: u32,
    network_reads: u32,
    ecc: VecDeque<(Instant, u64)>,
}

/// Hard faults as a current state, as a code shared through the round's all-gather (0:
/// none). Ordered by severity: the first that applies is reported. A card dropped or a
/// fault code that isolates the chip counts at once (the driver says so); critical health
/// and network health need `consecutive_reads` reads in a row; ECC counts the new
/// uncorrectable errors of the last hour. Evaluated once per probe round.
#[derive(Debug, Default)]
pub struct HardFaults {
    rules: HardFaultRules,
    chips: BTreeMap<u32, ChipHistory>,
    /// With `npu_scoped`: the chips whose own hard fault recommends isolating them, by
    /// physical id, with the code (as of the last evaluation).
    isolate: BTreeMap<u32, u8>,
}

impl HardFaults {
    /// Hard faults judged by `rules`.
    pub fn new(rules: HardFaultRules) -> Self {
        Self {
            rules,
            chips: BTreeMap::new(),
            isolate: BTreeMap::new(),
        }
    }

    /// The NPUs (physical ids) whose own hard fault recommends isolating them, with the
    /// code; empty unless `npu_scoped`.
    pub fn isolations(&self) -> &BTreeMap<u32, u8> {
        &self.isolate
    }

    /// The most severe hard fault the store shows now (0: none).
    pub fn code(&mut self, store: &Store) -> u8 {
        self.code_at(store, Instant::now())
    }

    /// [`Self::code`] at time `now`.
    pub fn code_at(&mut self, store: &Store, now: Instant) -> u8 {
        let npu = store.npu();
        let rules = self.rules;
        self.chips.retain(|id, _| npu.state.chips.contains_key(id));
        self.isolate.clear();
        // An NPU an operator holds healthy (its own override, `snapshot::overrides`) makes
        // no hard fault: a person has said it is fine until the override ends.
        let held = store.overrides();
        let wall = std::time::SystemTime::now();
        let held_healthy = |id: u32| {
            held.as_ref()
                .and_then(|h| h.active.npu_at(id, wall))
                .is_some_and(|o| o.state == crate::snapshot::overrides::Held::Healthy)
        };
        let mut code = 0u8;
        for (id, c) in &npu.state.chips {
            if held_healthy(*id) {
                continue;
            }
            let h = self.chips.entry(*id).or_default();
            // Rounds in a row that saw the condition, or the telemetry's own count of
            // reads in a row, whichever is longer: with health read every few seconds and
            // rounds every 30 s, the reads decide (faster), and a backend that does not
            // count reads is still judged per round.
            h.critical_reads = if c.health == Some(3) {
                (h.critical_reads + 1).max(c.critical_reads)
            } else {
                0
            };
            h.network_reads = if c.network_health.is_some_and(network_health_bad) {
                (h.network_reads + 1).max(c.network_bad_reads)
            } else {
                0
            };
            if let Some(v) = c.ecc.as_ref().map(|e| e.total_double.max(e.double)) {
                h.ecc.push_back((now, v));
            }
            while h
                .ecc
                .front()
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) > ECC_WINDOW)
            {
                h.ecc.pop_front();
            }
            let new_ecc = match (h.ecc.front(), h.ecc.back()) {
                (Some((_, first)), Some((_, last))) => last.saturating_sub(*first),
                _ => 0,
            };
            let this = if c.dropped {
                1
            } else if h.critical_reads >= rules.consecutive_reads {
                2
            } else if new_ecc >= rules.ecc_double_per_window {
                3
            } else if h.network_reads >= rules.consecutive_reads {
                4
            } else if has_separating_fault(c) {
                5
            } else {
                0
            };
            if rules.npu_scoped && chip_scoped(this) {
                self.isolate.insert(*id, this);
                continue;
            }
            if this != 0 && (code == 0 || this < code) {
                code = this;
            }
        }
        code
    }
}

/// The bounded label a chip-scoped hard-fault code is exported with.
pub fn isolation_reason(code: u8) -> &'static str {
    match code {
        2 => "health_critical",
        3 => "ecc_uncorrectable",
        4 => "roce_down",
        5 => "separate_npu_fault",
        _ => "hard_fault",
    }
}

/// The reason a hard-fault code stands for.
pub fn hard_fault_reason(code: u8) -> &'static str {
    match code {
        1 => "NPU hard fault: card dropped",
        2 => "NPU hard fault: health critical",
        3 => "NPU hard fault: uncorrectable (double-bit) HBM ECC errors within the last hour",
        4 => "NPU hard fault: RoCE network health down",
        5 => "NPU hard fault: a fault code at level SeparateNPU is active",
        _ => "NPU hard fault",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::npu::{Fault, FaultState, LevelSource, NpuSnapshot, NpuState};

    /// A store with one healthy chip carrying `faults` (codes with their levels), counted.
    fn store(faults: &[(u32, FaultLevel)]) -> Store {
        let with: Vec<_> = faults
            .iter()
            .map(|(c, l)| (*c, *l, FaultState::Counted))
            .collect();
        store_in(&with)
    }

    /// [`store`] with each fault's state.
    fn store_in(faults: &[(u32, FaultLevel, FaultState)]) -> Store {
        let chip = ChipReadings {
            health: Some(0),
            up: Some(true),
            faults: Some(
                faults
                    .iter()
                    .map(|(code, level, state)| Fault {
                        code: *code,
                        level: *level,
                        source: LevelSource::Table,
                        description: None,
                        state: *state,
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

    fn chip_store(edit: impl Fn(&mut ChipReadings)) -> Store {
        let mut chip = ChipReadings {
            health: Some(0),
            up: Some(true),
            network_health: Some(0),
            ecc: Some(crate::snapshot::npu::Ecc::default()),
            ..ChipReadings::default()
        };
        edit(&mut chip);
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

    /// Pins: with `npu_scoped`, a chip's own hard fault is a recommendation for that chip
    /// and not a node code; a dropped card stays the node's; without it, as before.
    #[test]
    fn npu_scoped_faults_are_the_chips_and_a_dropped_card_the_nodes() {
        let scoped = HardFaultRules {
            npu_scoped: true,
            ..HardFaultRules::default()
        };
        let now = Instant::now();
        let separating = store(&[(0x80E0_1801, FaultLevel::SeparateNPU)]);
        let mut h = HardFaults::new(scoped);
        assert_eq!(h.code_at(&separating, now), 0);
        assert_eq!(h.isolations(), &BTreeMap::from([(0, 5)]));
        let mut plain = HardFaults::new(HardFaultRules::default());
        assert_eq!(plain.code_at(&separating, now), 5);
        assert!(plain.isolations().is_empty());
        // The code clears: so does the recommendation.
        let clean = store(&[]);
        assert_eq!(h.code_at(&clean, now), 0);
        assert!(h.isolations().is_empty());
        let dropped = chip_store(|c| c.dropped = true);
        assert_eq!(h.code_at(&dropped, now), 1);
        assert!(h.isolations().is_empty());
    }

    /// Pins: an NPU an operator holds healthy makes no hard fault (node or NPU-scoped)
    /// while the override holds; after it ends, the same reading does.
    #[test]
    fn an_npu_held_healthy_makes_no_hard_fault() {
        use crate::snapshot::overrides::{Held, Override, Overrides, OverridesSnapshot};
        let s = store(&[(0x80E0_1801, FaultLevel::SeparateNPU)]);
        let until = |secs: i64| {
            let now = std::time::SystemTime::now();
            if secs >= 0 {
                now + Duration::from_secs(secs as u64)
            } else {
                now - Duration::from_secs((-secs) as u64)
            }
        };
        let held = |secs: i64| OverridesSnapshot {
            node: "n".into(),
            active: Overrides {
                node: None,
                npus: [(
                    0,
                    Override {
                        state: Held::Healthy,
                        until: until(secs),
                        reason: String::new(),
                        by: String::new(),
                    },
                )]
                .into_iter()
                .collect(),
            },
            refused: Vec::new(),
            error: None,
        };
        s.publish_overrides(held(3600));
        let mut h = HardFaults::new(HardFaultRules::default());
        assert_eq!(h.code_at(&s, Instant::now()), 0);
        s.publish_overrides(held(-1));
        assert_eq!(h.code_at(&s, Instant::now()), 5);
    }

    /// Pins: network health down on one read is not a hard fault; three in a row is, and
    /// one good read ends it.
    #[test]
    fn network_health_needs_consecutive_bad_reads() {
        let mut h = HardFaults::new(HardFaultRules::default());
        let down = chip_store(|c| c.network_health = Some(3));
        let up = chip_store(|_| {});
        let now = Instant::now();
        assert_eq!(h.code_at(&down, now), 0);
        assert_eq!(h.code_at(&down, now), 0);
        assert_eq!(h.code_at(&down, now), 4);
        assert_eq!(h.code_at(&up, now), 0);
        assert_eq!(h.code_at(&down, now), 0);
    }

    /// Critical health the telemetry has already read three times in a row is a hard fault
    /// at the first round that sees it: the reads, every few seconds, decide, not the
    /// rounds, every 30 s. Two reads are not enough, however many rounds see them.
    #[test]
    fn critical_health_counts_the_telemetrys_reads() {
        let mut h = HardFaults::new(HardFaultRules::default());
        let three = chip_store(|c| {
            c.health = Some(3);
            c.critical_reads = 3;
        });
        let now = Instant::now();
        assert_eq!(h.code_at(&three, now), 2);
        let mut h = HardFaults::new(HardFaultRules::default());
        let two = chip_store(|c| {
            c.health = Some(3);
            c.critical_reads = 2;
        });
        assert_eq!(h.code_at(&two, now), 0);
        // A second round on the same two reads counts as a third look (the rounds' own
        // count goes on from the longer of the two).
        assert_eq!(h.code_at(&two, now), 2);
    }

    /// Pins: new uncorrectable ECC errors are a hard fault for the hour after the last one,
    /// not forever (the old baseline never reset).
    #[test]
    fn ecc_errors_count_within_the_last_hour() {
        let mut h = HardFaults::new(HardFaultRules::default());
        let ecc = |n: u64| {
            chip_store(move |c| {
                c.ecc = Some(crate::snapshot::npu::Ecc {
                    total_double: n,
                    ..Default::default()
                })
            })
        };
        let t0 = Instant::now();
        assert_eq!(h.code_at(&ecc(5), t0), 0, "an old count is no new error");
        assert_eq!(h.code_at(&ecc(6), t0 + Duration::from_secs(60)), 3);
        assert_eq!(h.code_at(&ecc(6), t0 + Duration::from_secs(1800)), 3);
        assert_eq!(h.code_at(&ecc(6), t0 + Duration::from_secs(3700)), 0);
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

    /// A SeparateNPU code short of its `consecutive_reads` is no hard fault yet; one held
    /// by its `clear_after` after it was last read still is.
    #[test]
    fn only_separate_npu_codes_in_effect_are_hard_faults() {
        let mut h = HardFaults::default();
        let pending = FaultState::Pending {
            reads: 2,
            needed: 3,
        };
        let sep = FaultLevel::SeparateNPU;
        assert_eq!(h.code(&store_in(&[(0x80E3_A201, sep, pending)])), 0);
        assert_eq!(
            h.code(&store_in(&[(0x80E3_A201, sep, FaultState::Held)])),
            5
        );
    }
}
