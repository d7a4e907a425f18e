//! The ToR (leaf switch) as a condition its members share.
//!
//! A ToR that turns slow slows every probe that touches one of its members, so without
//! topology its members look like a crowd of independent stragglers: that blocked the
//! whole group's cordons for as long as the ToR stayed slow, and a straggler inside the
//! ToR was never found. With each node's ToR known, the engine fits every ToR's *level*
//! each round from the round's probes: a probe inside one ToR crosses it once, a probe
//! between two crosses both, so its log residual is modelled as the sum of its distinct
//! ToRs' levels. The fit alternates medians (each ToR's level is the median, over the
//! probes touching it, of their residual less the other ToR's level), which a straggler
//! among the members moves little (it touches a few of the ToR's probes, the ToR all of
//! them). Fitting on probes rather than on the members' scores keeps ToRs apart: a member
//! of a healthy ToR whose probes mostly go to a slow one is not itself slow. Every ToR is
//! refitted at once, starting from its own probes, so that the ToRs' order decides
//! nothing (one after another, the first of two ToRs took the slowdown of the other).
//!
//! Residuals are taken against the group's learned normal, less a *zero*: the level of a
//! ToR that is not slow, from the ToRs' own probes (those between two members of one
//! ToR), so that a change of the whole group (a fleet-wide step, a daily swing) is the
//! fabric's and moves no ToR, while one slow ToR of two is still that ToR's. The stride
//! pairs members of one ToR only in some rounds, and in the others the zero is that of
//! rounds ago while the group drifts: so what a round's levels share is taken off them
//! (their lower median), every round. A group of exactly two ToRs also measures its own
//! zero from its round (see [`PairZero`]), and a ToR verdict there needs the ToR slow
//! against both zeros: against the lower of the two ToRs' own alone, one of two ToRs
//! that swing apart over the day was slow by their difference. Each ToR's level is the
//! median of its last `window` fitted levels, against the round noise.
//!
//! Each ToR has a learned normal level (the group's baseline rule): a ToR whose level
//! stays above it is a *ToR verdict*, for the network team, never a node's. A change that
//! lasts [`HealthConfig::new_normal_rounds`] becomes the ToR's new normal: the verdict
//! ends and the round says the normal changed. When the engine judges by ToR
//! (`tor_aware`), a level beyond the exit threshold is also taken out of the residuals of
//! the probes touching the ToR, so a healthy member of a slow ToR scores about zero and a
//! straggler in it scores its own slowdown.
//!
//! [`HealthConfig::new_normal_rounds`]: crate::health::HealthConfig::new_normal_rounds

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::fabric::{Baseline, Normal};
use super::stats::median;

/// Members of one ToR among the round's nodes needed to measure its level: with fewer, a
/// straggler's own probes are too large a share of the ToR's to tell the two apart.
pub const TOR_MIN_MEMBERS: usize = 3;

/// Windows of fitted rounds a ToR's slow uplinks are held after its fit last showed them
/// ([`TorJudgement::uplinks`]). A probe plan on a stride pairs the members of a large ToR
/// with each other for runs of rounds (a stride under the ToR's size keeps most of its
/// probes inside): held out, such a run lowered a 16-member ToR's windowed level for ten
/// rounds or so every few hundred while a dip on its uplinks went on, and a member whose
/// re-pairing landed then was recommended.
pub const UPLINKS_HOLD: usize = 2;

/// Fitted rounds in a row that must show a ToR's members slow with the outside and fine
/// inside before its uplinks are marked ([`TorJudgement::uplinks`]). Held out, every false
/// mark was noise that one windowed level carried over the threshold for a round or two
/// (each then held for [`UPLINKS_HOLD`] windows, holding the ToR's members as a crowd).
pub const UPLINKS_ONSET: usize = 3;

/// Passes of the fit ([`alternate`]): two ToRs that share most of the probes settle in two
/// or three; an odd ring of ToR pairs (a round whose probes all leave their ToR, each ToR
/// paired with the next) shrinks its error by half or more each pass.
const FIT_PASSES: usize = 12;

/// The lower median of `v` (the smaller middle value of an even count; 0 when empty): the
/// zero ToR levels are taken from (over the ToRs' own probes), and the shift the fit takes
/// off a round's levels (over the levels). One slow ToR of two is the slow one; with more, a
/// minority of slow ToRs moves it little, and it is not the minimum of a few noisy
/// estimates (which sits below the normal ToRs' level and makes every ToR look slow).
pub(crate) fn lower_median<'a>(v: impl Iterator<Item = &'a f64>) -> f64 {
    let mut all: Vec<f64> = v.copied().collect();
    all.sort_by(f64::total_cmp);
    all.get(all.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0.0)
}

