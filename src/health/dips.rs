//! The pairs a partial fabric event (a *dip*) explains: while it lasts, and after it has
//! lasted long enough to be the normal.
//!
//! A dip along the topology (a spine's pairs, the pairs between two ToRs) slows the same
//! pairs all along, but shows as an event only in the rounds whose permutation crosses
//! enough of them; re-measured in the rounds between, its pairs look like degraded links
//! of their own. So the pairs seen slow in its event rounds are remembered, with the ToR
//! pairs they run between, and make no link verdict until a full turn of the permutation
//! stride passes with no event (every pair measured once).
//!
//! A dip that lasts is how the network is now, not an event: after the engine's
//! new-normal horizon its pairs become the *normal*. They are then left out of the
//! partial-fabric tally (so the fabric verdict they kept up ends, and a new dip elsewhere
//! is still judged against the rest), they still make no link verdict, their probes enter
//! the nodes' windows less the dip's share of them (so the nodes the dip touched are
//! judged against the new normal, and a straggler among them by its own slowness), and
//! the round says the normal changed. The normal is not forgotten by time, since it no
//! longer makes events: each pair leaves it when it measures normal again, and a ToR
//! pair leaves it with its last-but-one pair, so a dip that ends drains away and one that
//! never ends stays the normal.
//!
//! The normal is part of the host engine's wire form ([`NormalWire`]): a member that takes
//! over another's engine state (or restarts) takes the normal with it, so a lasting dip is
//! not an event again in its view alone. The dip still on is not carried: such a member
//! tallies it afresh, and makes it the normal up to `new_normal_rounds` after the others
//! (until then it sees the dip as an event: more fabric verdicts, frozen escalation).
//! Members pick the state to take by its digest, and a member of an older release writes
//! neither; a field present whenever a dip is on (often) would split every mixed group's
//! majority during a rolling upgrade, while a normal is rare. Carrying the dip on waits
//! for a wire version that gates it.

use std::collections::{BTreeMap, BTreeSet};

use super::lifecycle::remap_pair;
use super::spine::{Shape, SpineVerdict};
use super::stats::MAX_LOG;

/// Share of a ToR's inner pairs seen slow in a dip from which the dip reaches inside
/// the ToR (see [`DipPairs::spares`]): well above the few a healthy ToR's noise puts
/// there in a long dip, well below a slow ToR's all.
pub const INNER_DIP_SHARE: f64 = 0.25;

/// Fewest of a ToR's other inner pairs (directed, not touching the node re-paired)
/// measured since the dip began for [`DipPairs::spares`] to say the dip does not reach
/// inside the ToR: with fewer, a quarter of them is not one pair, and a slow ToR's first
/// rounds would pass for a spared one.
pub const INNER_SEEN_MIN: usize = 4;

/// The two ToRs of a pair, lower first.
type TorPair = (u32, u32);

/// Distinct pairs of one ToR pair that make a dip's shape there. A dip along the topology
/// slows many pairs of each ToR pair it crosses; a lone slow pair is a link of its own (a
/// degraded link that turned slow during the dip), which the normal must not take in.
pub const NORMAL_MIN_PAIRS: usize = 2;

/// Share of a node's pairs in the normal from which the node may be *bound* to it (see
/// [`DipPairs::binds`]).
pub const NORMAL_NODE_SHARE: f64 = 0.5;

/// The lower-first ToR pair of ends on ToRs `ta`, `tb`, when both are known.
fn tor_pair((ta, tb): (Option<u32>, Option<u32>)) -> Option<TorPair> {
    Some((ta?.min(tb?), ta?.max(tb?)))
}

/// A pair a dip slowed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slowed {
    /// Its ToR pair, when both ends' ToRs are known.
    tors: Option<TorPair>,
    /// The sum of the dip's shares of its slow measurements' log residuals (their ends'
    /// own shares taken out), and how many; `None` once an end was accused beyond suspect
    /// in one of them (its own share unknown).
    shares: Option<(f64, u32)>,
}

impl Slowed {
    /// The dip's mean share of the pair's log residual, at least zero.
    fn share(&self) -> Option<f64> {
        self.shares
            .map(|(sum, k)| (sum / f64::from(k.max(1))).max(0.0))
    }
}

/// What one dip reached: the pairs it slowed and the ToR pairs they run between.
#[derive(Debug, Clone, Default, PartialEq)]
struct Reach {
    /// Pairs (both directions) seen slow in the dip's event rounds.
    pairs: BTreeMap<(usize, usize), Slowed>,
    /// The ToR pairs of those pairs, each with how many of them (both directions): a
    /// pair the event rounds happened not to measure slow is still within the dip's reach
    /// when the dip slowed a pair between the same two ToRs (with the places unknown only
    /// the pairs seen slow are). The current dip keeps a ToR pair until it is over, also
    /// when its count falls to zero; the normal prunes it (see [`Reach::prune`]).
    tors: BTreeMap<TorPair, usize>,
}

impl Reach {
    fn add(&mut self, (a, b): (usize, usize), tors: Option<TorPair>, share: Option<f64>) {
        let was = self.pairs.get(&(a, b)).copied();
        let shares = match (was, share) {
            (Some(w), _) if w.shares.is_none() => None,
            (Some(w), Some(e)) => w.shares.map(|(sum, k)| (sum + e, k.saturating_add(1))),
            (None, Some(e)) => Some((e, 1)),
            (_, None) => None,
        };
        if let Some(old) = was.and_then(|w| w.tors) {
            self.uncount(old);
        }
        let s = Slowed { tors, shares };
        self.pairs.insert((a, b), s);
        self.pairs.insert((b, a), s);
        if let Some(t) = tors {
            *self.tors.entry(t).or_default() += 2;
        }
    }

