//! Reading the round's elevated ports together: a large share of those outside ToR events,
//! or many nodes at once, is the fabric; most ports of one ToR is that ToR (see `tor`: its ports are then
//! judged against it); most ports of one node (or one port of a node the host
//! plane holds bad) is that node; what is left is judged port by port. A uniformly bad
//! fabric leaves no port standing out, so the fabric is also judged absolutely: loss no
//! elevated port explains, slow pings beyond the base rate, a round median far above the
//! baseline, each over the pings no ToR event explains (a slow ToR holding a third of the
//! group moves the whole round's median, and is its own event).

use std::collections::{BTreeMap, BTreeSet};

use super::score::{Elevation, RoundStats};
use super::tor::TorEvents;
use super::{DeviceEngine, DeviceInput, Localised, PortProbe, most_of};
use crate::health::fabric::{PARTIAL_MIN_PROBES, RunStep, SLOW_RATE_FLOOR, crowd};
use crate::health::lifecycle::{NodeIx, PortIx};
use crate::health::stats::median;

/// Partial fabric events in a run after which the device plane's base rate of slow pings
/// is learnt again (an hour at the shipped 20 s device round): the level they show is how
/// the fabric is now ([`crate::health::fabric::EventRun::step`]). Also the rounds in a row
/// (of those judged) a round median above its normal takes to become the normal.
pub(super) const RATE_RENEWAL_ROUNDS: usize = 180;

impl DeviceEngine {
    /// Elevates ports (two passes: a port elevated only by its pings with bad ports is
    /// cleared once those are accused in the first pass), then localises: ToRs (whose ports
    /// are elevated again against their ToR), nodes, the fabric, single ports. Sets the
    /// round's fabric loss rate in `r`.
    pub(super) fn localise(&mut self, input: &DeviceInput, r: &mut RoundStats) -> Localised {
        let n = self.ports.len();
        self.tor_of = input.tors.clone();
        debug_assert!(
            input.port_tors.is_empty() || input.port_tors.len() == n,
            "one switch per port"
        );
        self.port_tor_of = input.port_tors.clone();
        self.tor_explained = (0..n)
            .map(|i| self.port_tor(i).is_some_and(|t| self.tor_in_event(t)))
            .collect();
        let accused: Vec<bool> = (0..n)
            .map(|i| {
                self.last_elevated.get(i).copied().unwrap_or(false)
                    || !self.ports[PortIx(i)].is_clear()
            })
            .collect();
        r.fabric_loss = self.fabric_loss(&accused);
        let first: Vec<bool> = (0..n)
            .map(|i| accused[i] || self.elevation(PortIx(i), r, &accused).any())
            .collect();
        let raw: Vec<Elevation> = (0..n)
            .map(|i| self.elevation(PortIx(i), r, &first))
            .collect();
        let elevated: Vec<bool> = raw.iter().map(Elevation::any).collect();
        self.last_elevated = elevated.clone();
        // Ports of a ToR in an event are judged against their ToR.
        let absent: BTreeSet<usize> = input.absent_nodes.iter().copied().collect();
        let tors = self.tor_events((input, r), &absent, &first, &raw);
        let elevations: Vec<Elevation> = (0..n)
            .map(|i| match tors.against[i] {
                Some(a) => self.elevation_against(PortIx(i), r, &first, a),
                None => raw[i],
            })
            .collect();
        let own: Vec<bool> = elevations.iter().map(Elevation::any).collect();
        let node_bad = self.nodes_elevated(&own, &input.host_suspects);
        // A fabric event of two rounds or more holds for a window after its last round:
        // the ports' windows still carry its pings, and would otherwise accuse whoever it
        // touched most. (One round alone is often a node fault before its ports are
        // elevated.)
        let now = n > 0 && self.is_fabric(input, r, (&elevated, &own), &node_bad, &tors);
        self.fabric_run = if now { self.fabric_run + 1 } else { 0 };
        if self.fabric_run >= 2 {
            self.fabric_until = self.ports.round() + self.cfg.window as u64;
        }
        let fabric = now || self.ports.round() <= self.fabric_until;
        let base = self.slow_rate.0.unwrap_or(SLOW_RATE_FLOOR);
        let spine_verdict = if fabric {
            self.spine.judge(base.max(SLOW_RATE_FLOOR))
        } else {
            None
        };
        Localised {
            spine_verdict,
            elevations,
            elevated,
            own,
            node_bad,
            fabric,
            tor_verdicts: if fabric {
                Vec::new()
            } else {
                tors.verdicts.clone()
            },
            against: tors.against,
        }
    }

