//! Link verdicts: a pair slow in the regular round is re-measured; a link verdict needs
//! `link_observations` slow, steady measurements in a row that are the pair's own, with
//! both ends otherwise normal, and no shared cause in sight: fewer than two other links
//! slow on their own at the same time (see [`shared`]), counting held links whose
//! slowness began with its own ([`began_together`]), and, for a pair between two ToRs,
//! fewer than two other links between ToRs slow on their own since last measured normal,
//! ends shared or not, held links begun with it counted ([`spread_between_tors`]). A
//! verdict is held until a measurement of the pair is normal.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::score::RoundStats;
use super::{HealthEngine, NodeData, Probe, RoundInput, RoundOutput};
use crate::health::evidence::steady;
use crate::health::fabric::SLOW_RATE_FLOOR;
use crate::health::lifecycle::{Lifecycle, NodeIx};
use crate::health::pairs::Pair;
use crate::health::stats::{deviations, median, spread_of};
use crate::snapshot::probe::NodeState;

/// Slow measurements of its own a pair needs, since it was last measured normal, to count
/// as slow together with a candidate link ([`shared`], [`spread_between_tors`]). Two: a
/// healthy probe is slow on its own now and then, and a probe group of a hundred members
/// measures a hundred pairs a round, so with one such measurement chance companions were
/// always at hand there (held out, 11 fewer of 235 degraded links were found, most lost
/// in groups of 96 and 128); a pair slow twice without a normal measurement between is
/// seldom chance.
const COHORT_OBSERVATIONS: usize = 2;

/// Turns of the stride (a round per member, at least `window` rounds) within which a
/// companion's last slow measurement must fall: two, since a pair not re-measured is
/// measured once a turn, and a measurement with a busy end neither counts for the pair
/// nor clears it.
const COHORT_TURNS: u64 = 2;

/// Other links (a pair and its way back counted once), sharing no end with a candidate,
/// slow on their own at the same time, that make its slowness shared rather than its own
/// ([`shared`]), and other links between ToRs slow on their own, ends shared or not, that
/// make a candidate between ToRs a spine's ([`spread_between_tors`]): two, so that two
/// degraded links in one group are still two links (three that turn slow within the same
/// turns wait for each other, a price: held out, of 147 correct link verdicts in a batch,
/// one had two others with no end in common start in the 30 rounds before it).
const LINK_COHORT: usize = 2;

/// Link re-measurements the daemon adds to a round at most: the engine orders its
/// requests for that many (the last one kept for a pair seen slow once).
pub const LINK_REMEASURES: usize = 4;

