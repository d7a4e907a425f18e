//! Inferring ToRs from the probes when no topology source gives them.
//!
//! Nodes behind one ToR switch share its slowdowns: when the switch is slow, congested or
//! swings with the day, every probe touching one of its members moves with it, so its
//! members' slowdowns rise and fall together, while a straggler rises alone and a
//! fleet-wide dip moves no peer-relative residual at all. [`TorInference`] keeps, for a
//! bounded window of rounds, each node's *excess* slowdown (its score above a floor: zero
//! while it is not slow) and groups the nodes whose excesses move together.
//!
//! A node's score here is not the engine's window score. The engine judges a node by the
//! slower of its sending and receiving sides, and the permutation's stride turns by one a
//! round, so a node's partners over a window are a run of neighbouring members: a node
//! some way from a slow ToR has one side slow while that run crosses the ToR, and the
//! sweep moves through the group, making its bystanders look as if they moved together.
//! So [`TorInference::observe_probes`] takes, each round, the *faster* of the node's two
//! probes (log residual against the round's median): only a node whose both probes are
//! slow is slow that round, which a ToR's member always is. A bystander still is in the
//! rounds whose stride puts both its partners behind the slow ToR: for the member
//! opposite the ToR, up to as many consecutive rounds as the ToR has members, once per
//! turn of the stride. So a node's score is the median of those over a whole turn, at
//! least `n − 1` rounds (every partner once): a ToR's member is slow in all of them, a
//! bystander in fewer than half while its ToR holds less than half the group.
//!
//! Timing alone cannot tell a slow ToR from stragglers whose slowness began together, so
//! a pair's own probes are asked too ([`TorInference::apart`]): between two members of one
//! slow switch a probe crosses it once, between two stragglers it carries both slowdowns.
//!
//! The grouping is deliberately shy. A pair of nodes has evidence only after
//! [`InferConfig::min_rounds`] rounds in which both were slow; its similarity is the
//! correlation of their excess series over the window (1: slow in the same rounds by
//! proportional amounts). A correlation, not a mere overlap: two stragglers slow through
//! the whole window are both always slow, yet nothing moves them together, and they
//! correlate no more than their noise does.
//! Nodes are merged by average linkage while the clusters' mean similarity stays at
//! [`InferConfig::similarity`] or above, and only clusters of at least
//! [`InferConfig::min_members`] nodes are groups. A quiet fleet (nothing slow), a single
//! straggler and nodes slow at unrelated times give no groups: "nothing inferred yet" is
//! the answer until slowdowns have moved together.
//!
//! A group is not a ToR by name, only nodes that behaved as one; two ToRs that were only
//! ever slow together (a spine event over both) are one group, and a ToR that was never
//! slow is not found. Memory is bounded: `window` rounds of the slow nodes' excesses and
//! of their pairs' own probes (at most one entry per node per round each), a turn of each
//! node's per-round slowdown, and two sums per pair. Everything is deterministic: every
//! member fed the same rounds infers the same groups, numbered by their lowest node.

use std::collections::VecDeque;

use super::host::Probe;
use super::stats::median;

/// One round of the window: the slow nodes and their excess, and the pairs' own probes
/// (pair slot, excess over the slower of the nodes' other probes).
#[derive(Debug, Clone, PartialEq)]
struct Round {
    slow: Vec<(usize, f64)>,
    direct: Vec<(usize, f64)>,
}

/// A pair's own probes (both ends slow) needed before they can set it apart.
pub const MIN_DIRECT: usize = 2;

/// A pair probe's excess over its slower node is clamped to ± this (log units), so that
/// one spike cannot decide.
const DIRECT_CLAMP: f64 = 0.5;

/// Variance of a node's excess series (log units²) below which it is taken as not moving.
const MIN_VARIANCE: f64 = 1e-9;

/// How the inference groups nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InferConfig {
    /// Rounds of history kept.
    pub window: usize,
    /// A node's window score above this (log units) is its excess slowdown; the engine's
    /// exit threshold, `ln(1 + delta/2)`, by default.
    pub floor: f64,
    /// Rounds in which both nodes of a pair were slow before the pair is evidence.
    pub min_rounds: usize,
    /// Mean correlation of the excess series at or above which clusters merge.
    pub similarity: f64,
    /// Rounds of a node's per-round slowdown whose median is its score
    /// ([`TorInference::observe_probes`]), at least: it is never fewer than a turn of the
    /// stride, `n − 1`.
    pub score_rounds: usize,
    /// Nodes a group needs (a ToR's level needs [`TOR_MIN_MEMBERS`] to be measured).
    ///
    /// [`TOR_MIN_MEMBERS`]: crate::health::TOR_MIN_MEMBERS
    pub min_members: usize,
}