/// Each fitted ToR's [`Level::broad`]: per member (a node behind a ToR in `level`), the
/// median over its `probes` of the residual less `zero` and less the level of the other
/// end's ToR when that is another (a probe inside the ToR crosses it once); then per ToR
/// the lower quartile over its members (the lowest of four or fewer).
fn member_levels<'a>(
    tor: &dyn Fn(usize) -> Option<u32>,
    probes: impl Iterator<Item = &'a Touch>,
    level: &BTreeMap<u32, f64>,
    zero: f64,
) -> BTreeMap<u32, f64> {
    let mut by_node: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for p in probes {
        for (me, other) in [(p.a, p.b), (p.b, p.a)] {
            let Some(t) = tor(me).filter(|t| level.contains_key(t)) else {
                continue;
            };
            let o = tor(other);
            let crossed = match o {
                Some(o) if o != t => level.get(&o).copied().unwrap_or(0.0),
                _ => 0.0,
            };
            by_node.entry(me).or_default().push(p.r - zero - crossed);
        }
    }
    let mut by_tor: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for (node, mut v) in by_node {
        if let Some(t) = tor(node) {
            by_tor.entry(t).or_default().push(median(&mut v));
        }
    }
    by_tor
        .into_iter()
        .map(|(t, mut v)| {
            v.sort_by(f64::total_cmp);
            (t, v[(v.len() - 1) / 4])
        })
        .collect()
}

/// The fit's alternation over the ToRs `tors`: every ToR's level becomes the median, over
/// the `touches` (each probe's two ToRs and residual) that cross it, of the residual less
/// `zero` and less the other ToR's level; all ToRs at once, from the previous pass's
/// levels, so that no ToR's place in the order decides (one after another, the first of
/// two ToRs took a slowdown their probes between them share, also when it was the
/// other's). A ToR's own probes (`inner`, their medians) cross it alone: they give its
/// first level where the round has some, and a ToR without them starts from its probes
/// to those. The result is the mean of the last two passes: where the probes cannot
/// place a shift (all between ToRs, which measure sums only), the passes swing it between
/// the ToRs, and the mean shares it out evenly. On an even ring of ToR pairs the probes
/// cannot tell one slow ToR from a pattern of the others either (only sums around the
/// ring are measured): it gets about half its level, and the rounds with probes inside
/// ToRs, in the median of the last `window` fits, give it the rest.
fn alternate(
    tors: impl Iterator<Item = u32>,
    inner: &BTreeMap<u32, f64>,
    touches: &[(Option<u32>, Option<u32>, f64)],
    zero: f64,
) -> BTreeMap<u32, f64> {
    let tors: BTreeSet<u32> = tors.collect();
    // Each ToR's probes, once: the other end's ToR (None: its own, or unknown) and the
    // residual less the zero.
    let mut by_tor: BTreeMap<u32, Vec<(Option<u32>, f64)>> = BTreeMap::new();
    for &(ta, tb, r) in touches {
        for (me, other) in [(ta, tb), (tb, ta)] {
            if let Some(t) = me.filter(|t| tors.contains(t)) {
                by_tor
                    .entry(t)
                    .or_default()
                    .push((other.filter(|o| *o != t), r - zero));
            }
            if ta == tb {
                break;
            }
        }
    }
    let own: BTreeMap<u32, f64> = tors
        .iter()
        .filter_map(|t| Some((*t, inner.get(t)? - zero)))
        .collect();
    let start: BTreeMap<u32, f64> = tors
        .iter()
        .map(|&t| {
            let level = own.get(&t).copied().or_else(|| {
                let mut v: Vec<f64> = by_tor
                    .get(&t)?
                    .iter()
                    .map(|(o, r)| r - o.and_then(|o| own.get(&o)).copied().unwrap_or(0.0))
                    .collect();
                Some(median(&mut v))
            });
            (t, level.unwrap_or(0.0))
        })
        .collect();
    let pass = |before: &BTreeMap<u32, f64>| -> BTreeMap<u32, f64> {
        before
            .iter()
            .map(|(&t, &was)| {
                let Some(own) = by_tor.get(&t) else {
                    return (t, was);
                };
                let mut v: Vec<f64> = own
                    .iter()
                    .map(|(o, r)| r - o.and_then(|o| before.get(&o)).copied().unwrap_or(0.0))
                    .collect();
                (t, median(&mut v))
            })
            .collect()
    };
    let mut last = start.clone();
    let mut now = pass(&last);
    for _ in 1..FIT_PASSES {
        last = std::mem::take(&mut now);
        now = pass(&last);
    }
    now.into_iter()
        .map(|(t, l)| (t, (l + last[&t]) / 2.0))
        .collect()
}