impl HealthEngine {
    /// Judges the round's slow pairs: see the module.
    pub(super) fn judge_links(
        &mut self,
        input: &RoundInput,
        r: &RoundStats,
        out: &mut RoundOutput,
    ) {
        let n = self.nodes.len();
        let usable = |p: &&Probe| p.within(n);
        // A dip stays on until a full turn of the stride (every pair measured once) passes
        // without an event round.
        let event = r.partial.recent;
        let places = |a: usize, b: usize| {
            let tor = |x: usize| input.tors.get(x).copied().flatten();
            (tor(a), tor(b))
        };
        // The dip was told the round's ToR numbers when the round began (`follow_tors`).
        let hold = n.max(self.cfg.window);
        if self
            .dip
            .round((event, r.partial_fabric), hold, self.cfg.new_normal_rounds)
        {
            // The dip is the normal now: its pairs leave the tally from the next round,
            // and the event rounds it left in the histories end its fabric verdict here
            // rather than a window later (a median step under way at the same moment
            // shows again within `fabric_rounds`).
            out.dip_new_normal = true;
            // The base rate is learnt again over the rest of the pairs: a dip of noise
            // (any pair slow on its own more often than before) is left by no set of
            // pairs, and a group whose rate was never learnt is not stuck for good.
            self.partial.relearn();
            self.partial_hist.clear();
            self.fabric_hist.clear();
        }
        for p in input.probes.iter().chain(&input.link_probes).filter(usable) {
            let d = r.adjusted(p);
            // By effect size, as the event was counted: its slow probes inflate the
            // round's spread.
            if event && d > r.entry {
                // The dip's own share of the slowness: less what a suspect end adds of
                // its own (none when an end is accused further).
                let own = |x: usize| r.own.get(x).copied().flatten();
                let excess = own(p.src).zip(own(p.dst)).map(|(a, b)| d - a - b);
                self.dip.add((p.src, p.dst), places(p.src, p.dst), excess);
            } else if d <= r.exit {
                self.dip.clean(p.src, p.dst);
            }
            if self.slow(p, r).is_none() {
                self.links.clean((p.src, p.dst));
            }
        }
        self.tally_shape(input, r, &places);
        out.spine_verdict = if r.partial_fabric {
            let base = self.partial.rate.0.unwrap_or(SLOW_RATE_FLOOR);
            self.dip.spine(base.max(SLOW_RATE_FLOOR))
        } else {
            None
        };
        let (held, dip) = (&self.links.held, &self.dip);
        if event {
            // A share of the links is slow at once (a spine, a partial dip): pending pairs
            // start over, only held verdicts stay.
            self.links.watched.retain(|k, _| held.contains(k));
        } else {
            // Pairs the dip explains are not watched between its event rounds either.
            self.links
                .watched
                .retain(|k, _| held.contains(k) || !dip.explains(*k, places(k.0, k.1)));
        }
        self.observe_links(input, r);
        let decided = self.link_decisions(r, &out.scores, &input.tors);
        out.link_verdicts = decided.verdicts;
        out.link_requests = decided.requests;
        out.link_withheld = decided.withheld;
    }

    /// Forgets the slow rounds too old to matter, then returns the pairs slow together
    /// with a candidate link this round ([`shared`]): slow on their own within the last
    /// [`COHORT_TURNS`] turns of the stride (a pair seen slow long ago and not measured
    /// since is no companion now), in at least [`COHORT_OBSERVATIONS`] measurements, both
    /// ends healthy (a pair whose end is judged, a slow ToR's member say, is that end's and
    /// no sign of a shared cause elsewhere), and no held verdict (two links found earlier
    /// and still degraded must not keep a third from its own; those whose slowness began
    /// with the candidate's are added in `link_decisions`, see [`began_together`]).
    pub(super) fn companions(&mut self) -> Vec<Pair> {
        let nodes = &self.nodes;
        let turn = self.turn();
        keep_recent(
            &mut self.link_seen,
            &self.links.watched,
            nodes.round(),
            turn,
        );
        let held = &self.links.held;
        // `link_seen` holds only pairs of this engine's nodes (it is cleared on a remap,
        // and a restore takes only pairs of its nodes), and `slow_together` asks it before
        // this: the index is in range.
        let fine = |a: usize, b: usize| !held.contains(&(a, b)) && ends_healthy(nodes, a, b);
        slow_together(&self.links.watched, &self.link_seen, fine)
    }

    /// Pairs between two ToRs (`tors`, both known and different) slow on their own in at
    /// least [`COHORT_OBSERVATIONS`] measurements since they were last measured normal,
    /// however long ago the last of them, both ends healthy and no held verdict either way
    /// (links found earlier and still degraded keep no later one from its own, and a held
    /// link's way back is the same link): what [`spread_between_tors`] counts, with the
    /// held links whose slowness began with the candidate's.
    ///
    /// Not only recent ones, as [`companions`](Self::companions) asks: a pair is measured
    /// once a turn, and a spine's pairs are seen on their own only now and then (not while
    /// an end is busy), so the last sighting of a pair still slow is often older than two
    /// turns; a pair measured normal since has left `watched`.
    pub(super) fn slow_between_tors(&self, tors: &[Option<u32>]) -> Vec<Pair> {
        let nodes = &self.nodes;
        let held = &self.links.held;
        self.links
            .watched
            .iter()
            .filter(|(k, obs)| {
                obs.len() >= COHORT_OBSERVATIONS
                    && crosses_tors(tors, **k)
                    && !held.contains(k)
                    && !held.contains(&(k.1, k.0))
                    && ends_healthy(nodes, k.0, k.1)
            })
            .map(|(k, _)| *k)
            .collect()
    }

