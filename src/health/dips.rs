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
use super::tor::{renumbered_pair, renumbering};

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

    /// Carries the ToR pairs over to new ToR numbers (`map`: old number to new, one to
    /// one); a ToR pair with an end `map` does not carry is forgotten, its pairs staying
    /// explained without it.
    fn renumber_tors(&mut self, map: &BTreeMap<u32, u32>) {
        let moved = |t: TorPair| renumbered_pair(map, t);
        for s in self.pairs.values_mut() {
            s.tors = s.tors.and_then(moved);
        }
        self.tors = std::mem::take(&mut self.tors)
            .into_iter()
            .filter_map(|(t, c)| Some((moved(t)?, c)))
            .collect();
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
    /// formation, also one that keeps every member (a member's place changed), and a ToR
    /// that appears or goes shifts the numbers of those after it. When they differ from
    /// those the ToR pairs and the shape were counted under, each ToR pair moves to the
    /// new numbers of its two ToRs where the members say which those are
    /// ([`renumbering`]: every member known under both numberings moved from the one
    /// number to the other, no other ToR's did); one with an end that is not carried is
    /// forgotten, its pairs staying explained and draining one by one. The shape is
    /// carried when every ToR is, and so are the inner pairs measured (the same
    /// switches' pairs); otherwise both start again. A round without topology changes
    /// nothing: the numbers last seen wait for the next round that has it, as the ToR
    /// tracks' do.
    pub fn topology(&mut self, tors: &[Option<u32>]) {
        if tors.is_empty() || self.tors == tors {
            return;
        }
        let map = renumbering(&self.tors, tors);
        let every =
            !self.tors.is_empty() && self.tors.iter().flatten().all(|t| map.contains_key(t));
        self.dip.renumber_tors(&map);
        self.normal.renumber_tors(&map);
        if every {
            self.shape.renumber(&map);
        } else {
            self.shape = Shape::default();
            self.inner_seen.clear();
        }
        self.tors = tors.to_vec();
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
mod tests;
