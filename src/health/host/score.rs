//! Scoring a round: the reference every probe is judged against (the round's median and
//! spread), the fabric judgement (the median against the baseline, slow probes against
//! the base rate), each node's windows of residuals, and the re-pairings of the nodes that
//! asked for them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{HealthEngine, RoundInput};
use crate::health::evidence::{Evidence, Key};
use crate::health::evidence::{moves_as_one, steady};
use crate::health::fabric::{CROWD_MIN, CROWD_SHARE, Partial, crowd};
use crate::health::lifecycle::NodeIx;
use crate::health::stats::{Reference, deviations, median, spread_of};
use crate::health::tor::{TorJudgement, TorLevels, TorRule, TorVerdict, Touch, lower_median};
use crate::snapshot::probe::NodeState;

use super::Probe;

/// What one round's probes say as a whole.
pub(super) struct RoundStats {
    /// Median log duration of the round's permutation probes, and the robust spread of
    /// their logs (floored at `mad_floor`).
    pub reference: Reference,
    /// The fabric verdict (the round median against the baseline, or partial events).
    pub fabric: bool,
    /// Partial events in `fabric_rounds` of the window: what freezes per-node escalation
    /// (re-pairings may cross the slow share of the links). A round median above the
    /// baseline alone does not: every residual is relative to the round.
    pub partial_fabric: bool,
    /// The round median's lasting change became the new normal this round.
    pub new_normal: bool,
    /// Each ToR's level this round (taken out of the residuals of the probes touching it).
    pub tors: TorLevels,
    /// The ToR verdicts and new normals.
    pub tor_judgement: TorJudgement,
    /// Probes slow on their own beyond the base rate: this round (a share of the links or
    /// a spine; re-pairings may cross it too), or this and the last few together (link
    /// decisions wait).
    pub partial: Partial,
    /// Per node: many nodes that share its condition (its ToR, or the group when its ToR
    /// is unknown) are elevated at once, or every member of its ToR is (set by `step`).
    pub crowded: Vec<bool>,
    /// Permutation probes above the exit threshold touching each node this round.
    pub slow_count: Vec<u32>,
    /// Per node, what it adds of its own to its probes: a suspect's window score, zero
    /// for a clear node, `None` for a node accused further (its probes are its doing).
    pub own: Vec<Option<f64>>,
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

    /// A probe's log residual against the round, less its ToRs' levels: what is the
    /// probe's own (see [`TorLevels`]).
    pub fn adjusted(&self, p: &Probe) -> f64 {
        self.residual(p.seconds) - self.tors.of_probe(p.src, p.dst)
    }

    /// Whether node `i` is in a crowd.
    pub fn crowded(&self, i: usize) -> bool {
        self.crowded.get(i).copied().unwrap_or(false)
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
    /// Slow (`large`), and its sending and receiving probes agreed round by round over
    /// the window ([`crate::health::evidence::moves_as_one`]): a slowness that varies
    /// between rounds but not between the probes of one round is a component's, not
    /// queueing's. Only a slow window's count reads it, so a clear one is not measured.
    pub agrees: bool,
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
    /// Per node: what it adds of its own (see [`RoundStats::own`]).
    own: Vec<Option<f64>>,
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
        let entry = (1.0 + self.cfg.delta).ln();
        let exit = (1.0 + self.cfg.delta / 2.0).ln();
        let n = self.nodes.len();
        // Last round's ToR levels, on this round's topology: the round's own are measured
        // from the windows, once this round's probes are in them (`step`).
        let tors = TorLevels::carried(self.topology(input), n, &self.tor_shift);
        // The reference is taken over the logs less their ToRs' levels: a slow ToR touches
        // nearly half of a round's probes (a quarter of the group's nodes), so the plain
        // median would jump between its probes and the others' with the stride, and their
        // spread would be that of two populations, hiding a straggler's z.
        let adjusted: Vec<f64> = if tors.shifts() {
            input
                .probes
                .iter()
                .filter(|p| p.within(n))
                .map(|p| p.seconds.ln() - tors.of_probe(p.src, p.dst))
                .collect()
        } else {
            logs.clone()
        };
        let reference = Reference::of(&adjusted, self.cfg.mad_floor);
        // Fabric: the round median against a slowly learned baseline; a step that lasts
        // `new_normal_rounds` is the new normal.
        let judged = if logs.is_empty() {
            Default::default()
        } else {
            self.baseline.judge(
                reference.median_log,
                self.cfg.fabric_ratio.ln(),
                self.cfg.new_normal_rounds,
            )
        };
        let fabric_slow = judged.slow;
        let mut r = RoundStats {
            reference,
            fabric: false,
            partial_fabric: false,
            new_normal: judged.renewed,
            tors,
            tor_judgement: TorJudgement::default(),
            partial: Partial::default(),
            crowded: Vec::new(),
            slow_count: Vec::new(),
            own: Vec::new(),
            entry,
            exit,
        };
        let tally = self.tally(input, &r);
        // Partial fabric: more probes slow on their own than the learned base rate
        // explains (a share of the links, a spine), which moves no median.
        r.partial = self.partial.judge(tally.slow, tally.judged, fabric_slow);
        r.slow_count = tally.slow_count;
        r.own = tally.own;
        let w = self.cfg.window;
        for (h, now) in [
            (&mut self.fabric_hist, fabric_slow || r.partial.now),
            (&mut self.partial_hist, r.partial.now),
        ] {
            h.push_back(now);
            while h.len() > w {
                h.pop_front();
            }
        }
        let count = |h: &VecDeque<bool>| h.iter().filter(|x| **x).count();
        r.fabric = count(&self.fabric_hist) >= self.cfg.fabric_rounds;
        r.partial_fabric = count(&self.partial_hist) >= self.cfg.fabric_rounds;
        self.record(input, &r);
        r
    }