/// What a group of exactly two fitted ToRs measured of its own zero, in the last round
/// whose probes could (see [`PairZero::measure`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PairZero {
    /// The two ToRs, lower first.
    tors: (u32, u32),
    /// The zero measured.
    zero: f64,
    /// The median residual of that round's probes between the two.
    between: f64,
}

impl PairZero {
    /// The zero of a round of two fitted ToRs `tors`, each with probes between its own
    /// members (`inner`, their medians) and probes between the two (`between`, their
    /// median): a probe inside a ToR is the zero and that ToR's level, one between them
    /// the zero and both levels, so the zero is the sum of the two ToRs' own less the one
    /// between them, whatever either ToR's level (see [`paired_levels`] for what it
    /// gates and why it is not the fit's zero).
    ///
    /// What slows only the probes between them (a spine, the links between the two ToRs)
    /// lowers the measured zero, and would make both ToRs slow by it: the zero is never
    /// taken below the lower of the two ToRs' own, the zero otherwise.
    fn measure(tors: (u32, u32), inner: &BTreeMap<u32, f64>, between: f64) -> Option<Self> {
        let (a, b) = (inner.get(&tors.0)?, inner.get(&tors.1)?);
        let zero = (a + b - between).max(a.min(*b));
        Some(PairZero {
            tors,
            zero,
            between,
        })
    }

    /// The zero of a round whose fitted ToRs are `members`: when they are exactly two
    /// with probes between them, this round's measure ([`PairZero::measure`], also
    /// returned) or else `last` carried ([`PairZero::carried`]); none otherwise.
    fn of_round(
        members: &BTreeMap<u32, usize>,
        inner: &BTreeMap<u32, f64>,
        touches: &[(Option<u32>, Option<u32>, f64)],
        last: Option<PairZero>,
    ) -> (Option<PairZero>, Option<f64>) {
        let [a, b] = members.keys().copied().collect::<Vec<_>>()[..] else {
            return (None, None);
        };
        let Some(x) = between_two((a, b), touches) else {
            return (None, None);
        };
        let now = PairZero::measure((a, b), inner, x);
        let zero = now.map(|p| p.zero);
        (
            now,
            zero.or_else(|| last.and_then(|l| l.carried((a, b), x))),
        )
    }

    /// The zero of a round of the same two ToRs without probes inside one of them (the
    /// stride paired none): the measured zero moved as the probes between them moved
    /// since (the group's drift moves both alike). Such a round cannot tell the drift
    /// from a ToR that turned slow since, which it takes for the drift: that ToR is found
    /// once the stride pairs members of both again (within a turn of the stride).
    fn carried(&self, tors: (u32, u32), between: f64) -> Option<f64> {
        (self.tors == tors).then_some(self.zero + between - self.between)
    }
}

/// The levels of two ToRs `tors` against the zero their own round measured (`zero`: see
/// [`PairZero`]), less a shift up of both (what slows only the probes between them, which
/// the measured zero did not take: a spine, the links between the two).
///
/// The fit's levels take the lower of the two ToRs' own probes as the zero, so one of
/// two ToRs that swing apart over the day (one faster than usual, one slower) is slow by
/// their difference; against their measured zero each is slow by its own swing. A
/// verdict needs both. Both, because neither zero holds everywhere: the measured one
/// assumes a probe between the ToRs crosses each as a probe inside it does, and a ToR
/// whose downlinks to its members are congested slows the probes to them only (the
/// probes between the two half as much as its own), which the measured zero halves.
fn paired_levels(
    tors: impl Iterator<Item = u32>,
    inner: &BTreeMap<u32, f64>,
    touches: &[(Option<u32>, Option<u32>, f64)],
    zero: f64,
) -> BTreeMap<u32, f64> {
    let level = alternate(tors, inner, touches, zero);
    let up = lower_median(level.values()).max(0.0);
    level.into_iter().map(|(t, l)| (t, l - up)).collect()
}

/// The median residual of `touches` between ToRs `a` and `b` (None: no such probe).
fn between_two((a, b): (u32, u32), touches: &[(Option<u32>, Option<u32>, f64)]) -> Option<f64> {
    let mut v: Vec<f64> = touches
        .iter()
        .filter(|(x, y, _)| (*x, *y) == (Some(a), Some(b)) || (*x, *y) == (Some(b), Some(a)))
        .map(|(_, _, r)| *r)
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}

/// One probe for the fit: its two ends and its log residual against the group's normal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Touch {
    /// One end (node index).
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Its log residual.
    pub r: f64,
}