    /// Takes one pair (both directions) off its ToR pair's count.
    fn uncount(&mut self, t: TorPair) {
        if let Some(c) = self.tors.get_mut(&t) {
            *c = c.saturating_sub(2);
        }
    }

    /// Forgets the pair; returns its ToR pair when the pair was there with one.
    fn remove(&mut self, a: usize, b: usize) -> Option<TorPair> {
        self.pairs.remove(&(b, a));
        let t = self.pairs.remove(&(a, b)).and_then(|s| s.tors);
        if let Some(t) = t {
            self.uncount(t);
        }
        t
    }

    fn explains(&self, pair: (usize, usize), tors: Option<TorPair>) -> bool {
        self.pairs.contains_key(&pair) || tors.is_some_and(|t| self.tors.contains_key(&t))
    }

    /// Drops the ToR pair `t` and its pairs when fewer than [`NORMAL_MIN_PAIRS`] of them
    /// are left (the scan of the pairs runs only then, once per ToR pair).
    fn prune(&mut self, t: TorPair) {
        let left = self.tors.get(&t).copied().unwrap_or(0) / 2;
        if left < NORMAL_MIN_PAIRS {
            self.tors.remove(&t);
            self.pairs.retain(|_, v| v.tors != Some(t));
        }
    }

    /// Takes in a dip that lasted: its pairs without known ToRs, and its ToR pairs with
    /// [`NORMAL_MIN_PAIRS`] or more pairs.
    fn absorb(&mut self, other: Reach) {
        for ((a, b), s) in other.pairs {
            if a < b {
                // One direction adds both, with the pair's shares as they were.
                if let Some(old) = self.pairs.get(&(a, b)).and_then(|w| w.tors) {
                    self.uncount(old);
                }
                self.pairs.insert((a, b), s);
                self.pairs.insert((b, a), s);
                if let Some(t) = s.tors {
                    *self.tors.entry(t).or_default() += 2;
                }
            }
        }
        for t in other.tors.into_keys() {
            self.prune(t);
        }
    }

    /// Caps every pair's share at the median share of the dip's pairs. A dip slows its
    /// pairs by about one amount; a pair measured slower carries an end's own slowness
    /// too (a straggler that turned slow while still counted healthy), which must stay in
    /// that end's window.
    fn cap_shares(&mut self) {
        let mut all: Vec<f64> = self.pairs.values().filter_map(Slowed::share).collect();
        if all.is_empty() {
            return;
        }
        all.sort_by(f64::total_cmp);
        let median = all[all.len() / 2];
        for s in self.pairs.values_mut() {
            if let Some(share) = s.share() {
                s.shares = Some((share.min(median), 1));
            }
        }
    }

    /// Renumbers the pairs (`map[old]`: the new index, None: gone). ToR numbers are
    /// positions in the group's ToR table, made again at each formation, so the ToR pairs
    /// are dropped: the pairs themselves stay explained and drain one by one.
    fn remap(&mut self, map: &[Option<usize>]) {
        self.pairs = std::mem::take(&mut self.pairs)
            .into_iter()
            .filter_map(|(k, s)| Some((remap_pair(map, k)?, Slowed { tors: None, ..s })))
            .collect();
        self.tors.clear();
    }

    /// Forgets the ToR pairs (their numbers changed); the pairs stay.
    fn drop_tors(&mut self) {
        for s in self.pairs.values_mut() {
            s.tors = None;
        }
        self.tors.clear();
    }
}

/// The current dip's pairs and the normal's: see the module.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DipPairs {
    /// The dip on now (or within `hold` rounds of its last event round).
    dip: Reach,
    /// Rounds since the last event round; `None` when no dip is on.
    quiet: Option<usize>,
    /// Rounds since the current dip's first event round.
    age: usize,
    /// Dips that lasted the horizon, as far as they still slow their pairs.
    normal: Reach,
    /// Where the current dip's rounds fell (within ToRs or between them): whether it is a
    /// spine's.
    shape: Shape,
    /// The ToR numbers the ToR pairs and the shape were counted under.
    tors: Vec<Option<u32>>,
    /// The directed pairs within one ToR judged while the current dip is on (as the
    /// shape tallies them), and whether any of those measurements was slow: what
    /// [`DipPairs::spares`] takes its share of. Forgotten with the shape.
    inner_seen: BTreeMap<(usize, usize), bool>,
}

impl DipPairs {
    /// Starts a round: `event` (a partial event this round or recently) keeps the dip on;
    /// after `hold` rounds without one the dip is over and its pairs are forgotten. A dip
    /// on for more than `horizon` rounds becomes the normal in a round with an event
    /// while its fabric verdict holds (`verdict`): returns true in that round. Both are
    /// needed because the hold can be longer than the horizon (a group of more members
    /// than the horizon has rounds): one event and the quiet rounds after it are no
    /// lasting change, and there is no verdict to end.
    pub fn round(&mut self, (event, verdict): (bool, bool), hold: usize, horizon: usize) -> bool {
        self.quiet = match (event, self.quiet) {
            (true, _) => Some(0),
            (false, Some(q)) if q < hold => Some(q + 1),
            (false, _) => None,
        };
        if self.quiet.is_none() {
            self.dip = Reach::default();
            self.shape = Shape::default();
            self.inner_seen.clear();
            self.age = 0;
            return false;
        }
        self.age += 1;
        self.shape.next_round(event);
        if self.age <= horizon || !event || !verdict {
            return false;
        }
        let mut dip = std::mem::take(&mut self.dip);
        dip.cap_shares();
        self.normal.absorb(dip);
        self.shape = Shape::default();
        self.inner_seen.clear();
        self.quiet = None;
        self.age = 0;
        true
    }