    /// Fits this round's ToR levels from its probes between judged nodes that are not
    /// recommended for quarantine (residuals against the group's learned normal, before
    /// any ToR level is taken out), then smooths and judges them.
    pub(super) fn judge_tors(
        &mut self,
        input: &RoundInput,
        r: &RoundStats,
        judged: &dyn Fn(&usize) -> bool,
    ) -> (TorLevels, TorJudgement) {
        let n = self.nodes.len();
        if input.tors.is_empty() {
            return (TorLevels::default(), TorJudgement::default());
        }
        let anchor = self.baseline.level().unwrap_or(r.reference.median_log);
        let counted = |i: usize| self.tor_counts(i, judged);
        let probes: Vec<Touch> = input
            .probes
            .iter()
            .filter(|p| p.valid() && p.within(n))
            .map(|p| Touch {
                a: p.src,
                b: p.dst,
                r: p.seconds.ln() - anchor,
            })
            .collect();
        // Read once, so that the closure's borrow of `self` ends before the ToRs' fit.
        let counted: Vec<bool> = (0..n).map(counted).collect();
        // The verdicts' own-probes test is against the zero the fit also takes (the ToRs'
        // own probes' lower median, read again inside `TorWatch::fit`: a few medians).
        let zero = self.tors.zero();
        let fitted = self.tors.fit(&input.tors, n, |i| counted[i], &probes);
        let rule = self.tor_rule();
        self.tors.judge(&fitted, &input.tors, n, rule, r.exit, zero)
    }

    /// Whether node `i` counts as a member of its ToR for the ToR verdicts: judged this
    /// round and not recommended for quarantine (a recommended straggler would lend its
    /// own slowness to its ToR).
    pub(super) fn tor_counts(&self, i: usize, judged: &dyn Fn(&usize) -> bool) -> bool {
        judged(&i) && self.nodes[NodeIx(i)].state != NodeState::QuarantineRecommended
    }

    /// The ToR verdict's rule: the group's fabric settings, per ToR.
    pub(super) fn tor_rule(&self) -> TorRule {
        TorRule {
            threshold: self.cfg.fabric_ratio.ln(),
            window: self.cfg.window,
            rounds: self.cfg.fabric_rounds,
            horizon: self.cfg.new_normal_rounds,
        }
    }