/// One ToR's level this round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Level {
    /// Its fitted log level, relative to the round's other ToRs.
    pub level: f64,
    /// The median residual of this round's probes between two of its own members (None:
    /// no such probe). A spine or the links between ToRs slow the probes that leave the
    /// ToR, never these: the ToR itself does.
    pub inner: Option<f64>,
    /// The lower quartile over its members (the lowest of four or fewer) of each one's
    /// own level (the median of its probes' residuals less the other end's ToR level;
    /// None: no member probed). A slow ToR slows every member's probes alike; two or
    /// three members of four slowed on their own (congestion on their uplinks that their
    /// counters miss) move the ToR's median but not this. (The lower median let a third
    /// member congested for a few rounds through: held out, 464 false ToR verdicts against
    /// 244.)
    pub broad: Option<f64>,
    /// Of exactly two fitted ToRs, its level against the zero their own probes measure
    /// ([`PairZero`]; None: not two, or not measured): a verdict's gate there.
    pub paired: Option<f64>,
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
    /// [`TorLevels::fit_with`] with no zero measured before (the tests' fit).
    #[cfg(test)]
    pub fn fit(
        tor_of: &[Option<u32>],
        n: usize,
        counted: impl Fn(usize) -> bool,
        probes: &[Touch],
        zero: Option<f64>,
    ) -> BTreeMap<u32, Level> {
        Self::fit_with(tor_of, n, counted, probes, zero, None).0
    }

    /// Fits this round's level of every ToR with at least [`TOR_MIN_MEMBERS`] members
    /// among the nodes `counted` (of the `n` in `tor_of`; none unless two ToRs have
    /// that many), from `probes` between counted nodes, against `zero` (see
    /// [`TorWatch::zero`]; without one, this round's own ToRs' probes give it): levels
    /// not yet smoothed. A group of exactly two fitted ToRs also measures its own zero
    /// ([`PairZero`]), or carries `last`, what it measured before, for each ToR's
    /// [`Level::paired`]; returns the levels and this round's measure, if any.
    pub fn fit_with(
        tor_of: &[Option<u32>],
        n: usize,
        counted: impl Fn(usize) -> bool,
        probes: &[Touch],
        zero: Option<f64>,
        last: Option<PairZero>,
    ) -> (BTreeMap<u32, Level>, Option<PairZero>) {
        let tor = |i: usize| tor_of.get(i).copied().flatten();
        let mut members: BTreeMap<u32, usize> = BTreeMap::new();
        for i in (0..n).filter(|&i| counted(i)) {
            if let Some(t) = tor(i) {
                *members.entry(t).or_default() += 1;
            }
        }
        members.retain(|_, m| *m >= TOR_MIN_MEMBERS);
        // A ToR is judged against the other fitted ToRs: their own probes give the zero.
        // With one (a group behind one ToR, or one ToR and a few nodes behind others) the
        // zero is the group's learnt normal, so a drift or a fleet-wide step of the group
        // was that ToR's level; it is the fabric verdict's to name.
        if members.len() < 2 {
            return (BTreeMap::new(), None);
        }
        // The probes the fit reads: between two distinct counted nodes, with a residual.
        let usable: Vec<&Touch> = probes
            .iter()
            .filter(|p| p.a < n && p.b < n && p.a != p.b && p.r.is_finite())
            .filter(|p| counted(p.a) && counted(p.b))
            .collect();
        let touches: Vec<(Option<u32>, Option<u32>, f64)> =
            usable.iter().map(|p| (tor(p.a), tor(p.b), p.r)).collect();
        // Each ToR's own probes (both ends its members) cross it alone.
        let mut inner: BTreeMap<u32, f64> = BTreeMap::new();
        for t in members.keys() {
            let mut v: Vec<f64> = touches
                .iter()
                .filter(|(ta, tb, _)| *ta == Some(*t) && *tb == Some(*t))
                .map(|(_, _, r)| *r)
                .collect();
            if !v.is_empty() {
                inner.insert(*t, median(&mut v));
            }
        }
        // The zero: the lower median of the ToRs' own probes, once two ToRs have some
        // (else the residuals' own zero, the group's normal).
        let zero = zero.unwrap_or(if inner.len() >= 2 {
            lower_median(inner.values())
        } else {
            0.0
        });
        // Two ToRs: their own zero, measured this round or carried from the last that could.
        let (measured, pair) = PairZero::of_round(&members, &inner, &touches, last);
        let mut level = alternate(members.keys().copied(), &inner, &touches, zero);
        // The levels are relative to the round's other ToRs: a shift of them all (the
        // group's drift since its ToRs' own probes last gave the zero, in rounds whose
        // stride pairs no two members of one ToR) is nobody's.
        let shift = lower_median(level.values());
        // The members' own levels are read as fitted and the shift taken off them after:
        // a median moves with its inputs, whichever probes (inside a ToR, between two, to
        // a node of no fitted ToR) set it.
        let broad: BTreeMap<u32, f64> = member_levels(&tor, usable.iter().copied(), &level, zero)
            .into_iter()
            .map(|(t, b)| (t, b - shift))
            .collect();
        for l in level.values_mut() {
            *l -= shift;
        }
        let paired = pair.map_or_else(BTreeMap::new, |z| {
            paired_levels(members.keys().copied(), &inner, &touches, z)
        });
        let levels = level
            .into_iter()
            .map(|(t, l)| {
                (
                    t,
                    Level {
                        level: l,
                        inner: inner.get(&t).copied(),
                        broad: broad.get(&t).copied(),
                        paired: paired.get(&t).copied(),
                        members: members[&t],
                    },
                )
            })
            .collect();
        (levels, measured)
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
    /// The last `window` fitted levels: the ToR's level is their median.
    fits: VecDeque<f64>,
    /// The last `window` rounds' inner residuals that had one.
    inners: VecDeque<f64>,
    /// The last `window` rounds' broad levels that had one ([`Level::broad`]).
    broads: VecDeque<f64>,
    /// The last `window` rounds' paired levels, in a row ([`Level::paired`]).
    paireds: VecDeque<f64>,
    /// The paired level's own learned normal, as `normal` is the level's.
    paired_normal: Normal,
    /// It had a verdict the last round it was fitted (its exit is then half the
    /// threshold). A ToR missing from one round's fit keeps it, as it keeps its history.
    held: bool,
    /// A recent fit found its members slow with the outside and its own probes fine
    /// ([`TorJudgement::uplinks`]): by how much; kept, as `held` is, through a round it is
    /// not fitted, and through [`UPLINKS_HOLD`] windows of fitted rounds that do not say so.
    uplinks: Option<f64>,
    /// Fitted rounds left before `uplinks` lapses.
    uplinks_hold: usize,
    /// Fitted rounds in a row that showed its uplinks slow ([`UPLINKS_ONSET`]).
    uplinks_onset: usize,
    /// The residuals of its own probes (less the zero) measured since its members became
    /// slow with the outside (or while the mark is held), the last `window` of them: what
    /// the uplinks mark reads of its own probes. The windowed `inners` would not do: a
    /// stride plan measures a small ToR's own probes a few rounds in a hundred, so their
    /// window can predate the slowdown by that long, and a ToR that turned slow inside too
    /// looked fine inside.
    fresh_inners: VecDeque<f64>,
}