impl Default for InferConfig {
    /// 2880 rounds (8 h at the shipped 10 s probe interval); the shipped exit threshold;
    /// two engine windows of shared slowness; similarity 0.8; three members.
    fn default() -> Self {
        Self {
            window: 2880,
            floor: (1.0 + 0.08 / 2.0_f64).ln(),
            min_rounds: 20,
            similarity: 0.8,
            score_rounds: 10,
            min_members: super::tor::TOR_MIN_MEMBERS,
        }
    }
}

impl InferConfig {
    /// The defaults with the floor at the engine's exit threshold, `ln(1 + delta/2)`, and
    /// the evidence at two of its windows.
    pub fn of(h: &super::HealthConfig) -> Self {
        Self {
            floor: (1.0 + h.delta / 2.0).ln(),
            min_rounds: 2 * h.window.max(1),
            score_rounds: h.window.max(1),
            ..Self::default()
        }
    }
}

/// The inference's state for one probe group of `n` nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct TorInference {
    cfg: InferConfig,
    n: usize,
    /// The window: per round, the nodes slow in it and their excess.
    rounds: VecDeque<Round>,
    /// Per node: Σ excess and Σ excess² over the window, and its slow rounds.
    own: Vec<(f64, f64, u32)>,
    /// Per pair (i < j, row-major over the upper triangle): Σ excess_i × excess_j over
    /// the window, and the rounds both were slow.
    pairs: Vec<(f64, u32)>,
    /// Per pair: Σ of its own probes' excess over its nodes' other probes (see
    /// [`TorInference::apart`]), and how many, over the window.
    direct: Vec<(f64, u32)>,
    /// Per node: the faster of its two probes' residuals in each of the last
    /// [`TorInference::score_rounds`] rounds it was measured in.
    recent: Vec<VecDeque<f64>>,
}

impl TorInference {
    /// An inference for `n` nodes with nothing seen.
    pub fn new(n: usize, cfg: InferConfig) -> Self {
        Self {
            cfg,
            n,
            rounds: VecDeque::new(),
            own: vec![(0.0, 0.0, 0); n],
            pairs: vec![(0.0, 0); n * n.saturating_sub(1) / 2],
            direct: vec![(0.0, 0); n * n.saturating_sub(1) / 2],
            recent: vec![VecDeque::new(); n],
        }
    }

    /// Nodes.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether it has no nodes.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Rounds whose median is a node's score: `score_rounds`, and never fewer than a turn
    /// of the stride (`n − 1`, every partner once).
    pub fn score_rounds(&self) -> usize {
        self.cfg.score_rounds.max(self.n.saturating_sub(1)).max(1)
    }

    /// The pair slot of `i < j`.
    fn slot(&self, i: usize, j: usize) -> usize {
        i * (2 * self.n - i - 1) / 2 + (j - i - 1)
    }