    /// Counts the probes slow on their own. By effect size alone: when many probes are
    /// slow, they inflate the round's spread and would hide behind a z threshold.
    ///
    /// A probe touching a suspect is counted less the suspect's own score (its window, as
    /// it stood before this round): a straggler's probes are then about normal, while a
    /// probe that crosses a dip stays slow. Leaving suspects out instead (as probes
    /// touching a confirmed node are) hid lasting dips: a dip makes suspects of the nodes
    /// whose recent peers it slowed most, and the probes left were those it spared, so
    /// the dip looked over while it went on, and taught the base rate.
    fn tally(&self, input: &RoundInput, r: &RoundStats) -> Tally {
        let (entry, exit) = (r.entry, r.exit);
        let n = self.nodes.len();
        let clean = |x: usize| self.nodes[NodeIx(x)].is_clear();
        // What each end adds of its own: a suspect's score, nothing for a clear node;
        // `None` for a node accused further (its probes are its doing).
        let own: Vec<Option<f64>> = (0..n)
            .map(|x| match self.nodes[NodeIx(x)].state {
                NodeState::Healthy | NodeState::Probation => Some(0.0),
                NodeState::Suspect => {
                    let data = &self.nodes[NodeIx(x)].data;
                    let score = self.side(&data.out_hist).0.max(self.side(&data.in_hist).0);
                    Some(if score.is_finite() {
                        score.max(0.0)
                    } else {
                        0.0
                    })
                }
                _ => None,
            })
            .collect();
        let mut t = Tally {
            slow: 0,
            judged: 0,
            slow_count: vec![0u32; n],
            own: Vec::new(),
        };
        for p in input.probes.iter().filter(|p| p.within(n)) {
            let d = r.adjusted(p);
            // Probes touching a node already accused are that node's doing: they neither
            // count towards a partial fabric event nor make the other end look busy.
            // Probes of pairs a lasting dip made the normal are not judged either: the
            // dip is how the network is now, and a new event is judged against the rest.
            if let (Some(a), Some(b), false) =
                (own[p.src], own[p.dst], self.dip.normal(p.src, p.dst))
            {
                t.judged += 1;
                t.slow += usize::from(d - a - b > entry);
            }
            // Probes above the exit threshold touching each node (their other end not
            // accused): a node with any is not clearly fine this round. A pair a lasting
            // dip made the normal is slow by the dip's share as a matter of course.
            if d - self.dip.excess(p.src, p.dst) > exit {
                t.slow_count[p.src] += u32::from(clean(p.dst));
                t.slow_count[p.dst] += u32::from(clean(p.src));
            }
        }
        t.own = own;
        t
    }

