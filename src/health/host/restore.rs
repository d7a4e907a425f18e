//! The engine's learned state as members exchange it, and carrying it over.
//!
//! A member that joins a group takes over the state a majority of the members hold, chosen
//! by the BLAKE3 digest of [`HealthEngine::snapshot`]'s bytes (`probe::group`). The bytes
//! are therefore a wire form: members of two versions must write the same bytes for the
//! same state, or a rolling upgrade leaves groups without a majority. So the form is kept
//! here as its own types, field for field and in the order it has always had, apart from
//! the engine's working types; a received state is checked field by field before anything
//! of it is taken over. The one part kept elsewhere is the dip normal's form
//! (`health::dips::NormalWire`), next to the private fields it carries.

use std::collections::VecDeque;

use super::links::Onset;
use super::{HealthConfig, HealthEngine, NodeData, NodeTrack};
use crate::health::dips::{DipPairs, NormalWire};
use crate::health::fabric::{
    BaseRate, Baseline, Normal, PARTIAL_ROUNDS, PartialFabric, RateLearning,
};
use crate::health::hardware::Signs;
use crate::health::horizon::CongestionHorizon;
use crate::health::lifecycle::{Counts, Lifecycle, Track};
use crate::health::pairs::Pairs;
use crate::health::stats::{MAX_LOG, MIN_SPREAD};
use crate::health::tor::renumbering;
use crate::snapshot::probe::NodeState;

use super::reports::REPORT_WINDOW;

/// The most rounds a state may have run: 2^40, over 30,000 years of one-second rounds. A
/// larger count is no engine's, and the rounds after it would overflow.
const MAX_ROUNDS: u64 = 1 << 40;

/// The largest z a state may carry: [`MAX_LOG`] over the least spread a round is given
/// ([`MIN_SPREAD`]).
const MAX_Z: f64 = MAX_LOG / MIN_SPREAD;

/// The most measurements one round of the partial-fabric tally may count: 2^32, more
/// than any group's round holds, and few enough that their sum over the tally's rounds
/// cannot overflow.
const MAX_ROUND_PROBES: usize = 1 << 32;

/// Whether a log value is finite and within [`MAX_LOG`].
fn log_ok(x: f64) -> bool {
    x.is_finite() && x.abs() <= MAX_LOG
}

/// Why a member's engine state cannot be taken over.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Not the wire form of an engine state.
    #[error("malformed engine state: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The state of an engine over another set of nodes.
    #[error("engine state for {theirs} nodes, this engine has {ours}")]
    OtherGroup {
        /// Nodes in the received state.
        theirs: usize,
        /// Nodes of this engine.
        ours: usize,
    },
    /// A field holds a value this engine could never have produced.
    #[error("engine state field {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The largest engine state a member takes from the wire, for `nodes` nodes and a scoring
/// window of `window` rounds (`probe::group` checks the announced length against it
/// before anything is allocated): each node's two histories hold at most `window`
/// (residual, z) pairs, about 100 bytes of JSON apiece, plus fixed fields; links add a few
/// per node. Releases before the dip normal was carried used the same bound, so
/// [`HealthEngine::snapshot`] leaves the normal out of a state it would push past it: no
/// member, of either release, refuses (and leaves out) a sender for its size.
pub fn max_state_bytes(nodes: usize, window: usize) -> usize {
    let per_node = 1024 + 4 * window.max(1) * 100;
    (64 * 1024 + nodes.max(1) * per_node).min(64 << 20)
}