    /// Nodes most of whose ports are elevated ([`most_of`]: at least `node_share` of
    /// them, and at least two), and nodes with an elevated port whose host-plane probes
    /// are bad too (`host_suspects`).
    fn nodes_elevated(&self, elevated: &[bool], host_suspects: &[usize]) -> BTreeSet<NodeIx> {
        // Per node: (ports, elevated ports).
        let mut by_node: BTreeMap<NodeIx, (usize, usize)> = BTreeMap::new();
        for (i, t) in self.ports.tracks().iter().enumerate() {
            let e = by_node.entry(t.data.node).or_default();
            e.0 += 1;
            e.1 += usize::from(elevated[i]);
        }
        by_node
            .into_iter()
            .filter(|(node, (all, bad))| {
                // A node of one port has no node verdict, host-plane suspect or not: its
                // port is judged as a port.
                *all > 1
                    && (most_of(*bad, *all, self.cfg.node_share)
                        || (*bad > 0 && host_suspects.contains(&node.0)))
            })
            .map(|(node, _)| node)
            .collect()
    }

    /// Whether the fabric is bad rather than a port, a node or one ToR. Judged relative to
    /// itself (a large share of ports `elevated` against the fabric, or many nodes at once,
    /// a ToR's members not counted) and absolutely (loss that no port elevated on its own
    /// (`own`), node or ToR event explains, or a round median RTT far above the learned
    /// baseline), since a uniformly bad fabric leaves no port standing out. (Without
    /// topology, `own` is `elevated`.)
    fn is_fabric(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        (elevated, own): (&[bool], &[bool]),
        node_bad: &BTreeSet<NodeIx>,
        tors: &TorEvents,
    ) -> bool {
        let n = self.ports.len();
        // A large share of the ports outside ToR events elevated is the fabric, however it
        // falls on ToRs; so are ToR events of two or more switches over most of the ports
        // (too many switches at once to be switches; one switch holding most of the group
        // is still that switch), and ToR events over every port (nothing left to compare).
        // A ToR in its event is judged against itself: counting its ports here would call
        // one ToR holding a quarter of the group the fabric.
        let in_tor = (0..n).filter(|&i| tors.in_event(i)).count();
        let outside_bad = (0..n).filter(|&i| elevated[i] && !tors.in_event(i)).count();
        let switches: BTreeSet<u32> = (0..n)
            .filter(|&i| tors.in_event(i))
            .filter_map(|i| self.port_tor(i))
            .collect();
        let share = if in_tor == n || (2 * in_tor > n && switches.len() >= 2) {
            1.0
        } else {
            outside_bad as f64 / (n - in_tor) as f64
        };
        let nodes: BTreeSet<NodeIx> = self.ports.tracks().iter().map(|p| p.data.node).collect();
        let many_nodes = crowd(node_bad.len(), nodes.len(), self.cfg.tor_nodes.max(1), 0.1);
        // Loss on pings between ports that nothing else (a port, a node, a ToR) accuses.
        let owners: Vec<NodeIx> = self.ports.tracks().iter().map(|p| p.data.node).collect();
        let explained =
            |port: usize| own[port] || node_bad.contains(&owners[port]) || tors.in_event(port);
        let (sent, lost) = input
            .probes
            .iter()
            .filter(|p| p.usable(n) && !explained(p.src) && !explained(p.dst))
            .fold((0u64, 0u64), |(s, l), p| {
                (s + u64::from(p.sent), l + u64::from(p.lost()))
            });
        let unexplained_loss = sent > 0 && lost as f64 / sent as f64 >= self.cfg.loss_min;
        let partial = self.partial_fabric(input, r, &explained);
        let slow = self.fabric_slow(input, r, tors);
        share >= self.cfg.fabric_share || many_nodes || unexplained_loss || slow || partial
    }