    /// Tallies the round's permutation probes for the dip's shape while a dip is on, judged
    /// as the partial-fabric tally judges them: both ends' own shares known and taken out,
    /// pairs the normal holds left out. Every round, not only event rounds: a round whose
    /// stride crosses mostly pairs within ToRs is seldom an event under a spine (it spares
    /// them), so tallying event rounds alone would hardly ever see the pairs a spine
    /// spares. Re-measurements are left out: they are the pairs already seen slow, not a
    /// sample of where the dip falls.
    fn tally_shape(
        &mut self,
        input: &RoundInput,
        r: &RoundStats,
        places: &dyn Fn(usize, usize) -> (Option<u32>, Option<u32>),
    ) {
        if !self.dip.on() {
            return;
        }
        let n = self.nodes.len();
        let own = |x: usize| r.own.get(x).copied().flatten();
        for p in input.probes.iter().filter(|p| p.within(n)) {
            if self.dip.normal(p.src, p.dst) {
                continue;
            }
            if let (Some(a), Some(b)) = (own(p.src), own(p.dst)) {
                let slow = r.adjusted(p) - a - b > r.entry;
                self.dip.measure((p.src, p.dst), places(p.src, p.dst), slow);
            }
        }
    }

    /// A probe's log residual when it is slow (above the entry threshold and `z`).
    fn slow(&self, p: &Probe, r: &RoundStats) -> Option<f64> {
        let d = r.adjusted(p);
        (d > r.entry && d / r.spread() > self.cfg.z).then_some(d)
    }

    /// Adds this round's slow observations that are the pair's own. Slowness belongs to the
    /// pair only when nothing else at either end was above the exit threshold this round
    /// (a congested uplink or a slow node slows every probe through it) and the round is
    /// not a fabric event: a slow permutation probe counts once at each end. Other slow
    /// observations are skipped: they neither count nor clear the pair. An end whose own
    /// counters showed congestion explains the slowness as well.
    fn observe_links(&mut self, input: &RoundInput, r: &RoundStats) {
        let n = self.nodes.len();
        let congested = |x: usize| input.congested.contains(&x);
        let specific = |p: &Probe, own: u32| {
            !r.fabric
                && !r.partial.recent
                && r.slow_count[p.src] + r.slow_count[p.dst] <= own
                && !congested(p.src)
                && !congested(p.dst)
        };
        let measured = input
            .link_probes
            .iter()
            .map(|p| (p, 0))
            .chain(input.probes.iter().map(|p| (p, 2)));
        let tor = |x: usize| input.tors.get(x).copied().flatten();
        let explained = |p: &Probe| self.dip.explains((p.src, p.dst), (tor(p.src), tor(p.dst)));
        let now = self.nodes.round();
        // Runs whose last sighting is more than ONSET_TURNS turns back are over, before
        // this round's sightings extend the others.
        let turn = self.turn();
        let since = now.saturating_sub(ONSET_TURNS * turn);
        // A held link's run lasts while it is held: its slowness goes on whether or not a
        // round sees it on its own.
        for k in &self.links.held {
            if let Some(o) = self.link_onset.get_mut(k) {
                o.last = now;
            }
            self.link_found.insert(*k, now);
        }
        self.link_onset.retain(|_, o| o.last >= since);
        let found_since = now.saturating_sub(FOUND_TURNS * turn);
        self.link_found.retain(|_, &mut held| held >= found_since);
        for (p, own) in measured.filter(|(p, _)| p.within(n) && !explained(p)) {
            match self.slow(p, r) {
                Some(d) if specific(p, own) => {
                    self.links
                        .watched
                        .entry((p.src, p.dst))
                        .or_default()
                        .push_back(d);
                    self.link_seen.insert((p.src, p.dst), now);
                    // A link found before whose slowness is back began before: with no
                    // later candidate.
                    let recurs = self.link_found.contains_key(&(p.src, p.dst));
                    self.link_onset
                        .entry((p.src, p.dst))
                        .or_insert(Onset {
                            first: (!recurs).then_some(now),
                            last: now,
                        })
                        .last = now;
                }
                // Not this pair's alone: this round does not count for the link, but a
                // slow permutation probe is still re-measured (in the daemon a sender
                // held up by a slow outgoing link also times its incoming probe late,
                // so the first sighting of a bad link is rarely its own; the
                // re-measurements, with other peers' probes normal, are).
                Some(_) if own > 0 && !r.fabric && !r.partial.recent => {
                    self.links.watched.entry((p.src, p.dst)).or_default();
                }
                Some(_) | None => {}
            }
        }
    }

