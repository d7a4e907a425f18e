//! Scoring a round: the reference every probe is judged against (the round's median and
//! spread), the fabric judgement (the median against the baseline, slow probes against
//! the base rate), each node's windows of residuals, and the re-pairings of the nodes that
//! asked for them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{HealthEngine, RoundInput};
use crate::health::evidence::steady;
use crate::health::evidence::{Evidence, Key};
use crate::health::fabric::{CROWD_MIN, CROWD_SHARE, Partial, crowd};
use crate::health::lifecycle::NodeIx;
use crate::health::stats::{Reference, deviations, median, spread_of};
use crate::snapshot::probe::NodeState;

/// What one round's probes say as a whole.
pub(super) struct RoundStats {
    /// Median log duration of the round's permutation probes, and the robust spread of
    /// their logs (floored at `mad_floor`).
    pub reference: Reference,
    /// The fabric verdict.
    pub fabric: bool,
    /// Probes slow on their own beyond the base rate: this round (a share of the links or
    /// a spine; re-pairings may cross it too), or this and the last few together (link
    /// decisions wait).
    pub partial: Partial,
    /// Many nodes are elevated at once (set by `step`).
    pub crowded: bool,
    /// Permutation probes above the exit threshold touching each node this round.
    pub slow_count: Vec<u32>,
    /// ln(1 + delta): the entry threshold.
    pub entry: f64,
    /// ln(1 + delta/2): the exit threshold.
    pub exit: f64,
}

impl RoundStats {
    /// A duration's log residual against the round.
    pub fn residual(&self, seconds: f64) -> f64 {
        self.reference.residual(seconds)
    }

    /// The round's robust spread.
    pub fn spread(&self) -> f64 {
        self.reference.spread
    }
}

/// A node's window this round.
pub(super) struct Window {
    /// Median log residual of its slower side.
    pub score: f64,
    /// Median robust z of that side.
    pub zmed: f64,
    /// Robust spread (1.4826 × MAD) of that side's residuals.
    pub spread: f64,
    /// Above the entry threshold (or probation's) with a full window.
    pub elevated: bool,
    /// Above it by effect size alone (no z): what a crowd is counted by, since many
    /// slow nodes inflate the round's spread and so hide each other's z.
    pub large: bool,
}

impl Window {
    /// The window's numbers as evidence.
    pub fn evidence(&self) -> Evidence {
        Evidence::of([
            (Key::WindowMedianLogResidual, self.score),
            (Key::WindowMedianZ, self.zmed),
            (Key::WindowLogResidualSpread, self.spread),
        ])
    }
}

/// Probes slow on their own this round.
struct Tally {
    /// Of the probes between two clear nodes, those above the entry threshold.
    slow: usize,
    /// Probes between two clear nodes.
    judged: usize,
    /// Per node: probes above the exit threshold whose other end is clear.
    slow_count: Vec<u32>,
}

/// One side's window: median residual, median z, deviations around the median, full.
type Side = (f64, f64, Vec<f64>, bool);

impl HealthEngine {
    /// Scores the round's probes against its median, updates the fabric baseline and each
    /// node's windows.
    pub(super) fn score_round(&mut self, input: &RoundInput) -> RoundStats {
        // Peer-relative scoring against this round's median.
        let logs: Vec<f64> = input
            .probes
            .iter()
            .filter(|p| p.valid())
            .map(|p| p.seconds.ln())
            .collect();
        let reference = Reference::of(&logs, self.cfg.mad_floor);
        // Fabric: the round median against a slowly learned baseline.
        let fabric_slow = !logs.is_empty()
            && self
                .baseline
                .judge(reference.median_log, self.cfg.fabric_ratio.ln(), 0.02);
        let entry = (1.0 + self.cfg.delta).ln();
        let exit = (1.0 + self.cfg.delta / 2.0).ln();
        let tally = self.tally(input, &reference, entry, exit);
        // Partial fabric: more probes slow on their own than the learned base rate
        // explains (a share of the links, a spine), which moves no median.
        let partial = self.partial.judge(tally.slow, tally.judged, fabric_slow);
        self.fabric_hist.push_back(fabric_slow || partial.now);
        while self.fabric_hist.len() > self.cfg.window {
            self.fabric_hist.pop_front();
        }
        let fabric = self.fabric_hist.iter().filter(|x| **x).count() >= self.cfg.fabric_rounds;
        self.record(input, &reference);
        RoundStats {
            reference,
            fabric,
            partial,
            crowded: false,
            slow_count: tally.slow_count,
            entry,
            exit,
        }
    }

