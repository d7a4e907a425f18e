//! Pair verdicts: a ping with loss or a slow RTT between two ports that are otherwise fine
//! is re-pinged every round while the pair is watched. A verdict (a cable or a switch path)
//! comes from either of two kinds of evidence:
//! - `pair_observations` bad observations in a row (a slow RTT shows in every ping);
//! - the pair's lost packets over its last [`PAIR_WINDOW`] observations, in two of them
//!   or more, more than the fabric's loss rate or what either end loses with its other
//!   peers explains (a binomial tail below `loss_alpha`) and at least `loss_min` of them.
//!   A ping is a few packets, so a cable that drops one packet in ten loses none in most
//!   pings: the rule of bad pings in a row alone found few such pairs, and their packets
//!   together do (docs/detection.md, "Device pairs from their packets").
//!
//! A watched pair is dropped (its verdict ends) at a clean observation once its window
//! holds no loss the fabric's rate leaves unlikely (a tail of [`KEEP_TAIL`] or above); a
//! pair slow without loss, at its first clean one.
//!
//! An observation counts only between two ports that are otherwise fine (neither elevated,
//! nor behind a ToR in an event, which delays or drops every ping through it, nor showing
//! congestion in its own counters), outside a fabric event, and with no other bad ping at
//! either end this round (but for those with an elevated port, that port's doing). What
//! many pairs share is no pair's: a pair earns no verdict while [`PAIR_CROWD`] other
//! watched pairs between switches show evidence of their own (a spine's ECMP hash spreads
//! its loss over pairs between every two switches), while another pair of one of its ends
//! does, or while an end loses `loss_min` of its window's packets with its other peers or
//! its pings with them are slow (its uplink, congested with its counters silent, or a weak
//! port). Pairs with a verdict held do not count among those others: a spine's first pair
//! to earn its verdict keeps it, and the rule then needs two more (a limit, measured in
//! docs/detection.md). A verdict once given is held as long as the pair is watched. A
//! pair verdict never quarantines anything.

use std::collections::{BTreeMap, VecDeque};

use super::score::RoundStats;
use super::{DeviceEngine, DeviceInput, DeviceOutput, PortProbe};
use crate::health::lifecycle::PortIx;
use crate::health::pairs::Pair;
use crate::health::stats::upper_tail;
use crate::snapshot::probe::NodeState;

/// Observations of a watched pair whose packets are judged together: forty, 120 packets of
/// 3-packet pings (13 minutes at the shipped 20 s device round). A cable that drops one
/// packet in twenty shows about six lost in them, and five stand out from a fabric that
/// loses one in a thousand below `loss_alpha` over that many packets; a repaired cable's
/// verdict lifts within as many observations.
pub(super) const PAIR_WINDOW: usize = 40;

/// A watched pair stays watched (and its verdict held) through a clean observation while
/// its window's lost packets are this unlikely under the fabric's loss rate: a pair that
/// lost one packet by chance is dropped after about 17 clean 3-packet observations at the
/// 1e-3 floor (52 packets), one that lost two or more when they leave the window, a lossy
/// one is kept.
pub(super) const KEEP_TAIL: f64 = 0.05;

/// Observations with a lost packet a window needs for a verdict from its packets: two.
const LOSSY_OBSERVATIONS: usize = 2;

/// Other pairs between switches with evidence of their own that withhold a pair's
/// verdict between switches: two. A spine's ECMP hash, or a dip, spreads its loss over
/// many pairs between switches at once; a cable is one pair.
const PAIR_CROWD: usize = 2;

/// The loss tail below which a watched pair counts towards [`PAIR_CROWD`].
const CROWD_TAIL: f64 = 1e-3;

/// What the engine keeps about a watched pair.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct PairEvidence {
    /// Bad observations in a row.
    in_row: usize,
    /// Packets (sent, lost) of its last [`PAIR_WINDOW`] observations, oldest first.
    packets: VecDeque<(u32, u32)>,
}