    /// Adds one permutation round's probes (each node sends one and receives one): each
    /// node's slowdown this round is the faster of its two probes' log residuals against
    /// the round's median, and its score the median of its last
    /// [`TorInference::score_rounds`] of them (a node without both probes this round, or
    /// without that many of them yet, has no score this round).
    pub fn observe_probes(&mut self, probes: &[Probe]) {
        let n = self.n;
        let ok: Vec<&Probe> = probes.iter().filter(|p| p.within(n)).collect();
        let mut logs: Vec<f64> = ok.iter().map(|p| p.seconds.ln()).collect();
        let mid = median(&mut logs);
        let mut sent: Vec<Option<f64>> = vec![None; n];
        let mut got: Vec<Option<f64>> = vec![None; n];
        for p in &ok {
            let d = p.seconds.ln() - mid;
            sent[p.src] = Some(sent[p.src].map_or(d, |x: f64| x.min(d)));
            got[p.dst] = Some(got[p.dst].map_or(d, |x: f64| x.min(d)));
        }
        let w = self.score_rounds();
        let mut scores: Vec<Option<f64>> = vec![None; n];
        for (i, score) in scores.iter_mut().enumerate() {
            let (Some(a), Some(b)) = (sent[i], got[i]) else {
                continue;
            };
            let r = &mut self.recent[i];
            r.push_back(a.min(b));
            while r.len() > w {
                r.pop_front();
            }
            if r.len() == w {
                let mut v: Vec<f64> = r.iter().copied().collect();
                *score = Some(median(&mut v));
            }
        }
        // The pair's own probes, where both its nodes are slow: how much slower each was
        // than the slower of its two nodes' other probes of the round (same round, same
        // median: the stride moves the median when a slow ToR holds a quarter of the
        // group, and a pair inside it is probed only at short strides).
        let slow = |i: usize| scores[i].is_some_and(|s| s > self.cfg.floor);
        let mut touching: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        for (k, p) in ok.iter().enumerate() {
            let d = p.seconds.ln() - mid;
            touching[p.src].push((k, d));
            touching[p.dst].push((k, d));
        }
        let other = |i: usize, k: usize| -> Option<f64> {
            touching[i]
                .iter()
                .filter(|(x, _)| *x != k)
                .map(|(_, d)| *d)
                .reduce(f64::max)
        };
        let direct: Vec<(usize, f64)> = ok
            .iter()
            .enumerate()
            .filter(|(_, p)| p.src != p.dst && slow(p.src) && slow(p.dst))
            .filter_map(|(k, p)| {
                let others = other(p.src, k)?.max(other(p.dst, k)?);
                let x = p.seconds.ln() - mid - others;
                let slot = self.slot(p.src.min(p.dst), p.src.max(p.dst));
                Some((slot, x.clamp(-DIRECT_CLAMP, DIRECT_CLAMP)))
            })
            .collect();
        let row = self.row(&scores);
        self.push(Round { slow: row, direct });
    }

    /// Adds one round of scores directly: each node's score (`None`: not measured this round,
    /// or its window not yet full). A node beyond `n` or a score that is not finite is
    /// ignored.
    pub fn observe(&mut self, scores: &[Option<f64>]) {
        let slow = self.row(scores);
        self.push(Round {
            slow,
            direct: Vec::new(),
        });
    }

    /// The slow nodes of a round of scores and their excess.
    fn row(&self, scores: &[Option<f64>]) -> Vec<(usize, f64)> {
        let floor = self.cfg.floor;
        scores
            .iter()
            .take(self.n)
            .enumerate()
            .filter_map(|(i, s)| {
                let s = (*s)?;
                (s.is_finite() && s > floor).then_some((i, s - floor))
            })
            .collect()
    }

    /// Adds a round to the window, and takes out the one that leaves it.
    fn push(&mut self, round: Round) {
        self.apply(&round, 1);
        self.rounds.push_back(round);
        while self.rounds.len() > self.cfg.window.max(1) {
            if let Some(old) = self.rounds.pop_front() {
                self.apply(&old, -1);
            }
        }
    }

    /// Adds (`sign` 1) or takes out (−1) one round's products. A sum whose count returns
    /// to zero is reset to exactly zero, so that rounding never leaves a ghost.
    fn apply(&mut self, round: &Round, sign: i32) {
        let f = f64::from(sign);
        for &(slot, x) in &round.direct {
            let d = &mut self.direct[slot];
            d.0 += f * x;
            d.1 = d.1.saturating_add_signed(sign);
            if d.1 == 0 {
                d.0 = 0.0;
            }
        }
        let row = &round.slow;
        for (k, &(i, ei)) in row.iter().enumerate() {
            let o = &mut self.own[i];
            o.0 += f * ei;
            o.1 += f * ei * ei;
            o.2 = o.2.saturating_add_signed(sign);
            if o.2 == 0 {
                (o.0, o.1) = (0.0, 0.0);
            }
            for &(j, ej) in &row[k + 1..] {
                let s = self.slot(i.min(j), i.max(j));
                let p = &mut self.pairs[s];
                p.0 += f * ei * ej;
                p.1 = p.1.saturating_add_signed(sign);
                if p.1 == 0 {
                    p.0 = 0.0;
                }
            }
        }
    }