/// A node's track on the wire.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct NodeWire {
    state: NodeState,
    out_hist: VecDeque<(f64, f64)>,
    in_hist: VecDeque<(f64, f64)>,
    /// [`Counts::clean`].
    below: usize,
    /// [`Counts::steady`].
    above: usize,
    /// [`Counts::quiet`].
    #[serde(default)]
    quiet: usize,
    since: u64,
    confirm_pending: bool,
    confirmations: usize,
    #[serde(default)]
    hard_clear: Option<usize>,
    #[serde(default)]
    reports: VecDeque<bool>,
    /// [`NodeData::signs`]' flags; left out when there are none, so a state without them
    /// keeps the form it had before they existed.
    #[serde(default, skip_serializing_if = "is_zero")]
    signs: u8,
    /// [`NodeData::persist`]; left out when 0, as `signs`.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    persist: usize,
    /// [`NodeData::unexplained`]; left out when 0, as `signs`.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    unexplained: usize,
    /// [`NodeData::agreeing`]; left out when 0, as `signs`.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    agreeing: usize,
    /// [`NodeData::asked_varying`]; left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    asked_varying: bool,
    /// The episode's slow rounds and those with a sign; left out when 0, as `signs`.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    slow_rounds: usize,
    #[serde(default, skip_serializing_if = "is_zero_count")]
    sign_rounds: usize,
}

/// Whether a counter is 0.
fn is_zero_count(n: &usize) -> bool {
    *n == 0
}

/// Whether a flag byte is empty (serde's `skip_serializing_if` takes a reference).
fn is_zero(b: &u8) -> bool {
    *b == 0
}

impl NodeWire {
    fn of(t: &NodeTrack) -> Self {
        let d = &t.data;
        NodeWire {
            state: t.state,
            out_hist: d.out_hist.clone(),
            in_hist: d.in_hist.clone(),
            below: t.counts.clean,
            above: t.counts.steady,
            quiet: t.counts.quiet,
            since: t.since,
            confirm_pending: d.confirm_pending,
            confirmations: d.confirmations,
            hard_clear: d.hard_clear,
            reports: d.reports.clone(),
            signs: d.signs.bits(),
            persist: d.persist,
            unexplained: d.unexplained,
            agreeing: d.agreeing,
            asked_varying: d.asked_varying,
            slow_rounds: d.slow_rounds,
            sign_rounds: d.sign_rounds,
        }
    }

    fn track(self) -> NodeTrack {
        Track {
            state: self.state,
            since: self.since,
            counts: Counts {
                clean: self.below,
                steady: self.above,
                quiet: self.quiet,
            },
            data: NodeData {
                out_hist: self.out_hist,
                in_hist: self.in_hist,
                confirm_pending: self.confirm_pending,
                confirmations: self.confirmations,
                hard_clear: self.hard_clear,
                reports: self.reports,
                signs: Signs::from_bits(self.signs),
                persist: self.persist,
                unexplained: self.unexplained,
                agreeing: self.agreeing,
                asked_varying: self.asked_varying,
                slow_rounds: self.slow_rounds,
                sign_rounds: self.sign_rounds,
                within: Vec::new(),
            },
        }
    }
}

/// The wire form of [`HealthEngine::snapshot`] (JSON has no tuple keys, so the maps are
/// lists).
#[derive(serde::Serialize, serde::Deserialize)]
struct Snapshot {
    nodes: Vec<NodeWire>,
    round: u64,
    baseline: Option<f64>,
    fabric_hist: VecDeque<bool>,
    #[serde(default)]
    slow_rate: Option<f64>,
    #[serde(default)]
    partial_hist: VecDeque<(usize, usize)>,
    links: Vec<((usize, usize), VecDeque<f64>)>,
    held: Vec<(usize, usize)>,
    /// The dips that became the normal; left out when there are none, so a state without
    /// one keeps the form it had before the normal was carried (and a member of an older
    /// release, which ignores the field, takes the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dip_normal: Option<NormalWire>,
    /// The congestion runs the counters reported ([`CongestionHorizon`]): those under way
    /// (node, first and last round) and the lengths of those that ended. Left out when
    /// empty, as `dip_normal`: a state without runs keeps the form it had before, a member
    /// of an older release ignores them, and a state from one starts the horizon again
    /// from the configured one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    congestion_open: Vec<(usize, u64, u64)>,
    /// The lengths of the last runs that ended, oldest first (see `congestion_open`).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    congestion_ended: VecDeque<u64>,
    /// The lengths of the last slow episodes nothing corroborated that ended by
    /// themselves, oldest first (see `CongestionHorizon::episode_ended`). Left out when
    /// empty, as `congestion_ended`: a member of an older release ignores them, and a
    /// state from one has none, so its horizon rests on the counters' runs alone (as an
    /// older member's does) until episodes end again, and it may recommend a straggler
    /// sooner than a member that kept them.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    episodes_ended: VecDeque<u64>,
    /// The fabric baseline's slow rounds in a row ([`Normal::run`]). Left out at 0, so a
    /// state without a run keeps the form it had before; a state from an older release
    /// starts the run again.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    baseline_run: usize,
    /// The round each watched pair was last slow on its own (`HealthEngine::link_seen`).
    /// This and the two link fields after it are left out when empty, as
    /// `congestion_ended`, and when a state would pass [`max_state_bytes`] with them
    /// (then the held links' runs and memory stay): a state without them gives its held
    /// links runs begun at an unknown round, as an older release's state does
    /// (`HealthEngine::held_links_began_before`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    link_seen: Vec<((usize, usize), u64)>,
    /// Each pair's run of slow sightings (`HealthEngine::link_onset`): the pair, the
    /// round of the run's first sighting (none: it began before) and of its latest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    link_runs: Vec<((usize, usize), Option<u64>, u64)>,
    /// The links found within the last sixteen turns, with the round each was last held
    /// (`HealthEngine::link_found`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    link_found: Vec<((usize, usize), u64)>,
}

