//! The host-plane engine ([`HealthEngine`]): probe measurements in, per-node states with
//! evidence out.
//!
//! The parts: `score` (the round's reference, fabric judgement and each node's window),
//! `advance` (moving a node by its window, its re-pairings and hard faults), `links`,
//! `reports` (the re-pairing reporters' consistency) and `restore` (the state's wire form,
//! which members exchange).

mod advance;
mod links;
mod reports;
mod restore;
mod score;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_crowds;
#[cfg(test)]
mod tests_dips;
#[cfg(test)]
mod tests_horizon;
#[cfg(test)]
mod tests_links;
#[cfg(test)]
mod tests_renumber;
#[cfg(test)]
mod tests_restore;
#[cfg(test)]
mod tests_small_tors;
#[cfg(test)]
mod tests_varying;
#[cfg(test)]
mod wire;

use std::collections::{BTreeMap, VecDeque};

use super::dips::DipPairs;
use super::evidence::Evidence;
use super::fabric::{Normal, PartialFabric};
use super::hardware::Signs;
use super::horizon::{CongestionHorizon, Horizon};
use super::lifecycle::{Change, Lifecycle, NodeIx, Track};
use super::pairs::{Pair, Pairs};
use super::spine::SpineVerdict;
use super::tor::{TorVerdict, TorWatch};
use crate::snapshot::probe::{NodeState, Transition};

pub use links::LINK_REMEASURES;
use links::Onset;
pub use reports::{CONTRADICTIONS, REPORT_WINDOW};

/// The shipped persistence horizon ([`HealthConfig::uncorroborated_hold`]), in rounds.
pub const UNCORROBORATED_HOLD: usize = 180;
pub use restore::{RestoreError, max_state_bytes};

/// Thresholds; defaults chosen with `hcclwatch simulate` on the shipped scenarios (see
/// `docs/detection.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Rounds in the scoring window (W).
    pub window: usize,
    /// Effect size to enter suspect: the window median of the node's log residual must
    /// exceed ln(1 + delta).
    pub delta: f64,
    /// Robust-z threshold on the window median.
    pub z: f64,
    /// Floor on the robust spread (log units), so tight data cannot manufacture 10σ.
    pub mad_floor: f64,
    /// Known-good peers a suspect is re-paired with.
    pub confirm_peers: usize,
    /// Rounds a hard fault must stay absent before a node it put in quarantine moves to
    /// probation (a hard fault is a current state, not a memory).
    pub hard_hold_down: usize,
    /// Consecutive re-pairings (one per round) that must all reproduce the slowness
    /// before a suspect is confirmed: one round's re-pairings share whatever congestion
    /// the node's uplink has at that moment.
    pub confirm_rounds: usize,
    /// Rounds, without congestion reported by its own uplink, a confirmed node must stay
    /// steadily above the entry threshold before a quarantine is recommended (rounds its
    /// counters explain neither count nor restart the hold).
    pub confirm_hold: usize,
    /// Rounds its uplink did not explain that a confirmed node must stay steadily above the
    /// entry threshold before a quarantine is recommended when its uplink reported
    /// congestion in most rounds of the run: probes cannot tell steady congestion from a
    /// slow component except by how long it lasts, and congestion the counters see part of
    /// the time is there in the rounds they miss. Rounds they explain never count: a node
    /// is never recommended for congestion its own counters show.
    pub congested_hold: usize,
    /// Rounds its uplink did not explain that a confirmed node must stay steadily above the
    /// entry threshold before a quarantine is recommended when nothing congestion cannot
    /// produce corroborates its slowness (no [`Signs`] in the run): the persistence
    /// horizon. Steady congestion that the node's counters miss slows its probes exactly as
    /// a slow component does, and ends; this is longer than such congestion lasts in the
    /// simulator's worlds (docs/detection.md). With hardware signs the hold is
    /// `confirm_hold` (or `congested_hold`).
    pub uncorroborated_hold: usize,
    /// Consecutive rounds below ln(1 + delta/2) to leave suspect/confirmed (or to move
    /// from quarantine_recommended to probation).
    pub exit_rounds: usize,
    /// Rounds of probation (re-entry threshold halved) before healthy.
    pub probation_rounds: usize,
    /// Round median above baseline × this ratio counts as a fabric-slow round.
    pub fabric_ratio: f64,
    /// Fabric-slow rounds, out of the last `window`, that make a fabric verdict.
    pub fabric_rounds: usize,
    /// Observations of one pair needed for a link verdict.
    pub link_observations: usize,
    /// Slow rounds in a row after which a lasting change (the round median against the
    /// baseline, a ToR's level against its normal) becomes the new normal.
    pub new_normal_rounds: usize,
    /// Judge nodes against their ToR's members too when [`RoundInput::tors`] names them:
    /// take each ToR's level out of its members' scores and count crowds per ToR (off:
    /// nodes are judged against the group alone). ToR verdicts are made either way.
    pub tor_aware: bool,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            window: 10,
            delta: 0.08,
            z: 3.0,
            mad_floor: 0.01,
            confirm_peers: 3,
            hard_hold_down: 30,
            confirm_rounds: 2,
            confirm_hold: 6,
            congested_hold: 15,
            uncorroborated_hold: UNCORROBORATED_HOLD,
            exit_rounds: 180,
            probation_rounds: 720,
            fabric_ratio: 1.0 / 0.9,
            fabric_rounds: 3,
            link_observations: 9,
            new_normal_rounds: 360,
            tor_aware: false,
        }
    }
}