    /// Counts the probes slow on their own. By effect size alone: when many probes are
    /// slow, they inflate the round's spread and would hide behind a z threshold.
    fn tally(&self, input: &RoundInput, r: &Reference, entry: f64, exit: f64) -> Tally {
        let n = self.nodes.len();
        let clean = |x: usize| self.nodes[NodeIx(x)].is_clear();
        let mut t = Tally {
            slow: 0,
            judged: 0,
            slow_count: vec![0u32; n],
        };
        for p in input.probes.iter().filter(|p| p.within(n)) {
            let d = r.residual(p.seconds);
            // Probes touching a node already accused are that node's doing: they neither
            // count towards a partial fabric event nor make the other end look busy.
            if clean(p.src) && clean(p.dst) {
                t.judged += 1;
                t.slow += usize::from(d > entry);
            }
            // Probes above the exit threshold touching each node (their other end not
            // accused): a node with any is not clearly fine this round.
            if d > exit {
                t.slow_count[p.src] += u32::from(clean(p.dst));
                t.slow_count[p.dst] += u32::from(clean(p.src));
            }
        }
        t
    }

    /// Adds each probe's (residual, z) to its sender's row and its receiver's column.
    fn record(&mut self, input: &RoundInput, r: &Reference) {
        let n = self.nodes.len();
        for p in input.probes.iter().filter(|p| p.within(n)) {
            let d = r.residual(p.seconds);
            let z = d / r.spread;
            self.nodes[NodeIx(p.src)].data.out_hist.push_back((d, z));
            self.nodes[NodeIx(p.dst)].data.in_hist.push_back((d, z));
        }
        let w = self.cfg.window;
        for track in self.nodes.tracks_mut() {
            for h in [&mut track.data.out_hist, &mut track.data.in_hist] {
                while h.len() > w {
                    h.pop_front();
                }
            }
        }
    }

    /// Each pending node's re-pairings this round (the log residual of each against the
    /// round median), one per distinct peer (a peer counted twice would be one reporter
    /// speaking twice).
    pub(super) fn confirmations(
        &self,
        input: &RoundInput,
        r: &RoundStats,
    ) -> BTreeMap<usize, Vec<f64>> {
        let n = self.nodes.len();
        let mut seen: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut confirm: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for p in &input.confirmations {
            if p.within(n) && p.src != p.dst {
                let d = r.residual(p.seconds);
                for (node, peer) in [(p.src, p.dst), (p.dst, p.src)] {
                    if self.nodes[NodeIx(node)].data.confirm_pending && seen.insert((node, peer)) {
                        confirm.entry(node).or_default().push(d);
                    }
                }
            }
        }
        confirm
    }

    /// A node's window: score, robust z, spread, and whether it is elevated (a full
    /// window above the entry threshold, or probation's). A node is as slow as its slower
    /// side: its row (sending) or its column (receiving) of the matrix.
    pub(super) fn window(&self, i: NodeIx, r: &RoundStats) -> Window {
        let track = &self.nodes[i];
        let out = self.side(&track.data.out_hist);
        let inn = self.side(&track.data.in_hist);
        // Both sides slow: their scatter is judged together (each around its own
        // median), twice the samples for the steadiness test.
        let both = out.0 > r.entry && inn.0 > r.entry;
        let (score, zmed, mut dev, full) = if out.0 >= inn.0 {
            out.clone()
        } else {
            inn.clone()
        };
        if both {
            dev = out.2.iter().chain(&inn.2).copied().collect();
        }
        let spread = spread_of(&mut dev);
        let threshold = if track.state == NodeState::Probation {
            (1.0 + self.cfg.delta / 2.0).ln()
        } else {
            r.entry
        };
        Window {
            score,
            zmed,
            spread,
            elevated: full && score > threshold && zmed > self.cfg.z,
            large: full && score > threshold,
        }
    }

    /// One side of a node's window.
    fn side(&self, h: &VecDeque<(f64, f64)>) -> Side {
        let mut ds: Vec<f64> = h.iter().map(|x| x.0).collect();
        let mut zs: Vec<f64> = h.iter().map(|x| x.1).collect();
        let m = median(&mut ds);
        let dev = deviations(&ds, m);
        (m, median(&mut zs), dev, h.len() >= self.cfg.window)
    }

    /// Whether many nodes are steadily slow at once (at least [`CROWD_MIN`] and
    /// [`CROWD_SHARE`] of the group, not counting nodes already recommended for
    /// quarantine): a ToR, a spine or the fabric, not that many independent stragglers.
    /// Counted by effect size and steadiness, not z (many slow nodes inflate the round's
    /// spread and hide each other's z); scattered slowness (congestion) is left out, as
    /// it never reaches a quarantine anyway.
    pub(super) fn crowded(
        &self,
        windows: &[Window],
        r: &RoundStats,
        judged: &dyn Fn(&usize) -> bool,
    ) -> bool {
        let n = self.nodes.len();
        let count = (0..n)
            .filter(|i| judged(i))
            .filter(|&i| self.nodes[NodeIx(i)].state != NodeState::QuarantineRecommended)
            .filter(|&i| windows[i].large && steady(windows[i].spread, r.spread()))
            .count();
        crowd(count, n, CROWD_MIN, CROWD_SHARE)
    }
}