/// Whether `list`'s keys strictly ascend (as an ordered map's are written).
fn ascending<T>(list: &[T], key: impl Fn(&T) -> (usize, usize)) -> bool {
    list.windows(2).all(|w| key(&w[0]) < key(&w[1]))
}

/// An error naming the field and what is wrong with it.
fn bad(field: &'static str, reason: String) -> Result<(), RestoreError> {
    Err(RestoreError::Invalid { field, reason })
}

impl Snapshot {
    /// Checks every field against what an engine with `cfg` can hold: history lengths
    /// within the window, finite numbers, pairs and counters in range. A state that passes
    /// could have been produced by this engine.
    fn validate(&self, cfg: &HealthConfig) -> Result<(), RestoreError> {
        if self.round > MAX_ROUNDS {
            return bad(
                "round",
                format!("{} rounds, more than {MAX_ROUNDS}", self.round),
            );
        }
        for (i, t) in self.nodes.iter().enumerate() {
            t.validate(i, self.round, cfg)?;
        }
        let w = cfg.window;
        if self.baseline.is_some_and(|b| !log_ok(b))
            || self.slow_rate.is_some_and(|r| !(0.0..=1.0).contains(&r))
        {
            return bad(
                "baseline",
                format!("not a finite baseline within ±{MAX_LOG} or a rate in 0..=1"),
            );
        }
        if self.fabric_hist.len() > w || self.partial_hist.len() > w.max(PARTIAL_ROUNDS) {
            return bad("fabric_hist", "longer than the window".into());
        }
        if let Some((slow, probes)) = self
            .partial_hist
            .iter()
            .find(|(slow, probes)| slow > probes || *probes > MAX_ROUND_PROBES)
        {
            return bad(
                "partial_hist",
                format!(
                    "{slow} slow of {probes} measurements: more slow than measured, or more measured than a round holds"
                ),
            );
        }
        let max_obs = cfg.link_observations.max(1);
        for ((a, b), obs) in &self.links {
            if obs.len() > max_obs || obs.iter().any(|d| !log_ok(*d)) || a == b {
                return bad("links", format!("pair ({a}, {b}): bad observations"));
            }
        }
        // A node is not a link to itself: held, it would be remembered as a link found
        // and written into a state no engine takes back.
        if let Some((a, _)) = self.held.iter().find(|(a, b)| a == b) {
            return bad("held", format!("pair ({a}, {a}): a node and itself"));
        }
        // The run counts slow rounds against a learned baseline, up to the horizon at which
        // the level becomes the normal and the run starts again.
        if self.baseline_run > 0
            && (self.baseline.is_none()
                || self.baseline_run > cfg.new_normal_rounds
                || self.baseline_run as u64 > self.round)
        {
            return bad(
                "baseline_run",
                format!(
                    "{} slow rounds in a row in {} rounds (horizon {}, baseline {:?})",
                    self.baseline_run, self.round, cfg.new_normal_rounds, self.baseline
                ),
            );
        }
        self.validate_link_memory()
    }

