//! `[health]`: the host-plane health engine's thresholds.

use super::section;
use crate::config::schema::Spec;

section! {
    /// `[health]`: the health engine's thresholds (defaults chosen with `hcclwatch
    /// simulate`). The shipped values are the health engine's defaults too
    /// (`probe::settings` tests that the two agree).
    pub struct HealthSection in "health" {
        /// Rounds in the scoring window.
        window: u32 = 10, Spec::int(3, 1000);
        /// Effect size to enter suspect (0.08 = 8 % slower than the round median).
        delta: f64 = 0.08, Spec::float(0.01, 2.0);
        /// Robust-z threshold.
        z: f64 = 3.0, Spec::float(0.5, 50.0);
        /// Floor on the robust spread, in log units.
        mad_floor: f64 = 0.01, Spec::float(0.0, 1.0);
        /// Known-good peers a suspect is re-paired with.
        confirm_peers: u32 = 3, Spec::int(1, 16);
        /// Rounds a hard fault must stay absent before its quarantine recommendation moves
        /// to probation.
        hard_hold_down: u32 = 30, Spec::int(1, 10_000);
        /// Consecutive reads of critical health or of RoCE network health not OK that make
        /// a hard fault.
        hard_consecutive_reads: u32 = 3, Spec::int(1, 100);
        /// Uncorrectable (double-bit) HBM ECC errors within the last hour that make a hard
        /// fault; it clears an hour after the last one.
        hard_ecc_double_per_hour: u32 = 1, Spec::int(1, 1_000_000);
        /// A hard fault of one NPU (critical health, uncorrectable ECC, its RoCE port down,
        /// a fault code at SeparateNPU or worse) recommends isolating that NPU
        /// (`hcclwatch_npu_isolation_recommended`) instead of quarantining the node; a
        /// dropped card stays a node verdict. Turn on with the receiver's `isolate_npu`.
        hard_npu_scoped: bool = false, Spec::BOOL;
        /// Consecutive rounds of re-pairings that must reproduce before a suspect is
        /// confirmed.
        confirm_rounds: u32 = 2, Spec::int(1, 10);
        /// Steadily slow rounds after confirmation without congestion reported by the
        /// node's own uplink before the second re-pairing.
        confirm_hold: u32 = 6, Spec::int(0, 1000);
        /// Steadily slow rounds its uplink did not explain before the second re-pairing,
        /// when the node's uplink reported congestion in most rounds of the run (those
        /// never count).
        congested_hold: u32 = 15, Spec::int(0, 10_000);
        /// Steadily slow rounds its uplink did not explain before the second re-pairing,
        /// when no hardware sign (link or PCIe trained down, corrupted frames) corroborates
        /// the slowness: the persistence horizon, longer than steady congestion that the
        /// counters miss lasts.
        uncorroborated_hold: u32 = 180, Spec::int(0, 100_000);
        /// Rounds within bounds to leave suspect/confirmed or a quarantine recommendation.
        exit_rounds: u32 = 180, Spec::int(1, 100_000);
        /// Rounds of probation after a quarantine.
        probation_rounds: u32 = 720, Spec::int(0, 1_000_000);
        /// Round median above baseline × this is a fabric-slow round.
        fabric_ratio: f64 = 1.0 / 0.9, Spec::float(1.0, 10.0);
        /// Fabric-slow rounds in the window that make a fabric verdict.
        fabric_rounds: u32 = 3, Spec::int(1, 1000);
        /// Slow re-measurements of one pair that make a link verdict.
        link_observations: u32 = 9, Spec::int(1, 100);
        /// Rounds after which a lasting change becomes the new normal and its verdict ends:
        /// slow rounds in a row of the group's round median or a ToR's level, rounds since
        /// the first event of a partial fabric event (a dip: its pairs; the base rate of
        /// probes slow on their own is then learnt again).
        new_normal_rounds: u32 = 360, Spec::int(10, 1_000_000);
        /// Judge each node against its ToR's members too, when the topology names its ToR
        /// (its ToR's level taken out of its score, crowds localised to a ToR). Off by
        /// default: on the shipped scenarios it does not yet do better than without
        /// (docs/detection.md). ToR verdicts are made whenever the topology is known.
        tor_aware: bool = false, Spec::BOOL;
    }
}
