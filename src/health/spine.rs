//! The spine as the switch a partial fabric event (a dip) sits on.
//!
//! With ECMP, each pair of nodes on different ToRs crosses one of several spines, chosen
//! by a hash of its flow, which no member can see. A congested or failing spine therefore
//! slows a share of the pairs *between* ToRs (about one in as many as there are spines),
//! spread over every ToR pair, and never a pair within one ToR (that traffic turns at the
//! ToR). That shape is what tells a spine from the dips the engine already names: a slow
//! ToR slows its own members' pairs too; a ToR's uplinks slow every pair that leaves that
//! one ToR; the link between two ToRs slows the pairs of that one ToR pair; a dip on a
//! random share of the links slows pairs within ToRs as often as between them.
//!
//! So while a dip is on, its rounds are tallied by where each judged measurement ran
//! (within a ToR or between two, and which two) and whether the dip slowed it. The dip is
//! a *spine verdict* when:
//! - it slowed at least [`SPINE_MIN_SLOW`] measurements between ToRs (noise included);
//! - beyond the noise (the base rate of measurements slow on their own, the
//!   partial-fabric detector's), it slowed the measurements of at least [`SPINE_MIN_TORS`]
//!   ToRs, and of at least [`SPINE_MIN_TOR_SHARE`] of those measured, at a rate of at
//!   least [`SPINE_TOR_REACH`] of the busiest ToR's (rates, not counts: ToRs differ in
//!   size), and at least [`SPINE_PAIR_COVER`] of the ToR pairs between them;
//! - the pairs within ToRs were spared, beyond the noise, where a dip that spared nothing
//!   would have slowed at least [`SPINE_INNER_EXPECTED`] of them. That count is taken
//!   round by round, from each round's own share between ToRs: the permutation reaches
//!   the pairs within ToRs only in some strides of its turn, and a round before the dip
//!   began (or after it eased) says nothing of the pairs it spares.
//!
//! The tally starts again after [`SPINE_QUIET_ROUNDS`] rounds without an event: a dip
//! stays on for a full turn of the stride after its last event, and what slowed the pairs
//! then (a spine's congestion that has passed) is not what slows them in a new event.
//! Which spine is not knowable from the pairs (the hash is the switch's); the verdict
//! names the ToRs it reached, and the daemon names their spine group from the topology.
//!
//! Needs each node's ToR: without topology a dip stays a partial fabric event. Like the
//! dip itself, the tally is not in the engine's wire form: a member that takes over the
//! engine state tallies the dip afresh.

use std::collections::BTreeMap;

use super::tor::renumbered_pair;

/// Rounds without an event after which the tally starts again (five minutes at the
/// shipped interval).
pub const SPINE_QUIET_ROUNDS: usize = 30;

/// Slow measurements between ToRs a dip needs before its shape is judged (noise included).
pub const SPINE_MIN_SLOW: u32 = 24;

/// ToRs the dip must have reached: with fewer, a spine cannot be told from the link
/// between two ToRs or one ToR's uplinks.
pub const SPINE_MIN_TORS: usize = 3;

/// A ToR is reached when the share of its measurements to other ToRs that the dip slowed
/// (beyond the noise) is at least this much of the busiest ToR's. A spine slows every
/// ToR's pairs alike, whatever the ToRs' sizes; one slow ToR (or its uplinks) slows a half
/// of the others' at most (three ToRs) and less with more.
pub const SPINE_TOR_REACH: f64 = 0.6;

/// The least share of the ToRs measured that the dip must have reached.
pub const SPINE_MIN_TOR_SHARE: f64 = 0.5;

/// The least share of the ToR pairs between reached ToRs that the dip must have slowed
/// (each at half the dip's overall rate beyond the noise, or more): a spine spreads over
/// every ToR pair, while two dips on two ToR pairs reach four ToRs alike through two
/// of their six pairs.
pub const SPINE_PAIR_COVER: f64 = 0.5;