    /// Checks the links' runs and memory: pairs of two of the state's nodes, rounds no
    /// later than the state's, a run's first sighting no later than its latest.
    fn validate_link_memory(&self) -> Result<(), RestoreError> {
        let (n, round) = (self.nodes.len(), self.round);
        let pair_ok = |&(a, b): &(usize, usize)| a < n && b < n && a != b;
        // Written from ordered maps: a list out of order, or with a pair twice, is not a
        // state this engine wrote (taken into a map, it would write other bytes back).
        for (field, ok) in [
            ("link_seen", ascending(&self.link_seen, |e| e.0)),
            ("link_runs", ascending(&self.link_runs, |e| e.0)),
            ("link_found", ascending(&self.link_found, |e| e.0)),
        ] {
            if !ok {
                return bad(field, "pairs out of order or repeated".into());
            }
        }
        let seen = self.link_seen.iter().map(|(k, at)| ("link_seen", k, *at));
        let found = self.link_found.iter().map(|(k, at)| ("link_found", k, *at));
        let runs = self
            .link_runs
            .iter()
            .map(|(k, _, last)| ("link_runs", k, *last));
        for (field, k, at) in seen.chain(found).chain(runs) {
            if !pair_ok(k) || at > round {
                return bad(
                    field,
                    format!(
                        "pair {k:?} at round {at}: not a pair of the state's {n} nodes by its round {round}"
                    ),
                );
            }
        }
        if let Some((k, first, last)) = self
            .link_runs
            .iter()
            .find(|(_, first, last)| first.is_some_and(|f| f > *last))
        {
            return bad(
                "link_runs",
                format!(
                    "pair {k:?}: its run begins at {first:?}, after its latest sighting {last}"
                ),
            );
        }
        Ok(())
    }
}

impl NodeWire {
    /// Checks node `i`'s track (of a state at `round`).
    fn validate(&self, i: usize, round: u64, cfg: &HealthConfig) -> Result<(), RestoreError> {
        let w = cfg.window;
        for (field, h) in [
            ("nodes.out_hist", &self.out_hist),
            ("nodes.in_hist", &self.in_hist),
        ] {
            if h.len() > w {
                return bad(
                    field,
                    format!("node {i}: {} entries, window is {w}", h.len()),
                );
            }
            if h.iter()
                .any(|(d, z)| !log_ok(*d) || !z.is_finite() || z.abs() > MAX_Z)
            {
                return bad(
                    field,
                    format!("node {i}: a value is not finite or beyond what a timing gives"),
                );
            }
        }
        if self.reports.len() > REPORT_WINDOW {
            return bad(
                "nodes.reports",
                format!("node {i}: {} entries", self.reports.len()),
            );
        }
        // Each counts rounds (in a row, or of an episode), so none exceeds the state's.
        for (field, count) in [
            ("nodes.below", self.below),
            ("nodes.above", self.above),
            ("nodes.quiet", self.quiet),
            ("nodes.confirmations", self.confirmations),
        ] {
            if count as u64 > round {
                return bad(field, format!("node {i}: {count} rounds in {round} rounds"));
            }
        }
        if self.quiet > self.above {
            return bad(
                "nodes.quiet",
                format!(
                    "node {i}: {} unexplained of {} steady rounds",
                    self.quiet, self.above
                ),
            );
        }
        if self.since > round {
            return bad(
                "nodes.since",
                format!("node {i}: round {} is after {round}", self.since),
            );
        }
        if self.sign_rounds > self.slow_rounds || self.slow_rounds as u64 > round {
            return bad(
                "nodes.sign_rounds",
                format!(
                    "node {i}: {} rounds with a sign of {} slow rounds in {round} rounds",
                    self.sign_rounds, self.slow_rounds
                ),
            );
        }
        if self.unexplained > self.slow_rounds {
            return bad(
                "nodes.unexplained",
                format!(
                    "node {i}: {} unexplained slow rounds of {} slow rounds",
                    self.unexplained, self.slow_rounds
                ),
            );
        }
        if self.agreeing > self.unexplained {
            return bad(
                "nodes.agreeing",
                format!(
                    "node {i}: {} agreeing slow rounds of {} unexplained ones",
                    self.agreeing, self.unexplained
                ),
            );
        }
        if self.persist as u64 > round {
            return bad(
                "nodes.persist",
                format!("node {i}: {} slow rounds in {round} rounds", self.persist),
            );
        }
        if self.hard_clear.is_some_and(|k| k > cfg.hard_hold_down) {
            return bad(
                "nodes.hard_clear",
                format!("node {i}: beyond the hold-down"),
            );
        }
        Ok(())
    }
}