    /// A judged measurement (both ends' own shares known, the pair not in the normal) of
    /// a round while the dip is on, of `pair` between nodes on ToRs `places`; `slow`: the
    /// dip's share of it is above the entry threshold. Tallied for the dip's shape (whether
    /// it is a spine's), and a pair within one ToR as seen for [`DipPairs::spares`].
    /// Nothing is tallied with no dip on (the round a dip became the normal).
    pub fn measure(
        &mut self,
        pair: (usize, usize),
        places: (Option<u32>, Option<u32>),
        slow: bool,
    ) {
        if self.quiet.is_some() {
            self.shape.measure(places, slow);
            if places.0.is_some() && places.0 == places.1 {
                *self.inner_seen.entry(pair).or_default() |= slow;
            }
        }
    }

    /// Whether a dip is on (its shape is being tallied).
    pub fn on(&self) -> bool {
        self.quiet.is_some()
    }

    /// The spine verdict the current dip's shape supports (none without a dip on), with
    /// `base` the share of measurements slow on their own outside events.
    pub fn spine(&self, base: f64) -> Option<SpineVerdict> {
        self.quiet.and_then(|_| self.shape.judge(base))
    }

    /// A slow measurement of `a`, `b` (on ToRs `ta`, `tb`) in an event round: the dip
    /// explains the pair. `excess`: the dip's share of the measurement's log residual
    /// (`None` when an end's own share is unknown: the pair then carries no share).
    pub fn add(
        &mut self,
        pair: (usize, usize),
        places: (Option<u32>, Option<u32>),
        excess: Option<f64>,
    ) {
        self.dip.add(pair, tor_pair(places), excess);
    }

    /// A normal measurement of `a`, `b`: whatever slowed it has left it. When fewer than
    /// [`NORMAL_MIN_PAIRS`] of its ToR pair are left in the normal, the ToR pair leaves
    /// it, with the pair left (a link slow on its own once the dip has drained).
    pub fn clean(&mut self, a: usize, b: usize) {
        self.dip.remove(a, b);
        if let Some(t) = self.normal.remove(a, b) {
            self.normal.prune(t);
        }
    }

    /// Whether a dip (the current one, or the normal) explains the pair `a`, `b` (on ToRs
    /// `ta`, `tb`): it makes no link verdict.
    pub fn explains(&self, pair: (usize, usize), places: (Option<u32>, Option<u32>)) -> bool {
        let tors = tor_pair(places);
        (self.quiet.is_some() && self.dip.explains(pair, tors)) || self.normal.explains(pair, tors)
    }

    /// Whether the pair is one the normal holds slow: its probes are not judged for a
    /// partial event. Only the pairs themselves: the ToR pairs of a spine dip can be every
    /// pair between ToRs, and a new dip among them must still show.
    pub fn normal(&self, a: usize, b: usize) -> bool {
        self.normal.pairs.contains_key(&(a, b))
    }

    /// Whether `node` is bound to the normal: at least [`NORMAL_NODE_SHARE`] of its pairs
    /// with the group's other members are in it, and so are those of another member of
    /// its ToR (`tors`, by node), while the pair between the two is not. That is the
    /// members of a ToR whose uplinks dipped: slow on every probe but the ones between
    /// them, which is how the dip looks, not how one straggler does. Their own share and
    /// the dip's cannot be told apart, so their windows keep the slowness; while the dip
    /// was an event the event froze their escalation, and they stay frozen, as a crowd's
    /// members are. A lone straggler (slow to its ToR's members too) is judged as usual,
    /// as is one that turns slow after the dip became the normal (only the dip's share
    /// of its pairs is in the normal). Without the node's ToR, nothing binds.
    pub fn binds(&self, node: usize, tors: &[Option<u32>]) -> bool {
        let members = tors.len();
        if members < 2 || self.normal.pairs.is_empty() {
            return false;
        }
        let Some(tor) = tors.get(node).copied().flatten() else {
            return false;
        };
        let most = |x: usize| {
            let held = self.normal.pairs.range((x, 0)..(x + 1, 0)).count();
            held as f64 >= NORMAL_NODE_SHARE * (members - 1) as f64
        };
        most(node)
            && (0..members).any(|m| {
                m != node
                    && tors[m] == Some(tor)
                    && !self.normal.pairs.contains_key(&(node, m))
                    && most(m)
            })
    }