    /// The pairs to re-measure next round (most evidence first: the daemon re-measures only
    /// a few per round; the last of those few kept for a pair seen slow once, see
    /// [`give_a_slot_to_a_fresh_pair`]), the pairs with a link verdict and those whose
    /// verdict waits for a shared cause to pass.
    fn link_decisions(
        &mut self,
        r: &RoundStats,
        scores: &[f64],
        tors: &[Option<u32>],
    ) -> LinkDecisions {
        let cohort = self.companions();
        let between = self.slow_between_tors(tors);
        let turn = self.turn();
        let onset = &self.link_onset;
        let found = &mut self.link_found;
        let now = self.nodes.round();
        let cfg = &self.cfg;
        let nodes = &self.nodes;
        // Both ends healthy and within the exit threshold.
        let fine_ends = |a: usize, b: usize| {
            ends_healthy(nodes, a, b)
                && [a, b]
                    .iter()
                    .all(|&x| scores.get(x).is_some_and(|s| *s < r.exit))
        };
        let (mut requests, mut verdicts, mut withheld) = (Vec::new(), Vec::new(), Vec::new());
        let mut new_links = Vec::new();
        let links = &mut self.links;
        for ((a, b), obs) in links.watched.iter_mut() {
            while obs.len() > cfg.link_observations.max(1) {
                obs.pop_front();
            }
            if links.held.contains(&(*a, *b)) {
                verdicts.push((*a, *b));
                continue;
            }
            if r.fabric || !fine_ends(*a, *b) {
                continue;
            }
            let earned = obs.len() >= cfg.link_observations && steady_shift(obs, r);
            // Held links are companions too when their slowness began with this one's
            // (with both ends healthy, as for the others), for either rule.
            let alone = earned && {
                let together: Vec<Pair> = began_together(onset, &links.held, (*a, *b), turn)
                    .into_iter()
                    .filter(|&(x, y)| ends_healthy(nodes, x, y))
                    .collect();
                let mut with = cohort.clone();
                with.extend(&together);
                !shared(&with, (*a, *b))
                    && !spread_between_tors(between.iter().chain(&together), tors, (*a, *b))
            };
            if alone {
                verdicts.push((*a, *b));
                links.held.insert((*a, *b));
                // Remembered from the round of its verdict: a verdict lifted the next
                // round is never seen held by `observe_links`.
                found.insert((*a, *b), now);
                new_links.push((*a, *b));
            } else {
                if earned {
                    withheld.push((*a, *b));
                }
                requests.push((*a, *b));
            }
        }
        // A candidate that waits for a shared cause to pass keeps its place at the front:
        // re-measured, it stays a companion of the cause's other pairs (sent to the back,
        // held out, it let more of them through: 111 false link verdicts in one world
        // against 135).
        let evidence = |k: &Pair| self.links.watched.get(k).map_or(0, VecDeque::len);
        requests.sort_by_key(|k| std::cmp::Reverse(evidence(k)));
        give_a_slot_to_a_fresh_pair(&mut requests, &evidence, self.nodes.round());
        // A link can earn its verdict on observations older than its run (a run ends four
        // turns after its last sighting, a fabric event's rounds show none): such a link
        // began at an unknown round. So every held link has a run, as a restored one does,
        // and a member that takes the state over holds the same runs.
        for k in new_links {
            self.link_onset.entry(k).or_insert(Onset {
                first: None,
                last: now,
            });
        }
        LinkDecisions {
            requests,
            verdicts,
            withheld,
        }
    }
}

