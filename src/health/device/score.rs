//! Scoring a device-plane round: the round's reference (median log RTT and spread) and the
//! fabric's loss rate, each port's window of pings (each ping charged to both its ends),
//! and whether a port is elevated over its window, by loss or by RTT.

use std::collections::BTreeSet;

use super::{DeviceEngine, DeviceInput, PortProbe};
use crate::health::evidence::{Evidence, Key, steady};
use crate::health::lifecycle::{NodeIx, PortIx};
use crate::health::stats::{Reference, deviations, median, spread_of, upper_tail};

/// Statistics of one round's pings as a whole.
pub(super) struct RoundStats {
    /// Median log RTT of the round's plan pings, and the robust spread around it.
    pub reference: Reference,
    /// The fabric's loss rate (floored): see [`DeviceEngine::fabric_loss`].
    pub fabric_loss: f64,
}

impl RoundStats {
    /// A ping's log RTT residual against the round, when it has a usable RTT.
    pub fn residual(&self, p: &PortProbe) -> Option<f64> {
        p.rtt
            .filter(|x| x.is_finite() && *x > 0.0)
            .map(|x| self.reference.residual(x))
    }
}

/// What a port is judged against: the loss rate its packets may show by chance and the
/// log RTT level taken out of its residuals. The fabric's (no level) for most ports; its
/// ToR's own for a port of a ToR in an event (see `tor`), so that a lossy or slow ToR does
/// not elevate all its ports while a port bad among them still stands out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Against {
    /// Loss rate (floored at the fabric's).
    pub loss: f64,
    /// Log RTT level taken out of the residuals.
    pub rtt: f64,
}

/// One round of a port's history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sample {
    /// Packets through the port.
    pub packets: u32,
    /// Of which lost.
    pub lost: u32,
    /// Log RTT residuals of this round's pings through the port, with their peer.
    pub residuals: Vec<(PortIx, f64)>,
    /// Each ping's peer port, packets sent and lost.
    pub peers: Vec<(PortIx, u32, u32)>,
}

/// Why a port is elevated this round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Elevation {
    /// Elevated by loss: unlikely under the fabric's loss rate, with enough peers.
    pub loss: bool,
    /// Elevated by RTT: the window median residual above ln(`rtt_ratio`) and `z`.
    pub rtt: bool,
    /// Lost ÷ sent over the window (pings with accused peers left out).
    pub loss_ratio: f64,
    /// The binomial tail of that loss under the fabric's loss rate.
    pub tail: f64,
    /// Window median log RTT residual (NaN without an answered ping).
    pub rtt_residual: f64,
    /// Its robust z against the round's spread.
    pub rtt_z: f64,
    /// Robust spread of the window's RTT residuals.
    pub rtt_spread: f64,
    /// The slowness is steady (see [`STEADY_RATIO`](crate::health::STEADY_RATIO)) or the
    /// port is lossy.
    pub steady: bool,
    /// Distinct peers in the window.
    pub peers: usize,
}

impl Elevation {
    /// Elevated by loss or by RTT.
    pub fn any(&self) -> bool {
        self.loss || self.rtt
    }

    /// The window's numbers as evidence.
    pub fn evidence(&self) -> Evidence {
        Evidence::of([
            (Key::WindowLossRatio, self.loss_ratio),
            (Key::LossBinomialTail, self.tail),
            (Key::WindowMedianLogRttResidual, self.rtt_residual),
            (Key::WindowRttRobustZ, self.rtt_z),
            (Key::WindowRttResidualSpread, self.rtt_spread),
            (Key::DistinctPeers, self.peers as f64),
        ])
    }

    /// The elevation in words, with only the numbers the window has. A port within
    /// bounds in this round's window (a suspect's re-pings may still decide it in a round
    /// an event explains) is said to be, and a window without an RTT it is judged by
    /// (none answered, or each with a port behind another switch in an event) gives
    /// none: a reason never shows a figure nobody measured.
    pub fn describe(&self) -> String {
        let peers = self.peers;
        let loss = self.loss_ratio * 100.0;
        let rtt = percent_slower(self.rtt_residual);
        match (self.loss, self.rtt) {
            (true, true) => {
                format!("{loss:.1}% packet loss and {rtt:.0}% slower pings with {peers} peers")
            }
            (true, false) => format!("{loss:.1}% packet loss on pings with {peers} peers"),
            (false, true) => {
                format!("pings {rtt:.0}% slower than the round median with {peers} peers")
            }
            (false, false) => {
                let rtt = if rtt.is_finite() {
                    format!("pings {rtt:+.0}% against the round median")
                } else {
                    "no RTT to judge it by".to_string()
                };
                format!(
                    "within bounds in this round's window ({loss:.1}% packet loss, {rtt}, with {peers} peers)"
                )
            }
        }
    }
}