/// One probe: how long `src → dst` took, normalised to the probe size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// Sender.
    pub src: usize,
    /// Receiver.
    pub dst: usize,
    /// Seconds (any consistent unit; only ratios matter).
    pub seconds: f64,
}

impl Probe {
    /// A usable duration.
    pub(super) fn valid(&self) -> bool {
        self.seconds.is_finite() && self.seconds > 0.0
    }

    /// Usable, with both ends among `n` nodes.
    pub(super) fn within(&self, n: usize) -> bool {
        self.src < n && self.dst < n && self.valid()
    }
}

/// One end's own timing of a re-pairing with an accused node: what the consistency check
/// compares across the accused's reporters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    /// The member that timed it.
    pub reporter: usize,
    /// The node it was re-paired with.
    pub accused: usize,
    /// Its timing, seconds.
    pub seconds: f64,
}

/// What the engine receives for one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundInput {
    /// Permutation-round probes.
    pub probes: Vec<Probe>,
    /// Confirmation probes (suspect with known-good peers), as requested last round.
    pub confirmations: Vec<Probe>,
    /// Hard faults from telemetry: (node, reason).
    pub hard_faults: Vec<(usize, String)>,
    /// Re-measurements of pairs the engine asked about (link localisation).
    pub link_probes: Vec<Probe>,
    /// Nodes outside this round's group (removed after a timeout): their state and
    /// history are kept, frozen, until they return.
    pub absent: Vec<usize>,
    /// Each end's own timing of each re-pairing (the accused's own report left out): what
    /// the consistency check compares.
    pub reports: Vec<Report>,
    /// Nodes whose own uplink counters showed congestion during the round (other traffic
    /// near line rate, congestion-marked packets received): slowness there has an
    /// explanation other than a slow component.
    pub congested: Vec<usize>,
    /// Nodes whose own interface showed hardware signs during the round (a link or PCIe
    /// link trained down, corrupted frames): evidence that congestion cannot give.
    pub hardware: Vec<(usize, Signs)>,
    /// Each node's ToR (leaf switch), by node index, as the topology gives it: nodes that
    /// share one share its slowdowns, so they are judged against each other as well as the
    /// group. Empty (or `None` for a node): the place is unknown.
    pub tors: Vec<Option<u32>>,
}