impl PairEvidence {
    /// Adds an observation's packets.
    fn record(&mut self, sent: u32, lost: u32) {
        self.packets.push_back((sent, lost));
        while self.packets.len() > PAIR_WINDOW {
            self.packets.pop_front();
        }
    }

    /// The window's (sent, lost).
    fn totals(&self) -> (u64, u64) {
        self.packets.iter().fold((0, 0), |(s, l), (ps, pl)| {
            (s + u64::from(*ps), l + u64::from(*pl))
        })
    }

    /// The chance of the window's lost packets or more under the fabric's loss rate.
    fn loss_tail(&self, fabric_loss: f64) -> f64 {
        let (sent, lost) = self.totals();
        upper_tail(lost, sent, fabric_loss)
    }

    /// Whether the window's loss makes a verdict: lost packets in [`LOSSY_OBSERVATIONS`]
    /// observations or more (one ping that lost everything is a flap, or a responder's
    /// moment, and was a verdict held for the whole window), at least `loss_min` of its
    /// packets, and a tail below `loss_alpha`.
    fn lossy(&self, fabric_loss: f64, loss_min: f64, loss_alpha: f64) -> bool {
        let (sent, lost) = self.totals();
        let lossy = self.packets.iter().filter(|(_, l)| *l > 0).count();
        sent > 0
            && lossy >= LOSSY_OBSERVATIONS
            && lost as f64 / sent as f64 >= loss_min
            && self.loss_tail(fabric_loss) < loss_alpha
    }
}

