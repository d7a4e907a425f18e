//! Pair verdicts: a ping with loss or a slow RTT between two ports that are otherwise fine
//! is re-pinged; `pair_observations` bad observations in a row make a verdict (a cable or a
//! switch path), held until a clean observation. A pair verdict never quarantines anything.

use std::collections::BTreeMap;

use super::score::RoundStats;
use super::{DeviceEngine, DeviceInput, DeviceOutput, PortProbe};
use crate::health::pairs::Pair;

impl DeviceEngine {
    /// Judges the round's pairs: see the module.
    pub(super) fn judge_pairs(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        elevated: &[bool],
        fabric: bool,
        out: &mut DeviceOutput,
    ) {
        for (pair, (was_bad, specific)) in self.pair_observations(input, r) {
            let ends_fine = !elevated[pair.0] && !elevated[pair.1];
            if !was_bad {
                self.pairs.clean(pair);
            } else if ends_fine && !fabric && specific {
                *self.pairs.watched.entry(pair).or_default() += 1;
            }
        }
        // Pairs with a verdict are re-pinged too, so that the verdict ends with the first
        // clean observation instead of waiting for the plan to come round again.
        for (pair, count) in &self.pairs.watched {
            if self.pairs.held.contains(pair) || *count >= self.cfg.pair_observations {
                out.pair_verdicts.push(*pair);
            }
            out.pair_requests.push(*pair);
        }
        for p in &out.pair_verdicts {
            self.pairs.held.insert(*p);
        }
    }

    /// Per pair observed this round: whether it was bad, and whether every bad observation
    /// was specific to the pair (a port bad with several peers at once, its own fault, its
    /// node's, its ToR's or a congested link, says nothing about one pair).
    fn pair_observations(
        &self,
        input: &DeviceInput,
        r: &RoundStats,
    ) -> BTreeMap<Pair, (bool, bool)> {
        let n = self.ports.len();
        let bad = |p: &PortProbe| {
            let lossy =
                p.lost() > 0 && f64::from(p.lost()) / f64::from(p.sent) >= self.cfg.loss_min;
            lossy || self.slow_ping(p, r)
        };
        let key = |p: &PortProbe| (p.src.min(p.dst), p.src.max(p.dst));
        // Bad plan pings per port this round.
        let mut bad_at = vec![0u32; n];
        for p in input.probes.iter().filter(|p| p.usable(n) && bad(p)) {
            bad_at[p.src] += 1;
            bad_at[p.dst] += 1;
        }
        let mut seen: BTreeMap<Pair, (bool, bool)> = BTreeMap::new();
        let plan = input.probes.iter().map(|p| (p, 1));
        let repings = input.confirmations.iter().map(|p| (p, 0));
        for (p, own) in plan.chain(repings).filter(|(p, _)| p.usable(n)) {
            let b = bad(p);
            let specific = bad_at[p.src] <= own && bad_at[p.dst] <= own;
            let e = seen.entry(key(p)).or_insert((false, true));
            e.0 |= b;
            e.1 &= !b || specific;
        }
        seen
    }
}