/// A log RTT residual as a percentage slower (NaN stays NaN: the caller says so in words).
pub(super) fn percent_slower(log_residual: f64) -> f64 {
    (log_residual.exp() - 1.0) * 100.0
}

/// A port's loss is unlikely under the fabric rate: P(X ≥ lost) for X ~ Bin(packets, p0).
pub(super) fn loss_tail(lost: u32, packets: u32, p0: f64) -> f64 {
    upper_tail(
        u64::from(lost),
        u64::from(packets),
        p0.clamp(1e-9, 1.0 - 1e-9),
    )
}

impl DeviceEngine {
    /// The round's reference, from its plan pings with an RTT.
    pub(super) fn stats(&self, input: &DeviceInput) -> RoundStats {
        let n = self.ports.len();
        let logs: Vec<f64> = input
            .probes
            .iter()
            .filter(|p| p.usable(n))
            .filter_map(|p| p.rtt.filter(|r| r.is_finite() && *r > 0.0))
            .map(f64::ln)
            .collect();
        RoundStats {
            reference: Reference::of(&logs, self.cfg.mad_floor),
            fabric_loss: self.cfg.loss_floor,
        }
    }

    /// The fabric's loss rate: the median over ports of each port's loss ratio over its
    /// window (each packet is charged to both ends), leaving out pings with an accused
    /// peer or one behind another ToR in an event (see `window_loss`). A median, so that a few lossy ports do not raise the rate they and their
    /// peers are judged against; a loss most ports share moves it. Floored at `loss_floor`.
    pub(super) fn fabric_loss(&self, accused: &[bool]) -> f64 {
        let mut ratios: Vec<f64> = (0..self.ports.len())
            .filter_map(|i| self.window_loss(PortIx(i), accused))
            .collect();
        median(&mut ratios).max(self.cfg.loss_floor)
    }

    /// Port `i`'s loss ratio over its window, leaving out pings with an accused peer or a
    /// peer behind another ToR in an event (None without a packet). Were a ToR's loss left
    /// in its peers' ratios, a ToR holding a quarter of the group would raise the fabric's
    /// rate, which its own ports would then not stand out from.
    pub(super) fn window_loss(&self, i: PortIx, accused: &[bool]) -> Option<f64> {
        let mine = self.port_tor(i.0);
        let (sent, lost) = self.window_packets(i, |p| {
            !accused.get(p.0).copied().unwrap_or(false) && !self.behind_another_event(p.0, mine)
        });
        (sent > 0).then(|| lost as f64 / sent as f64)
    }

    /// Port `i`'s plan packets over its window, (sent, lost), with the peers `keep` admits.
    pub(super) fn window_packets(&self, i: PortIx, keep: impl Fn(PortIx) -> bool) -> (u64, u64) {
        self.ports[i]
            .data
            .window
            .iter()
            .flat_map(|s| s.peers.iter())
            .filter(|(p, _, _)| keep(*p))
            .fold((0u64, 0u64), |(s, l), (_, ps, pl)| {
                (s + u64::from(*ps), l + u64::from(*pl))
            })
    }

    /// Charges this round's plan pings to both their ends.
    pub(super) fn record(&mut self, input: &DeviceInput, r: &RoundStats) {
        let n = self.ports.len();
        let mut samples: Vec<Sample> = vec![Sample::default(); n];
        for p in input.probes.iter().filter(|p| p.usable(n)) {
            let residual = r.residual(p);
            for (me, peer) in [(p.src, p.dst), (p.dst, p.src)] {
                let s = &mut samples[me];
                s.packets += p.sent;
                s.lost += p.lost();
                s.residuals.extend(residual.map(|x| (PortIx(peer), x)));
                s.peers.push((PortIx(peer), p.sent, p.lost()));
            }
        }
        let absent: BTreeSet<usize> = input.absent_nodes.iter().copied().collect();
        let w = self.cfg.window;
        for (track, s) in self.ports.tracks_mut().iter_mut().zip(samples) {
            if absent.contains(&track.data.node.0) {
                continue;
            }
            track.data.window.push_back(s);
            while track.data.window.len() > w {
                track.data.window.pop_front();
            }
        }
    }