impl HealthEngine {
    /// Carries the engine over to a new member list: `map[old]` is the old node's new
    /// index (None: gone). New indices without an old node start healthy and empty. Used
    /// when a DNS re-resolution changes the candidates, so that nobody's state or history is
    /// reset because somebody else joined or left.
    pub fn remap(&mut self, map: &[Option<usize>], nodes: usize) {
        // The re-pairings collected inside a dip name peers by their old indices.
        self.nodes
            .remap(map, vec![NodeData::default(); nodes], |_, mut t| {
                t.data.within.clear();
                t
            });
        self.links.remap(map);
        // The links' runs and memory are dropped (their indices may name other nodes now);
        // the held links keep theirs, begun at an unknown round.
        self.link_seen.clear();
        self.link_onset.clear();
        self.link_found.clear();
        self.held_links_began_before();
        self.dip.remap(map);
        self.congestion.remap(map);
        self.tors.forget_topology();
        // The ToR numbers last seen, by the nodes' new indices (a node new here has none).
        let mut seen = vec![None; nodes];
        for (old, new) in map.iter().enumerate() {
            if let (Some(new), Some(t)) = (new, self.tor_seen.get(old))
                && let Some(slot) = seen.get_mut(*new)
            {
                *slot = *t;
            }
        }
        self.tor_seen = if seen.iter().any(Option::is_some) {
            seen
        } else {
            Vec::new()
        };
    }

    /// Carries what the engine learnt of each ToR (`tors`: normals, histories, holds,
    /// uplinks marks; `tor_shift`: last round's levels) over to this round's ToR numbers
    /// (`tors`, by node) when they differ from those it was kept under: the daemon numbers
    /// ToRs afresh at each formation, and a ToR that appears or goes shifts the others'
    /// numbers (see [`crate::health::tor::renumbering`]). A round without topology changes
    /// nothing: the numbers last seen wait for the next round that has it. The dip's ToR
    /// pairs are told the round's numbers here too, before anything reads them (the
    /// re-pairings within a ToR read them before the links are judged).
    pub(super) fn follow_tors(&mut self, tors: &[Option<u32>]) {
        self.dip.topology(tors);
        if tors.is_empty() || self.tor_seen == tors {
            return;
        }
        let map = renumbering(&self.tor_seen, tors);
        self.tors.renumber(&map);
        self.tor_shift = std::mem::take(&mut self.tor_shift)
            .into_iter()
            .filter_map(|(t, level)| Some((*map.get(&t)?, level)))
            .collect();
        self.tor_seen = tors.to_vec();
    }