    /// Adds each probe's (residual, z) to its sender's row and its receiver's column.
    fn record(&mut self, input: &RoundInput, r: &RoundStats) {
        let n = self.nodes.len();
        // Each residual less the levels of the ToRs the probe crossed (last round's, when
        // the engine judges by ToR): a node's window then holds what is its own, also when
        // most of its probes go to a slow ToR it is not behind. A pair a lasting dip made
        // the normal is judged against that normal: less the dip's own share of it.
        for p in input.probes.iter().filter(|p| p.within(n)) {
            let d = r.adjusted(p) - self.dip.excess(p.src, p.dst);
            let z = d / r.spread();
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
    /// speaking twice), with the peer.
    pub(super) fn confirmations(
        &self,
        input: &RoundInput,
        r: &RoundStats,
    ) -> BTreeMap<usize, Vec<(usize, f64)>> {
        let n = self.nodes.len();
        let mut seen: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut confirm: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
        for p in &input.confirmations {
            if p.within(n) && p.src != p.dst {
                let d = r.adjusted(p);
                for (node, peer) in [(p.src, p.dst), (p.dst, p.src)] {
                    if self.nodes[NodeIx(node)].data.confirm_pending && seen.insert((node, peer)) {
                        confirm.entry(node).or_default().push((peer, d));
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
        // The gap between what it sent and what it received, paired by position, newest
        // first: the permutation plan gives each node one probe each way a round, so the
        // k-th newest of each is the same round's. A lost probe shifts the older pairs
        // until the window has turned; the median takes a few such gaps in its stride.
        // Both histories are in the wire form, so a restored engine decides the same.
        let large = full && score > threshold;
        let agrees = large && {
            let mut gaps: Vec<f64> = (track.data.out_hist.iter().rev())
                .zip(track.data.in_hist.iter().rev())
                .map(|(o, i)| (o.0 - i.0).abs())
                .collect();
            moves_as_one(&mut gaps, self.cfg.window.div_ceil(2), r.spread())
        };
        Window {
            score,
            zmed,
            spread,
            elevated: large && zmed > self.cfg.z,
            large,
            agrees,
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

    /// Per node, whether many nodes that share its condition are steadily slow at once
    /// (at least [`CROWD_MIN`] and [`CROWD_SHARE`] of them, not counting nodes already
    /// recommended for quarantine): a shared cause, not that many independent stragglers.
    /// Counted by effect size and steadiness, not z (many slow nodes inflate the round's
    /// spread and hide each other's z); scattered slowness (congestion) is left out, as it
    /// never reaches a quarantine anyway. Also returns the crowd's members.
    ///
    /// A crowd is localised. When the engine judges by ToR, the condition is each node's
    /// ToR (a crowd of its members blocks them, not the group). Otherwise the group's slow
    /// nodes are counted together; when the topology puts them all behind one ToR the
    /// crowd is that ToR's event and blocks that ToR's members only (the rest of the group
    /// goes on being judged). A crowd over several ToRs, or with a place unknown, blocks
    /// the group: a ToR's uplinks slow every probe to its members, so its event makes
    /// victims behind the other ToRs too, and they must not be escalated for it. The
    /// crowd's members are named either way.
    ///
    /// Before either, a ToR all of whose members in the group are slow at once is that
    /// ToR's event, however small ([`whole_slow_tors`]): its members are crowded, and they
    /// are left out of the count above, so that a few slow ToRs do not make a crowd of the
    /// whole group and freeze a straggler behind another ToR. The last value says whether
    /// there is a crowd besides such ToRs' events (what makes a fabric verdict).
    ///
    /// A crowd's member far slower than its typical member ([`stand_out`]) whose own
    /// hardware corroborates its episode (evidence congestion cannot give) is judged on its
    /// own and not named: standing out alone is also what the most congested node of a
    /// crowd that uplink congestion formed looks like.
    pub(super) fn crowded(
        &self,
        windows: &[Window],
        r: &RoundStats,
        places: &[Option<u32>],
        judged: &dyn Fn(&usize) -> bool,
    ) -> Crowds {
        let n = self.nodes.len();
        // A ToR all of whose members are slow is its own event first: its members are
        // localised to it, and do not count towards a crowd of the group.
        // A ToR whose members are slow only with the outside is its uplinks' event: its
        // members are held too (and do not count towards a crowd of the group), but for
        // those that stand out of it. Kept apart from `whole`, which also makes a small
        // ToR's verdict: the uplinks are no ToR verdict. Both from the round's ToR event
        // levels, which the re-pairings of those that stand out are judged beyond.
        let tor_level = tor_event_levels(
            windows,
            places,
            &|i| judged(&i),
            (&r.tor_judgement.uplinks, r.tors.shift()),
        );
        let held =
            |i: usize, level: Option<f64>| level.is_some_and(|l| windows[i].score <= l + r.entry);
        let whole: BTreeSet<usize> = (0..n).filter(|&i| held(i, tor_level[i].whole)).collect();
        let behind: BTreeSet<usize> = (0..n).filter(|&i| held(i, tor_level[i].uplinks)).collect();
        let slow = |i: usize| {
            judged(&i)
                && self.nodes[NodeIx(i)].state != NodeState::QuarantineRecommended
                && windows[i].large
                && steady(windows[i].spread, r.spread())
                && !whole.contains(&i)
                && !behind.contains(&i)
        };
        let members: Vec<usize> = (0..n).filter(|&i| slow(i)).collect();
        let group = crowd(members.len(), n, CROWD_MIN, CROWD_SHARE);
        let by_tor = (0..n).any(|i| r.tors.tor(i).is_some());
        let (mut crowded, mut named) = if by_tor {
            self.crowded_by_tor(r, &slow, group, members)
        } else if !group {
            (vec![false; n], Vec::new())
        } else {
            // All of them behind one known ToR: that ToR's event.
            let place = |i: usize| places.get(i).copied().flatten();
            let one = place(members[0]).filter(|t| members.iter().all(|&i| place(i) == Some(*t)));
            let crowded = match one {
                Some(t) => (0..n).map(|i| place(i) == Some(t)).collect(),
                None => vec![true; n],
            };
            (crowded, members)
        };
        // A crowd of the group (or of one ToR, counted as above) is a fabric verdict; a
        // whole ToR's event alone is not: that verdict holds back straggler alerts across
        // the cluster, and a slow ToR of two must not silence them.
        let crowd = crowded.iter().any(|c| *c);
        let condition = |i: usize| if by_tor { r.tors.tor(i) } else { None };
        for i in stand_out(windows, &named, &condition, r.entry) {
            // Only on evidence congestion cannot give: held out, letting every outlier
            // stand out made false cordons of the most congested node of a crowd that
            // uplink congestion its counters missed had formed (40 -> 66, 86 -> 115).
            // The signs are the episode's up to the last round (this round's are added
            // when the node advances): one round later at most.
            if !self.nodes[NodeIx(i)].data.corroborated() {
                continue;
            }
            crowded[i] = false;
            named.retain(|&m| m != i);
        }
        for &i in whole.iter().chain(&behind) {
            crowded[i] = true;
        }
        // Named (the state API's `crowd`) are the members slow together: those behind slow
        // uplinks only when their own window is slow.
        named.extend(whole.iter().copied());
        named.extend(behind.iter().copied().filter(|&i| windows[i].large));
        named.sort_unstable();
        named.dedup();
        Crowds {
            crowded,
            named,
            fabric: crowd,
            whole,
            tor_level,
        }
    }

    /// [`HealthEngine::crowded`] when judging by ToR: the condition is the node's ToR, or
    /// the group for the nodes whose ToR is unknown.
    fn crowded_by_tor(
        &self,
        r: &RoundStats,
        slow: &dyn Fn(usize) -> bool,
        group: bool,
        members: Vec<usize>,
    ) -> (Vec<bool>, Vec<usize>) {
        let n = self.nodes.len();
        // Members and slow members per condition: a ToR, or `None` for the group's nodes
        // whose ToR is unknown (judged against the whole group, as without topology).
        let mut count: BTreeMap<Option<u32>, (usize, usize)> = BTreeMap::new();
        for i in 0..n {
            let e = count.entry(r.tors.tor(i)).or_default();
            e.0 += 1;
            e.1 += usize::from(slow(i));
        }
        let crowded: Vec<bool> = (0..n)
            .map(|i| match r.tors.tor(i) {
                None => group,
                Some(t) => {
                    let (m, s) = count[&Some(t)];
                    crowd(s, m, CROWD_MIN, CROWD_SHARE)
                }
            })
            .collect();
        let named = members.into_iter().filter(|&i| crowded[i]).collect();
        (crowded, named)
    }
}

/// The crowd's members that stand out of it: slower than its typical member by more than
/// the entry threshold (`entry`, log units). Each member's crowd is the one of its
/// `condition`: its ToR when the engine judges by ToR, otherwise (or when its ToR is
/// unknown) the group's, whose typical member is taken over every member.
/// [`HealthEngine::crowded`] lets those whose own hardware corroborates their episode out
/// of the crowd: they are escalated as any node is (re-paired with known-good peers), so
/// a 30 % straggler among nodes a shared cause slowed by 5 to 10 % is still a straggler,
/// and the crowd does not freeze it for as long as the cause lasts. The crowd stays a crowd
/// (its fabric verdict and the block on its other members).
///
/// The typical member is the upper median of the members' scores (the slower middle one of
/// an even count), so fewer than half of a crowd ever stand out: a cause that slows its
/// nodes unevenly does not release the majority it slowed most, and one member it spared a
/// little does not expose the rest.
fn stand_out(
    windows: &[Window],
    members: &[usize],
    condition: &dyn Fn(usize) -> Option<u32>,
    entry: f64,
) -> Vec<usize> {
    let upper_median = |c: Option<u32>| {
        let mut scores: Vec<f64> = members
            .iter()
            .filter(|&&m| c.is_none() || condition(m) == c)
            .map(|&m| windows[m].score)
            .collect();
        scores.sort_by(f64::total_cmp);
        scores[scores.len() / 2]
    };
    // Each condition's typical member once (every condition here has a member).
    let typical: BTreeMap<Option<u32>, f64> = members
        .iter()
        .map(|&m| condition(m))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|c| (c, upper_median(c)))
        .collect();
    members
        .iter()
        .copied()
        .filter(|&i| windows[i].score > typical[&condition(i)] + entry)
        .collect()
}

/// What [`HealthEngine::crowded`] found this round.
pub(super) struct Crowds {
    /// Per node: held as a crowd's member (a crowd sharing its condition, or its whole ToR
    /// slow at once).
    pub crowded: Vec<bool>,
    /// The nodes named in the round's `crowd`.
    pub named: Vec<usize>,
    /// A crowd besides whole ToRs' events: a fabric verdict.
    pub fabric: bool,
    /// The members of ToRs every judged member of which is slow at once
    /// ([`whole_slow_tors`]), less the stragglers inside them.
    pub whole: BTreeSet<usize>,
    /// Per node, the levels of the ToR event it is in ([`tor_event_levels`]).
    pub tor_level: Vec<TorEventLevel>,
}

/// The ToRs not fitted this round (not in `fitted`, the ToRs the fit judged) with at least
/// two members the group `counted`s (as the fit counts them) and at most half of all it
/// counts (a ToR holding most of the group moves the round's median with it, and one
/// holding all of it is the group, whose slowdown is the fabric verdict's): each
/// one's verdict-to-be (the lower median of its members' window `scores`, relative to the
/// round as they were judged), its members, and whether this round is its event: every
/// member in `whole` (slow at once, none a straggler inside the ToR) and none `congested`
/// by its own counters. An event that lasts
/// ([`crate::health::tor::TorWatch::judge_small`]) is a ToR verdict. Without it a slow ToR
/// of two was held as a crowd but never named: held out, most slow ToRs that were not
/// localised were ToRs of two.
///
/// Stricter than what holds the members (any of them in `whole`): held out, most ToRs of
/// two named when nothing slowed the switch had two causes at once, a straggler and a
/// congested uplink, or two congested uplinks, one of them seen by its counters.
pub(super) fn small_tors(
    places: &[Option<u32>],
    counted: &dyn Fn(usize) -> bool,
    congested: &dyn Fn(usize) -> bool,
    scores: &[f64],
    whole: &BTreeSet<usize>,
    fitted: &[u32],
) -> Vec<(TorVerdict, Vec<usize>, bool)> {
    let mut by_tor: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut all = 0;
    for (i, t) in places.iter().enumerate().take(scores.len()) {
        all += usize::from(counted(i));
        if let Some(t) = t
            && counted(i)
            && !fitted.contains(t)
        {
            by_tor.entry(*t).or_default().push(i);
        }
    }
    by_tor
        .into_iter()
        .filter(|(_, m)| m.len() >= 2 && 2 * m.len() <= all)
        .map(|(t, m)| {
            let verdict = TorVerdict {
                tor: t,
                excess: lower_median(m.iter().map(|&i| &scores[i])),
                members: m.len(),
            };
            let event = m.iter().all(|i| whole.contains(i) && !congested(*i));
            (verdict, m, event)
        })
        .collect()
}

/// The members held with their whole ToR's event ([`whole_slow_tors`]): those within the
/// entry threshold (`entry`, log units) of its typical member, as
/// [`HealthEngine::crowded`] reads them from [`tor_event_levels`].
#[cfg(test)]
pub(super) fn whole_tor_slow(
    windows: &[Window],
    places: &[Option<u32>],
    counted: &dyn Fn(usize) -> bool,
    entry: f64,
) -> BTreeSet<usize> {
    let levels = tor_event_levels(windows, places, counted, (&[], &BTreeMap::new()));
    (0..windows.len())
        .filter(|&i| {
            levels[i]
                .whole
                .is_some_and(|t| windows[i].score <= t + entry)
        })
        .collect()
}

/// The ToRs every one of whose members the group judges (`counted`, at least two
/// of them) is slow at once (each window's score above its threshold, the entry threshold
/// or probation's: [`Window::large`]): the ToR's event, not that many stragglers. It
/// covers the ToRs too small for a crowd ([`CROWD_MIN`]) or a fitted level
/// ([`crate::health::TOR_MIN_MEMBERS`]): held out, the two members of a slow ToR of two
/// were cordoned together once their slowdown outlasted the persistence horizon.
///
/// A member slower than its ToR's typical member (the lower median of their scores: the
/// less slow one of two) by more than the entry threshold is judged on
/// its own: a straggler inside the slow ToR, measured against the peers that share its
/// condition. The lower median and not the least slow member, so that in a larger ToR
/// one member the event spared a little does not expose the rest.
///
/// Members already recommended for quarantine are counted (unlike in a crowd): once a
/// straggler inside a slow ToR of two is recommended, its partner still has a slow peer
/// beside it, and is not left to look like a straggler alone.
///
/// The price: two stragglers that are a ToR's only judged members, slow at once by about as
/// much, wait until one of them recovers; and so does a member that turns as slow as a
/// partner recommended earlier and not yet repaired (both unlikely, and neither cordons a
/// healthy node).
///
/// Returns each such ToR's members and its typical member's score: the level its
/// members stand out of ([`tor_event_levels`]).
fn whole_slow_tors(
    windows: &[Window],
    places: &[Option<u32>],
    counted: &dyn Fn(usize) -> bool,
) -> BTreeMap<u32, (Vec<usize>, f64)> {
    let mut by_tor: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, t) in places.iter().enumerate().take(windows.len()) {
        if let Some(t) = t
            && counted(i)
        {
            by_tor.entry(*t).or_default().push(i);
        }
    }
    by_tor
        .into_iter()
        .filter(|(_, m)| m.len() >= 2 && m.iter().all(|&i| windows[i].large))
        .map(|(t, nodes)| {
            let typical = lower_median(nodes.iter().map(|&i| &windows[i].score));
            (t, (nodes, typical))
        })
        .collect()
}

/// Per node, the levels of the ToR event it is in, which its re-pairings cross as much as
/// its probes (None without one):
/// - its whole ToR slow at once: the typical member's score ([`whole_slow_tors`]); a
///   member within the entry threshold of it is held with its ToR;
/// - its ToR's uplinks marked slow (slow with the outside by the level given, not within:
///   [`crate::health::tor::TorJudgement::uplinks`]): that level, less what `taken` (per
///   ToR) already took out of the probes' residuals (`health.tor_aware`: counted once,
///   not twice). A member within the entry threshold of it is held as a crowd of its ToR:
///   not against its ToR-mates' scores, since whether a member's recent probes went out
///   or stayed in the ToR (the stride decides) spreads them, and a member just back from
///   the outside stood out of the others.
///
/// A member that stands out of the event is judged on its own (a straggler is slow with
/// its ToR-mates too, and beyond the uplinks' level with the rest), and a re-pairing with
/// known-good peers behind other ToRs reproduces its slowness only by what it shows
/// beyond the larger of the two levels; one with a member of its own ToR crosses the ToR
/// but not its uplinks, so beyond the first.
pub(super) fn tor_event_levels(
    windows: &[Window],
    places: &[Option<u32>],
    counted: &dyn Fn(usize) -> bool,
    (uplinks, taken): (&[(u32, f64)], &BTreeMap<u32, f64>),
) -> Vec<TorEventLevel> {
    let mut level = vec![TorEventLevel::default(); windows.len()];
    for (nodes, typical) in whole_slow_tors(windows, places, counted).into_values() {
        for i in nodes {
            level[i].whole = Some(typical);
        }
    }
    for (i, l) in level.iter_mut().enumerate().filter(|(i, _)| counted(*i)) {
        let t = places.get(i).copied().flatten();
        for (u, up) in uplinks.iter().filter(|(u, _)| Some(*u) == t) {
            let left = (up - taken.get(u).copied().unwrap_or(0.0)).max(0.0);
            l.uplinks = Some(l.uplinks.map_or(left, |x| x.max(left)));
        }
    }
    level
}

/// The levels (log units) of the ToR event a node is in: see [`tor_event_levels`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct TorEventLevel {
    /// Its whole ToR slow at once: the typical member's score.
    pub whole: Option<f64>,
    /// Its ToR's uplinks marked slow: their level.
    pub uplinks: Option<f64>,
}

impl TorEventLevel {
    /// What a re-pairing with a peer behind another ToR crosses of it: both (zero
    /// without an event).
    pub fn across(&self) -> f64 {
        self.within().max(self.uplinks.unwrap_or(0.0))
    }

    /// What a re-pairing within its ToR crosses of it: the whole ToR's slowdown only.
    pub fn within(&self) -> f64 {
        self.whole.unwrap_or(0.0)
    }
}