/// What a round produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundOutput {
    /// State changes this round.
    pub transitions: Vec<Transition>,
    /// Nodes to re-pair with known-good peers next round.
    pub confirm_requests: Vec<usize>,
    /// Of those, the nodes to re-pair with members of their own ToR only (the plan's
    /// [`OwnTor`](crate::health::plan::OwnTor)): confirmed nodes judged inside a partial
    /// fabric event, where only a pair that stays within one ToR is beyond the dip's reach.
    pub confirm_own_tor: Vec<usize>,
    /// The fabric verdict: the group slow against its baseline, a partial event, or a
    /// crowd (per-node escalation is frozen where it reaches).
    pub fabric_degraded: bool,
    /// Pairs judged degraded links this round (src, dst).
    pub link_verdicts: Vec<(usize, usize)>,
    /// Pairs to re-measure next round (seen slow, endpoints healthy), most evidence first
    /// but for the last of [`LINK_REMEASURES`], kept for a pair seen slow once.
    pub link_requests: Vec<(usize, usize)>,
    /// Pairs whose evidence would make a link verdict this round but which other links,
    /// sharing no end with them, are slow together with: a shared cause (a spine, a dip
    /// the partial-fabric tally misses), so no verdict while it lasts. For the operator
    /// who sees a slow pair and no verdict, and for the network team (several at once
    /// point at a switch).
    pub link_withheld: Vec<(usize, usize)>,
    /// Window score per node (median log residual), for `hcclwatch_straggler_score`.
    pub scores: Vec<f64>,
    /// Members whose re-pairing reports the others consistently contradict.
    pub inconsistent_reporters: Vec<usize>,
    /// ToRs whose members are slow together, against the ToR's own learned normal (a ToR
    /// too small for a level: every member slow at once by about as much, against the
    /// round): a verdict on the switch (for the network team), never on its members.
    pub tor_verdicts: Vec<TorVerdict>,
    /// ToRs judged this round (at least [`TOR_MIN_MEMBERS`] members in the group by their
    /// fitted level, two or more by whether all are slow at once): a ToR not among them
    /// has no verdict either way.
    ///
    /// [`TOR_MIN_MEMBERS`]: crate::health::TOR_MIN_MEMBERS
    pub tors_judged: Vec<u32>,
    /// The group's round median stayed above its baseline for `new_normal_rounds`: this
    /// round it became the new normal (the fabric verdict ends).
    pub new_normal: bool,
    /// ToRs whose lasting change became their new normal this round.
    pub tor_new_normal: Vec<u32>,
    /// ToRs whose uplinks are marked slow: their members slow with the rest of the group
    /// while the probes between two of them are not, with by how much (log units, against
    /// the other ToRs). For the network team (the ToR's uplinks, or what lies past them);
    /// no ToR verdict, and its members are held as a crowd's are but for one slower than
    /// the uplinks explain by the entry threshold.
    pub tor_uplinks: Vec<(u32, f64)>,
    /// A partial fabric event (a dip) lasted `new_normal_rounds`: this round its pairs
    /// became the normal (its fabric verdict ends; they still make no link verdict).
    pub dip_new_normal: bool,
    /// While a partial fabric verdict holds: its dip has a spine's shape (pairs between
    /// ToRs slowed, spread over them, the pairs within ToRs spared), a verdict on a spine
    /// behind the ToRs it names (for the network team, never on a node or link).
    pub spine_verdict: Option<SpineVerdict>,
    /// The nodes of this round's crowd (many steadily slow at once: a shared cause, whose
    /// members are not escalated), empty without one. When the topology puts them all
    /// behind one ToR the crowd blocks only that ToR's members; otherwise the group's.
    /// Also the members of a ToR all of whose members are slow at once, however small
    /// the ToR (its event, not theirs; no fabric verdict on its own).
    pub crowd: Vec<usize>,
    /// The persistence horizon a straggler nothing corroborates waits now (one without a
    /// congestion run of its own under way), and the runs it was learnt from.
    pub horizon: Horizon,
}

