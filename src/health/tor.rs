//! The ToR (leaf switch) as a condition its members share.
//!
//! A ToR that turns slow slows every probe that touches one of its members, so without
//! topology its members look like a crowd of independent stragglers: that blocked the
//! whole group's cordons for as long as the ToR stayed slow, and a straggler inside the
//! ToR was never found. With each node's ToR known, the engine measures every ToR's
//! *level* each round (the median log residual of the probes that touch its members: a
//! straggler among them moves two of those probes, the ToR moves all of them) and takes
//! it out of those probes' residuals. Members are then judged against each other as well
//! as against the group: a healthy member of a slow ToR scores about zero, a straggler in
//! it scores its own slowdown.
//!
//! A pair inside one ToR crosses that switch once; a pair between two crosses both, so a
//! probe's shift is the sum of its distinct ToRs' levels. A level within the exit
//! threshold is noise and is not taken out.
//!
//! Separately, each ToR has a learned normal level (the same slowly learned baseline the
//! group has): a ToR whose level stays above it is a *ToR verdict*, for the network team,
//! never a node's. A change that lasts [`HealthConfig::new_normal_rounds`] becomes the
//! ToR's new normal: the verdict ends and the round says the normal changed.
//!
//! [`HealthConfig::new_normal_rounds`]: crate::health::HealthConfig::new_normal_rounds

use std::collections::{BTreeMap, VecDeque};

use super::fabric::Normal;
use super::stats::median;

/// Members of one ToR among the round's nodes needed to measure its level: with fewer, a
/// straggler's own probes are too large a share of the ToR's to tell the two apart.
pub const TOR_MIN_MEMBERS: usize = 3;

/// One ToR's level this round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Level {
    /// Median log residual of the probes touching its members.
    pub level: f64,
    /// Its members among the round's nodes.
    pub members: usize,
}

/// Each node's ToR, and this round's ToR levels.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorLevels {
    /// Each node's ToR (`None`: unknown), by node index.
    tor_of: Vec<Option<u32>>,
    /// The level taken out of the probes touching each ToR (only those beyond the noise).
    shift: BTreeMap<u32, f64>,
    /// Every measured ToR's level.
    pub measured: BTreeMap<u32, Level>,
}

impl TorLevels {
    /// Measures the levels of the ToRs in `tor_of` (by node index, `n` nodes) from the
    /// window scores `(node, score)` of the nodes judged this round: each ToR's level is
    /// its members' median score. Levels whose size is at most `noise` are measured but not
    /// taken out.
    pub fn measure(
        tor_of: &[Option<u32>],
        n: usize,
        scores: impl Iterator<Item = (usize, f64)>,
        noise: f64,
    ) -> Self {
        let tor_of: Vec<Option<u32>> = (0..n).map(|i| tor_of.get(i).copied().flatten()).collect();
        let mut samples: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (i, score) in scores.filter(|(i, d)| *i < n && d.is_finite()) {
            if let Some(t) = tor_of[i] {
                samples.entry(t).or_default().push(score);
            }
        }
        let mut out = Self {
            tor_of,
            ..Self::default()
        };
        for (t, mut v) in samples {
            let members = v.len();
            if members < TOR_MIN_MEMBERS {
                continue;
            }
            let level = median(&mut v);
            out.measured.insert(t, Level { level, members });
            if level.abs() > noise {
                out.shift.insert(t, level);
            }
        }
        out
    }

    /// Levels `shift` (per ToR, from an earlier round) on the topology `tor_of`, nothing
    /// measured.
    pub fn carried(tor_of: &[Option<u32>], n: usize, shift: &BTreeMap<u32, f64>) -> Self {
        Self {
            tor_of: (0..n).map(|i| tor_of.get(i).copied().flatten()).collect(),
            shift: shift.clone(),
            measured: BTreeMap::new(),
        }
    }

    /// The levels taken out, per ToR.
    pub fn shift(&self) -> &BTreeMap<u32, f64> {
        &self.shift
    }

    /// The level taken out of node `a`'s scores (0 when none).
    pub fn of_node(&self, a: usize) -> f64 {
        self.tor(a)
            .and_then(|t| self.shift.get(&t))
            .copied()
            .unwrap_or(0.0)
    }

    /// The shift of a probe between `a` and `b`: the levels of its distinct ToRs.
    pub fn of_probe(&self, a: usize, b: usize) -> f64 {
        let (ta, tb) = (self.tor(a), self.tor(b));
        let s = |t: Option<u32>| t.and_then(|t| self.shift.get(&t)).copied().unwrap_or(0.0);
        s(ta) + if tb != ta { s(tb) } else { 0.0 }
    }

    /// A node's ToR.
    pub fn tor(&self, a: usize) -> Option<u32> {
        self.tor_of.get(a).copied().flatten()
    }

    /// Whether any ToR's level is taken out this round.
    pub fn shifts(&self) -> bool {
        !self.shift.is_empty()
    }
}

/// One ToR's learned normal and its recent slow rounds.
#[derive(Debug, Clone, Default, PartialEq)]
struct TorTrack {
    normal: Normal,
    hist: VecDeque<bool>,
}

/// A ToR verdict: the ToR, its level against its normal, its members.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TorVerdict {
    /// The ToR (the topology's number for it).
    pub tor: u32,
    /// Its level this round above its learned normal (log units).
    pub excess: f64,
    /// Its members in the group.
    pub members: usize,
}