    /// The similarity of `i` and `j`: the correlation of their excess series over the
    /// window (a round a node was not measured in counts as not slow), 0 without enough
    /// shared slow rounds.
    pub fn similarity(&self, i: usize, j: usize) -> f64 {
        if i == j || i >= self.n || j >= self.n {
            return 0.0;
        }
        let (cross, both) = self.pairs[self.slot(i.min(j), i.max(j))];
        if (both as usize) < self.cfg.min_rounds.max(1) || self.apart(i, j) {
            return 0.0;
        }
        let n = self.rounds.len() as f64;
        let (xi, xxi, _) = self.own[i];
        let (xj, xxj, _) = self.own[j];
        // n² × the variance; a series that does not move (within rounding) correlates
        // with nothing.
        let var = |x: f64, xx: f64| (n * xx - x * x).max(0.0);
        let (vi, vj) = (var(xi, xxi), var(xj, xxj));
        let still = n * n * MIN_VARIANCE;
        let norm = (vi * vj).sqrt();
        if vi > still && vj > still {
            (n * cross - xi * xj) / norm
        } else {
            0.0
        }
    }

    /// Whether the pair's own probes say its two nodes are slow for separate reasons: a
    /// probe between two members of one slow ToR crosses the switch once and is about as
    /// slow as either member's other probes, while a probe between two stragglers carries
    /// both slowdowns. Apart when, over at least `MIN_DIRECT` (2) of the pair's probes in
    /// rounds where both were slow, the probe was on average more than the floor slower
    /// than the slower of the two nodes' other probes of the same round. Stragglers whose slowness began together
    /// move together as a ToR's members do; this is what tells them apart.
    pub fn apart(&self, i: usize, j: usize) -> bool {
        if i == j || i >= self.n || j >= self.n {
            return false;
        }
        let (sum, k) = self.direct[self.slot(i.min(j), i.max(j))];
        k as usize >= MIN_DIRECT && sum / f64::from(k) > self.cfg.floor
    }

    /// The inferred groups, each sorted, ordered by their lowest node; empty when nothing
    /// is inferred (yet).
    pub fn groups(&self) -> Vec<Vec<usize>> {
        let t = self.cfg.similarity;
        // Only nodes with at least one similar partner can be in a group.
        let candidates: Vec<usize> = (0..self.n)
            .filter(|&i| (0..self.n).any(|j| self.similarity(i, j) >= t))
            .collect();
        let mut clusters: Vec<Vec<usize>> = candidates.iter().map(|&i| vec![i]).collect();
        // Sum of similarities between each pair of clusters (average linkage divides by
        // the product of their sizes).
        let k = clusters.len();
        let mut link: Vec<Vec<f64>> = vec![vec![0.0; k]; k];
        for a in 0..k {
            for b in a + 1..k {
                let s = self.similarity(candidates[a], candidates[b]);
                link[a][b] = s;
                link[b][a] = s;
            }
        }
        let mut alive: Vec<bool> = vec![true; k];
        loop {
            let mut best: Option<(f64, usize, usize)> = None;
            for a in (0..k).filter(|&a| alive[a]) {
                for b in (a + 1..k).filter(|&b| alive[b]) {
                    let size = (clusters[a].len() * clusters[b].len()) as f64;
                    let mean = link[a][b] / size;
                    if mean >= t && best.is_none_or(|(m, _, _)| mean > m) {
                        best = Some((mean, a, b));
                    }
                }
            }
            let Some((_, a, b)) = best else { break };
            let moved = std::mem::take(&mut clusters[b]);
            clusters[a].extend(moved);
            alive[b] = false;
            let merged: Vec<f64> = (0..k).map(|c| link[a][c] + link[b][c]).collect();
            for (c, s) in merged.into_iter().enumerate() {
                link[a][c] = s;
                link[c][a] = s;
            }
        }
        let mut out: Vec<Vec<usize>> = clusters
            .into_iter()
            .zip(alive)
            .filter(|(c, alive)| *alive && c.len() >= self.cfg.min_members.max(2))
            .map(|(mut c, _)| {
                c.sort_unstable();
                c
            })
            .collect();
        out.sort();
        out
    }