/// What the engine keeps about a node beside its lifecycle.
#[derive(Debug, Clone, Default, PartialEq)]
struct NodeData {
    /// (log residual, robust z) of the probes the node sent (its row of the matrix).
    out_hist: VecDeque<(f64, f64)>,
    /// (log residual, robust z) of the probes the node received (its column).
    in_hist: VecDeque<(f64, f64)>,
    /// Re-pairings were asked for last round; this round's are the node's.
    confirm_pending: bool,
    /// Rounds whose re-pairings all reproduced since the node became suspect.
    confirmations: usize,
    /// While a quarantine recommendation is due to a hard fault: rounds the fault has been
    /// absent.
    hard_clear: Option<usize>,
    /// This node's re-pairing reports: whether each was contradicted by the other
    /// reporters of the same suspect.
    reports: VecDeque<bool>,
    /// The hardware signs the node showed in its current episode (from its first slow
    /// round until it is healthy again).
    signs: Signs,
    /// Its steadily slow rounds in the episode that its counters did not explain, in a
    /// row or not: what the persistence horizon counts.
    persist: usize,
    /// Its slow rounds in the episode, steady or not, that its counters did not explain:
    /// what the hold of a straggler that varies from round to round counts
    /// (`HealthEngine::varying_held`).
    unexplained: usize,
    /// Of those, the rounds in which its sending and receiving probes moved as one: what
    /// the persistence horizon of a straggler that varies round to round counts
    /// (`HealthEngine::varying_held`).
    agreeing: usize,
    /// The pending re-pairing of this confirmed node was asked while its slowness varied
    /// (`varying_held`: hardware evidence, or the horizon of rounds that moved as one),
    /// not after its steady hold: its answer is judged on that evidence.
    asked_varying: bool,
    /// Its slow rounds in the episode, and of them those with a hardware sign (whether
    /// the signs corroborate the episode, [`crate::health::hardware::corroborates`]).
    slow_rounds: usize,
    sign_rounds: usize,
    /// While it is confirmed inside a partial fabric verdict: its re-pairings with members
    /// of its own ToR that the dip does not reach, (peer, log residual), one per peer, the
    /// newest last (see `HealthEngine::judge_within`). Not part of the engine's wire form:
    /// a member that takes the state over collects them again, a few rounds.
    within: Vec<(usize, f64)>,
}

impl NodeData {
    /// Whether the episode's hardware signs corroborate it (evidence congestion cannot
    /// give, [`crate::health::hardware::corroborates`]).
    fn corroborated(&self) -> bool {
        crate::health::hardware::corroborates(self.sign_rounds, self.slow_rounds)
    }

    /// Drops the current episode's evidence.
    fn forget_episode(&mut self) {
        self.signs = Signs::NONE;
        self.persist = 0;
        self.unexplained = 0;
        self.agreeing = 0;
        self.slow_rounds = 0;
        self.sign_rounds = 0;
    }
}

/// A node's track: its lifecycle and [`NodeData`].
type NodeTrack = Track<NodeData>;