    /// Whether a re-pairing of `node` with `peer` is beyond the dips' reach: the two
    /// share a ToR (`tors`, by node), the normal holds neither the pair nor any pair
    /// within that ToR, and of that ToR's other inner pairs (those not touching `node`)
    /// measured since the current dip began, at least [`INNER_SEEN_MIN`], fewer than
    /// [`INNER_DIP_SHARE`] are the dip's (seen slow). A pair within one ToR crosses no
    /// uplink of it and no spine, so a dip between ToRs, on a spine or on the ToR's
    /// uplinks never slows it; a slow ToR (or a dip on a large random share of the links)
    /// does, and shows in the ToR's other inner pairs. The share is of those measured,
    /// not of all: a stride plan measures a ToR's own pairs a few rounds in ten, and a
    /// dip that slowed every one it measured is no less inside for the ones it has not
    /// yet. The pairs touching `node` are not read, the pair itself included: a
    /// straggler's slow probes were tallied as the dip's before it was accused, and would
    /// hide it from the only test that finds it inside the dip.
    pub fn spares(&self, (node, peer): (usize, usize), tors: &[Option<u32>]) -> bool {
        let tor = |i: usize| tors.get(i).copied().flatten();
        let Some(t) = tor(node) else {
            return false;
        };
        if node == peer || tor(peer) != Some(t) {
            return false;
        }
        if self.normal.pairs.contains_key(&(node, peer)) || self.normal.tors.contains_key(&(t, t)) {
            return false;
        }
        if self.quiet.is_none() {
            return true;
        }
        let other = |&(a, b): &(usize, usize)| a != node && b != node;
        // Slow: the dip's pairs of this ToR (slow in an event round) and the inner pairs
        // measured slow in any round since it began; seen: those and the rest measured.
        let mut slow: BTreeSet<(usize, usize)> = self
            .dip
            .pairs
            .iter()
            .filter(|(k, s)| s.tors == Some((t, t)) && other(k))
            .map(|(k, _)| *k)
            .collect();
        let measured = self
            .inner_seen
            .iter()
            .filter(|(k, _)| other(k) && tor(k.0) == Some(t) && tor(k.1) == Some(t));
        let mut seen = 0;
        for (k, was_slow) in measured {
            if *was_slow {
                slow.insert(*k);
            } else if !slow.contains(k) {
                seen += 1;
            }
        }
        let seen = seen + slow.len();
        seen >= INNER_SEEN_MIN && (slow.len() as f64) < INNER_DIP_SHARE * seen as f64
    }

    /// The normal's share of the pair's log residual (zero for a pair not in it, or with
    /// no share known): what a node's window takes out of the pair's probes.
    pub fn excess(&self, a: usize, b: usize) -> f64 {
        self.normal
            .pairs
            .get(&(a, b))
            .and_then(Slowed::share)
            .unwrap_or(0.0)
    }

    /// Takes the round's ToR numbers (by node index). They are made again at each
    /// formation, also one that keeps every member (a member's place changed): when they
    /// differ from those the ToR pairs and the shape were counted under, both are dropped
    /// (the pairs themselves stay explained and drain one by one).
    pub fn topology(&mut self, tors: &[Option<u32>]) {
        if self.tors != tors {
            self.tors = tors.to_vec();
            self.dip.drop_tors();
            self.normal.drop_tors();
            self.shape = Shape::default();
            self.inner_seen.clear();
        }
    }

    /// Carries the pairs over to a new index table (`map[old]`: the new index, None: gone).
    pub fn remap(&mut self, map: &[Option<usize>]) {
        self.dip.remap(map);
        self.normal.remap(map);
        // ToR numbers are made again at each formation: the old ones (by old index) name
        // nothing now, and a state written before the next round must not carry them.
        self.tors.clear();
        self.shape = Shape::default();
        self.inner_seen.clear();
    }
}

/// One pair of the normal as the engine state carries it: lower index first (the normal
/// holds both directions alike).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct NormalPairWire {
    pair: (usize, usize),
    /// [`Slowed::tors`].
    tors: Option<TorPair>,
    /// [`Slowed::shares`].
    shares: Option<(f64, u32)>,
}

/// The normal as the host engine's state carries it; see the module. Lists in order, so
/// members holding the same normal write the same bytes (their states' digests agree).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NormalWire {
    pairs: Vec<NormalPairWire>,
    /// The normal's ToR pairs, each with its count of pairs (both directions).
    tor_pairs: Vec<(TorPair, usize)>,
    /// The ToR numbers (by node) the ToR pairs were counted under.
    tors: Vec<Option<u32>>,
}

impl DipPairs {
    /// The normal's wire form; `None` when there is none (the state then has the form it
    /// had before the normal was carried).
    pub(crate) fn normal_wire(&self) -> Option<NormalWire> {
        if self.normal.pairs.is_empty() && self.normal.tors.is_empty() {
            return None;
        }
        Some(NormalWire {
            pairs: self
                .normal
                .pairs
                .iter()
                .filter(|((a, b), _)| a < b)
                .map(|(&pair, s)| NormalPairWire {
                    pair,
                    tors: s.tors,
                    shares: s.shares,
                })
                .collect(),
            tor_pairs: self.normal.tors.iter().map(|(t, c)| (*t, *c)).collect(),
            tors: self.tors.clone(),
        })
    }