impl TorTrack {
    /// Takes this round's fitted `fit` into the windows (of `window` rounds) and returns
    /// the ToR's smoothed level: each part the median of its window (the own probes' less
    /// `zero`).
    fn smooth(&mut self, fit: &Level, window: usize, zero: Option<f64>) -> Level {
        let level = windowed(&mut self.fits, Some(fit.level), window).unwrap_or(fit.level);
        let inner = windowed(&mut self.inners, fit.inner, window).map(|x| x - zero.unwrap_or(0.0));
        let broad = windowed(&mut self.broads, fit.broad, window);
        // Of two ToRs, the level against their own zero, smoothed as the level is (a
        // round that did not measure it, the group no longer two, starts it afresh).
        if fit.paired.is_none() {
            self.paireds.clear();
        }
        let paired = windowed(&mut self.paireds, fit.paired, window);
        Level {
            level,
            inner,
            broad,
            paired,
            members: fit.members,
        }
    }

    /// Marks its uplinks slow when its members are slow with the outside beyond the
    /// threshold by both the ToR's level and its typical member's (`outside`: the pair;
    /// the typical member's is None when no member probed, and then there is no mark)
    /// while its own probes measured since then (`inner`: this round's, None without one;
    /// the last window of them kept) stay under half of it (a verdict's exit): its
    /// uplinks, or what lies past them. The mark is the larger of the two. Held out, a dip
    /// on one ToR's uplinks lasting two hours made no ToR verdict (its own probes were
    /// fine) and every member was recommended, one by one, in the rounds no crowd held it.
    /// Both levels, not either: the level is a median over the probes touching the ToR,
    /// which most of a small ToR's members slowed with the outside (or a dip on a random
    /// share of the links, sampled by few probes a round) lift while its typical member
    /// stays fine. Own probes measured since, not their window: a small ToR's own probes
    /// come a few rounds in a hundred, and a window of them from before a slowdown of the
    /// whole ToR (congestion on it) said "fine inside". Otherwise (a fitted round that
    /// does not show it, or a round the ToR is not fitted, called with no `inner`) the
    /// mark is held through [`UPLINKS_HOLD`] windows of such rounds before it lapses, at
    /// the value it last had. A ToR not marked yet is marked only once [`UPLINKS_ONSET`]
    /// fitted rounds in a row showed it (one not fitted breaks the run: see
    /// [`TorWatch::uplinks`]).
    fn mark_uplinks(&mut self, outside: (f64, Option<f64>), inner: Option<f64>, rule: TorRule) {
        let (level, broad) = outside;
        let slow = level > rule.threshold && broad.is_some_and(|b| b > rule.threshold);
        // Kept while the mark is held too: the rounds whose strides keep the members'
        // probes inside lower the levels for a while, and their own probes are the freshest
        // word on the inside.
        let inner = if slow || self.uplinks.is_some() {
            windowed(&mut self.fresh_inners, inner, rule.window.max(1))
        } else {
            self.fresh_inners.clear();
            None
        };
        let shows = slow && inner.is_some_and(|x| x < rule.threshold / 2.0);
        self.uplinks_onset = if shows {
            self.uplinks_onset.saturating_add(1)
        } else {
            0
        };
        if shows && (self.uplinks.is_some() || self.uplinks_onset >= UPLINKS_ONSET) {
            self.uplinks = Some(broad.map_or(level, |b| b.max(level)));
            self.uplinks_hold = UPLINKS_HOLD * rule.window.max(1);
        } else if self.uplinks_hold > 0 {
            // Held through rounds whose strides kept its members' probes inside it: a run
            // of them lowers its windowed levels while the uplinks stay slow.
            self.uplinks_hold -= 1;
        } else {
            self.uplinks = None;
        }
    }
}