    /// Each node's inferred group (the index into [`TorInference::groups`]), `None` for
    /// nodes in no group; empty when nothing is inferred.
    pub fn assignment(&self) -> Vec<Option<u32>> {
        let groups = self.groups();
        if groups.is_empty() {
            return Vec::new();
        }
        let mut out = vec![None; self.n];
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                out[i] = Some(g as u32);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic noise in [−1, 1] for node `i` in round `r`.
    fn noise(i: usize, r: usize) -> f64 {
        let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (r as u64 + 7);
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        (x % 2001) as f64 / 1000.0 - 1.0
    }

    fn run(n: usize, rounds: usize, score: impl Fn(usize, usize) -> f64) -> TorInference {
        let mut inf = TorInference::new(n, InferConfig::default());
        for r in 0..rounds {
            let s: Vec<Option<f64>> = (0..n).map(|i| Some(score(i, r))).collect();
            inf.observe(&s);
        }
        inf
    }

    #[test]
    fn two_tors_slow_at_different_times_are_two_groups() {
        // Twelve nodes: 0–3 behind ToR A, 4–7 behind ToR B, 8–11 elsewhere. A is slow by
        // 0.2 for rounds 50–99 (with a wobble its members share), B by 0.15 for 200–279.
        let level = |i: usize, r: usize| {
            if i < 4 && (50..100).contains(&r) {
                0.2 + 0.05 * (r as f64 / 5.0).sin()
            } else if (4..8).contains(&i) && (200..280).contains(&r) {
                0.15 + 0.04 * (r as f64 / 7.0).cos()
            } else {
                0.0
            }
        };
        let inf = run(12, 400, |i, r| level(i, r) + 0.01 * noise(i, r));
        assert_eq!(inf.groups(), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        let a = inf.assignment();
        assert_eq!(
            &a[..8],
            &[Some(0); 4]
                .iter()
                .chain(&[Some(1); 4])
                .copied()
                .collect::<Vec<_>>()[..]
        );
        assert!(a[8..].iter().all(Option::is_none));
    }

    /// A slow ToR: its members, the rounds it is slow in, its level.
    type SlowTor = (std::ops::Range<usize>, std::ops::Range<usize>, f64);

    /// Permutation rounds as the prober runs them (the stride turning by one a round):
    /// node k receives from k − stride. A probe is as slow as the slow ToR when either end
    /// is behind it (a pair inside it crosses it once), plus each end's own slowdown
    /// (`stragglers`: node, first slow round, slowdown).
    fn permutation(
        n: usize,
        rounds: usize,
        tor: Option<SlowTor>,
        stragglers: &[(usize, usize, f64)],
    ) -> TorInference {
        let mut inf = TorInference::new(n, InferConfig::default());
        let own = |i: usize, r: usize| -> f64 {
            stragglers
                .iter()
                .filter(|(x, from, _)| *x == i && r >= *from)
                .map(|(_, _, d)| d)
                .sum()
        };
        for r in 0..rounds {
            let stride = 1 + r % (n - 1);
            let probes: Vec<Probe> = (0..n)
                .map(|k| {
                    let src = (k + n - stride) % n;
                    let level = tor.as_ref().map_or(0.0, |(members, when, level)| {
                        let touches = members.contains(&src) || members.contains(&k);
                        if touches && when.contains(&r) {
                            *level
                        } else {
                            0.0
                        }
                    });
                    let d = level + own(src, r) + own(k, r) + 0.01 * noise(src * n + k, r);
                    Probe {
                        src,
                        dst: k,
                        seconds: 1e-3 * d.exp(),
                    }
                })
                .collect();
            inf.observe_probes(&probes);
        }
        inf
    }

    #[test]
    fn from_probes_a_slow_tor_is_its_members_not_the_bystanders_its_probes_sweep() {
        // 32 nodes, ToR = nodes 8–15 slow by 0.3 in rounds 100–299 (a quarter of the
        // group: its probes are fewer than half the round's, so the round's median stays
        // the others'): every node's partners sweep across it, but only its members have
        // both probes slow round after round.
        let inf = permutation(32, 400, Some((8..16, 100..300, 0.3)), &[]);
        assert_eq!(inf.groups(), vec![(8..16).collect::<Vec<usize>>()]);
        // 64 nodes, ToR = nodes 16–31: the members opposite it have both partners behind
        // it for up to 16 rounds in a row, once a turn, and together; not a group.
        let inf = permutation(64, 600, Some((16..32, 100..500, 0.3)), &[]);
        assert_eq!(inf.groups(), vec![(16..32).collect::<Vec<usize>>()]);
        // A straggler inside the ToR is slow for its own reason too, yet its probes to
        // the other members carry the ToR once: it may stay out, never splits the ToR.
        let inf = permutation(64, 600, Some((16..32, 100..500, 0.3)), &[(20, 100, 0.2)]);
        let g = inf.groups();
        assert_eq!(g.len(), 1, "{g:?}");
        assert!(
            g[0].iter().all(|i| (16..32).contains(i)) && g[0].len() >= 15,
            "{g:?}"
        );
    }

    #[test]
    fn stragglers_whose_slowness_began_together_are_told_apart_by_their_own_probes() {
        // Three stragglers, from the same round to the end: they move together as a ToR's
        // members do, but their own probes carry both their slowdowns.
        let inf = permutation(
            64,
            600,
            None,
            &[(3, 100, 0.1), (20, 100, 0.15), (40, 100, 0.2)],
        );
        assert!(inf.groups().is_empty(), "{:?}", inf.groups());
        assert!(inf.apart(3, 20) && inf.apart(20, 40) && inf.apart(3, 40));
        // A single straggler from round 50: no group.
        let inf = permutation(32, 400, None, &[(5, 50, 0.3)]);
        assert!(inf.groups().is_empty(), "{:?}", inf.groups());
    }

    #[test]
    fn independent_noise_gives_no_groups() {
        // Every node's score is its own noise, often above the floor (±0.1).
        let inf = run(16, 1000, |i, r| 0.1 * noise(i, r));
        assert_eq!(inf.groups(), Vec::<Vec<usize>>::new());
        assert!(inf.assignment().is_empty());
        // Nothing slow at all: nothing inferred either.
        let quiet = run(16, 1000, |_, _| 0.0);
        assert!(quiet.groups().is_empty());
    }

    #[test]
    fn a_single_straggler_or_a_pair_is_not_a_group() {
        // Node 3 slow for the whole run; nodes 5 and 6 slow together for 100 rounds.
        let inf = run(10, 300, |i, r| match i {
            3 => 0.3,
            5 | 6 if (100..200).contains(&r) => 0.2,
            _ => 0.0,
        });
        assert!(inf.groups().is_empty(), "{:?}", inf.groups());
        // The pair is similar, but two are too few.
        assert!(inf.similarity(5, 6) > 0.99);
    }

    #[test]
    fn stragglers_slow_all_along_do_not_move_together() {
        // Nodes 0, 3 and 6 are each slow through the whole run, by different amounts;
        // always slow together, yet nothing moves them together.
        let inf = run(9, 500, |i, r| match i {
            0 => 0.2 + 0.01 * noise(i, r),
            3 => 0.3 + 0.01 * noise(i, r),
            6 => 0.25 + 0.01 * noise(i, r),
            _ => 0.01 * noise(i, r),
        });
        assert!(inf.groups().is_empty(), "{:?}", inf.groups());
    }

    #[test]
    fn evidence_needs_enough_shared_rounds_and_leaves_with_the_window() {
        let cfg = InferConfig {
            window: 100,
            ..InferConfig::default()
        };
        let mut inf = TorInference::new(4, cfg);
        for _ in 0..30 {
            inf.observe(&[Some(0.0); 4]);
        }
        // Then nodes 0–2 slow together for 19 rounds: one short of the evidence needed.
        let slow = [Some(0.3), Some(0.3), Some(0.3), Some(0.0)];
        for _ in 0..19 {
            inf.observe(&slow);
        }
        assert!(inf.groups().is_empty());
        inf.observe(&slow);
        assert_eq!(inf.groups(), vec![vec![0, 1, 2]]);
        // A hundred quiet rounds later the window holds none of it.
        for _ in 0..100 {
            inf.observe(&[Some(0.0); 4]);
        }
        assert!(inf.groups().is_empty());
        assert_eq!(inf.similarity(0, 1), 0.0);
    }

    #[test]
    fn bad_input_is_ignored() {
        let mut inf = TorInference::new(3, InferConfig::default());
        for _ in 0..50 {
            inf.observe(&[
                Some(f64::NAN),
                Some(f64::INFINITY),
                None,
                Some(0.5),
                Some(0.5),
            ]);
        }
        assert!(inf.groups().is_empty());
        assert_eq!(
            TorInference::new(0, InferConfig::default()).groups().len(),
            0
        );
    }
}