    /// Whether more pings between ports nothing accuses are slow than the learned base
    /// rate explains (see [`crate::health::fabric`]): a share of the paths is slow at once
    /// (a partial dip, a spine), which moves no port's median and no round median. Learns
    /// the base rate from rounds that are not, and tallies the pings' places while such an
    /// event is on (see `spine`).
    fn partial_fabric(
        &mut self,
        input: &DeviceInput,
        r: &RoundStats,
        explained: &dyn Fn(usize) -> bool,
    ) -> bool {
        let n = self.ports.len();
        let pings: Vec<&PortProbe> = input
            .probes
            .iter()
            .filter(|p| p.usable(n) && !explained(p.src) && !explained(p.dst))
            .collect();
        let slow: Vec<bool> = pings.iter().map(|p| self.slow_ping(p, r)).collect();
        let count = slow.iter().filter(|s| **s).count();
        // The rate warms up over the first rounds with enough pings, as on the host plane
        // (`RateLearning`: against the floor, pings slow on their own more often than that
        // were an event from the first round, for good), and a run of event rounds that
        // lasts an hour renews it (`EventRun`).
        let round = (count, pings.len());
        let partial = if self
            .rate_learning
            .warming(&mut self.slow_rate, round, false)
        {
            false
        } else {
            let enough = pings.len() >= PARTIAL_MIN_PROBES;
            let partial = enough && self.slow_rate.exceeded(count, pings.len());
            let run = &mut self.event_run;
            let step = run.step(&mut self.slow_rate, partial, round, RATE_RENEWAL_ROUNDS);
            // A skipped round of a run of events shows the run's level: it does not teach
            // the rate.
            if enough && !partial && step != RunStep::Skipped {
                self.slow_rate.learn(count, pings.len());
            }
            self.rate_renewed = step == RunStep::Renewed;
            partial
        };
        // Where the event's pings ran, for its shape (whether it is a spine's).
        let switches: Vec<Option<u32>> = (0..n).map(|i| self.port_tor(i)).collect();
        self.spine.round(partial, &switches);
        if self.spine.on() {
            for (p, &s) in pings.iter().zip(&slow) {
                let places = (self.port_tor(p.src), self.port_tor(p.dst));
                self.spine.measure(places, s);
            }
        }
        partial
    }

    /// A ping slower than the round median by `rtt_ratio`, with a robust z above `z`.
    pub(super) fn slow_ping(&self, p: &PortProbe, r: &RoundStats) -> bool {
        p.rtt.is_some_and(|x| {
            let d = r.reference.residual(x);
            x > 0.0 && d > self.cfg.rtt_ratio.ln() && d / r.reference.spread > self.cfg.z
        })
    }

    /// Whether the round's median RTT is far above the learned baseline; learns the
    /// baseline from rounds that are not. The median is over the pings no ToR event
    /// explains (both ends outside them): a slow ToR holding a third of the group moves
    /// the whole round's median beyond the threshold, and is its own event, not the
    /// fabric's. With too few such pings (the ToRs in events hold nearly every port) the
    /// round is not judged this way. Such a round still moves the baseline, as any round
    /// that is not fabric-slow does: its pings (often within one ToR) may be a little
    /// faster than a whole round's, which lowers the baseline for a while, we expect by less
    /// than the threshold (unconfirmed on hardware), and the baseline follows the fabric's
    /// drift through a long event (held out, not learning in such rounds cost 7 correct
    /// cordons).
    fn fabric_slow(&mut self, input: &DeviceInput, r: &RoundStats, tors: &TorEvents) -> bool {
        let n = self.ports.len();
        let m = if (0..n).any(|i| tors.in_event(i)) {
            let mut logs: Vec<f64> = input
                .probes
                .iter()
                .filter(|p| p.usable(n) && !tors.in_event(p.src) && !tors.in_event(p.dst))
                .filter_map(|p| p.rtt.filter(|x| x.is_finite() && *x > 0.0))
                .map(f64::ln)
                .collect();
            if logs.len() < PARTIAL_MIN_PROBES {
                return false;
            }
            median(&mut logs)
        } else {
            r.reference.median_log
        };
        if !m.is_finite() || m == 0.0 {
            return false;
        }
        let judged = self
            .baseline
            .judge_at(m, self.cfg.rtt_ratio.ln(), RATE_RENEWAL_ROUNDS, 0.05);
        self.median_renewed = judged.renewed;
        judged.slow
    }
}