/// Adds `x` (if any) to a window of the last `window` values and returns their median
/// (None: the window is empty).
fn windowed(values: &mut VecDeque<f64>, x: Option<f64>, window: usize) -> Option<f64> {
    if let Some(x) = x {
        values.push_back(x);
    }
    while values.len() > window {
        values.pop_front();
    }
    let mut v: Vec<f64> = values.iter().copied().collect();
    (!v.is_empty()).then(|| median(&mut v))
}

/// A ToR verdict: the ToR, its level against its normal, its members.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TorVerdict {
    /// The ToR (the topology's number for it).
    pub tor: u32,
    /// Its level this round above its learned normal (log units); for a ToR too small to
    /// fit a level, its typical member's window score (relative to the round).
    pub excess: f64,
    /// Its members in the group.
    pub members: usize,
}

/// What [`TorWatch::judge`] found this round.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorJudgement {
    /// ToRs measured this round (enough members to judge), with a verdict or not.
    pub judged: Vec<u32>,
    /// ToRs with a verdict.
    pub verdicts: Vec<TorVerdict>,
    /// ToRs whose lasting change became their new normal this round.
    pub renewed: Vec<u32>,
    /// ToRs whose members are slow with the outside while the probes between two of them
    /// are not ([`TorWatch::judge`]), with how slow (log units, the larger of the ToR's
    /// level and its typical member's): what slows them is beyond their own links (the
    /// ToR's uplinks, or the switches past them), and no member's own.
    pub uplinks: Vec<(u32, f64)>,
}

/// The ToR verdicts of one group: each measured ToR's level against its own learned normal.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TorWatch {
    tracks: BTreeMap<u32, TorTrack>,
    /// What the group, while it had exactly two fitted ToRs, last measured of its zero.
    pair: Option<PairZero>,
    /// Per ToR too small to fit: see [`TorWatch::judge_small`].
    whole: BTreeMap<u32, WholeTrack>,
}