/// Slow measurements within ToRs, beyond the base rate, that a dip of the same share on
/// random links would have made: fewer, and sparing the ToRs' own pairs is no evidence
/// (eight make the chance that a random dip spares them, at a quarter of that count or
/// fewer, about 1.4 %, before the noise's own spread).
pub const SPINE_INNER_EXPECTED: f64 = 8.0;

/// The most the share of slow measurements within ToRs may be of the share between them,
/// both above the base rate.
pub const SPINE_INNER_RATIO: f64 = 0.25;

/// The two ToRs of a pair, lower first.
type TorPair = (u32, u32);

/// Adds one measurement, `slow` or not, to a (measured, slow) count.
fn bump(c: &mut (u32, u32), slow: bool) {
    c.0 = c.0.saturating_add(1);
    c.1 = c.1.saturating_add(u32::from(slow));
}

/// The share of a (measured, slow) count that is slow beyond the noise `base`.
fn excess_rate(&(m, k): &(u32, u32), base: f64) -> f64 {
    f64::from(k) / f64::from(m.max(1)) - base
}

/// Where a dip's rounds fell since its events began again: see the module.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Shape {
    /// Judged measurements within one ToR, and how many the dip slowed.
    inner: (u32, u32),
    /// Judged measurements between two ToRs, and how many the dip slowed.
    cross: (u32, u32),
    /// The same between two ToRs, per ToR pair.
    by_pair: BTreeMap<TorPair, (u32, u32)>,
    /// This round's: within ToRs measured, and between ToRs (measured, slow).
    now: (u32, (u32, u32)),
    /// Over the rounds before this one: the measurements within ToRs, each weighted by its
    /// round's share of slow measurements between ToRs (what a dip that spares nothing
    /// would have slowed of them, noise included).
    weighted: f64,
    /// Rounds since the last event round.
    quiet: usize,
}

/// A spine verdict: a dip on the pairs between ToRs, spread over them, sparing the pairs
/// within ToRs.
#[derive(Debug, Clone, PartialEq)]
pub struct SpineVerdict {
    /// The ToRs it reached (the topology's numbers), sorted.
    pub tors: Vec<u32>,
    /// The ToR pairs between them it slowed.
    pub tor_pairs: usize,
    /// The share of the judged measurements between ToRs it slowed (about one over the
    /// spines behind them).
    pub cross_share: f64,
    /// The share of the judged measurements within ToRs it slowed (about zero).
    pub inner_share: f64,
}

impl Shape {
    /// Starts a round, an event round or not: after [`SPINE_QUIET_ROUNDS`] without one the
    /// tally starts again.
    pub fn next_round(&mut self, event: bool) {
        let (inner, cross) = std::mem::take(&mut self.now);
        self.weighted += f64::from(inner) * excess_rate(&cross, 0.0);
        if event {
            self.quiet = 0;
        } else {
            self.quiet += 1;
            if self.quiet > SPINE_QUIET_ROUNDS {
                *self = Shape::default();
            }
        }
    }

    /// Carries the tally per ToR pair over to new ToR numbers (`map`: old number to new,
    /// one to one; see [`crate::health::tor::renumbering`]). The caller carries the shape
    /// only when every ToR it knew is in `map`, so the totals within and between ToRs
    /// still count the same switches.
    pub fn renumber(&mut self, map: &BTreeMap<u32, u32>) {
        self.by_pair = std::mem::take(&mut self.by_pair)
            .into_iter()
            .filter_map(|(t, c)| Some((renumbered_pair(map, t)?, c)))
            .collect();
    }

    /// A judged measurement of this round between nodes on ToRs `ta`, `tb` (ignored
    /// when either is unknown); `slow`: the dip's share of it is above the entry threshold.
    pub fn measure(&mut self, (ta, tb): (Option<u32>, Option<u32>), slow: bool) {
        let (Some(ta), Some(tb)) = (ta, tb) else {
            return;
        };
        if ta == tb {
            bump(&mut self.inner, slow);
            self.now.0 = self.now.0.saturating_add(1);
            return;
        }
        bump(&mut self.cross, slow);
        bump(&mut self.now.1, slow);
        bump(
            self.by_pair.entry((ta.min(tb), ta.max(tb))).or_default(),
            slow,
        );
    }