/// What [`HealthEngine::link_decisions`] decided this round.
struct LinkDecisions {
    /// Pairs to re-measure next round, most evidence first but for the last of the
    /// daemon's [`LINK_REMEASURES`] ([`give_a_slot_to_a_fresh_pair`]).
    requests: Vec<Pair>,
    /// Pairs with a link verdict (held ones included).
    verdicts: Vec<Pair>,
    /// Pairs that earned a verdict this round but are slow together with other links.
    withheld: Vec<Pair>,
}

/// Gives the last of the round's [`LINK_REMEASURES`] to a pair seen slow fewer than
/// [`COHORT_OBSERVATIONS`] times (in turn, by `round`, when there are several), when
/// `requests` (most `evidence` first) would fill every one with pairs that have more.
///
/// A spine the counters do not see slows a pair in ten or so between ToRs, too few a
/// round for a dip: its pairs are told from a degraded link only by being slow at the
/// same time ([`shared`]), which each shows by being slow twice. Re-measured first, the
/// candidates earned their nine observations in nine to twenty rounds, while the others
/// were measured once a turn of the stride and needed two turns to count. Held out, four
/// batches: 413 false link verdicts, 289 with this slot (correct ones 493, 497).
///
/// A fourth candidate gives up its slot while a fresh pair waits; its own permutation
/// probe still measures it once a turn, so it stays a companion of the others.
pub(super) fn give_a_slot_to_a_fresh_pair(
    requests: &mut Vec<Pair>,
    evidence: &dyn Fn(&Pair) -> usize,
    round: u64,
) {
    let last = LINK_REMEASURES - 1;
    if requests.len() <= last || evidence(&requests[last]) < COHORT_OBSERVATIONS {
        return;
    }
    let fresh: Vec<usize> = (last + 1..requests.len())
        .filter(|&i| evidence(&requests[i]) < COHORT_OBSERVATIONS)
        .collect();
    if fresh.is_empty() {
        return;
    }
    let k = requests.remove(fresh[(round % fresh.len() as u64) as usize]);
    requests.insert(last, k);
}

/// Forgets the last slow round of pairs no longer watched, and of pairs last slow on their
/// own more than [`COHORT_TURNS`] turns of `turn` rounds before round `now`.
pub(super) fn keep_recent(
    seen: &mut BTreeMap<Pair, u64>,
    watched: &BTreeMap<Pair, VecDeque<f64>>,
    now: u64,
    turn: u64,
) {
    let since = now.saturating_sub(COHORT_TURNS * turn);
    seen.retain(|k, at| *at >= since && watched.contains_key(k));
}

/// Pairs slow on their own in at least [`COHORT_OBSERVATIONS`] measurements since they
/// were last normal, the last of them recent (`seen` holds only recent ones), with both
/// ends `fine`: the pairs a shared cause would be slowing at the same time as a candidate.
pub(super) fn slow_together(
    watched: &BTreeMap<Pair, VecDeque<f64>>,
    seen: &BTreeMap<Pair, u64>,
    fine: impl Fn(usize, usize) -> bool,
) -> Vec<Pair> {
    watched
        .iter()
        .filter(|(k, obs)| {
            obs.len() >= COHORT_OBSERVATIONS && seen.contains_key(k) && fine(k.0, k.1)
        })
        .map(|(k, _)| *k)
        .collect()
}