/// A ToR too small to fit a level, as [`TorWatch::judge_small`] keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
struct WholeTrack {
    /// The members it was judged on: a change (a member gone or back, a renumbering)
    /// starts its history afresh, as it is another set of nodes.
    members: Vec<usize>,
    /// Its last `2 × window` rounds: whether every member was slow at once (an event).
    hist: VecDeque<bool>,
    /// Its excess in its last event round: what its verdict reports in rounds between.
    excess: f64,
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

/// Whether a small ToR's verdict holds, from its last `2 × window` rounds (`hist`, whether
/// each was an event): `window` events in a row that ended within the last `window`
/// rounds (the entry; held out, batch `1000000`, 8 of 10 made 250 false ToR verdicts
/// against 201), and a third of the last `window` events still (a hysteresis, so that a
/// slow ToR whose members' windows dip under the threshold now and then stays one
/// verdict). A function of those rounds alone, so that two members agree within
/// `2 × window` rounds of taking over each other's state.
fn small_tor_holds(hist: &VecDeque<bool>, window: usize) -> bool {
    let events = |from: usize, to: usize| hist.range(from..to).filter(|x| **x).count();
    let n = hist.len();
    let entered = (0..=window)
        .filter(|k| n >= window + k)
        .any(|k| events(n - window - k, n - k) == window);
    entered && 3 * events(n.saturating_sub(window), n) >= window
}

impl TorWatch {
    /// Judges the ToRs too small to fit a level (`small`: each one's verdict-to-be, its
    /// members, and whether this round is its event: every member slow at once by about
    /// as much) and returns their verdicts. A ToR's verdict starts from `window` event
    /// rounds in a row and holds while a third of the last `window` are events, for up to
    /// `window` rounds after the last such run ([`small_tor_holds`]; its excess the last
    /// event round's): a function of its last `2 × window` rounds alone, so that a member
    /// that takes over another's state (which does not carry this history) agrees with it
    /// within `2 × window` rounds.
    /// Two members each slow on their own, or paired with the same slow peers, are slow
    /// together now and then; held out, a verdict from 3 such rounds of 10 (as a fitted
    /// ToR's) named ToRs of two that nothing slowed 2,456 times in one batch. ToRs not
    /// judged this round are forgotten.
    pub(crate) fn judge_small(
        &mut self,
        small: Vec<(TorVerdict, Vec<usize>, bool)>,
        window: usize,
    ) -> Vec<TorVerdict> {
        let window = window.max(1);
        let judged: BTreeSet<u32> = small.iter().map(|(v, _, _)| v.tor).collect();
        self.whole.retain(|t, _| judged.contains(t));
        let mut out = Vec::new();
        for (mut verdict, members, event) in small {
            let w = self.whole.entry(verdict.tor).or_default();
            if w.members != members {
                *w = WholeTrack {
                    members,
                    ..WholeTrack::default()
                };
            }
            w.hist.push_back(event);
            while w.hist.len() > 2 * window {
                w.hist.pop_front();
            }
            if event {
                w.excess = verdict.excess;
            }
            if small_tor_holds(&w.hist, window) {
                verdict.excess = w.excess;
                out.push(verdict);
            }
        }
        out
    }

    /// Forgets the small ToRs' histories, the zero a group of two ToRs last measured,
    /// which fitted ToRs had a verdict (another switch under the same number would keep
    /// it through the exit alone) and their uplinks marks with the own probes those read:
    /// after a remap or a restore the ToR numbers may name other switches.
    pub(crate) fn forget_topology(&mut self) {
        self.whole.clear();
        self.pair = None;
        for track in self.tracks.values_mut() {
            track.held = false;
            track.uplinks = None;
            track.uplinks_hold = 0;
            track.uplinks_onset = 0;
            track.fresh_inners.clear();
        }
    }

    /// Fits this round's ToR levels ([`TorLevels::fit_with`]) against the watch's zero
    /// ([`TorWatch::zero`]) and what the group last measured of its own (two ToRs).
    pub fn fit(
        &mut self,
        tor_of: &[Option<u32>],
        n: usize,
        counted: impl Fn(usize) -> bool,
        probes: &[Touch],
    ) -> BTreeMap<u32, Level> {
        let (levels, measured) =
            TorLevels::fit_with(tor_of, n, counted, probes, self.zero(), self.pair);
        let fitted: Vec<u32> = levels.keys().copied().collect();
        if measured.is_some() {
            self.pair = measured;
        } else if self.pair.is_some_and(|p| fitted != [p.tors.0, p.tors.1]) {
            self.pair = None;
        }
        levels
    }

    /// The zero ToR levels are taken from: the lower median, over the ToRs, of each one's
    /// recent probes between its own members (the median of its last `window`), once two
    /// ToRs have some. Those probes cross no other switch, so the zero is what a ToR that
    /// is not slow gives, also when one of two ToRs has been slow since the group formed
    /// (the group's learnt normal is then that ToR's).
    pub fn zero(&self) -> Option<f64> {
        let own: Vec<f64> = self
            .tracks
            .values()
            .filter(|t| !t.inners.is_empty())
            .map(|t| {
                let mut v: Vec<f64> = t.inners.iter().copied().collect();
                median(&mut v)
            })
            .collect();
        (own.len() >= 2).then(|| lower_median(own.iter()))
    }

