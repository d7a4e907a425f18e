//! Confirming a suspect port: known-good ports on other nodes re-ping it, and the re-pings
//! reproduce its loss or slowness, or do not. A confirmation needs [`MIN_REPORTERS`] nodes
//! other than the accused's that each saw the fault on their own, so one member that lies
//! about its re-pings cannot confirm a port of another node.

use std::collections::{BTreeMap, BTreeSet};

use super::score::{Against, RoundStats, loss_tail};
use super::{DeviceEngine, DeviceInput, PortProbe};
use crate::health::evidence::MIN_REPORTERS;
use crate::health::lifecycle::{NodeIx, PortIx};
use crate::health::plan::spread_pick;
use crate::health::stats::median;
use crate::snapshot::probe::NodeState;

/// Significance a suspect's re-ping loss must reach: fewer packets than the window, so a
/// looser bound than `loss_alpha`, still far below chance.
const CONFIRM_ALPHA: f64 = 1e-3;

/// Re-pings from known-good ports, accumulated while a port is suspect.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Confirmation {
    /// All reporters together.
    pub all: Tally,
    /// The same, per reporting node (the node whose port re-pinged).
    by_reporter: BTreeMap<NodeIx, Tally>,
}

/// Re-pings of a suspect port: packets, lost, log RTT residuals.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Tally {
    /// Packets sent.
    pub sent: u32,
    /// Of which lost.
    pub lost: u32,
    /// Log RTT residuals of the answered re-pings.
    pub residuals: Vec<f64>,
}

impl Tally {
    /// Adds a re-ping (with its residual, when answered).
    fn add(&mut self, p: &PortProbe, residual: Option<f64>) {
        self.sent = self.sent.saturating_add(p.sent);
        self.lost = self.lost.saturating_add(p.lost());
        self.residuals.extend(residual);
    }

    /// Lost ÷ sent (0 without packets).
    fn loss_ratio(&self) -> f64 {
        f64::from(self.lost) / f64::from(self.sent.max(1))
    }
}

/// What a suspect's re-pings say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Reproduction {
    /// They reproduce its loss or slowness.
    Reproduced {
        /// Loss ratio of the re-pings.
        loss_ratio: f64,
        /// Their median log RTT residual (NaN without an answer).
        slow: f64,
    },
    /// Enough re-pings, and they do not.
    NotReproduced {
        /// Loss ratio of the re-pings.
        loss_ratio: f64,
    },
    /// Not decided yet.
    Undecided,
}

impl DeviceEngine {
    /// Healthy ports on nodes other than the suspect's, present this round (`present`, by
    /// node), that can re-ping a suspect: chosen deterministically from the round and the
    /// suspect, so every member picks the same. With topology, ports behind another ToR
    /// than the suspect's, in no ToR event, are preferred (when there are any): their
    /// re-pings cross the suspect's ToR only where they must, and no other bad switch.
    pub fn confirmers(&self, suspect: usize, present: &[bool]) -> Vec<usize> {
        let node = self.ports.tracks().get(suspect).map(|p| p.data.node);
        let mut good: Vec<usize> = (0..self.ports.len())
            .filter(|&i| {
                let p = &self.ports[PortIx(i)];
                p.state == NodeState::Healthy
                    && Some(p.data.node) != node
                    && present.get(p.data.node.0).copied().unwrap_or(false)
            })
            .collect();
        let tor = self.port_tor(suspect);
        let apart: Vec<usize> = good
            .iter()
            .copied()
            .filter(|&i| self.behind_another_tor(i, tor))
            .collect();
        if !apart.is_empty() {
            good = apart;
        }
        if good.is_empty() {
            return Vec::new();
        }
        (0..self.cfg.confirm_peers.min(good.len()))
            .map(|k| good[spread_pick(suspect, k, self.ports.round() as usize, good.len())])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Adds this round's re-pings to the tallies of the suspects they were sent to.
    pub(super) fn record_confirmations(&mut self, input: &DeviceInput, r: &RoundStats) {
        let n = self.ports.len();
        // Re-pings of a suspect pair are about the pair: they do not confirm a port.
        let pair = |p: &PortProbe| {
            let k = (p.src.min(p.dst), p.src.max(p.dst));
            self.pairs.watched.contains_key(&k) || self.pairs.held.contains(&k)
        };
        let repings: Vec<PortProbe> = input
            .confirmations
            .iter()
            .filter(|p| p.usable(n) && !pair(p))
            .copied()
            .collect();
        for p in &repings {
            // A re-ping is evidence about the port it was sent to, reported by the node of
            // the port that sent it; the accused's own node never testifies against it.
            let reporter = self.ports[PortIx(p.src)].data.node;
            let t = &mut self.ports[PortIx(p.dst)];
            if t.state != NodeState::Suspect || reporter == t.data.node {
                continue;
            }
            let residual = r.residual(p);
            t.data.confirm.all.add(p, residual);
            t.data
                .confirm
                .by_reporter
                .entry(reporter)
                .or_default()
                .add(p, residual);
        }
    }

    /// Whether a suspect's re-pings from known-good ports reproduce its loss or slowness,
    /// against `against` (the fabric's loss rate, or its ToR's rate and level in an event).
    pub(super) fn reproduced(&self, i: PortIx, r: &RoundStats, against: Against) -> Reproduction {
        let cfg = &self.cfg;
        let c = &self.ports[i].data.confirm;
        let ratio = c.all.loss_ratio();
        let mut res = c.all.residuals.clone();
        let slow = if res.is_empty() {
            f64::NAN
        } else {
            median(&mut res) - against.rtt
        };
        // Reporters that each saw the loss, and each the slowness, on their own.
        let lossy_reporters = c
            .by_reporter
            .values()
            .filter(|t| t.lost > 0 && t.loss_ratio() >= cfg.loss_min)
            .count();
        let slow_reporters = c
            .by_reporter
            .values()
            .filter(|t| {
                let mut own = t.residuals.clone();
                !own.is_empty() && median(&mut own) - against.rtt > cfg.rtt_ratio.ln()
            })
            .count();
        let lossy = c.all.lost >= 2
            && ratio >= cfg.loss_min
            && loss_tail(c.all.lost, c.all.sent, against.loss.max(r.fabric_loss)) < CONFIRM_ALPHA
            && lossy_reporters >= MIN_REPORTERS;
        let slow_enough = res.len() >= cfg.confirm_peers
            && slow > cfg.rtt_ratio.ln()
            && slow_reporters >= MIN_REPORTERS;
        if lossy || slow_enough {
            Reproduction::Reproduced {
                loss_ratio: ratio,
                slow,
            }
        } else if c.all.sent >= cfg.confirm_packets {
            Reproduction::NotReproduced { loss_ratio: ratio }
        } else {
            Reproduction::Undecided
        }
    }
}