/// The host-plane engine of one probe group: [`HealthEngine::step`] takes a round's
/// measurements and returns its verdicts.
///
/// Each round the engine receives the probes of a permutation round (every node sends one
/// flow and receives one), the confirmation probes it asked for, and any hard faults from
/// telemetry. It scores every probe against the same round's median (peer-relative, so a
/// fabric-wide dip moves the median, not the residuals), keeps a window per node, and
/// moves nodes through the lifecycle both planes share, with exit thresholds below entry
/// thresholds. Every transition records its reason and the evidence.
///
/// - A suspect is confirmed when re-pairings with known-good peers reproduce the slowness
///   in consecutive rounds. Congestion on the node's own uplink reaches those re-pairings
///   too, so reproduction alone does not separate it from a slow node; what does is that
///   a slow component adds a constant while queueing scatters: confirmation and quarantine
///   also need the slowness to be *steady* (the window's residuals and the re-pairings
///   scatter no more than [`STEADY_RATIO`](crate::health::STEADY_RATIO) times the round's
///   healthy spread, and before a quarantine the re-pairings land where the window says
///   the node is).
/// - Hard faults skip straight to a quarantine recommendation.
/// - A fabric-wide slowdown (the round median against a slow baseline), or a *partial* one
///   (more probes slow on their own than the learned base rate explains: a spine, a share
///   of the links), makes a fabric verdict that blocks every quarantine recommendation
///   while it lasts; many nodes steadily slow at once (a *crowd*: a ToR) does the same and
///   blocks confirmations too. Detection goes on: residuals are peer-relative.
/// - A link verdict needs `link_observations` slow, steady observations of one pair that
///   are the pair's own: nothing else at either end slow in the same round, no fabric
///   event. A congested uplink or a slow node slows every probe through it, a bad link
///   only its own. A pair slow while two other links with no end in common are slow on
///   their own too waits: a spine or a dip slows many pairs at once, a bad link one.
///
/// ```
/// use hcclwatch::health::{HealthConfig, HealthEngine, NodeState, Probe, RoundInput};
///
/// // Eight nodes; node 5 takes 30 % longer on every probe it sends or receives.
/// let mut engine = HealthEngine::new(8, HealthConfig::default());
/// for round in 0..20 {
///     let stride = 1 + round % 7;
///     let probes = (0..8)
///         .map(|src| {
///             let dst = (src + stride) % 8;
///             let slow = src == 5 || dst == 5;
///             Probe { src, dst, seconds: if slow { 1.3e-3 } else { 1e-3 } }
///         })
///         .collect();
///     engine.step(&RoundInput { probes, ..RoundInput::default() });
/// }
/// // A full window later it is a suspect (re-pairings would confirm it); nobody else is.
/// let states = engine.states();
/// assert_eq!(states[5], NodeState::Suspect);
/// assert!(states.iter().enumerate().all(|(i, s)| i == 5 || *s == NodeState::Healthy));
/// ```
#[derive(Debug, Clone)]
pub struct HealthEngine {
    cfg: HealthConfig,
    nodes: Lifecycle<NodeIx, NodeData>,
    /// Median log duration of a normal round.
    baseline: Normal,
    /// Fabric-slow rounds (the median, or a partial event) of the last `window`.
    fabric_hist: VecDeque<bool>,
    /// Partial-event rounds of the last `window` (not in the wire form: a restored engine
    /// starts it empty).
    partial_hist: VecDeque<bool>,
    /// Each ToR's learned normal and recent slow rounds (not in the wire form).
    tors: TorWatch,
    /// Last round's ToR levels, taken out of this round's probes before its own are
    /// measured (not in the wire form).
    tor_shift: BTreeMap<u32, f64>,
    /// The ToR numbers (by node) `tors` and `tor_shift` were last kept under: a round
    /// that numbers them otherwise carries both over ([`HealthEngine::follow_tors`]).
    /// Not in the wire form: a restored engine keeps its own `tors`, and this with them.
    tor_seen: Vec<Option<u32>>,
    /// The base rate of probes slow on their own, and the recent rounds' counts.
    partial: PartialFabric,
    /// Pairs with slow observations of their own, and pairs with a link verdict: held
    /// until a measurement of the pair is normal again, so that the verdict does not
    /// flicker when an end's score moves (the slow link itself lifts its ends' scores).
    links: Pairs<VecDeque<f64>>,
    /// The round each watched pair was last slow on its own: a pair counts as slow at the
    /// same time as a candidate link only while this is recent (`links::slow_together`).
    /// In the wire form (a member that takes a group's state over decides as the members
    /// that held it); a remapped engine starts it empty, so its watched pairs count again
    /// from their next slow measurement.
    link_seen: BTreeMap<Pair, u64>,
    /// When each pair's slowness began and when it was last slow on its own: a run of
    /// sightings no more than `links::ONSET_TURNS` turns apart, lasting while the pair is
    /// held (a normal measurement between does not end it, so a noisy measurement does
    /// not move the start). Held links that began with a candidate are its companions
    /// (`links::began_together`). In the wire form, like `link_seen`; a remapped engine,
    /// or one restored from a state without runs (an older release's), keeps only its
    /// held links' runs, begun at an unknown round (`held_links_began_before`).
    link_onset: BTreeMap<Pair, Onset>,
    /// The links held within the last `links::FOUND_TURNS` turns, with the round each was
    /// last held: a run such a link starts began at an unknown round, before any later
    /// candidate's. In the wire form, like `link_onset`.
    link_found: BTreeMap<Pair, u64>,
    /// The pairs a partial event explains while it lasts, and those of dips that lasted
    /// the horizon: they make no link verdict (not in the wire form: a restored engine
    /// learns a dip again from its next event round, and its normal only after the
    /// horizon; see `crate::health::dips`).
    dip: DipPairs,
    /// The runs of congestion the members' counters reported, and the slow episodes that
    /// ended by themselves: how long the persistence horizon is
    /// ([`crate::health::horizon`]).
    congestion: CongestionHorizon,
}

impl HealthEngine {
    /// An engine for `nodes` nodes.
    pub fn new(nodes: usize, cfg: HealthConfig) -> Self {
        Self {
            nodes: Lifecycle::new((0..nodes).map(|_| NodeData::default())),
            cfg,
            baseline: Normal::default(),
            fabric_hist: VecDeque::new(),
            partial_hist: VecDeque::new(),
            tors: TorWatch::default(),
            tor_shift: BTreeMap::new(),
            tor_seen: Vec::new(),
            partial: PartialFabric::default(),
            links: Pairs::default(),
            link_seen: BTreeMap::new(),
            link_onset: BTreeMap::new(),
            link_found: BTreeMap::new(),
            dip: DipPairs::default(),
            congestion: CongestionHorizon::default(),
        }
    }