    /// The pairs of an engine over `n` nodes with the normal `w` and no dip on; or why no
    /// such engine could have written `w` (a pair or ToR out of range, out of order or
    /// twice, a share that is not finite, counts nothing or averages beyond
    /// [`MAX_LOG`], a count beyond its pairs).
    pub(crate) fn with_normal(w: NormalWire, n: usize) -> Result<Self, String> {
        if !w.tors.is_empty() && w.tors.len() != n {
            return Err(format!("ToR numbers for {} nodes, not {n}", w.tors.len()));
        }
        // A ToR number is a position in the group's table of ToRs: fewer than its nodes.
        let tor_ok = |t: u32| (t as usize) < n;
        if let Some(t) = w.tors.iter().flatten().find(|t| !tor_ok(**t)) {
            return Err(format!("ToR number {t} in a group of {n}"));
        }
        let pair_tors_ok = |(x, y): TorPair| x <= y && tor_ok(y);
        let mut normal = Reach::default();
        let mut last = None;
        for p in &w.pairs {
            let (a, b) = p.pair;
            if a >= b || b >= n || last.is_some_and(|l| l >= p.pair) {
                return Err(format!(
                    "pair ({a}, {b}): out of range, not lower first, or out of order"
                ));
            }
            last = Some(p.pair);
            if p.tors.is_some_and(|t| !pair_tors_ok(t))
                || p.shares.is_some_and(|(sum, k)| {
                    !sum.is_finite() || k == 0 || (sum / f64::from(k)).abs() > MAX_LOG
                })
            {
                return Err(format!("pair ({a}, {b}): bad ToR pair or share"));
            }
            let s = Slowed {
                tors: p.tors,
                shares: p.shares,
            };
            normal.pairs.insert((a, b), s);
            normal.pairs.insert((b, a), s);
        }
        let mut last = None;
        for &(t, count) in &w.tor_pairs {
            if !pair_tors_ok(t) || last.is_some_and(|l| l >= t) || count > normal.pairs.len() {
                return Err(format!(
                    "ToR pair {t:?} ({count} pairs): out of range, out of order, or more pairs than the normal holds"
                ));
            }
            last = Some(t);
            normal.tors.insert(t, count);
        }
        Ok(DipPairs {
            normal,
            tors: w.tors,
            ..DipPairs::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dip's pairs are explained while it lasts, and so are the other pairs between the
    /// same two ToRs; a full hold without an event forgets them, and a normal measurement
    /// of a pair lets it go at once (its ToR pair still explains it while the dip is on).
    #[test]
    fn a_dip_explains_its_pairs_until_a_hold_passes_without_an_event() {
        let mut d = DipPairs::default();
        let places = (Some(0), Some(2));
        assert!(!d.round((true, true), 3, 100));
        d.add((1, 9), places, Some(0.2));
        d.add((4, 7), (None, None), Some(0.2));
        assert!(d.explains((9, 1), places) && d.explains((5, 12), (Some(2), Some(0))));
        assert!(!d.explains((5, 12), (Some(0), Some(1))));
        assert!(d.explains((7, 4), (None, None)) && !d.explains((4, 8), (None, None)));
        d.clean(4, 7);
        assert!(!d.explains((4, 7), (None, None)));
        for _ in 0..3 {
            d.round((false, true), 3, 100);
            assert!(d.explains((1, 9), places));
        }
        d.round((false, true), 3, 100);
        assert!(!d.explains((1, 9), places));
        assert_eq!(d, DipPairs::default());
    }

    /// Re-pairings within a ToR (nodes 0..4 on ToR 0, 4..8 on ToR 1): spared by a dip
    /// between the ToRs once enough of the ToR's other inner pairs were measured, also
    /// when the re-paired node's own pairs were tallied as the dip's; not across ToRs;
    /// not once a quarter of the ToR's other inner pairs measured are the dip's (2
    /// directed pairs of the 6 not touching node 0); not in a normal's ToR.
    #[test]
    fn a_re_pairing_within_a_tor_is_spared_unless_the_dip_reaches_inside() {
        let tors: Vec<Option<u32>> = (0..8).map(|i| Some(i / 4)).collect();
        let mut d = DipPairs::default();
        assert!(d.spares((0, 1), &tors), "no dip, no normal");
        d.round((true, true), 3, 100);
        for (a, b) in [(0, 4), (1, 5), (2, 6), (3, 7)] {
            d.add((a, b), (Some(0), Some(1)), Some(0.2));
        }
        // Nothing within ToR 0 measured yet: the dip may reach inside.
        assert!(!d.spares((0, 1), &tors), "nothing measured inside");
        // Every directed inner pair of both ToRs measured, none slow.
        for base in [0, 4] {
            for a in base..base + 4 {
                for b in (base..base + 4).filter(|&b| b != a) {
                    let t = Some(base as u32 / 4);
                    d.measure((a, b), (t, t), false);
                }
            }
        }
        // Node 0's own slow probes, inside its ToR, tallied before it was accused.
        d.add((0, 1), (Some(0), Some(0)), Some(0.3));
        d.add((0, 2), (Some(0), Some(0)), Some(0.3));
        assert!(d.spares((0, 1), &tors) && d.spares((0, 3), &tors));
        assert!(!d.spares((0, 4), &tors), "across ToRs");
        assert!(!d.spares((0, 0), &tors), "itself");
        assert!(!d.spares((0, 1), &[]), "no topology");
        d.add((2, 3), (Some(0), Some(0)), Some(0.2));
        assert!(
            !d.spares((0, 1), &tors),
            "2 of 6 inner pairs: the dip reaches in"
        );
        assert!(d.spares((4, 5), &tors), "ToR 1's inner pairs are untouched");
        // The normal's ToR: nothing within it is spared either.
        let mut n = DipPairs::default();
        for _ in 0..4 {
            n.round((true, true), 3, 2);
            n.add((4, 5), (Some(1), Some(1)), Some(0.2));
            n.add((6, 7), (Some(1), Some(1)), Some(0.2));
        }
        assert!(n.normal(4, 5), "the dip became the normal");
        // A new dip is on (the last event round): ToR 0's pairs measured in it, not slow.
        for (a, b) in [(1, 2), (2, 1), (2, 3), (3, 2)] {
            n.measure((a, b), (Some(0), Some(0)), false);
        }
        assert!(!n.spares((4, 6), &tors) && n.spares((0, 1), &tors));
    }

    /// The share is of the inner pairs measured since the dip began, not of all: in a ToR
    /// of eight (42 directed pairs not touching node 0), a dip that slowed both of the
    /// two pairs measured reaches inside, however many were not measured, and a pair
    /// measured slow once stays slow (a later quick measurement of it does not undo it);
    /// the same two among eight measured (a quarter: not fewer) still do, among nine they
    /// do not. A dip that ends forgets what it measured.
    #[test]
    fn the_inner_share_is_of_the_pairs_measured_since_the_dip_began() {
        let tors: Vec<Option<u32>> = (0..16).map(|i| Some(i / 8)).collect();
        let t = (Some(0), Some(0));
        let mut d = DipPairs::default();
        d.round((true, true), 3, 100);
        // Measured slow (in rounds that were no event: not among the dip's pairs).
        d.measure((2, 3), t, true);
        d.measure((3, 2), t, true);
        d.measure((2, 3), t, false);
        assert!(!d.spares((0, 1), &tors), "2 slow of 2 measured");
        for (a, b) in [(4, 5), (5, 4), (6, 7), (7, 6), (4, 6), (6, 4)] {
            d.measure((a, b), t, false);
        }
        assert!(!d.spares((0, 1), &tors), "2 slow of 8 measured: a quarter");
        d.measure((5, 7), t, false);
        assert!(d.spares((0, 1), &tors), "2 slow of 9 measured");
        // Quiet past the hold: the dip is over, and what it measured with it.
        for _ in 0..4 {
            d.round((false, false), 3, 100);
        }
        d.round((true, true), 3, 100);
        assert!(
            !d.spares((0, 1), &tors),
            "a new dip has measured nothing inside"
        );
    }

    /// A dip on for more than the horizon (here 5 rounds, an event every other round)
    /// becomes the normal in its first event round after the horizon (its seventh), once.
    /// Its pairs are then the normal's (left out of the tally, no link verdict) with no
    /// event at all; a later dip on other pairs is a dip of its own, judged from the
    /// start.
    #[test]
    fn a_dip_that_lasts_the_horizon_becomes_the_normal() {
        let mut d = DipPairs::default();
        let (ab, cd) = ((Some(0), Some(2)), (Some(1), Some(3)));
        let renewed: Vec<bool> = (0..7)
            .map(|r| {
                let was = d.round((r % 2 == 0, true), 3, 5);
                if r == 0 {
                    d.add((1, 9), ab, Some(0.2));
                    d.add((2, 10), ab, Some(0.2));
                }
                was
            })
            .collect();
        assert_eq!(renewed, [false, false, false, false, false, false, true]);
        assert!(d.normal(1, 9) && d.normal(9, 1) && !d.normal(5, 12));
        // Explained with no event for far longer than the hold, and the ToR pair too.
        for _ in 0..20 {
            assert!(!d.round((false, true), 3, 5));
        }
        assert!(d.explains((1, 9), ab) && d.explains((5, 12), ab));
        // A new dip: not the normal's, and explained only while it is on.
        d.round((true, true), 3, 5);
        d.add((4, 20), cd, Some(0.2));
        assert!(!d.normal(4, 20) && d.explains((4, 20), cd));
        for _ in 0..4 {
            d.round((false, true), 3, 5);
        }
        assert!(!d.explains((4, 20), cd) && d.explains((1, 9), ab));
    }

    /// With a hold longer than the horizon, one event and the quiet rounds after it never
    /// make a normal; nor do events while no fabric verdict holds.
    #[test]
    fn only_a_lasting_dip_with_a_verdict_becomes_the_normal() {
        let mut d = DipPairs::default();
        let ab = (Some(0), Some(2));
        d.round((true, true), 50, 5);
        d.add((1, 9), ab, Some(0.2));
        d.add((2, 10), ab, Some(0.2));
        for _ in 0..40 {
            assert!(!d.round((false, true), 50, 5));
        }
        assert!(!d.normal(1, 9));
        for _ in 0..40 {
            assert!(!d.round((true, false), 50, 5));
        }
        assert!(!d.normal(1, 9));
        assert!(d.round((true, true), 50, 5));
        assert!(d.normal(1, 9));
    }

    /// The normal drains pair by pair: a ToR pair leaves it when fewer than two of its
    /// pairs are left, with the one left (a link slow on its own); a pair without known
    /// ToRs leaves it on its own.
    #[test]
    fn the_normal_drains_as_its_pairs_measure_normal() {
        let mut d = DipPairs::default();
        let ab = (Some(0), Some(2));
        d.round((true, true), 1, 1);
        for (a, b) in [(1, 9), (2, 10), (3, 11)] {
            d.add((a, b), ab, Some(0.2));
        }
        d.add((3, 4), (None, None), Some(0.2));
        assert!(d.round((true, true), 1, 1));
        d.clean(9, 1);
        assert!(
            !d.normal(1, 9) && d.explains((1, 9), ab),
            "two pairs keep ToRs 0-2"
        );
        d.clean(2, 10);
        assert!(
            !d.normal(3, 11),
            "the last pair of ToRs 0-2 leaves with them"
        );
        assert!(!d.explains((3, 11), ab) && !d.explains((6, 12), ab));
        assert!(d.normal(4, 3));
        d.clean(3, 4);
        assert_eq!(d, DipPairs::default());
    }

    /// A lone slow pair of its ToR pair (a link that turned slow during a dip) is not
    /// taken into the normal; the dip's pairs around it are.
    #[test]
    fn a_lone_pair_of_its_tor_pair_is_not_taken_into_the_normal() {
        let mut d = DipPairs::default();
        let (ab, cc) = ((Some(0), Some(2)), (Some(3), Some(3)));
        d.round((true, true), 1, 1);
        d.add((1, 9), ab, Some(0.2));
        d.add((2, 10), ab, Some(0.2));
        d.add((50, 55), cc, Some(0.2));
        assert!(d.round((true, true), 1, 1));
        assert!(d.normal(1, 9) && d.normal(10, 2));
        assert!(!d.normal(50, 55) && !d.explains((50, 55), cc));
    }

    /// The normal's share of a pair is the average of its slow measurements' shares,
    /// taken out of the pair's probes only once the dip is the normal; a pair whose end
    /// was accused further (share unknown), or that left the normal, has none.
    #[test]
    fn the_normal_takes_out_the_dip_s_share_of_its_pairs() {
        let mut d = DipPairs::default();
        let ab = (Some(0), Some(2));
        d.round((true, true), 1, 1);
        d.add((1, 9), ab, Some(0.2));
        d.add((9, 1), ab, Some(0.3));
        d.add((1, 9), ab, Some(0.7));
        d.add((2, 10), ab, Some(0.2));
        d.add((2, 10), ab, None);
        d.add((2, 10), ab, Some(0.2));
        d.add((3, 11), ab, Some(-0.1));
        assert_eq!(d.excess(1, 9), 0.0, "not the normal yet");
        assert!(d.round((true, true), 1, 1));
        // The mean of 0.2, 0.3 and 0.7: every measurement weighs alike.
        assert!((d.excess(1, 9) - 0.4).abs() < 1e-12 && d.excess(9, 1) == d.excess(1, 9));
        assert_eq!((d.excess(2, 10), d.excess(3, 11)), (0.0, 0.0));
        d.clean(1, 9);
        assert_eq!(d.excess(1, 9), 0.0);
    }

    /// A share above the dip's median share is capped at it when the normal forms.
    #[test]
    fn a_pair_s_share_is_capped_at_the_dip_s_median() {
        let mut d = DipPairs::default();
        d.round((true, true), 1, 1);
        for (b, e) in [(1, 0.2), (2, 0.2), (3, 0.1), (4, 0.6)] {
            d.add((0, b), (None, None), Some(e));
        }
        assert!(d.round((true, true), 1, 1));
        assert!((d.excess(0, 4) - 0.2).abs() < 1e-12);
        assert!((d.excess(0, 3) - 0.1).abs() < 1e-12);
    }

    /// Nodes 0 and 1 share ToR 0 and are slow to the four others on ToRs 1 and 2 but not
    /// to each other: both are bound. Node 2, alone on ToR 1 with most of its pairs in the
    /// normal, is not (a lone straggler), nor is either when the pair between them is in
    /// the normal, when their ToRs are unknown, or while the dip is only an event.
    #[test]
    fn the_members_of_a_tor_slow_on_all_but_each_other_are_bound_to_the_normal() {
        let tors = [Some(0), Some(0), Some(1), Some(2), Some(2), Some(2)];
        let mut d = DipPairs::default();
        d.round((true, true), 1, 1);
        for a in 0..2 {
            for b in 2..6 {
                d.add((a, b), (None, None), Some(0.2));
            }
        }
        d.add((2, 3), (None, None), Some(0.2));
        assert!(!d.binds(0, &tors), "not the normal yet");
        d.round((true, true), 1, 1);
        assert!(d.binds(0, &tors) && d.binds(1, &tors));
        assert!(!d.binds(2, &tors) && !d.binds(3, &tors));
        assert!(!d.binds(0, &[None; 6]));
        let mut e = d.clone();
        e.round((true, true), 1, 1);
        e.add((0, 1), (None, None), Some(0.2));
        e.round((true, true), 1, 1);
        assert!(
            !e.binds(0, &tors),
            "slow to its ToR's member too: a straggler"
        );
    }

    /// A normal written and read back is the normal it was: the same pairs both ways, the
    /// same shares and ToR pairs, under the same ToR numbers; with no dip on and nothing
    /// else, the whole `DipPairs` is equal. No normal writes nothing.
    #[test]
    fn the_normal_survives_its_wire_form() {
        let mut d = DipPairs::default();
        assert_eq!(d.normal_wire(), None);
        let tors: Vec<Option<u32>> = (0..12).map(|i| Some(i / 4)).collect();
        d.topology(&tors);
        d.round((true, true), 1, 1);
        // Two pairs between ToRs 0 and 2 (a ToR pair of the normal), one with unknown
        // places, one whose end's own share was unknown (no share).
        d.add((1, 9), (Some(0), Some(2)), Some(0.2));
        d.add((2, 10), (Some(0), Some(2)), Some(0.3));
        d.add((5, 6), (None, None), None);
        assert!(d.round((true, true), 1, 1), "the dip becomes the normal");
        let w = d.normal_wire().expect("a normal");
        assert_eq!(w.pairs.len(), 3, "each pair once: {w:?}");
        assert_eq!(w.tor_pairs, [((0, 2), 4)]);
        let json = serde_json::to_vec(&w).unwrap();
        let back: NormalWire = serde_json::from_slice(&json).unwrap();
        let r = DipPairs::with_normal(back, 12).unwrap();
        assert_eq!(r, d);
        assert!(r.normal(9, 1) && r.normal(6, 5) && !r.normal(1, 10));
        // The shares as the dip left them: capped at the median of the four directions'
        // shares (0.3) when it became the normal, which moves neither.
        assert!((r.excess(1, 9) - 0.2).abs() < 1e-12 && (r.excess(10, 2) - 0.3).abs() < 1e-12);
        assert_eq!(r.excess(5, 6), 0.0);
        // The ToR pair explains a pair the dip was never seen on.
        assert!(r.explains((3, 11), (Some(0), Some(2))));
    }

    /// A normal no engine over the group could have written is refused, with why.
    #[test]
    fn a_normal_no_engine_could_write_is_refused() {
        let pair = |a: usize, b: usize| NormalPairWire {
            pair: (a, b),
            tors: None,
            shares: Some((0.2, 1)),
        };
        let good = NormalWire {
            pairs: vec![pair(0, 1), pair(0, 2)],
            tor_pairs: vec![],
            tors: vec![],
        };
        assert!(DipPairs::with_normal(good.clone(), 4).is_ok());
        let pairs = |pairs: Vec<NormalPairWire>| NormalWire {
            pairs,
            ..good.clone()
        };
        let tor_pairs = |tor_pairs: Vec<(TorPair, usize)>| NormalWire {
            tor_pairs,
            ..good.clone()
        };
        let tors = |tors: Vec<Option<u32>>| NormalWire {
            tors,
            ..good.clone()
        };
        let nan = NormalPairWire {
            shares: Some((f64::NAN, 1)),
            ..pair(0, 1)
        };
        let of_nothing = NormalPairWire {
            shares: Some((0.2, 0)),
            ..pair(0, 1)
        };
        let tor_higher_first = NormalPairWire {
            tors: Some((2, 1)),
            ..pair(0, 1)
        };
        let cases = [
            ("beyond the group", pairs(vec![pair(0, 4)])),
            ("higher first", pairs(vec![pair(2, 1)])),
            ("a node with itself", pairs(vec![pair(1, 1)])),
            ("twice", pairs(vec![pair(0, 1), pair(0, 1)])),
            ("out of order", pairs(vec![pair(0, 2), pair(0, 1)])),
            ("a share that is not finite", pairs(vec![nan])),
            ("a share of no measurement", pairs(vec![of_nothing])),
            ("a ToR pair higher first", pairs(vec![tor_higher_first])),
            ("ToR numbers for another group", tors(vec![Some(0); 3])),
            ("a ToR beyond the group", tors(vec![Some(4); 4])),
            ("more pairs counted than held", tor_pairs(vec![((0, 1), 5)])),
            ("ToR pairs twice", tor_pairs(vec![((0, 1), 2), ((0, 1), 2)])),
        ];
        for (what, w) in cases {
            let err = DipPairs::with_normal(w, 4).expect_err(what);
            assert!(!err.is_empty(), "{what}");
        }
    }

    /// Renumbering keeps both the dip's and the normal's pairs, and drops a gone node's.
    #[test]
    fn remapping_carries_the_normal() {
        let mut d = DipPairs::default();
        d.round((true, true), 1, 1);
        d.add((1, 2), (None, None), Some(0.2));
        d.add((0, 2), (None, None), Some(0.2));
        d.round((true, true), 1, 1);
        d.remap(&[None, Some(0), Some(1)]);
        assert!(d.normal(0, 1) && d.normal(1, 0));
        assert_eq!(d.normal.pairs.len(), 2);
        // ToR pairs are numbers of the old formation's table: dropped on renumbering,
        // the pairs themselves still explained.
        let mut e = DipPairs::default();
        let ab = (Some(0), Some(2));
        e.round((true, true), 1, 1);
        for (a, b) in [(1, 9), (2, 10), (3, 11)] {
            e.add((a, b), ab, Some(0.2));
        }
        e.round((true, true), 1, 1);
        e.remap(&(0..12).map(Some).collect::<Vec<_>>());
        assert!(e.explains((1, 9), ab) && !e.explains((4, 12), ab));
        e.clean(1, 9);
        e.clean(2, 10);
        assert!(e.normal(3, 11), "no ToR pair left to prune it with");
    }

    /// ToR numbers made again at a formation that kept every member (a member's place
    /// changed): the ToR pairs counted under the old numbers are dropped, the pairs
    /// themselves stay explained; the same numbers again change nothing.
    #[test]
    fn new_tor_numbers_drop_the_tor_pairs() {
        let mut d = DipPairs::default();
        let old: Vec<Option<u32>> = (0..12).map(|i| Some(i / 4)).collect();
        d.topology(&old);
        d.round((true, true), 5, 100);
        d.add((1, 9), (Some(0), Some(2)), Some(0.2));
        d.topology(&old);
        assert!(
            d.explains((2, 10), (Some(0), Some(2))),
            "kept under the same numbers"
        );
        let new: Vec<Option<u32>> = (0..12).map(|i| Some(2 - i / 4)).collect();
        d.topology(&new);
        assert!(!d.explains((2, 10), (Some(2), Some(0))));
        assert!(d.explains((1, 9), (Some(2), Some(0))));
    }
}