/// Whether a pair runs between two ToRs that the topology names (`tors`, by node).
fn crosses_tors(tors: &[Option<u32>], (a, b): Pair) -> bool {
    let tor = |x: usize| tors.get(x).copied().flatten();
    matches!((tor(a), tor(b)), (Some(x), Some(y)) if x != y)
}

/// Whether a candidate between two ToRs is one of several pairs between ToRs slow on
/// their own: at least [`LINK_COHORT`] other links between ToRs (a pair and its way back
/// are one) in `between` ([`HealthEngine::slow_between_tors`], and the held links whose
/// slowness began with the candidate's, [`began_together`]), whether or not they share an
/// end with it. A spine slows pairs between ToRs and none within one; its ECMP hash
/// spreads them over every pair of ToRs, so with small ToRs (two to eight members) no two
/// of them need share a ToR pair, and in a group of sixteen a spine of six slows about ten
/// of its pairs between ToRs, several of which meet at a node by chance: the rule of
/// disjoint companions ([`shared`]) then finds at most one for each. A degraded link is
/// one pair (and its way back); a node slow on all its pairs is judged as a node, and its
/// pairs count here only while it is healthy. Pairs within a ToR, and any pair of a node
/// whose ToR is unknown, are judged by [`shared`] alone.
fn spread_between_tors<'a>(
    between: impl Iterator<Item = &'a Pair>,
    tors: &[Option<u32>],
    (a, b): Pair,
) -> bool {
    if !crosses_tors(tors, (a, b)) {
        return false;
    }
    let own = (a.min(b), a.max(b));
    let links: BTreeSet<Pair> = between
        .filter(|k| crosses_tors(tors, **k))
        .map(|&(x, y)| (x.min(y), x.max(y)))
        .filter(|k| *k != own)
        .collect();
    links.len() >= LINK_COHORT
}

/// Whether both ends of a pair are healthy: a pair with a judged end (a slow ToR's
/// member, say) is that end's, and no sign of a shared cause elsewhere.
fn ends_healthy(nodes: &Lifecycle<NodeIx, NodeData>, a: usize, b: usize) -> bool {
    [a, b]
        .iter()
        .all(|&x| nodes[NodeIx(x)].state == NodeState::Healthy)
}

/// When a pair's slowness began and when it was last slow on its own: a run of slow
/// sightings of its own no more than [`ONSET_TURNS`] turns apart, which lasts while the
/// pair is a held link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Onset {
    /// The round of the run's first sighting; `None` for a held link whose run the engine
    /// lost in a remap (or a restore of a state that carried none), for one that earned
    /// its verdict without a run, and for a run of a link found within the last
    /// [`FOUND_TURNS`] turns: its slowness began before, so it began with no later
    /// candidate (restarted at its next sighting instead, it would seem to have begun
    /// with the candidates of that moment and keep them from their verdicts).
    pub first: Option<u64>,
    /// The round of its latest.
    pub last: u64,
}

impl HealthEngine {
    /// The rounds of a turn of the stride: the members, or the window if longer (a pair is
    /// measured in the permutation about once a turn).
    fn turn(&self) -> u64 {
        self.nodes.len().max(self.cfg.window) as u64
    }

    /// After a remap (whose runs are dropped), or a restore of a state that carried no
    /// runs (one from an older release; one too large to carry them keeps the held
    /// links'): each held link gets
    /// a run begun at an unknown round ([`Onset::first`]), ending as any run does if the
    /// link is not seen slow again within [`ONSET_TURNS`] turns once it lifts, and is
    /// remembered as found this round. A state of this release holds both for every held
    /// link (`link_decisions` gives a link that earned its verdict without a run one begun
    /// at an unknown round), so for it this changes nothing, and a member that took a
    /// group's state over holds the same runs and memory as the members that held it.
    pub(super) fn held_links_began_before(&mut self) {
        let now = self.nodes.round();
        for &k in &self.links.held {
            self.link_found.entry(k).or_insert(now);
            self.link_onset.entry(k).or_insert(Onset {
                first: None,
                last: now,
            });
        }
    }
}