    /// The engine's learned state (tracks, baseline, fabric and link histories; not the
    /// thresholds), for a member that joins a group to take over from one that has been
    /// in it longer, so that every member computes the same verdicts.
    pub fn snapshot(&self) -> Vec<u8> {
        let (congestion_open, congestion_ended, episodes_ended) = self.congestion.wire();
        let mut s = Snapshot {
            nodes: self.nodes.tracks().iter().map(NodeWire::of).collect(),
            round: self.nodes.round(),
            baseline: self.baseline.level(),
            fabric_hist: self.fabric_hist.clone(),
            slow_rate: self.partial.rate.0,
            partial_hist: self.partial.recent.clone(),
            links: self
                .links
                .watched
                .iter()
                .map(|(k, v)| (*k, v.clone()))
                .collect(),
            held: self.links.held.iter().copied().collect(),
            dip_normal: self.dip.normal_wire(),
            congestion_open,
            congestion_ended,
            episodes_ended,
            baseline_run: self.baseline.run,
            link_seen: self.link_seen.iter().map(|(k, at)| (*k, *at)).collect(),
            link_runs: self
                .link_onset
                .iter()
                .map(|(k, o)| (*k, o.first, o.last))
                .collect(),
            link_found: self.link_found.iter().map(|(k, at)| (*k, *at)).collect(),
        };
        let max = max_state_bytes(self.nodes.len(), self.cfg.window);
        let bytes = serde_json::to_vec(&s).unwrap_or_default();
        if bytes.len() <= max {
            return bytes;
        }
        // Every member holding this state drops the same parts alike, so digests still
        // agree: first the links' runs and memory (learnt again within a few turns), then
        // the dip normal (a horizon to learn again). The held links' runs and memory stay:
        // a state restored without them gives them again (`held_links_began_before`), and
        // its snapshot would then differ from the one it was restored from.
        let held = &self.links.held;
        s.link_seen.clear();
        s.link_runs.retain(|(k, _, _)| held.contains(k));
        s.link_found.retain(|(k, _)| held.contains(k));
        let bytes = serde_json::to_vec(&s).unwrap_or_default();
        if bytes.len() <= max {
            return bytes;
        }
        s.dip_normal = None;
        serde_json::to_vec(&s).unwrap_or_default()
    }

    /// Takes over a [`HealthEngine::snapshot`] of an engine over the same nodes; on an
    /// error (malformed, or another number of nodes) this engine is left as it was.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), RestoreError> {
        let s: Snapshot = serde_json::from_slice(bytes).map_err(RestoreError::Malformed)?;
        let n = self.nodes.len();
        let in_range = |(a, b): &(usize, usize)| *a < n && *b < n;
        if s.nodes.len() != n
            || !s.links.iter().all(|(k, _)| in_range(k))
            || !s.held.iter().all(in_range)
        {
            return Err(RestoreError::OtherGroup {
                theirs: s.nodes.len(),
                ours: n,
            });
        }
        s.validate(&self.cfg)?;
        let dip = match s.dip_normal {
            None => DipPairs::default(),
            Some(w) => DipPairs::with_normal(w, n).map_err(|reason| RestoreError::Invalid {
                field: "dip_normal",
                reason,
            })?,
        };
        let congestion = CongestionHorizon::from_wire(
            (s.congestion_open, s.congestion_ended, s.episodes_ended),
            n,
            s.round,
        )
        .map_err(|(field, reason)| RestoreError::Invalid { field, reason })?;
        self.nodes =
            Lifecycle::restored(s.round, s.nodes.into_iter().map(NodeWire::track).collect());
        self.baseline = Normal {
            baseline: Baseline(s.baseline),
            run: s.baseline_run,
        };
        self.fabric_hist = s.fabric_hist;
        self.partial = PartialFabric {
            rate: BaseRate(s.slow_rate),
            recent: s.partial_hist,
            learning: RateLearning::default(),
        };
        self.links = Pairs {
            watched: s.links.into_iter().collect(),
            held: s.held.into_iter().collect(),
        };
        self.dip = dip;
        self.congestion = congestion;
        self.link_seen = s.link_seen.into_iter().collect();
        self.link_onset = s
            .link_runs
            .into_iter()
            .map(|(k, first, last)| (k, Onset { first, last }))
            .collect();
        self.link_found = s.link_found.into_iter().collect();
        self.held_links_began_before();
        self.tors.forget_topology();
        // Not in the wire form, and learnt within a window: started afresh, so that the
        // member that took the state over does not judge with its own old rounds.
        self.partial_hist.clear();
        self.tor_shift.clear();
        Ok(())
    }
}
