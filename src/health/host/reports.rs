//! The consistency of re-pairing reports: each end of a re-pairing times it on its own,
//! and a member that lies about its timings stands out against the honest reporters of the
//! same suspect.

use std::collections::BTreeMap;

use super::score::RoundStats;
use super::{HealthEngine, RoundInput, RoundOutput};
use crate::health::lifecycle::NodeIx;

/// Participations in re-pairings remembered per reporter for the consistency check.
pub const REPORT_WINDOW: usize = 20;
/// A reporter contradicted by the others this many times within [`REPORT_WINDOW`] (and in
/// at least half its participations) is flagged as inconsistent.
pub const CONTRADICTIONS: usize = 4;

impl HealthEngine {
    /// Flags reporters whose re-pairing reports the other reporters of the same suspect
    /// consistently contradict (one says slow, the majority normal, or the reverse).
    pub(super) fn check_reports(
        &mut self,
        input: &RoundInput,
        r: &RoundStats,
        out: &mut RoundOutput,
    ) {
        let n = self.nodes.len();
        // Per accused: (reporter, says slow).
        let mut by_accused: BTreeMap<usize, Vec<(usize, bool)>> = BTreeMap::new();
        for rep in &input.reports {
            let (reporter, accused, secs) = (rep.reporter, rep.accused, rep.seconds);
            if reporter < n && accused < n && reporter != accused && secs.is_finite() && secs > 0.0
            {
                let slow = r.residual(secs) - r.tors.of_probe(reporter, accused) > r.entry;
                by_accused
                    .entry(accused)
                    .or_default()
                    .push((reporter, slow));
            }
        }
        for reports in by_accused.values().filter(|v| v.len() >= 3) {
            let slow = reports.iter().filter(|(_, s)| *s).count();
            for &(reporter, says) in reports {
                let others_slow = slow - usize::from(says);
                let others = reports.len() - 1;
                let majority_slow = others_slow * 2 > others;
                let contradicted = says != majority_slow && (others_slow * 2 != others);
                let h = &mut self.nodes[NodeIx(reporter)].data.reports;
                h.push_back(contradicted);
                while h.len() > REPORT_WINDOW {
                    h.pop_front();
                }
            }
        }
        out.inconsistent_reporters = (0..n)
            .filter(|&i| {
                let h = &self.nodes[NodeIx(i)].data.reports;
                let bad = h.iter().filter(|c| **c).count();
                bad >= CONTRADICTIONS && bad * 2 >= h.len()
            })
            .collect();
    }
}