    /// Rounds this engine has processed.
    pub fn rounds(&self) -> u64 {
        self.nodes.round()
    }

    /// The current state of every node.
    pub fn states(&self) -> Vec<NodeState> {
        self.nodes.states()
    }

    /// Processes one round.
    pub fn step(&mut self, input: &RoundInput) -> RoundOutput {
        self.nodes.tick();
        self.follow_tors(&input.tors);
        let mut out = RoundOutput::default();
        let mut r = self.score_round(input);
        let n = self.nodes.len();
        let hard = self.hard_faults(input, &mut out);
        let judged = |i: &usize| !hard.contains(i) && !input.absent.contains(i);
        // ToR verdicts are made whenever the topology is known; the levels are taken out of
        // the probes touching a ToR only when the engine judges by ToR (`tor_aware`).
        let (levels, judgement) = self.judge_tors(input, &r, &judged);
        r.tor_judgement = judgement;
        if self.cfg.tor_aware {
            r.tors = levels;
        }
        self.tor_shift = r.tors.shift().clone();
        // The windows hold residuals less the levels of the ToRs each probe crossed (see
        // `record`): nothing more to take out here.
        let windows: Vec<score::Window> = (0..n).map(|i| self.window(NodeIx(i), &r)).collect();
        let mut confirm = self.confirmations(input, &r);
        out.scores = windows.iter().map(|w| w.score).collect();
        // Only the group's own members (as hard faults and reports): a state the engine
        // writes must be one it takes back.
        let congested: Vec<usize> = input.congested.iter().copied().filter(|&i| i < n).collect();
        self.congestion.observe(self.nodes.round(), &congested);
        out.horizon = self.congestion.group(self.cfg.uncorroborated_hold);
        let crowds = self.crowded(&windows, &r, &input.tors, &judged);
        out.fabric_degraded = r.fabric || crowds.fabric;
        // A ToR too small for a fitted level has no level to judge: whether all its
        // members are slow at once stands in for it, so that a slow ToR of two is named.
        let small = score::small_tors(
            &input.tors,
            &|i| self.tor_counts(i, &judged),
            &|i| input.congested.contains(&i),
            &out.scores,
            &crowds.whole,
            &r.tor_judgement.judged,
        );
        (r.crowded, out.crowd) = (crowds.crowded, crowds.named);
        out.tors_judged = r.tor_judgement.judged.clone();
        out.tors_judged.extend(small.iter().map(|(v, _, _)| v.tor));
        out.tors_judged.sort_unstable();
        out.tor_verdicts = r.tor_judgement.verdicts.clone();
        let small = self.tors.judge_small(small, self.cfg.window);
        out.tor_verdicts.extend(small);
        out.tor_new_normal = r.tor_judgement.renewed.clone();
        out.tor_uplinks = r.tor_judgement.uplinks.clone();
        out.new_normal = r.new_normal;
        // The topology as far as it names this group's nodes (a longer list names none of
        // them past its end); the states as the round began, read once and only under a
        // partial fabric verdict (what they are read for: a node moved this round does not
        // change how its ToR's members are judged).
        let tors = &input.tors[..input.tors.len().min(n)];
        let states = if r.partial_fabric {
            self.nodes.states()
        } else {
            Vec::new()
        };
        for (i, w) in windows.into_iter().enumerate() {
            if judged(&i) {
                let (peers, residuals): (Vec<usize>, Vec<f64>) =
                    confirm.remove(&i).unwrap_or_default().into_iter().unzip();
                // Only a confirmed node alone on its ToR is judged by its re-pairings
                // within the ToR inside a dip (`advance`): the others' answers are not
                // read for it, and the dip's pairs are scanned for none of them.
                let confirmed = self.nodes[NodeIx(i)].state == NodeState::Confirmed;
                let (alone, mates) = if r.partial_fabric && confirmed {
                    tor_mates(i, tors, &states, &input.absent)
                } else {
                    (false, 0)
                };
                let spared = if alone && !r.crowded(i) {
                    let spares = |p: &usize| self.dip.spares((i, *p), tors);
                    peers.iter().map(spares).collect()
                } else {
                    Vec::new()
                };
                let seen = advance::Seen {
                    confirm: (!peers.is_empty()).then_some(residuals),
                    peers,
                    spared,
                    alone,
                    mates,
                    congested: input.congested.contains(&i),
                    signs: input
                        .hardware
                        .iter()
                        .filter(|(n, _)| *n == i)
                        .fold(Signs::NONE, |a, (_, s)| a.union(*s)),
                    bound: self.nodes[NodeIx(i)].state == NodeState::Confirmed
                        && self.dip.binds(i, &input.tors),
                    beyond: crowds.tor_level.get(i).copied().unwrap_or_default(),
                };
                self.advance(NodeIx(i), w, &r, seen, &mut out);
            }
        }
        self.judge_links(input, &r, &mut out);
        self.check_reports(input, &r, &mut out);
        out
    }

