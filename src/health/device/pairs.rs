//! Pair verdicts: a ping with loss or a slow RTT between two ports that are otherwise fine
//! is re-pinged; `pair_observations` bad observations in a row make a verdict (a cable or a
//! switch path), held until a clean observation. A bad observation counts only between
//! two ports that are otherwise fine, outside a fabric event and with neither behind a ToR
//! in an event (which delays or drops every ping through it). A pair verdict never
//! quarantines anything.

use std::collections::BTreeMap;

use super::score::RoundStats;
use super::{DeviceEngine, DeviceInput, DeviceOutput, PortProbe};
use crate::health::pairs::Pair;

impl DeviceEngine {
    /// Judges the round's pairs: see the module. `elevated` are the ports elevated this
    /// round, `in_tor` those whose ToR is in an event.
    pub(super) fn judge_pairs(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        (elevated, in_tor): (&[bool], &[bool]),
        fabric: bool,
        out: &mut DeviceOutput,
    ) {
        for (pair, (was_bad, specific)) in self.pair_observations(input, r) {
            // An end behind a ToR in an event: the ToR explains a bad ping, as the fabric
            // does in its event.
            let ends_fine =
                !elevated[pair.0] && !elevated[pair.1] && !in_tor[pair.0] && !in_tor[pair.1];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::device::DeviceConfig;

    /// 8 nodes × 4 ports, every port pinging the port 4 on: all at 100 µs but port 0's
    /// ping to port 4, three times as slow, three rounds running (`pair_observations`).
    /// Bad with no other ping of either end, it is that pair's: a pair verdict. With port
    /// 0 behind a ToR in an event, the ToR explains it: none.
    #[test]
    fn a_pair_with_an_end_behind_a_tor_in_an_event_is_no_pair_verdict() {
        let cfg = DeviceConfig::default();
        let nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
        let input = DeviceInput {
            probes: (0..32)
                .map(|src| PortProbe {
                    src,
                    dst: (src + 4) % 32,
                    sent: 3,
                    received: 3,
                    rtt: Some(if src == 0 { 300e-6 } else { 100e-6 }),
                })
                .collect(),
            ..DeviceInput::default()
        };
        let verdicts = |in_tor: &[bool]| {
            let mut e = DeviceEngine::new(&nodes, cfg.clone());
            let r = e.stats(&input);
            let mut last = Vec::new();
            for _ in 0..cfg.pair_observations {
                let mut out = DeviceOutput::default();
                e.judge_pairs(&input, &r, (&[false; 32], in_tor), false, &mut out);
                last = out.pair_verdicts;
            }
            last
        };
        assert_eq!(verdicts(&[false; 32]), vec![(0, 4)]);
        let mut in_tor = [false; 32];
        in_tor[0] = true;
        assert_eq!(verdicts(&in_tor), vec![]);
    }
}