/// What [`TorWatch::judge`] found this round.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorJudgement {
    /// ToRs with a verdict.
    pub verdicts: Vec<TorVerdict>,
    /// ToRs whose lasting change became their new normal this round.
    pub renewed: Vec<u32>,
}

/// The ToR verdicts of one group: each measured ToR's level against its own learned normal.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorWatch {
    tracks: BTreeMap<u32, TorTrack>,
}

/// How the ToR verdict is judged (the group's fabric settings, applied per ToR).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TorRule {
    /// A round is slow for a ToR whose level is this far above its normal (log units).
    pub threshold: f64,
    /// Rounds of history.
    pub window: usize,
    /// Slow rounds of the history that make a verdict.
    pub rounds: usize,
    /// Slow rounds in a row after which the level is the ToR's new normal.
    pub horizon: usize,
}

impl TorWatch {
    /// Judges this round's measured ToRs. A ToR not measured this round keeps its history
    /// (it may be absent from one round's probes) but has no verdict.
    pub fn judge(&mut self, levels: &TorLevels, rule: TorRule) -> TorJudgement {
        let mut out = TorJudgement::default();
        for (&t, l) in &levels.measured {
            let track = self.tracks.entry(t).or_default();
            let judged = track.normal.judge(l.level, rule.threshold, rule.horizon);
            if judged.renewed {
                out.renewed.push(t);
                track.hist.clear();
            }
            track.hist.push_back(judged.slow);
            while track.hist.len() > rule.window {
                track.hist.pop_front();
            }
            let slow = track.hist.iter().filter(|x| **x).count();
            if judged.slow && slow >= rule.rounds {
                out.verdicts.push(TorVerdict {
                    tor: t,
                    excess: l.level - track.normal.level().unwrap_or(0.0),
                    members: l.members,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight nodes, ToR 0 = nodes 0–3, ToR 1 = nodes 4–7.
    fn tors() -> Vec<Option<u32>> {
        (0..8).map(|i| Some(u32::from(i >= 4))).collect()
    }

    /// ToR 0's members at 0.2, node 1 at 0.5 (a straggler in it), ToR 1 at about 0.
    fn scores(slow: f64) -> Vec<(usize, f64)> {
        let mut v: Vec<(usize, f64)> = (0..8)
            .map(|i| (i, if i < 4 { slow } else { 0.001 * i as f64 }))
            .collect();
        v[1].1 += 0.3;
        v
    }

    #[test]
    fn a_slow_tor_is_taken_out_of_its_members_and_a_straggler_keeps_its_own() {
        let l = TorLevels::measure(&tors(), 8, scores(0.2).into_iter(), 0.04);
        assert_eq!(l.measured[&0].members, 4);
        // Median of 0.2, 0.5, 0.2, 0.2.
        assert!((l.measured[&0].level - 0.2).abs() < 1e-12);
        assert!((l.measured[&1].level - 0.0055).abs() < 1e-12);
        assert_eq!(l.of_node(2), 0.2);
        assert_eq!(l.of_node(5), 0.0, "ToR 1's level is noise, not taken out");
        // A probe inside ToR 0 crosses it once, one between the ToRs both (ToR 1: none).
        assert_eq!(l.of_probe(0, 3), 0.2);
        assert_eq!(l.of_probe(0, 5), 0.2);
        assert_eq!(l.of_probe(4, 5), 0.0);
        assert!((0.5 - l.of_node(1) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn unknown_or_small_tors_are_not_measured() {
        let l = TorLevels::measure(&[], 8, scores(0.2).into_iter(), 0.04);
        assert!(l.measured.is_empty() && !l.shifts());
        let two: Vec<Option<u32>> = (0..8).map(|i| (i < 2).then_some(7)).collect();
        let l = TorLevels::measure(&two, 8, scores(0.2).into_iter(), 0.04);
        assert!(l.measured.is_empty(), "two members are too few");
        assert_eq!(l.of_probe(0, 1), 0.0);
    }

    #[test]
    fn a_lasting_slow_tor_is_a_verdict_then_the_new_normal() {
        let rule = TorRule {
            threshold: 0.1,
            window: 10,
            rounds: 3,
            horizon: 20,
        };
        let mut w = TorWatch::default();
        let quiet = TorLevels::measure(&tors(), 8, scores(0.0).into_iter(), 0.04);
        for _ in 0..5 {
            assert_eq!(w.judge(&quiet, rule), TorJudgement::default());
        }
        let slow = TorLevels::measure(&tors(), 8, scores(0.2).into_iter(), 0.04);
        let got: Vec<TorJudgement> = (0..25).map(|_| w.judge(&slow, rule)).collect();
        // Two slow rounds are not enough; the third is a verdict on ToR 0 only.
        assert!(got[..2].iter().all(|j| j.verdicts.is_empty()));
        assert_eq!(got[2].verdicts.len(), 1);
        assert_eq!(got[2].verdicts[0].tor, 0);
        // The 21st slow round in a row makes it the normal: the verdict ends.
        let renewed = got.iter().position(|j| !j.renewed.is_empty());
        assert_eq!(renewed, Some(20));
        assert_eq!(got[20].renewed, vec![0]);
        assert!(got[20..].iter().all(|j| j.verdicts.is_empty()));
    }
}