    /// The ToRs the engine judges by: the input's when `tor_aware`, none otherwise.
    fn topology<'a>(&self, input: &'a RoundInput) -> &'a [Option<u32>] {
        if self.cfg.tor_aware { &input.tors } else { &[] }
    }

    /// Moves `node` to `to` and records the transition (nothing when it is there already).
    fn set(
        &mut self,
        node: NodeIx,
        to: NodeState,
        reason: String,
        evidence: Evidence,
        out: &mut RoundOutput,
    ) {
        // Back within bounds for `exit_rounds` (to healthy or probation), or out of a
        // hard fault's quarantine (to probation), the episode is over: its evidence
        // (hardware signs, slow rounds towards the horizon) does not carry into the next
        // one. A suspect cleared because one re-pairing did not reproduce, still slow, is
        // the same episode.
        let recovered = self.nodes[node].counts.clean >= self.cfg.exit_rounds;
        // A pending re-pairing asked on a confirmed node's varying evidence is judged so
        // only in that state, and the answers collected within its ToR inside a dip
        // belong to that stay in it.
        self.nodes[node].data.asked_varying = false;
        if self.nodes[node].state != to {
            self.nodes[node].data.within.clear();
        }
        let mut ended = None;
        if to == NodeState::Probation || (to == NodeState::Healthy && recovered) {
            // An episode nothing corroborated that ended by itself (back within bounds
            // from suspect or confirmed, never recommended) tells how long such slowness
            // lasts (see `CongestionHorizon::episode_ended`). One that was recommended
            // may have ended by a repair, and the end of a hard fault's hold-down is no
            // end of a slowness.
            let d = &self.nodes[node].data;
            let by_itself = to == NodeState::Healthy
                && matches!(
                    self.nodes[node].state,
                    NodeState::Suspect | NodeState::Confirmed
                );
            ended = (by_itself && !d.corroborated()).then_some(d.persist.max(d.agreeing));
            self.nodes[node].data.forget_episode();
        }
        if let Some(c) = self.nodes.set(node, to, reason, evidence) {
            if let Some(rounds) = ended {
                self.congestion.episode_ended(rounds as u64);
            }
            out.transitions.push(transition(c));
        }
    }
}

/// Whether node `i`'s ToR (`tors`, by node) is known with no other member confirmed
/// (`states`; one recommended for quarantine no longer counts: it is out of the jobs'
/// way, and a second straggler beside it is judged alone), and how many of its other
/// members are healthy and present (not in `absent`).
fn tor_mates(
    i: usize,
    tors: &[Option<u32>],
    states: &[NodeState],
    absent: &[usize],
) -> (bool, usize) {
    let Some(t) = tors.get(i).copied().flatten() else {
        return (false, 0);
    };
    let n = tors.len().min(states.len());
    let mates = || (0..n).filter(|&m| m != i && tors[m] == Some(t));
    let slow = |m: usize| states[m] == NodeState::Confirmed;
    // The plan pairs present members only.
    let healthy = |m: &usize| states[*m] == NodeState::Healthy && !absent.contains(m);
    (!mates().any(slow), mates().filter(healthy).count())
}

/// The snapshot's form of a node's change.
fn transition(c: Change<NodeIx>) -> Transition {
    Transition {
        round: c.round,
        node: c.id.0,
        from: c.from,
        to: c.to,
        reason: c.reason,
        evidence: c.evidence.named(),
    }
}