/// Turns of the stride within which two links' slowness must begin to count as begun
/// together ([`began_together`]), and the most a run of a pair's slow sightings may go
/// without one ([`Onset`]): four. A spine's pairs are seen slow on their own only now and
/// then (not in a partial event's rounds, nor while an end is slow), so their runs start
/// apart and break; held out, four batches: with two (in the rule's first form), false
/// link verdicts 313 -> 265 and links found 216 -> 215; with four, 241 and 216 (242 and
/// 216 with [`FOUND_TURNS`]).
const ONSET_TURNS: u64 = 4;

/// Turns of the stride for which a link verdict is remembered after it was last held
/// (`HealthEngine::link_found`): sixteen. A degraded link's verdict lifts at a normal
/// measurement and its run of sightings breaks in a busy fabric (events and slow ends
/// leave none of its own for long), so the run it starts when it is seen again began
/// then, by chance together with another link's; counted as that link's companion, two
/// true links kept a third from its verdict (the reduced `tor-fabric` scenario lost one
/// of its four links that way). A link found before began before.
const FOUND_TURNS: u64 = 16;

/// Held links whose slowness began within [`ONSET_TURNS`] turns of `pair`'s: companions
/// of `pair` as much as the pairs still watched ([`shared`]). Runs that are over are
/// gone from `onset` before this is asked (`observe_links` drops them, and a held link's
/// run lasts while it is held).
///
/// A spine or a dip slows its pairs from one moment on, but a group sees them one at a
/// time: the first, re-measured every round, earns its verdict before the others have
/// been measured twice, and a verdict held kept it from counting as their companion, so
/// a spine's few pairs in a group became links one after another (held out, spine
/// congestion the counters did not show made 105 link verdicts in one world of groups of
/// 16). Links that degraded on their own began apart, and a link found earlier still
/// keeps no later one from its own.
pub(super) fn began_together(
    onset: &BTreeMap<Pair, Onset>,
    held: &BTreeSet<Pair>,
    pair: Pair,
    turn: u64,
) -> Vec<Pair> {
    let Some(at) = onset.get(&pair).and_then(|o| o.first) else {
        return Vec::new();
    };
    held.iter()
        .filter(|k| **k != pair)
        .filter(|k| {
            onset
                .get(k)
                .and_then(|o| o.first)
                .is_some_and(|first| first.abs_diff(at) <= ONSET_TURNS * turn)
        })
        .copied()
        .collect()
}

/// Whether pair `(a, b)`'s slowness is shared: at least [`LINK_COHORT`] other links (a
/// pair and its way back are one) with no end in common with it are slow on their own at
/// the same time. A degraded link is one pair, or two with its way back, which share its
/// ends; a spine or a dip that the partial-fabric tally misses (a small share of the
/// pairs, spread over the rounds of a stride) slows many pairs between different nodes at
/// once, each of them steady and with both ends otherwise fine, exactly as a degraded
/// link looks on its own.
pub(super) fn shared(cohort: &[Pair], (a, b): Pair) -> bool {
    let links: BTreeSet<Pair> = cohort
        .iter()
        .filter(|(x, y)| ![*x, *y].iter().any(|e| *e == a || *e == b))
        .map(|&(x, y)| (x.min(y), x.max(y)))
        .collect();
    links.len() >= LINK_COHORT
}

/// Steady, as for nodes: congestion on a spine or an end scatters a pair's observations, a
/// degraded link shifts them. Every observation within 3 spreads of their median, as
/// before a quarantine.
fn steady_shift(obs: &VecDeque<f64>, r: &RoundStats) -> bool {
    let mut v: Vec<f64> = obs.iter().copied().collect();
    let m = median(&mut v);
    let mut dev = deviations(&v, m);
    let within = dev.iter().all(|d| *d <= 3.0 * r.spread());
    within && steady(spread_of(&mut dev), r.spread())
}