    /// Whether port `i` is elevated over its window against the fabric, and by how much.
    pub(super) fn elevation(&self, i: PortIx, r: &RoundStats, accused: &[bool]) -> Elevation {
        let fabric = Against {
            loss: r.fabric_loss,
            rtt: 0.0,
        };
        self.elevation_against(i, r, accused, fabric)
    }

    /// Whether port `i` is elevated over its window against `against` (its loss rate and
    /// the RTT level taken out), and by how much.
    pub(super) fn elevation_against(
        &self,
        i: PortIx,
        r: &RoundStats,
        accused: &[bool],
        against: Against,
    ) -> Elevation {
        let cfg = &self.cfg;
        let t = &self.ports[i].data;
        // A ping with a port behind another ToR in an event crossed that ToR: the ToR
        // explains it, as an accused peer does.
        let mine = self.port_tor(i.0);
        let other_tor = |p: &PortIx| self.behind_another_event(p.0, mine);
        // Loss on pings with a peer already accused is explained by that peer: a port
        // next to a bad one is not bad itself.
        let pings = || {
            t.window
                .iter()
                .flat_map(|s| s.peers.iter())
                .filter(|(p, _, _)| !accused.get(p.0).copied().unwrap_or(false) && !other_tor(p))
        };
        let packets: u32 = pings().map(|(_, s, _)| *s).sum();
        let lost: u32 = pings().map(|(_, _, l)| *l).sum();
        let peers: BTreeSet<PortIx> = t
            .window
            .iter()
            .flat_map(|s| s.peers.iter().map(|(p, _, _)| *p))
            .collect();
        // Loss with the ports of one node only is that node's (or a pair's), not this
        // port's: count the nodes of the lossy peers.
        let lossy_peers: BTreeSet<NodeIx> = pings()
            .filter(|(_, _, l)| *l > 0)
            .map(|(p, _, _)| self.owner(*p))
            .collect();
        let mut residuals: Vec<f64> = t
            .window
            .iter()
            .flat_map(|s| s.residuals.iter())
            .filter(|(p, _)| !other_tor(p))
            .map(|(_, x)| *x)
            .collect();
        let rtt_residual = if residuals.is_empty() {
            f64::NAN
        } else {
            median(&mut residuals) - against.rtt
        };
        let rtt_spread = spread_of(&mut deviations(&residuals, rtt_residual + against.rtt));
        let rtt_z = rtt_residual / r.reference.spread;
        let loss_ratio = if packets == 0 {
            0.0
        } else {
            f64::from(lost) / f64::from(packets)
        };
        let tail = loss_tail(lost, packets, against.loss.max(r.fabric_loss));
        let enough_peers = peers.len() >= cfg.min_peers;
        let loss = enough_peers
            && lossy_peers.len() >= cfg.min_peers.min(2)
            && loss_ratio >= cfg.loss_min
            && tail < cfg.loss_alpha;
        Elevation {
            loss,
            rtt: enough_peers
                && rtt_residual.is_finite()
                && rtt_residual > cfg.rtt_ratio.ln()
                && rtt_z > cfg.z,
            loss_ratio,
            tail,
            rtt_residual,
            rtt_z,
            rtt_spread,
            steady: loss || steady(rtt_spread, r.reference.spread),
            peers: peers.len(),
        }
    }

    /// Whether port `p` sits behind a switch other than `mine` that was in an event when
    /// the round began: a ping with it crossed that switch, which explains it.
    fn behind_another_event(&self, p: usize, mine: Option<u32>) -> bool {
        self.tor_explained.get(p).copied().unwrap_or(false) && self.port_tor(p) != mine
    }

    /// The node that owns a port (a port outside the table belongs to no node).
    pub(super) fn owner(&self, p: PortIx) -> NodeIx {
        self.ports
            .tracks()
            .get(p.0)
            .map_or(NodeIx(usize::MAX), |t| t.data.node)
    }
}