/// What a round showed of one pair.
#[derive(Debug, Clone, Copy)]
struct Observation {
    /// A bad ping (lossy or slow) among the pair's this round.
    bad: bool,
    /// Every bad ping of the pair this round was specific to it.
    specific: bool,
    /// Packets sent over the pair's pings this round.
    sent: u32,
    /// Of them, packets lost.
    lost: u32,
}

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
        let base = r.fabric_loss;
        let n = self.ports.len();
        let mut congested = vec![false; n];
        for &i in input.congested_ports.iter().filter(|&&i| i < n) {
            congested[i] = true;
        }
        let flag = |v: &[bool], i: usize| v.get(i).copied().unwrap_or(false);
        let fine = |i: usize| !flag(elevated, i) && !flag(in_tor, i) && !congested[i];
        for (pair, o) in self.pair_observations(input, r, elevated) {
            // An end behind a ToR in an event: the ToR explains a bad ping, as the fabric
            // does in its event; one whose own counters show congestion, its congestion.
            let ends_fine = fine(pair.0) && fine(pair.1);
            let telling = ends_fine && !fabric && o.specific;
            if !o.bad {
                let Some(e) = self.pairs.watched.get_mut(&pair) else {
                    self.pairs.held.remove(&pair);
                    continue;
                };
                e.in_row = 0;
                e.record(o.sent, o.lost);
                if e.loss_tail(base) >= KEEP_TAIL {
                    self.pairs.clean(pair);
                }
            } else if telling {
                let e = self.pairs.watched.entry(pair).or_default();
                e.in_row += 1;
                e.record(o.sent, o.lost);
            }
        }
        // Every watched pair is re-pinged, those with a verdict too, so that its evidence
        // gathers (and a verdict ends) without waiting for the plan to come round again.
        let (rows, min, alpha) = (
            self.cfg.pair_observations,
            self.cfg.loss_min,
            self.cfg.loss_alpha,
        );
        let crowd = self.on_their_own(base);
        for (pair, e) in &self.pairs.watched {
            // The pair's rate is never below the fabric's: only a window lossy against the
            // fabric's is worth reading its ends' windows for.
            let earned = e.in_row >= rows
                || e.lossy(base, min, alpha) && e.lossy(self.pair_rate(*pair, base), min, alpha);
            let others = || crowd.iter().filter(|k| *k != pair);
            // A spine's or a dip's pairs: others between switches bad on their own too.
            let spread = || {
                self.between_switches(*pair)
                    && others().filter(|k| self.between_switches(**k)).count() >= PAIR_CROWD
            };
            // An end's own uplink (congestion its counters missed): another of its pairs
            // bad on its own too.
            let at_an_end = || {
                others().any(|k| k.0 == pair.0 || k.0 == pair.1 || k.1 == pair.0 || k.1 == pair.1)
            };
            // An end that loses with its other peers too, or is slow with them (the same,
            // seen in its window).
            let lossy_end = || {
                self.lossy_beside(pair.0, pair.1)
                    || self.lossy_beside(pair.1, pair.0)
                    || self.slow_beside(pair.0, pair.1)
                    || self.slow_beside(pair.1, pair.0)
            };
            if self.pairs.held.contains(pair) || earned && !spread() && !at_an_end() && !lossy_end()
            {
                out.pair_verdicts.push(*pair);
            }
            out.pair_requests.push(*pair);
        }
        for p in &out.pair_verdicts {
            self.pairs.held.insert(*p);
        }
    }

    /// Whether a pair's ends hang off two different known switches.
    fn between_switches(&self, (a, b): Pair) -> bool {
        matches!((self.port_tor(a), self.port_tor(b)), (Some(x), Some(y)) if x != y)
    }

    /// The share of its window's plan packets port `i` loses with its peers other than
    /// `other` and the accused ones (None: no such packets): its own uplink's loss
    /// (congestion its counters missed), which a pair of it shows too.
    fn loss_beside(&self, i: usize, other: usize) -> Option<f64> {
        let accused = |p: usize| {
            self.ports
                .tracks()
                .get(p)
                .is_some_and(|t| t.state != NodeState::Healthy)
        };
        let (sent, lost) = self.window_packets(PortIx(i), |p| p.0 != other && !accused(p.0));
        (sent > 0).then(|| lost as f64 / sent as f64)
    }

    /// Whether port `i` loses at least `loss_min` with its peers other than `other`
    /// ([`Self::loss_beside`]).
    fn lossy_beside(&self, i: usize, other: usize) -> bool {
        self.loss_beside(i, other)
            .is_some_and(|x| x >= self.cfg.loss_min)
    }

    /// The loss rate a pair's packets are judged against: the fabric's, or what either
    /// end loses with its other peers when that is more. A port that loses a packet in a
    /// hundred with everyone (below `loss_min`, so neither it nor [`Self::lossy_beside`]
    /// is judged) still lost enough on a pair re-pinged every round for a tail below
    /// `loss_alpha` against the fabric's rate of one in a thousand: a pair earns a
    /// verdict only by losing more than its own ends explain.
    fn pair_rate(&self, (a, b): Pair, fabric: f64) -> f64 {
        [self.loss_beside(a, b), self.loss_beside(b, a)]
            .into_iter()
            .flatten()
            .fold(fabric, f64::max)
    }

    /// Whether port `i`'s pings with its peers other than `other` are slow in its window:
    /// their median RTT residual above half of ln(`rtt_ratio`), a port slower than the
    /// round though not enough to be elevated (a weak port, or congestion on its link),
    /// whose slowness a pair of it shows too.
    fn slow_beside(&self, i: usize, other: usize) -> bool {
        let mut residuals: Vec<f64> = self.ports[PortIx(i)]
            .data
            .window
            .iter()
            .flat_map(|s| s.residuals.iter())
            .filter(|(p, _)| p.0 != other)
            .map(|(_, x)| *x)
            .collect();
        !residuals.is_empty()
            && crate::health::stats::median(&mut residuals) > self.cfg.rtt_ratio.ln() / 2.0
    }

    /// Watched pairs with no verdict held that show evidence of their own: two bad
    /// observations in a row, or lost packets the fabric's rate leaves unlikely (a tail
    /// below [`CROWD_TAIL`]).
    fn on_their_own(&self, base: f64) -> Vec<Pair> {
        self.pairs
            .watched
            .iter()
            .filter(|(k, e)| {
                !self.pairs.held.contains(k) && (e.in_row >= 2 || e.loss_tail(base) < CROWD_TAIL)
            })
            .map(|(k, _)| *k)
            .collect()
    }

    /// Per pair observed this round: whether it was bad, whether every bad observation was
    /// specific to the pair (a port bad with several peers at once, its own fault, its
    /// node's, its ToR's or a congested link, says nothing about one pair), and its
    /// packets. A bad ping with an `elevated` port is that port's doing: it does not make
    /// its other end look bad with several peers (a lossy port that pinged one end of a
    /// bad cable hid the cable).
    fn pair_observations(
        &self,
        input: &DeviceInput,
        r: &RoundStats,
        elevated: &[bool],
    ) -> BTreeMap<Pair, Observation> {
        let n = self.ports.len();
        let bad = |p: &PortProbe| {
            let lossy =
                p.lost() > 0 && f64::from(p.lost()) / f64::from(p.sent) >= self.cfg.loss_min;
            lossy || self.slow_ping(p, r)
        };
        let key = |p: &PortProbe| (p.src.min(p.dst), p.src.max(p.dst));
        // Bad plan pings per port this round, but for those with an accused peer.
        let accused = |i: usize| elevated.get(i).copied().unwrap_or(false);
        let mut bad_at = vec![0u32; n];
        for p in input.probes.iter().filter(|p| p.usable(n) && bad(p)) {
            bad_at[p.src] += u32::from(!accused(p.dst));
            bad_at[p.dst] += u32::from(!accused(p.src));
        }
        let mut seen: BTreeMap<Pair, Observation> = BTreeMap::new();
        let plan = input.probes.iter().map(|p| (p, 1));
        let repings = input.confirmations.iter().map(|p| (p, 0));
        for (p, own) in plan.chain(repings).filter(|(p, _)| p.usable(n)) {
            let b = bad(p);
            let specific = bad_at[p.src] <= own && bad_at[p.dst] <= own;
            let e = seen.entry(key(p)).or_insert(Observation {
                bad: false,
                specific: true,
                sent: 0,
                lost: 0,
            });
            e.bad |= b;
            e.specific &= !b || specific;
            e.sent = e.sent.saturating_add(p.sent);
            e.lost = e.lost.saturating_add(p.lost());
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::device::DeviceConfig;

    /// Every one of 32 ports pinging the port 4 on, no packet lost, port `src`'s ping
    /// taking `rtt(src)`.
    fn ring(rtt: impl Fn(usize) -> f64) -> Vec<PortProbe> {
        (0..32)
            .map(|src| PortProbe {
                src,
                dst: (src + 4) % 32,
                sent: 3,
                received: 3,
                rtt: Some(rtt(src)),
            })
            .collect()
    }

    /// 8 nodes × 4 ports, every port pinging the port 4 on: all at 100 µs but port 0's
    /// ping to port 4, three times as slow, three rounds running (`pair_observations`).
    /// Bad with no other ping of either end, it is that pair's: a pair verdict. With port
    /// 0 behind a ToR in an event, the ToR explains it: none.
    #[test]
    fn a_pair_with_an_end_behind_a_tor_in_an_event_is_no_pair_verdict() {
        let cfg = DeviceConfig::default();
        let nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
        let input = DeviceInput {
            probes: ring(|src| if src == 0 { 300e-6 } else { 100e-6 }),
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

    /// Port 3 pings port 20 every round, losing one packet of three every other round;
    /// the pair's packets together make a verdict. With port 3 also losing two packets of
    /// three with port 21 in the rounds between, port 3 loses with its other peers too:
    /// its uplink's doing, no verdict on (3, 20). (Port 21 shares port 20's node, so port
    /// 3 loses with one node only and is not elevated, and its counters show congestion,
    /// so the pair (3, 21) is never watched: only the rule on an end's other loss is left
    /// to withhold the verdict.)
    #[test]
    fn a_pair_of_a_port_lossy_with_other_peers_is_no_pair_verdict() {
        let nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
        let ping = |src: usize, dst: usize, lost: u32| PortProbe {
            src,
            dst,
            sent: 3,
            received: 3 - lost,
            rtt: Some(100e-6),
        };
        let verdicts = |beside: bool| {
            let mut e = DeviceEngine::new(&nodes, DeviceConfig::default());
            let mut given = BTreeMap::new();
            for r in 0..40u32 {
                let odd = r % 2;
                let mut probes: Vec<PortProbe> =
                    (0..32).map(|src| ping(src, (src + 4) % 32, 0)).collect();
                probes.push(ping(3, 20, odd));
                probes.push(ping(3, 21, if beside { 2 * (1 - odd) } else { 0 }));
                let out = e.step(&DeviceInput {
                    probes,
                    congested_ports: vec![21],
                    ..DeviceInput::default()
                });
                for p in out.pair_verdicts {
                    given.entry(p).or_insert(r);
                }
            }
            assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
            given.into_keys().collect::<Vec<_>>()
        };
        assert_eq!(verdicts(false), vec![(3, 20)]);
        assert_eq!(verdicts(true), vec![]);
    }

    /// The same lossy pair (3, 20), and every other ping of port 3 30 % slower than the
    /// rest (below `rtt_ratio`, so port 3 is not elevated): a weak port, or congestion on
    /// its link, whose slowness the pair shows too; no verdict on (3, 20).
    #[test]
    fn a_pair_of_a_port_slow_with_other_peers_is_no_pair_verdict() {
        let nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
        let verdicts = |slow: f64| {
            let ping = |src: usize, dst: usize, lost: u32| PortProbe {
                src,
                dst,
                sent: 3,
                received: 3 - lost,
                rtt: Some(if (src == 3 || dst == 3) && src != 20 && dst != 20 {
                    100e-6 * slow
                } else {
                    100e-6
                }),
            };
            let mut e = DeviceEngine::new(&nodes, DeviceConfig::default());
            let mut given = BTreeMap::new();
            for r in 0..40u32 {
                let mut probes: Vec<PortProbe> =
                    (0..32).map(|src| ping(src, (src + 4) % 32, 0)).collect();
                probes.push(ping(3, 20, r % 2));
                for p in e
                    .step(&DeviceInput {
                        probes,
                        ..DeviceInput::default()
                    })
                    .pair_verdicts
                {
                    given.entry(p).or_insert(r);
                }
            }
            assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
            given.into_keys().collect::<Vec<_>>()
        };
        assert_eq!(verdicts(1.0), vec![(3, 20)]);
        assert_eq!(verdicts(1.3), vec![]);
    }

    /// The slow pair (0, 4) of the test above, and port 8, elevated, whose ping with port 0
    /// (either way) is slow too every round: that ping is port 8's doing, so (0, 4) is
    /// still bad with one peer only, a pair verdict (counted against port 0, it hid the
    /// pair). A second slow ping of port 0 with a peer that is not elevated still makes
    /// it no pair's.
    #[test]
    fn a_bad_ping_with_an_elevated_port_does_not_hide_a_pair() {
        let cfg = DeviceConfig::default();
        let nodes: Vec<usize> = (0..32).map(|p| p / 4).collect();
        let slow = |src: usize, dst: usize| PortProbe {
            src,
            dst,
            sent: 3,
            received: 3,
            rtt: Some(300e-6),
        };
        let input = |(from, to): (usize, usize)| DeviceInput {
            probes: ring(|_| 100e-6)
                .into_iter()
                .filter(|p| p.src != 0)
                .chain([slow(0, 4), slow(from, to)])
                .collect(),
            ..DeviceInput::default()
        };
        let verdicts = |input: &DeviceInput, elevated: &[bool]| {
            let mut e = DeviceEngine::new(&nodes, cfg.clone());
            let r = e.stats(input);
            let mut last = Vec::new();
            for _ in 0..cfg.pair_observations {
                let mut out = DeviceOutput::default();
                e.judge_pairs(input, &r, (elevated, &[false; 32]), false, &mut out);
                last = out.pair_verdicts;
            }
            last
        };
        let mut elevated = [false; 32];
        elevated[8] = true;
        // Port 8's slow ping to port 0, and port 0's to port 8.
        for way in [(8, 0), (0, 8)] {
            assert_eq!(verdicts(&input(way), &elevated), vec![(0, 4)], "{way:?}");
            assert_eq!(verdicts(&input(way), &[false; 32]), vec![], "{way:?}");
        }
    }
}