    /// Smooths this round's fitted levels (`fitted`, of the ToRs in `tor_of`, `n` nodes,
    /// against `zero`) into each ToR's level, judges it against the ToR's normal, and returns the levels
    /// (those beyond `noise` to be taken out) with the judgement. A ToR not fitted this
    /// round keeps its history (it may be absent from one round's probes) but has no
    /// verdict.
    pub fn judge(
        &mut self,
        fitted: &BTreeMap<u32, Level>,
        tor_of: &[Option<u32>],
        n: usize,
        rule: TorRule,
        noise: f64,
        zero: Option<f64>,
    ) -> (TorLevels, TorJudgement) {
        let mut levels = TorLevels::carried(tor_of, n, &BTreeMap::new());
        let mut out = TorJudgement::default();
        for (&t, fit) in fitted {
            out.judged.push(t);
            // A ToR's level is relative to the others': its normal starts at zero (as fast
            // as they are), not at whatever it is when first seen, so that a ToR slow from
            // the start is a verdict, until it has lasted long enough to be the new normal.
            let track = self.tracks.entry(t).or_insert_with(|| TorTrack {
                normal: Normal {
                    baseline: Baseline(Some(0.0)),
                    run: 0,
                },
                paired_normal: Normal {
                    baseline: Baseline(Some(0.0)),
                    run: 0,
                },
                ..TorTrack::default()
            });
            let smoothed = track.smooth(fit, rule.window.max(1), zero);
            let Level {
                level,
                inner,
                broad,
                paired,
                ..
            } = smoothed;
            levels.measured.insert(t, smoothed);
            if level.abs() > noise {
                levels.shift.insert(t, level);
            }
            let judged = track.normal.judge(level, rule.threshold, rule.horizon);
            if judged.renewed {
                out.renewed.push(t);
                track.hist.clear();
            }
            track.hist.push_back(judged.slow);
            while track.hist.len() > rule.window {
                track.hist.pop_front();
            }
            let slow = track.hist.iter().filter(|x| **x).count();
            // The ToR's own probes must be slow too: what slows only the probes that leave
            // it (a spine, the links between ToRs) is not the ToR's. And its typical
            // member's own (the lower quartile): two or three members slowed on their own
            // (their uplinks congested) slow a ToR of four's median probe, not its least
            // slow member. A round with an inner probe always has a broad level.
            let above = |x: Option<f64>, t: f64| x.is_some_and(|x| x > t);
            // Of two ToRs, also against their own zero (and its own normal, learnt as the
            // level's is): two that swing apart are not one slow ToR (see `paired_levels`).
            let own = paired.map(|x| {
                let j = track.paired_normal.judge(x, rule.threshold, rule.horizon);
                (j.slow, x - track.paired_normal.level().unwrap_or(0.0))
            });
            let excess = level - track.normal.level().unwrap_or(0.0);
            let enters = judged.slow
                && slow >= rule.rounds
                && above(inner, rule.threshold)
                && above(broad, rule.threshold)
                && own.is_none_or(|(slow, _)| slow);
            // A verdict holds while every part stays above half the threshold (an exit under
            // the entry, as a node has): a ToR congested at about the threshold was a
            // verdict in pieces.
            let exit = rule.threshold / 2.0;
            let holds = track.held
                && !judged.renewed
                && excess > exit
                && above(inner, exit)
                && above(broad, exit)
                && own.is_none_or(|(_, x)| x > exit);
            // Slow outside, not inside: no verdict, its uplinks (see `mark_uplinks`), judged
            // on the own probes of this round, not their window.
            let inner_now = fit.inner.map(|x| x - zero.unwrap_or(0.0));
            track.mark_uplinks((level, broad), inner_now, rule);
            track.held = enters || holds;
            if track.held {
                out.verdicts.push(TorVerdict {
                    tor: t,
                    excess,
                    members: fit.members,
                });
            }
        }
        out.uplinks = self.uplinks(fitted, tor_of, n, rule);
        (levels, out)
    }

    /// The ToRs of `tor_of` (`n` nodes) whose uplinks are marked slow, with by how much. A
    /// ToR missing from a round's fit (fewer than [`TOR_MIN_MEMBERS`] of its members
    /// counted, or no other ToR fitted) keeps what its last fit said, as it keeps its
    /// verdict's history (its members' re-pairings cross the same uplinks), and such a
    /// round counts down the mark's hold as a fitted round that does not show it does: a
    /// ToR that stays unfitted does not hold its members for ever.
    fn uplinks(
        &mut self,
        fitted: &BTreeMap<u32, Level>,
        tor_of: &[Option<u32>],
        n: usize,
        rule: TorRule,
    ) -> Vec<(u32, f64)> {
        let unfitted = self
            .tracks
            .iter_mut()
            .filter(|(t, _)| !fitted.contains_key(t));
        for (_, track) in unfitted {
            // A round that does not show the uplinks slow, as a fitted one may not: it
            // counts a mark's hold down, and breaks a run of rounds toward one (the onset
            // counts rounds in a row; the own probes read since the run began go with it).
            track.mark_uplinks((0.0, None), None, rule);
        }
        let present: BTreeSet<u32> = tor_of.iter().take(n).flatten().copied().collect();
        self.tracks
            .iter()
            .filter(|(t, _)| present.contains(t))
            .filter_map(|(t, track)| track.uplinks.map(|x| (*t, x)))
            .collect()
    }
}

mod renumber;
#[cfg(test)]
mod tests;

pub(crate) use renumber::{renumbered_pair, renumbering};