    /// The ToRs the dip reached, by the share of each ToR's measurements to other ToRs it
    /// slowed beyond `base` (see [`SPINE_TOR_REACH`]); empty when it slowed none.
    fn reached(&self, base: f64) -> Vec<u32> {
        let mut per_tor: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
        for (&(a, b), &(m, k)) in &self.by_pair {
            for t in [a, b] {
                let c = per_tor.entry(t).or_default();
                c.0 = c.0.saturating_add(m);
                c.1 = c.1.saturating_add(k);
            }
        }
        let rates: Vec<(u32, f64)> = per_tor
            .iter()
            .map(|(&t, c)| (t, excess_rate(c, base)))
            .collect();
        let busiest = rates.iter().map(|x| x.1).fold(0.0, f64::max);
        if busiest <= 0.0 {
            return Vec::new();
        }
        let reached: Vec<u32> = rates
            .iter()
            .filter(|x| x.1 >= SPINE_TOR_REACH * busiest)
            .map(|x| x.0)
            .collect();
        if (reached.len() as f64) < SPINE_MIN_TOR_SHARE * rates.len() as f64 {
            return Vec::new();
        }
        reached
    }

    /// The spine verdict the tally supports, if any, with `base` the share of measurements
    /// slow on their own outside events: see the module.
    pub fn judge(&self, base: f64) -> Option<SpineVerdict> {
        let base = base.clamp(0.0, 1.0);
        if self.cross.1 < SPINE_MIN_SLOW {
            return None;
        }
        let tors = self.reached(base);
        if tors.len() < SPINE_MIN_TORS {
            return None;
        }
        // The ToR pairs between reached ToRs, and those the dip slowed at half its overall
        // rate (beyond the noise) or more.
        let overall = excess_rate(&self.cross, base);
        let (mut between, mut slowed) = (0usize, 0usize);
        for ((a, b), c) in &self.by_pair {
            if tors.binary_search(a).is_ok() && tors.binary_search(b).is_ok() {
                between += 1;
                slowed += usize::from(excess_rate(c, base) >= 0.5 * overall);
            }
        }
        if overall <= 0.0 || (slowed as f64) < SPINE_PAIR_COVER * between as f64 {
            return None;
        }
        let (inner_measured, inner_slow) = self.inner;
        let noise = base * f64::from(inner_measured);
        // What a dip that spared nothing would have slowed within ToRs beyond the noise.
        let weighted = self.weighted + f64::from(self.now.0) * excess_rate(&self.now.1, 0.0);
        let expected = weighted - noise;
        if expected < SPINE_INNER_EXPECTED
            || f64::from(inner_slow) > noise + SPINE_INNER_RATIO * expected
        {
            return None;
        }
        Some(SpineVerdict {
            tors,
            tor_pairs: slowed,
            cross_share: f64::from(self.cross.1) / f64::from(self.cross.0.max(1)),
            inner_share: f64::from(inner_slow) / f64::from(inner_measured.max(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four ToRs of 16 nodes, every ordered pair measured `turns` times; `slowed` says
    /// which pairs (node numbers) the dip slowed.
    fn tally(turns: usize, slowed: impl Fn(usize, usize) -> bool) -> Shape {
        let mut s = Shape::default();
        for _ in 0..turns {
            for a in 0..64 {
                for b in (0..64).filter(|&b| b != a) {
                    let tor = |x: usize| Some((x / 16) as u32);
                    s.measure((tor(a), tor(b)), slowed(a, b));
                }
            }
        }
        s
    }

    /// A stand-in for an ECMP hash: which of four spines the pair crosses.
    fn spine_of(a: usize, b: usize) -> usize {
        (a.min(b) * 7 + a.max(b) * 13) % 4
    }

    #[test]
    fn a_dip_on_one_spine_s_pairs_between_tors_is_a_spine_verdict() {
        let s = tally(1, |a, b| a / 16 != b / 16 && spine_of(a, b) == 1);
        let v = s.judge(0.0).expect("a spine's shape");
        assert_eq!(v.tors, [0, 1, 2, 3]);
        assert_eq!(v.tor_pairs, 6);
        assert_eq!(v.inner_share, 0.0);
        assert!((v.cross_share - 0.25).abs() < 0.05, "{}", v.cross_share);
    }

    #[test]
    fn a_random_share_of_the_links_is_not_a_spine() {
        // The same share, within ToRs as well as between them.
        let s = tally(1, |a, b| spine_of(a, b) == 1);
        assert_eq!(s.judge(0.0), None);
    }

    #[test]
    fn one_tor_s_uplinks_or_one_tor_pair_is_not_a_spine() {
        let uplinks = tally(1, |a, b| a / 16 != b / 16 && (a / 16 == 2 || b / 16 == 2));
        assert_eq!(uplinks.judge(0.0), None);
        let tor_pair = tally(1, |a, b| {
            (a / 16).min(b / 16) == 0 && (a / 16).max(b / 16) == 3
        });
        assert_eq!(tor_pair.judge(0.0), None);
    }

    #[test]
    fn too_few_measurements_within_tors_to_tell_is_no_verdict() {
        // Every node on its own ToR: no pair within a ToR to be spared.
        let mut s = Shape::default();
        for a in 0..64u32 {
            for b in (0..64).filter(|&b| b != a) {
                s.measure((Some(a), Some(b)), (a * 7 + b * 13) % 4 == 1);
            }
        }
        assert_eq!(s.judge(0.0), None);
        // Unknown ToRs are not tallied at all.
        let mut s = Shape::default();
        for _ in 0..100 {
            s.measure((None, Some(1)), true);
        }
        assert_eq!(s, Shape::default());
    }

    #[test]
    fn a_few_slow_measurements_within_tors_are_noise_many_are_not() {
        let mut s = tally(1, |a, b| a / 16 != b / 16 && spine_of(a, b) == 1);
        // 960 measurements within ToRs, a quarter share: 240 expected of a random dip.
        for _ in 0..40 {
            s.measure((Some(0), Some(0)), true);
        }
        assert!(
            s.judge(0.0).is_some(),
            "40 of 240 expected is a spine's noise"
        );
        for _ in 0..40 {
            s.measure((Some(1), Some(1)), true);
        }
        assert_eq!(s.judge(0.0), None, "80 of 240 is a random dip's");
    }

    /// What slowed the pairs before a quiet stretch (a spine's congestion that passed) is
    /// not the shape of a new event; a shorter lull keeps the tally.
    #[test]
    fn the_tally_starts_again_after_a_quiet_stretch() {
        let mut s = tally(1, |a, b| a / 16 != b / 16 && spine_of(a, b) == 1);
        for _ in 0..SPINE_QUIET_ROUNDS {
            s.next_round(false);
        }
        s.next_round(true);
        assert!(
            s.judge(0.0).is_some(),
            "a lull of {SPINE_QUIET_ROUNDS} rounds keeps it"
        );
        for _ in 0..=SPINE_QUIET_ROUNDS {
            s.next_round(false);
        }
        assert_eq!(s, Shape::default());
    }

    /// Measurements slow on their own (here one in ten, everywhere) are the base rate: the
    /// pairs within ToRs are judged spared above it. Without the base rate they would not
    /// look spared; a random dip over the same noise is still no spine.
    #[test]
    fn the_shares_are_judged_above_the_base_rate() {
        let noisy = |a: usize, b: usize| (a * 31 + b * 17) % 10 == 3;
        let spine = tally(1, |a, b| {
            noisy(a, b) || a / 16 != b / 16 && spine_of(a, b) == 1
        });
        assert!(spine.judge(0.1).is_some());
        assert_eq!(spine.judge(0.0), None);
        let random = tally(1, |a, b| noisy(a, b) || spine_of(a, b) == 1);
        assert_eq!(random.judge(0.1), None);
    }

    /// Pairs within ToRs measured while nothing slowed anything (the rounds a dip stays on
    /// after its events) are no evidence that a later dip spares them: what it would have
    /// slowed is counted from each round's own share between ToRs. A later dip measured
    /// only between ToRs is no spine; measured within ToRs too, sparing them, it is.
    #[test]
    fn the_pairs_within_tors_count_against_their_own_round_s_share() {
        let tor = |x: usize| Some((x / 16) as u32);
        let round = |s: &mut Shape, inner: bool, slow: &dyn Fn(usize, usize) -> bool| {
            s.next_round(true);
            for a in 0..64 {
                for b in [(a + 5) % 64, (a + 21) % 64, (a + 37) % 64] {
                    if inner || tor(a) != tor(b) {
                        s.measure((tor(a), tor(b)), slow(a, b));
                    }
                }
            }
        };
        let dip = |a: usize, b: usize| spine_of(a, b) == 1;
        let mut s = Shape::default();
        for _ in 0..10 {
            round(&mut s, true, &|_, _| false);
        }
        for _ in 0..10 {
            round(&mut s, false, &dip);
        }
        assert_eq!(s.judge(0.0), None);
        for _ in 0..5 {
            round(&mut s, true, &|a, b| tor(a) != tor(b) && dip(a, b));
        }
        assert!(s.judge(0.0).is_some());
    }

    /// A weak dip on one ToR's uplinks over noise everywhere: a fifth of its pairs to the
    /// other ToRs slow, the pairs within ToRs spared. Counted with the noise, the slow
    /// measurements between ToRs look spread (noise reaches every ToR pair, and the ToR is
    /// an end of under three quarters of them); beyond the noise they are all the one
    /// ToR's, which is no spine.
    #[test]
    fn one_tor_s_weak_uplinks_over_noise_are_not_a_spine() {
        let noisy = |a: usize, b: usize| (a * 31 + b * 17) % 10 == 3;
        let uplinks = |a: usize, b: usize| {
            a / 16 != b / 16 && (a / 16 == 2 || b / 16 == 2) && (a + b).is_multiple_of(5)
        };
        let s = tally(1, |a, b| noisy(a, b) || uplinks(a, b));
        assert_eq!(s.judge(0.1), None);
    }

    /// Every ordered pair of 64 nodes measured once, node `x` on ToR `tor(x)`.
    fn tally_on(tor: impl Fn(usize) -> u32, slowed: impl Fn(usize, usize) -> bool) -> Shape {
        let mut s = Shape::default();
        for a in 0..64 {
            for b in (0..64).filter(|&b| b != a) {
                s.measure((Some(tor(a)), Some(tor(b))), slowed(a, b));
            }
        }
        s
    }

    /// ToRs of 32, 4, 4 and 24 members: a spine slows each ToR's pairs at the same rate,
    /// though the big ToRs are an end of most of the slow measurements.
    #[test]
    fn a_spine_over_tors_of_unequal_sizes_is_a_spine() {
        let tor = |x: usize| match x {
            0..32 => 0,
            32..36 => 1,
            36..40 => 2,
            _ => 3,
        };
        let s = tally_on(tor, |a, b| tor(a) != tor(b) && spine_of(a, b) == 1);
        let v = s.judge(0.0).expect("a spine's shape");
        assert_eq!(v.tors, [0, 1, 2, 3]);
        assert_eq!(v.tor_pairs, 6);
    }

    /// Two dips on two ToR pairs (0–1 and 2–3) reach four ToRs alike, through two of the
    /// six pairs between them: no spine.
    #[test]
    fn two_tor_pair_dips_are_not_a_spine() {
        let tor = |x: usize| (x / 16) as u32;
        let pair = |a: usize, b: usize| (tor(a).min(tor(b)), tor(a).max(tor(b)));
        let s = tally_on(tor, |a, b| matches!(pair(a, b), (0, 1) | (2, 3)));
        assert_eq!(s.judge(0.0), None);
    }
}
