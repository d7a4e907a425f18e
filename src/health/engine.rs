//! The health engine: probe measurements in, per-node states with evidence out.
//!
//! Each round the engine receives the probes of a permutation round (every node sends one
//! flow and receives one), the confirmation probes it asked for, and any hard faults from
//! telemetry. It scores every probe against the same round's median (peer-relative, so a
//! fabric-wide dip moves the median, not the residuals), keeps a window per node, and
//! moves nodes through
//!
//! ```text
//! healthy → suspect → confirmed → quarantine_recommended → probation → healthy
//! ```
//!
//! with exit thresholds below entry thresholds. Every transition records its reason and
//! the evidence.
//!
//! - A suspect is confirmed when re-pairings with known-good peers reproduce the slowness
//!   in consecutive rounds. Congestion on the node's own uplink reaches those re-pairings
//!   too, so reproduction alone does not separate it from a slow node; what does is that
//!   a slow component adds a constant while queueing scatters: confirmation and quarantine
//!   also need the slowness to be *steady* (the window's residuals and the re-pairings
//!   scatter no more than [`STEADY_RATIO`] times the round's healthy spread, and before a
//!   quarantine the re-pairings land where the window says the node is).
//! - Hard faults skip straight to a quarantine recommendation.
//! - A fabric-wide slowdown (the round median against a slow baseline), or a *partial* one
//!   (more probes slow on their own than the learned base rate explains: a spine, a share
//!   of the links), makes a fabric verdict that blocks every quarantine recommendation
//!   while it lasts; many nodes steadily slow at once (a *crowd*: a ToR) does the same and
//!   blocks confirmations too. Detection goes on: residuals are peer-relative.
//! - A link verdict needs `link_observations` slow, steady observations of one pair that
//!   are the pair's own: nothing else at either end slow in the same round, no fabric
//!   event. A congested uplink or a slow node slows every probe through it, a bad link
//!   only its own.

use std::collections::{BTreeMap, VecDeque};

use statrs::distribution::{Binomial, DiscreteCDF};

use crate::snapshot::probe::{NodeState, Transition};

/// Nodes elevated at once (not counting those already recommended for quarantine) that
/// make a crowd: with independent faults and the congestion of the noise model, three at
/// once in one group happens in well under 0.1 % of rounds, so three or more (and at least
/// [`CROWD_SHARE`] of the group) are a shared cause, a ToR, a spine or the fabric.
pub const CROWD_MIN: usize = 3;
/// Share of the group elevated at once that makes a crowd (the detection design's "more
/// than 5 % of nodes flagged is a fabric incident").
pub const CROWD_SHARE: f64 = 0.05;
/// A round is a partial fabric event when its count of probes slow on their own has a
/// binomial tail below this under the learned base rate.
pub const PARTIAL_ALPHA: f64 = 1e-3;
/// Rounds over which slow probes are also summed for link decisions: an event that lasts
/// (a congested spine) shows in the sum before it shows in any one round.
pub const PARTIAL_ROUNDS: usize = 3;
/// Rounds with fewer probes are never judged partial fabric events (too few to tell).
pub const PARTIAL_MIN_PROBES: usize = 8;
/// Floor on the learned share of probes slow on their own.
pub const SLOW_RATE_FLOOR: f64 = 0.01;
/// A confirmed node is recommended for quarantine only when its window's residuals
/// scatter at most this many times the round's robust spread: a component that is slow
/// adds a constant and leaves the scatter of healthy probes; queueing behind other
/// traffic, or an intermittent fault, scatters them.
pub const STEADY_RATIO: f64 = 2.0;

/// Distinct reporters, other than the accused, whose re-pairings must all reproduce a
/// slowness before a node is confirmed or recommended, whatever `confirm_peers` says: no
/// single member's reports can move another node beyond suspect.
pub const MIN_REPORTERS: usize = 2;
/// Participations in re-pairings remembered per reporter for the consistency check.
pub const REPORT_WINDOW: usize = 20;
/// A reporter contradicted by the others this many times within [`REPORT_WINDOW`] (and in
/// at least half its participations) is flagged as inconsistent.
pub const CONTRADICTIONS: usize = 4;

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
    /// Rounds a confirmed node must stay steadily above the entry threshold before a
    /// quarantine is recommended when its uplink reported congestion in some of them:
    /// probes cannot tell steady congestion from a slow component except by how long it
    /// lasts, so explained slowness waits longer, but a slow node under a busy job is
    /// still recommended in the end.
    pub congested_hold: usize,
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
            exit_rounds: 180,
            probation_rounds: 720,
            fabric_ratio: 1.0 / 0.9,
            fabric_rounds: 3,
            link_observations: 9,
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
    /// Each end's own timing of each re-pairing, as `(reporter, accused, seconds)` (the
    /// accused's own report left out): what the consistency check compares.
    pub reports: Vec<(usize, usize, f64)>,
    /// Nodes whose own uplink counters showed congestion during the round (other traffic
    /// near line rate, congestion-marked packets received): slowness there has an
    /// explanation other than a slow component.
    pub congested: Vec<usize>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct NodeTrack {
    state: NodeState,
    /// (log residual, robust z) of the probes the node sent (its row of the matrix).
    out_hist: VecDeque<(f64, f64)>,
    /// (log residual, robust z) of the probes the node received (its column).
    in_hist: VecDeque<(f64, f64)>,
    below: usize,
    above: usize,
    /// Of the `above` rounds, those without congestion reported by the node's own uplink.
    #[serde(default)]
    quiet: usize,
    since: u64,
    confirm_pending: bool,
    /// Independent confirmations that reproduced since the node became suspect.
    confirmations: usize,
    /// While a quarantine recommendation is due to a hard fault: rounds the fault has been
    /// absent.
    #[serde(default)]
    hard_clear: Option<usize>,
    /// This node's re-pairing reports: whether each was contradicted by the other
    /// reporters of the same suspect.
    #[serde(default)]
    reports: VecDeque<bool>,
}

/// What a round produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundOutput {
    /// State changes this round.
    pub transitions: Vec<Transition>,
    /// Nodes to re-pair with known-good peers next round.
    pub confirm_requests: Vec<usize>,
    /// Whether the fabric as a whole is slow (per-node escalation is frozen).
    pub fabric_degraded: bool,
    /// Pairs judged degraded links this round (src, dst).
    pub link_verdicts: Vec<(usize, usize)>,
    /// Pairs to re-measure next round (one slow observation, endpoints healthy).
    pub link_requests: Vec<(usize, usize)>,
    /// Window score per node (median log residual), for `hcclwatch_straggler_score`.
    pub scores: Vec<f64>,
    /// Members whose re-pairing reports the others consistently contradict.
    pub inconsistent_reporters: Vec<usize>,
}

/// The engine.
#[derive(Debug, Clone)]
pub struct HealthEngine {
    cfg: HealthConfig,
    nodes: Vec<NodeTrack>,
    round: u64,
    baseline: Option<f64>,
    fabric_hist: VecDeque<bool>,
    /// Share of a normal round's probes that are slow on their own (learned outside
    /// fabric rounds): the base rate a partial fabric event is judged against.
    slow_rate: Option<f64>,
    /// (slow, judged) probes of the last [`PARTIAL_ROUNDS`] rounds.
    partial_hist: VecDeque<(usize, usize)>,
    links: BTreeMap<(usize, usize), VecDeque<f64>>,
    /// Pairs with a link verdict: held until a measurement of the pair is normal again,
    /// so that the verdict does not flicker when an end's score moves (the slow link
    /// itself lifts its ends' scores).
    held: std::collections::BTreeSet<(usize, usize)>,
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

impl Snapshot {
    /// Checks every field against what an engine with `cfg` can hold: history lengths
    /// within the window, finite numbers, pairs and counters in range. A state that passes
    /// could have been produced by this engine.
    fn validate(&self, cfg: &HealthConfig) -> Result<(), RestoreError> {
        let bad =
            |field: &'static str, reason: String| Err(RestoreError::Invalid { field, reason });
        let w = cfg.window;
        for (i, t) in self.nodes.iter().enumerate() {
            for (field, h) in [
                ("nodes.out_hist", &t.out_hist),
                ("nodes.in_hist", &t.in_hist),
            ] {
                if h.len() > w {
                    return bad(
                        field,
                        format!("node {i}: {} entries, window is {w}", h.len()),
                    );
                }
                if h.iter().any(|(d, z)| !d.is_finite() || !z.is_finite()) {
                    return bad(field, format!("node {i}: a value is not finite"));
                }
            }
            if t.reports.len() > REPORT_WINDOW {
                return bad(
                    "nodes.reports",
                    format!("node {i}: {} entries", t.reports.len()),
                );
            }
            if t.since > self.round {
                return bad(
                    "nodes.since",
                    format!("node {i}: round {} is after {}", t.since, self.round),
                );
            }
            if t.hard_clear.is_some_and(|k| k > cfg.hard_hold_down) {
                return bad(
                    "nodes.hard_clear",
                    format!("node {i}: beyond the hold-down"),
                );
            }
        }
        if self.baseline.is_some_and(|b| !b.is_finite())
            || self.slow_rate.is_some_and(|r| !(0.0..=1.0).contains(&r))
        {
            return bad(
                "baseline",
                "not a finite baseline or a rate in 0..=1".into(),
            );
        }
        if self.fabric_hist.len() > w || self.partial_hist.len() > w.max(PARTIAL_ROUNDS) {
            return bad("fabric_hist", "longer than the window".into());
        }
        let max_obs = cfg.link_observations.max(1);
        for ((a, b), obs) in &self.links {
            if obs.len() > max_obs || obs.iter().any(|d| !d.is_finite()) || a == b {
                return bad("links", format!("pair ({a}, {b}): bad observations"));
            }
        }
        Ok(())
    }
}

/// The wire form of [`HealthEngine::snapshot`] (JSON has no tuple keys, so the maps are
/// lists).
#[derive(serde::Serialize, serde::Deserialize)]
struct Snapshot {
    nodes: Vec<NodeTrack>,
    round: u64,
    baseline: Option<f64>,
    fabric_hist: VecDeque<bool>,
    #[serde(default)]
    slow_rate: Option<f64>,
    #[serde(default)]
    partial_hist: VecDeque<(usize, usize)>,
    links: Vec<((usize, usize), VecDeque<f64>)>,
    held: Vec<(usize, usize)>,
}

fn healthy_end_pair(a: usize, b: usize, nodes: &[NodeTrack], scores: &[f64], exit: f64) -> bool {
    [a, b]
        .iter()
        .all(|&x| nodes[x].state == NodeState::Healthy && scores.get(x).is_some_and(|s| *s < exit))
}

/// Median of a slice (NaN-free input); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

impl HealthEngine {
    /// An engine for `nodes` nodes.
    pub fn new(nodes: usize, cfg: HealthConfig) -> Self {
        Self {
            nodes: (0..nodes)
                .map(|_| NodeTrack {
                    state: NodeState::Healthy,
                    out_hist: VecDeque::new(),
                    in_hist: VecDeque::new(),
                    below: 0,
                    above: 0,
                    quiet: 0,
                    since: 0,
                    confirm_pending: false,
                    confirmations: 0,
                    hard_clear: None,
                    reports: VecDeque::new(),
                })
                .collect(),
            cfg,
            round: 0,
            baseline: None,
            fabric_hist: VecDeque::new(),
            slow_rate: None,
            partial_hist: VecDeque::new(),
            links: BTreeMap::new(),
            held: Default::default(),
        }
    }

    /// Carries the engine over to a new member list: `map[old]` is the old node's new
    /// index (None: gone). New indices without an old node start healthy and empty. Used
    /// when a DNS re-resolution changes the candidates, so that nobody's state or history is
    /// reset because somebody else joined or left.
    pub fn remap(&mut self, map: &[Option<usize>], nodes: usize) {
        let fresh = HealthEngine::new(nodes, self.cfg.clone());
        let mut tracks = fresh.nodes;
        for (old, new) in map.iter().enumerate() {
            if let (Some(new), Some(t)) = (new, self.nodes.get(old))
                && let Some(slot) = tracks.get_mut(*new)
            {
                *slot = t.clone();
            }
        }
        self.nodes = tracks;
        let idx = |i: usize| map.get(i).copied().flatten();
        self.links = std::mem::take(&mut self.links)
            .into_iter()
            .filter_map(|((a, b), h)| Some(((idx(a)?, idx(b)?), h)))
            .collect();
        self.held = std::mem::take(&mut self.held)
            .into_iter()
            .filter_map(|(a, b)| Some((idx(a)?, idx(b)?)))
            .collect();
    }

    /// Rounds this engine has processed.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// The engine's learned state (tracks, baseline, fabric and link histories; not the
    /// thresholds), for a member that joins a group to take over from one that has been
    /// in it longer, so that every member computes the same verdicts.
    pub fn snapshot(&self) -> Vec<u8> {
        let s = Snapshot {
            nodes: self.nodes.clone(),
            round: self.round,
            baseline: self.baseline,
            fabric_hist: self.fabric_hist.clone(),
            slow_rate: self.slow_rate,
            partial_hist: self.partial_hist.clone(),
            links: self.links.iter().map(|(k, v)| (*k, v.clone())).collect(),
            held: self.held.iter().copied().collect(),
        };
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
        self.nodes = s.nodes;
        self.round = s.round;
        self.baseline = s.baseline;
        self.fabric_hist = s.fabric_hist;
        self.slow_rate = s.slow_rate;
        self.partial_hist = s.partial_hist;
        self.links = s.links.into_iter().collect();
        self.held = s.held.into_iter().collect();
        Ok(())
    }

    /// The current state of every node.
    pub fn states(&self) -> Vec<NodeState> {
        self.nodes.iter().map(|n| n.state).collect()
    }

    fn set(
        &mut self,
        node: usize,
        to: NodeState,
        reason: String,
        evidence: Vec<(String, f64)>,
        out: &mut RoundOutput,
    ) {
        let from = self.nodes[node].state;
        if from == to {
            return;
        }
        let n = &mut self.nodes[node];
        n.state = to;
        n.since = self.round;
        n.below = 0;
        n.above = 0;
        n.quiet = 0;
        out.transitions.push(Transition {
            round: self.round,
            node,
            from,
            to,
            reason,
            evidence,
        });
    }

    /// Processes one round.
    pub fn step(&mut self, input: &RoundInput) -> RoundOutput {
        self.round += 1;
        let mut out = RoundOutput::default();
        let mut r = self.score_round(input);
        let mut confirm = self.confirmations(input, &r);
        let n = self.nodes.len();
        let hard = self.hard_faults(input, &mut out);
        let windows: Vec<Window> = (0..n).map(|i| self.window(i, &r)).collect();
        out.scores = windows.iter().map(|w| w.score).collect();
        let judged = |i: &usize| !hard.contains(i) && !input.absent.contains(i);
        r.crowded = self.crowded(&windows, &r, &judged);
        out.fabric_degraded = r.fabric || r.crowded;
        for (i, w) in windows.into_iter().enumerate() {
            if judged(&i) {
                let congested = input.congested.contains(&i);
                self.advance(i, w, &r, (confirm.remove(&i), congested), &mut out);
            }
        }
        self.judge_links(input, &r, &mut out);
        self.check_reports(input, &r, &mut out);
        out
    }

    /// Hard faults are a current state: present, the node is recommended for quarantine
    /// at once (the telemetry already debounced them); absent for `hard_hold_down` rounds,
    /// a node they put there moves to probation. Returns the nodes not to judge on scores
    /// this round (a hard fault present, or its hold-down running).
    fn hard_faults(&mut self, input: &RoundInput, out: &mut RoundOutput) -> Vec<usize> {
        let n = self.nodes.len();
        let present: Vec<usize> = input
            .hard_faults
            .iter()
            .map(|(n, _)| *n)
            .filter(|i| *i < n)
            .collect();
        for (node, reason) in input.hard_faults.iter().filter(|(i, _)| *i < n) {
            self.nodes[*node].hard_clear = Some(0);
            if self.nodes[*node].state != NodeState::QuarantineRecommended {
                self.set(
                    *node,
                    NodeState::QuarantineRecommended,
                    format!("hard fault: {reason}"),
                    vec![],
                    out,
                );
            }
        }
        let mut held = present.clone();
        for i in 0..n {
            if present.contains(&i) || input.absent.contains(&i) {
                continue;
            }
            let Some(k) = self.nodes[i].hard_clear else {
                continue;
            };
            if self.nodes[i].state != NodeState::QuarantineRecommended {
                self.nodes[i].hard_clear = None;
                continue;
            }
            let k = k + 1;
            if k >= self.cfg.hard_hold_down {
                self.nodes[i].hard_clear = None;
                self.set(
                    i,
                    NodeState::Probation,
                    format!("hard fault absent for {k} rounds; probation"),
                    vec![("rounds_without_hard_fault".into(), k as f64)],
                    out,
                );
            } else {
                self.nodes[i].hard_clear = Some(k);
            }
            held.push(i);
        }
        held
    }

    /// Flags reporters whose re-pairing reports the other reporters of the same suspect
    /// consistently contradict (one says slow, the majority normal, or the reverse): a
    /// member that lies about its timings stands out against the honest ones.
    fn check_reports(&mut self, input: &RoundInput, r: &RoundStats, out: &mut RoundOutput) {
        let n = self.nodes.len();
        let mut by_accused: BTreeMap<usize, Vec<(usize, bool)>> = BTreeMap::new();
        for &(reporter, accused, secs) in &input.reports {
            if reporter < n && accused < n && reporter != accused && secs.is_finite() && secs > 0.0
            {
                let slow = secs.ln() - r.median_log > r.entry;
                by_accused
                    .entry(accused)
                    .or_default()
                    .push((reporter, slow));
            }
        }
        for reports in by_accused.values().filter(|v| v.len() >= 3) {
            let slow = reports.iter().filter(|(_, s)| *s).count();
            for &(reporter, says) in reports {
                let others_slow = slow - usize::from(says);
                let others = reports.len() - 1;
                let majority_slow = others_slow * 2 > others;
                let contradicted = says != majority_slow && (others_slow * 2 != others);
                let h = &mut self.nodes[reporter].reports;
                h.push_back(contradicted);
                while h.len() > REPORT_WINDOW {
                    h.pop_front();
                }
            }
        }
        out.inconsistent_reporters = (0..n)
            .filter(|&i| {
                let h = &self.nodes[i].reports;
                let bad = h.iter().filter(|c| **c).count();
                bad >= CONTRADICTIONS && bad * 2 >= h.len()
            })
            .collect();
    }

    /// Whether many nodes are steadily slow at once (at least [`CROWD_MIN`] and
    /// [`CROWD_SHARE`] of the group, not counting nodes already recommended for
    /// quarantine): a ToR, a spine or the fabric, not that many independent stragglers.
    /// Counted by effect size and steadiness, not z (many slow nodes inflate the round's
    /// spread and hide each other's z); scattered slowness (congestion) is left out, as
    /// it never reaches a quarantine anyway.
    fn crowded(&self, windows: &[Window], r: &RoundStats, judged: &dyn Fn(&usize) -> bool) -> bool {
        let n = self.nodes.len();
        let count = (0..n)
            .filter(|i| judged(i))
            .filter(|&i| self.nodes[i].state != NodeState::QuarantineRecommended)
            .filter(|&i| windows[i].large && windows[i].spread <= STEADY_RATIO * r.spread)
            .count();
        count >= CROWD_MIN.max((CROWD_SHARE * n as f64).ceil() as usize)
    }

    /// Scores the round's probes against its median, updates the fabric baseline and each
    /// node's windows.
    fn score_round(&mut self, input: &RoundInput) -> RoundStats {
        let cfg = self.cfg.clone();
        let n = self.nodes.len();
        // Peer-relative scoring against this round's median.
        let logs: Vec<f64> = input
            .probes
            .iter()
            .filter(|p| valid(p))
            .map(|p| p.seconds.ln())
            .collect();
        let median_log = median(&mut logs.clone());
        let mut dev: Vec<f64> = logs.iter().map(|l| (l - median_log).abs()).collect();
        let spread = (1.4826 * median(&mut dev)).max(cfg.mad_floor);

        // Fabric: the round median against a slowly learned baseline.
        let fabric_slow = match self.baseline {
            Some(b) if !logs.is_empty() => median_log - b > cfg.fabric_ratio.ln(),
            _ => false,
        };
        if !logs.is_empty() {
            self.baseline = Some(match self.baseline {
                None => median_log,
                Some(b) if !fabric_slow => b + 0.02 * (median_log - b),
                Some(b) => b,
            });
        }
        // Partial fabric: more probes slow on their own than the learned base rate
        // explains (a share of the links, a spine), which moves no median.
        let entry = (1.0 + cfg.delta).ln();
        // By effect size alone: when many probes are slow, they inflate the round's
        // spread and would hide behind a z threshold.
        let is_slow = |p: &Probe| p.seconds.ln() - median_log > entry;
        // Probes above the exit threshold touching each node (their other end not
        // accused): a node with any is not clearly fine this round.
        let exit = (1.0 + cfg.delta / 2.0).ln();
        let mut slow_count = vec![0u32; n];
        let mut slow = 0usize;
        let clean = |x: usize| {
            matches!(
                self.nodes[x].state,
                NodeState::Healthy | NodeState::Probation
            )
        };
        let mut judged = 0usize;
        for p in input
            .probes
            .iter()
            .filter(|p| valid(p) && p.src < n && p.dst < n)
        {
            // Probes touching a node already accused are that node's doing: they neither
            // count towards a partial fabric event nor make the other end look busy.
            if clean(p.src) && clean(p.dst) {
                judged += 1;
                slow += usize::from(is_slow(p));
            }
            if p.seconds.ln() - median_log > exit {
                slow_count[p.src] += u32::from(clean(p.dst));
                slow_count[p.dst] += u32::from(clean(p.src));
            }
        }
        let (partial, partial_recent) = self.partial_fabric(slow, judged, fabric_slow);
        self.fabric_hist.push_back(fabric_slow || partial);
        while self.fabric_hist.len() > cfg.window {
            self.fabric_hist.pop_front();
        }
        let fabric = self.fabric_hist.iter().filter(|x| **x).count() >= cfg.fabric_rounds;

        for p in input.probes.iter().filter(|p| valid(p)) {
            if p.src >= n || p.dst >= n {
                continue;
            }
            let d = p.seconds.ln() - median_log;
            let z = d / spread;
            self.nodes[p.src].out_hist.push_back((d, z));
            self.nodes[p.dst].in_hist.push_back((d, z));
        }
        for track in &mut self.nodes {
            while track.out_hist.len() > cfg.window {
                track.out_hist.pop_front();
            }
            while track.in_hist.len() > cfg.window {
                track.in_hist.pop_front();
            }
        }
        RoundStats {
            median_log,
            spread,
            fabric,
            partial,
            partial_recent,
            crowded: false,
            slow_count,
            entry,
            exit,
        }
    }

    /// Whether `slow` of `probes` probes slow on their own is too many for the learned
    /// base rate (a binomial tail below [`PARTIAL_ALPHA`]); learns the rate from rounds
    /// that are not.
    fn partial_fabric(&mut self, slow: usize, probes: usize, fabric_slow: bool) -> (bool, bool) {
        if probes == 0 {
            return (false, false);
        }
        let p0 = self
            .slow_rate
            .unwrap_or(SLOW_RATE_FLOOR)
            .max(SLOW_RATE_FLOOR);
        let tail = |slow: usize, probes: usize| {
            if probes < PARTIAL_MIN_PROBES || slow == 0 {
                return 1.0;
            }
            Binomial::new(p0.min(0.5), probes as u64).map_or(1.0, |b| b.sf(slow as u64 - 1))
        };
        let partial = tail(slow, probes) < PARTIAL_ALPHA;
        self.partial_hist.push_back((slow, probes));
        while self.partial_hist.len() > PARTIAL_ROUNDS {
            self.partial_hist.pop_front();
        }
        let (s, n) = self
            .partial_hist
            .iter()
            .fold((0, 0), |(s, n), (a, b)| (s + a, n + b));
        let recent = partial || tail(s, n) < PARTIAL_ALPHA;
        if !partial && !fabric_slow {
            let share = slow as f64 / probes as f64;
            self.slow_rate = Some(match self.slow_rate {
                None => share,
                Some(x) => x + 0.02 * (share - x),
            });
        }
        (partial, recent)
    }

    /// Confirmation probes (the suspect against known-good peers), by the node awaiting
    /// them: each probe's log residual against the round median.
    /// Each pending node's re-pairings this round, one per distinct peer (a peer counted
    /// twice would be one reporter speaking twice).
    fn confirmations(&self, input: &RoundInput, r: &RoundStats) -> BTreeMap<usize, Vec<f64>> {
        let n = self.nodes.len();
        let mut seen: std::collections::BTreeSet<(usize, usize)> = Default::default();
        let mut confirm: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for p in &input.confirmations {
            if p.src < n && p.dst < n && p.src != p.dst && valid(p) {
                let d = p.seconds.ln() - r.median_log;
                for (node, peer) in [(p.src, p.dst), (p.dst, p.src)] {
                    if self.nodes[node].confirm_pending && seen.insert((node, peer)) {
                        confirm.entry(node).or_default().push(d);
                    }
                }
            }
        }
        confirm
    }

    /// A node's window: score, robust z, spread, and whether it is elevated (a full
    /// window above the entry threshold, or probation's). A node is as slow as its slower
    /// side: its row (sending) or its column (receiving) of the matrix.
    fn window(&self, i: usize, r: &RoundStats) -> Window {
        let side = |h: &VecDeque<(f64, f64)>| {
            let mut ds: Vec<f64> = h.iter().map(|x| x.0).collect();
            let mut zs: Vec<f64> = h.iter().map(|x| x.1).collect();
            let m = median(&mut ds);
            let dev: Vec<f64> = ds.iter().map(|d| (d - m).abs()).collect();
            (m, median(&mut zs), dev, h.len() >= self.cfg.window)
        };
        let out = side(&self.nodes[i].out_hist);
        let inn = side(&self.nodes[i].in_hist);
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
        let spread = 1.4826 * median(&mut dev);
        let threshold = if self.nodes[i].state == NodeState::Probation {
            (1.0 + self.cfg.delta / 2.0).ln()
        } else {
            r.entry
        };
        Window {
            score,
            zmed,
            spread,
            elevated: full && score > threshold && zmed > self.cfg.z,
            large: full && score > threshold,
        }
    }

    /// Moves node `i` through its states by its window and this round's confirmations.
    fn advance(
        &mut self,
        i: usize,
        w: Window,
        r: &RoundStats,
        (confirm, congested): (Option<Vec<f64>>, bool),
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        let state = self.nodes[i].state;
        if w.score < r.exit {
            self.nodes[i].below += 1;
        } else {
            self.nodes[i].below = 0;
        }
        // Rounds slow in a row, and steadily so (see `STEADY_RATIO`): a quarantine waits
        // for `confirm_hold` of them.
        if w.elevated && w.spread <= STEADY_RATIO * r.spread {
            self.nodes[i].above += 1;
            // A round its own counters explain does not count towards the short hold, nor
            // does it start it again: congestion that lasts shows in every round it lasts,
            // a busy moment on a slow node's NIC only delays its verdict by that round.
            self.nodes[i].quiet += usize::from(!congested);
        } else {
            self.nodes[i].above = 0;
            self.nodes[i].quiet = 0;
        }
        match state {
            NodeState::Healthy | NodeState::Probation if w.elevated => {
                self.nodes[i].confirm_pending = true;
                self.nodes[i].confirmations = 0;
                out.confirm_requests.push(i);
                self.set(
                    i,
                    NodeState::Suspect,
                    format!(
                        "{:.1}% slower than the round median over {} rounds (robust z {:.1})",
                        (w.score.exp() - 1.0) * 100.0,
                        cfg.window,
                        w.zmed
                    ),
                    w.evidence(),
                    out,
                );
            }
            NodeState::Probation
                if self.round - self.nodes[i].since >= cfg.probation_rounds as u64 =>
            {
                self.set(
                    i,
                    NodeState::Healthy,
                    "probation passed".into(),
                    w.evidence(),
                    out,
                );
            }
            NodeState::Suspect => self.advance_suspect(i, &w, r, (confirm, congested), out),
            NodeState::Confirmed => self.advance_confirmed(i, &w, r, confirm, out),
            NodeState::QuarantineRecommended if self.nodes[i].below >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Probation,
                    "back within bounds; probation".into(),
                    w.evidence(),
                    out,
                );
            }
            _ => {}
        }
    }

    /// A suspect is confirmed when every re-pairing reproduces the slowness, in
    /// `confirm_rounds` consecutive rounds; cleared when one does not, or when it has been
    /// back within bounds for `exit_rounds`.
    fn advance_suspect(
        &mut self,
        i: usize,
        w: &Window,
        r: &RoundStats,
        (confirm, congested): (Option<Vec<f64>>, bool),
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        let Some(c) = confirm else {
            if self.nodes[i].below >= cfg.exit_rounds {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    w.evidence(),
                    out,
                );
            } else if w.elevated {
                // Still slow and no confirmation arrived: ask again.
                self.nodes[i].confirm_pending = true;
                out.confirm_requests.push(i);
            }
            return;
        };
        let got = c.len();
        // Every re-pairing must reproduce the slowness: one congested path must not be
        // enough to condemn a node.
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        let reproduced = got >= cfg.confirm_peers.max(MIN_REPORTERS) && cm > r.entry;
        // The re-pairings went through an uplink that reported congestion: they reproduce
        // the congestion as much as the node, until the node has been a suspect for
        // `congested_hold` rounds.
        let suspect_for = self.round - self.nodes[i].since;
        let explained = congested && suspect_for < cfg.congested_hold as u64;
        if r.partial || r.crowded || reproduced && (explained || !steady(w, &c, r, false)) {
            // A share of the links slow (the re-pairings may cross them too), many nodes at
            // once (not this node's doing alone), congestion its own counters show, or slow
            // but not steadily (queueing behind other traffic scatters the residuals, see
            // `STEADY_RATIO`): it stays a suspect (a ticket) and is re-paired again.
            self.nodes[i].confirm_pending = w.elevated;
            if w.elevated {
                out.confirm_requests.push(i);
            }
            return;
        }
        self.nodes[i].confirm_pending = false;
        if reproduced {
            self.nodes[i].confirmations += 1;
        }
        let mut e = w.evidence();
        e.push(("confirmation_min_log_residual".into(), cm));
        if reproduced && self.nodes[i].confirmations < cfg.confirm_rounds {
            // Reproduced once: ask again next round before condemning.
            self.nodes[i].confirm_pending = true;
            out.confirm_requests.push(i);
        } else if reproduced {
            self.nodes[i].confirmations = 1;
            e.push(("confirmation_probes".into(), got as f64));
            self.set(
                i,
                NodeState::Confirmed,
                format!(
                    "re-paired with {got} known-good peers: still {:.1}% slower",
                    (cm.exp() - 1.0) * 100.0
                ),
                e,
                out,
            );
        } else {
            self.set(
                i,
                NodeState::Healthy,
                format!(
                    "not reproduced against {got} known-good peers ({:.1}%): transient or path congestion",
                    (cm.exp() - 1.0) * 100.0
                ),
                e,
                out,
            );
        }
    }

    /// A confirmed node is recommended for quarantine after its hold (see
    /// [`HealthEngine::held`]) and a second re-pairing that reproduces; a fabric-wide event
    /// freezes it.
    fn advance_confirmed(
        &mut self,
        i: usize,
        w: &Window,
        r: &RoundStats,
        confirm: Option<Vec<f64>>,
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        let Some(c) = confirm else {
            if r.fabric || r.crowded {
                // Frozen: a fabric-wide event blocks per-node escalation.
            } else if self.held(i) && w.elevated {
                self.nodes[i].confirm_pending = true;
                out.confirm_requests.push(i);
            } else if self.nodes[i].below >= cfg.exit_rounds {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    w.evidence(),
                    out,
                );
            }
            return;
        };
        self.nodes[i].confirm_pending = false;
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        if r.fabric || r.crowded {
            // A fabric-wide event (or many nodes at once) blocks cordons: stay confirmed and
            // ask again once it is over.
            return;
        }
        let mut e = w.evidence();
        e.push(("second_confirmation_min_log_residual".into(), cm));
        let reproduced = c.len() >= cfg.confirm_peers.max(MIN_REPORTERS) && cm > r.entry;
        if reproduced && !steady(w, &c, r, true) {
            // Slow, but not steadily: the window's residuals scatter far more than healthy
            // probes do, as queueing behind other traffic (or an intermittent fault) makes
            // them. A cordon waits for steady slowness; the node stays confirmed.
            return;
        }
        if reproduced {
            self.nodes[i].confirmations += 1;
            let (above, quiet) = (self.nodes[i].above, self.nodes[i].quiet);
            e.push(("steady_slow_rounds".into(), above as f64));
            e.push(("uncongested_slow_rounds".into(), quiet as f64));
            self.set(
                i,
                NodeState::QuarantineRecommended,
                format!(
                    "confirmed straggler: still {:.1}% slower after {above} steady rounds ({quiet} without congestion on its uplink) and a second re-pairing with {} known-good peers",
                    (w.score.exp() - 1.0) * 100.0,
                    c.len()
                ),
                e,
                out,
            );
        } else {
            self.set(
                i,
                NodeState::Healthy,
                "second re-pairing did not reproduce".into(),
                e,
                out,
            );
        }
    }

    /// Whether a confirmed node has been steadily slow long enough for a quarantine:
    /// `confirm_hold` rounds (of a run of steadily slow rounds) with no congestion
    /// reported by its own uplink, or `congested_hold` rounds whatever its counters said.
    fn held(&self, i: usize) -> bool {
        let t = &self.nodes[i];
        t.quiet >= self.cfg.confirm_hold || t.above >= self.cfg.congested_hold
    }

    /// Links: a pair slow in the regular round is re-measured; a link verdict needs
    /// `link_observations` slow measurements in a row with both ends otherwise normal.
    fn judge_links(&mut self, input: &RoundInput, r: &RoundStats, out: &mut RoundOutput) {
        let n = self.nodes.len();
        let cfg = &self.cfg;
        let slow = |p: &Probe| {
            let d = p.seconds.ln() - r.median_log;
            (d > r.entry && d / r.spread > cfg.z).then_some(d)
        };
        let usable = |p: &&Probe| p.src < n && p.dst < n && valid(p);
        // Slowness belongs to the pair only when nothing else at either end was above the
        // exit threshold this round (a congested uplink or a slow node slows every probe through it) and the
        // round is not a fabric event: a slow permutation probe counts once at each end.
        // Other slow observations are skipped: they neither count nor clear the pair.
        // An end whose own counters showed congestion explains the slowness as well.
        let congested = |x: usize| input.congested.contains(&x);
        let specific = |p: &Probe, own: u32| {
            !r.fabric
                && !r.partial_recent
                && r.slow_count[p.src] + r.slow_count[p.dst] <= own
                && !congested(p.src)
                && !congested(p.dst)
        };
        for p in input.probes.iter().chain(&input.link_probes).filter(usable) {
            if slow(p).is_none() {
                self.links.remove(&(p.src, p.dst));
                self.held.remove(&(p.src, p.dst));
            }
        }
        if r.partial_recent {
            // A share of the links is slow at once (a spine, a partial dip): pending pairs
            // start over, only held verdicts stay.
            let held = &self.held;
            self.links.retain(|k, _| held.contains(k));
        }
        let measured = input
            .link_probes
            .iter()
            .map(|p| (p, 0))
            .chain(input.probes.iter().map(|p| (p, 2)));
        for (p, own) in measured.filter(|(p, _)| usable(p)) {
            match slow(p) {
                Some(d) if specific(p, own) => {
                    self.links.entry((p.src, p.dst)).or_default().push_back(d)
                }
                // Not this pair's alone: this round does not count for the link, but a
                // slow permutation probe is still re-measured (in the daemon a sender
                // held up by a slow outgoing link also times its incoming probe late,
                // so the first sighting of a bad link is rarely its own; the
                // re-measurements, with other peers' probes normal, are).
                Some(_) if own > 0 && !r.fabric && !r.partial_recent => {
                    self.links.entry((p.src, p.dst)).or_default();
                }
                Some(_) | None => {}
            }
        }
        let (mut requests, mut verdicts) = (Vec::new(), Vec::new());
        for ((a, b), obs) in self.links.iter_mut() {
            while obs.len() > cfg.link_observations.max(1) {
                obs.pop_front();
            }
            if self.held.contains(&(*a, *b)) {
                verdicts.push((*a, *b));
                continue;
            }
            if r.fabric || !healthy_end_pair(*a, *b, &self.nodes, &out.scores, r.exit) {
                continue;
            }
            // Steady, as for nodes: congestion on a spine or an end scatters the
            // observations, a degraded link shifts them.
            // Every observation within 3 spreads of their median, as before a quarantine.
            let steady = || {
                let mut v: Vec<f64> = obs.iter().copied().collect();
                let m = median(&mut v);
                let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
                let within = dev.iter().all(|d| *d <= 3.0 * r.spread);
                within && 1.4826 * median(&mut dev) <= STEADY_RATIO * r.spread
            };
            if obs.len() >= cfg.link_observations && steady() {
                verdicts.push((*a, *b));
                self.held.insert((*a, *b));
            } else {
                requests.push((*a, *b));
            }
        }
        // Pairs with the most evidence first: the daemon re-measures only a few per round.
        requests.sort_by_key(|k| std::cmp::Reverse(self.links.get(k).map_or(0, VecDeque::len)));
        out.link_verdicts = verdicts;
        out.link_requests = requests;
    }
}

/// Robust spread (1.4826 × MAD) of a sample.
fn robust_spread(v: &[f64]) -> f64 {
    let mut x = v.to_vec();
    let m = median(&mut x);
    let mut dev: Vec<f64> = x.iter().map(|d| (d - m).abs()).collect();
    1.4826 * median(&mut dev)
}

/// Whether a node's slowness is steady: its window's residuals, and this round's
/// re-pairings, scatter no more than [`STEADY_RATIO`] times the round's healthy spread.
/// Before a quarantine (`anchored`), each re-pairing must also land where the window
/// says the node is: a constant slowdown puts them there, queueing puts them anywhere.
/// (Within 3 × the spread: a healthy probe lands farther about one time in a hundred.)
fn steady(w: &Window, confirmations: &[f64], r: &RoundStats, anchored: bool) -> bool {
    let limit = STEADY_RATIO * r.spread;
    let consistent = !anchored
        || confirmations
            .iter()
            .all(|c| (c - w.score).abs() <= 3.0 * r.spread.max(w.spread));
    w.spread <= limit && robust_spread(confirmations) <= limit && consistent
}

/// A probe with a usable duration.
fn valid(p: &Probe) -> bool {
    p.seconds.is_finite() && p.seconds > 0.0
}

/// What one round's probes say as a whole.
struct RoundStats {
    /// Median log duration of the round's permutation probes.
    median_log: f64,
    /// Robust spread (1.4826 × MAD) of their logs, floored at `mad_floor`.
    spread: f64,
    /// The fabric verdict.
    fabric: bool,
    /// This round has more probes slow on their own than the base rate explains (a share
    /// of the links or a spine): re-pairings may cross it too.
    partial: bool,
    /// This round or the last few together have more such probes than the base rate
    /// explains (link decisions wait).
    partial_recent: bool,
    /// Many nodes are elevated at once (set by `step`).
    crowded: bool,
    /// Permutation probes above the exit threshold touching each node this round.
    slow_count: Vec<u32>,
    /// ln(1 + delta): the entry threshold.
    entry: f64,
    /// ln(1 + delta/2): the exit threshold.
    exit: f64,
}

/// A node's window this round.
struct Window {
    /// Median log residual of its slower side.
    score: f64,
    /// Median robust z of that side.
    zmed: f64,
    /// Robust spread (1.4826 × MAD) of that side's residuals.
    spread: f64,
    /// Above the entry threshold (or probation's) with a full window.
    elevated: bool,
    /// Above it by effect size alone (no z): what a crowd is counted by, since many
    /// slow nodes inflate the round's spread and so hide each other's z.
    large: bool,
}

impl Window {
    fn evidence(&self) -> Vec<(String, f64)> {
        vec![
            ("window_median_log_residual".to_string(), self.score),
            ("window_median_z".to_string(), self.zmed),
            ("window_log_residual_spread".to_string(), self.spread),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(
        n: usize,
        stride: usize,
        slow: &[(usize, f64)],
        jitter: impl Fn(usize) -> f64,
    ) -> RoundInput {
        let probes = (0..n)
            .map(|i| {
                let j = (i + stride) % n;
                let f: f64 = slow
                    .iter()
                    .filter(|(s, _)| *s == i || *s == j)
                    .map(|(_, f)| *f)
                    .product();
                Probe {
                    src: i,
                    dst: j,
                    seconds: f * (1.0 + jitter(i)),
                }
            })
            .collect();
        RoundInput {
            probes,
            ..RoundInput::default()
        }
    }

    /// The scores after a quiet round that measures nobody (an empty round changes no
    /// window).
    fn scores(e: &HealthEngine) -> Vec<f64> {
        e.clone().step(&RoundInput::default()).scores
    }

    /// Runs a 16-node group with node 5 steadily 30 % slow, re-paired whenever the engine
    /// asks, its uplink reporting congestion in the rounds `congested` says; returns the
    /// round at which node 5 was recommended for quarantine.
    fn recommended_at(congested: impl Fn(usize) -> bool) -> Option<usize> {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let mut confirm: Vec<usize> = Vec::new();
        for r in 0..80 {
            let mut input = round(n, 1 + r % 7, &[(5, 1.3)], jitter);
            for &s in &confirm {
                for (src, dst) in [(s, (s + 3) % n), ((s + 9) % n, s), (s, (s + 11) % n)] {
                    input.confirmations.push(Probe {
                        src,
                        dst,
                        seconds: 1.3,
                    });
                }
            }
            if congested(r) {
                input.congested.push(5);
            }
            let out = e.step(&input);
            confirm = out.confirm_requests.clone();
            if e.states()[5] == NodeState::QuarantineRecommended {
                return Some(r);
            }
        }
        None
    }

    #[test]
    fn congestion_on_the_uplink_lengthens_the_hold_but_never_hides_a_slow_node() {
        let cfg = HealthConfig::default();
        let quiet = recommended_at(|_| false).expect("recommended without congestion");
        // Reported congested in every round: the same slowness waits for the longer hold
        // twice, and is then recommended all the same. Without congestion: suspect at s,
        // confirmed after `confirm_rounds` reproducing rounds, `confirm_hold` quiet rounds,
        // then one round for the second re-pairing. With it: the re-pairings count only
        // from the `congested_hold`-th round as a suspect, the quarantine waits
        // `congested_hold` rounds as confirmed, then the same one round.
        let busy = recommended_at(|_| true).expect("recommended with congestion");
        let without = cfg.confirm_rounds + cfg.confirm_hold + 1;
        let with = cfg.congested_hold + cfg.confirm_rounds - 1 + cfg.congested_hold + 1;
        assert_eq!(busy - quiet, with - without);
        // One congested round while the short hold runs delays it by exactly that round.
        let hit = quiet - 2;
        let once = recommended_at(|r| r == hit).expect("recommended after one congested round");
        assert_eq!(once, quiet + 1);
    }

    #[test]
    fn median_cases() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn slow_node_goes_suspect_confirmed_quarantine_and_back() {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let mut states = Vec::new();
        let mut confirm = Vec::new();
        for r in 0..40 {
            let mut input = round(n, 1 + r % 7, &[(5, 1.3)], jitter);
            for &s in &confirm {
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + 3) % n,
                    seconds: 1.3,
                });
                input.confirmations.push(Probe {
                    src: (s + 9) % n,
                    dst: s,
                    seconds: 1.3,
                });
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + 11) % n,
                    seconds: 1.3,
                });
            }
            let out = e.step(&input);
            confirm = out.confirm_requests.clone();
            states.push(e.states()[5]);
            for t in &out.transitions {
                assert!(!t.reason.is_empty());
            }
        }
        assert!(states.contains(&NodeState::Suspect));
        assert!(states.contains(&NodeState::Confirmed));
        assert_eq!(*states.last().unwrap(), NodeState::QuarantineRecommended);
        // Only the slow node moved.
        assert!(
            e.states()
                .iter()
                .enumerate()
                .all(|(i, s)| i == 5 || *s == NodeState::Healthy)
        );
        // Recovery: within bounds for exit_rounds → probation.
        for r in 0..HealthConfig::default().exit_rounds + 10 {
            e.step(&round(n, 1 + r % 7, &[], jitter));
        }
        assert_eq!(e.states()[5], NodeState::Probation);
    }

    /// A suspect is confirmed only after `confirm_rounds` consecutive rounds of re-pairings
    /// all reproduce: one round that reproduces (a congested uplink at that moment) and one
    /// that does not send it back to healthy.
    #[test]
    fn one_reproducing_round_of_re_pairings_is_not_enough() {
        let n = 16;
        for second_reproduces in [false, true] {
            let mut e = HealthEngine::new(n, HealthConfig::default());
            let mut confirm: Vec<usize> = Vec::new();
            let mut rounds_of_confirmation = 0;
            let mut outcome = None;
            for r in 0..40 {
                let mut input = round(n, 1 + r % 7, &[(2, 1.3)], |_| 0.0);
                if !confirm.is_empty() {
                    rounds_of_confirmation += 1;
                }
                let slow = rounds_of_confirmation == 1 || second_reproduces;
                for &s in &confirm {
                    for k in [3, 9, 11] {
                        input.confirmations.push(Probe {
                            src: s,
                            dst: (s + k) % n,
                            seconds: if slow { 1.3 } else { 1.0 },
                        });
                    }
                }
                let out = e.step(&input);
                if let Some(t) = out
                    .transitions
                    .iter()
                    .find(|t| t.node == 2 && t.from == NodeState::Suspect)
                {
                    outcome = Some((t.to, rounds_of_confirmation));
                    break;
                }
                confirm = out.confirm_requests;
            }
            let want = if second_reproduces {
                NodeState::Confirmed
            } else {
                NodeState::Healthy
            };
            assert_eq!(
                outcome,
                Some((want, 2)),
                "second round reproduces: {second_reproduces}"
            );
        }
    }

    #[test]
    fn unconfirmed_suspect_returns_to_healthy() {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let mut confirm = Vec::new();
        let mut saw_suspect = false;
        for r in 0..30 {
            let mut input = round(n, 1 + r % 7, &[(2, 1.3)], |_| 0.0);
            // Confirmation against good peers is normal: the slowness was path-specific.
            for &s in &confirm {
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + 3) % n,
                    seconds: 1.0,
                });
                input.confirmations.push(Probe {
                    src: (s + 9) % n,
                    dst: s,
                    seconds: 1.0,
                });
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + 11) % n,
                    seconds: 1.0,
                });
            }
            let out = e.step(&input);
            saw_suspect |= out
                .transitions
                .iter()
                .any(|t| t.node == 2 && t.to == NodeState::Suspect);
            if let Some(t) = out
                .transitions
                .iter()
                .find(|t| t.node == 2 && t.from == NodeState::Suspect)
            {
                assert_eq!(t.to, NodeState::Healthy);
                assert!(t.reason.contains("not reproduced"), "{}", t.reason);
                return;
            }
            confirm = out.confirm_requests;
        }
        panic!("suspect never resolved (saw suspect: {saw_suspect})");
    }

    #[test]
    fn fabric_wide_slowdown_blocks_node_verdicts() {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        for r in 0..20 {
            e.step(&round(n, 1 + r % 7, &[], |_| 0.0));
        }
        let mut fabric_seen = false;
        for r in 0..30 {
            // Everything 25% slower, one node a bit more.
            let mut input = round(n, 1 + r % 7, &[(4, 1.1)], |_| 0.0);
            for p in &mut input.probes {
                p.seconds *= 1.25;
            }
            let out = e.step(&input);
            fabric_seen |= out.fabric_degraded;
            assert!(
                out.transitions
                    .iter()
                    .all(|t| t.to != NodeState::QuarantineRecommended)
            );
        }
        assert!(fabric_seen);
    }

    #[test]
    fn an_absent_node_keeps_its_state_and_a_remap_carries_states_by_node() {
        let n = 8;
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        for r in 0..30 {
            e.step(&round(n, 1 + r % 7, &[(5, 1.3)], jitter));
        }
        let st = e.states()[5];
        assert_ne!(st, NodeState::Healthy, "the slow node is at least suspect");
        // Node 5 leaves the group: many healthy rounds without it do not move its state.
        for r in 0..200 {
            let mut input = round(n, 1 + r % 7, &[], jitter);
            input.probes.retain(|p| p.src != 5 && p.dst != 5);
            input.absent = vec![5];
            let out = e.step(&input);
            assert!(
                out.transitions.iter().all(|t| t.node != 5),
                "{:?}",
                out.transitions
            );
        }
        assert_eq!(e.states()[5], st);
        // The candidates change: node 0 goes, a new node arrives last; node 5 becomes 4.
        let map: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        e.remap(&map, n);
        let after = e.states();
        assert_eq!(after.len(), n);
        assert_eq!(after[4], st);
        assert_eq!(after[n - 1], NodeState::Healthy);
        assert_eq!(
            after.iter().filter(|s| **s != NodeState::Healthy).count(),
            1
        );
    }

    /// A fresh engine that takes over a snapshot decides exactly like the engine it came
    /// from; a snapshot for other nodes, or garbage, is refused and changes nothing.
    #[test]
    fn a_restored_engine_decides_like_its_source() {
        let n = 8;
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let mut old = HealthEngine::new(n, HealthConfig::default());
        let mut confirm = Vec::new();
        for r in 0..40 {
            let mut input = round(n, 1 + r % 7, &[(5, 1.3)], jitter);
            for &s in &confirm {
                for k in [1, 3] {
                    input.confirmations.push(Probe {
                        src: s,
                        dst: (s + k) % n,
                        seconds: 1.3,
                    });
                }
                input.confirmations.push(Probe {
                    src: (s + 2) % n,
                    dst: s,
                    seconds: 1.3,
                });
            }
            confirm = old.step(&input).confirm_requests;
        }
        assert_ne!(old.states()[5], NodeState::Healthy);
        let mut new = HealthEngine::new(n, HealthConfig::default());
        new.restore(&old.snapshot()).unwrap();
        assert_eq!(new.states(), old.states());
        assert_eq!(new.rounds(), old.rounds());
        for r in 0..30 {
            let input = round(n, 1 + r % 7, &[(5, 1.3)], jitter);
            assert_eq!(new.step(&input), old.step(&input), "round {r}");
        }
        let mut other = HealthEngine::new(n + 1, HealthConfig::default());
        assert!(
            other
                .restore(&old.snapshot())
                .unwrap_err()
                .to_string()
                .contains("9")
        );
        assert!(
            other
                .restore(b"{not json")
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
        assert!(other.states().iter().all(|s| *s == NodeState::Healthy));
        assert_eq!(other.rounds(), 0);
    }

    #[test]
    fn hard_fault_skips_hysteresis() {
        let mut e = HealthEngine::new(4, HealthConfig::default());
        let out = e.step(&RoundInput {
            hard_faults: vec![(2, "card dropped (0x40F84E00)".into())],
            ..RoundInput::default()
        });
        assert_eq!(out.transitions[0].to, NodeState::QuarantineRecommended);
        assert!(out.transitions[0].reason.contains("card dropped"));
    }

    /// Pins: a hard fault is a current state. While present the node stays recommended for
    /// quarantine; absent for `hard_hold_down` rounds it moves to probation, then healthy.
    /// (Before, one reading kept it recommended until its scores said otherwise.)
    #[test]
    fn a_hard_fault_clears_after_its_hold_down() {
        let cfg = HealthConfig::default();
        let n = 8;
        let mut e = HealthEngine::new(n, cfg.clone());
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let hard = |on: bool, r: usize| RoundInput {
            hard_faults: if on {
                vec![(2, "card dropped".into())]
            } else {
                vec![]
            },
            ..round(n, 1 + r % 7, &[], jitter)
        };
        for r in 0..5 {
            e.step(&hard(true, r));
            assert_eq!(e.states()[2], NodeState::QuarantineRecommended);
        }
        let mut moved = None;
        for r in 0..cfg.hard_hold_down + 2 {
            let out = e.step(&hard(false, r));
            if let Some(t) = out.transitions.iter().find(|t| t.node == 2) {
                assert_eq!(t.to, NodeState::Probation, "{}", t.reason);
                moved = Some(r + 1);
            }
        }
        assert_eq!(
            moved,
            Some(cfg.hard_hold_down),
            "probation after the hold-down"
        );
        for r in 0..cfg.probation_rounds {
            e.step(&hard(false, r));
        }
        assert_eq!(e.states()[2], NodeState::Healthy);
    }

    /// Pins: a reporter whose re-pairing reports the others contradict is flagged; honest
    /// reporters are not.
    #[test]
    fn a_contradicted_reporter_is_flagged() {
        let n = 8;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let mut last = RoundOutput::default();
        for r in 0..6 {
            let mut input = round(n, 1 + r % 7, &[], jitter);
            // Peers 1 and 4 time their exchange with node 5 as normal; liar 3 says 10x.
            input.reports = vec![(1, 5, 1.0), (4, 5, 1.0), (3, 5, 10.0)];
            last = e.step(&input);
        }
        assert_eq!(last.inconsistent_reporters, vec![3]);
    }

    /// Pins: a restored state is checked field by field; one this engine could never have
    /// produced is refused and the engine left as it was.
    #[test]
    fn an_impossible_restored_state_is_refused() {
        let n = 4;
        let mut src = HealthEngine::new(n, HealthConfig::default());
        for r in 0..3 {
            src.step(&round(n, 1 + r % 3, &[], |_| 0.0));
        }
        let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
        let long: Vec<(f64, f64)> = vec![(0.1, 1.0); 500];
        v["nodes"][0]["out_hist"] = serde_json::json!(long);
        let mut dst = HealthEngine::new(n, HealthConfig::default());
        let err = dst
            .restore(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("out_hist"), "{err}");
        assert_eq!(dst.rounds(), 0);
    }

    #[test]
    fn a_slow_pair_whose_receiver_reports_congestion_makes_no_link_verdict() {
        // The same 1.5× pair as below, but node 2's own counters report congestion in
        // every round: the slowness has another explanation, so it never becomes the
        // link's (the same scenario without the reports does, see the next test).
        let n = 8;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        for r in 0..40 {
            let mut input = round(n, 1 + r % 3, &[], |i| (i % 2) as f64 * 0.003);
            for p in &mut input.probes {
                if p.src == 1 && p.dst == 2 {
                    p.seconds *= 1.5;
                }
            }
            input.congested.push(2);
            let out = e.step(&input);
            assert!(
                out.link_verdicts.is_empty(),
                "round {r}: {:?}",
                out.link_verdicts
            );
        }
    }

    #[test]
    fn degraded_link_is_a_link_verdict_not_a_node() {
        let n = 8;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let mut links = Vec::new();
        for r in 0..40 {
            let stride = 1 + r % 3;
            let mut input = round(n, stride, &[], |i| (i % 2) as f64 * 0.003);
            for p in &mut input.probes {
                if p.src == 1 && p.dst == 2 {
                    p.seconds *= 1.5;
                }
            }
            let out = e.step(&input);
            links.extend(out.link_verdicts);
        }
        assert!(links.contains(&(1, 2)), "{links:?}");
        assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
        // The verdict holds while the pair is not measured (its alert needs a steady
        // series), also when an end's score rises above the exit threshold (a slow link
        // does that to its ends), and ends with the first normal measurement of the pair.
        for r in 0..14 {
            let out = e.step(&round(n, 2 + r % 2, &[(1, 1.06)], |i| {
                (i % 2) as f64 * 0.003
            }));
            assert_eq!(out.link_verdicts, vec![(1, 2)], "round {r}");
        }
        assert!(scores(&e)[1] > (1.0f64 + 0.04).ln());
        let out = e.step(&round(n, 1, &[], |i| (i % 2) as f64 * 0.003));
        assert!(out.link_verdicts.is_empty(), "{:?}", out.link_verdicts);
    }

    /// Re-pairings that reproduce, answered for every node asking.
    fn repairings(
        input: &mut RoundInput,
        asking: &[usize],
        n: usize,
        seconds: impl Fn(usize) -> f64,
    ) {
        for &s in asking {
            for k in [3, 9, 11] {
                input.confirmations.push(Probe {
                    src: s,
                    dst: (s + k) % n,
                    seconds: seconds(s),
                });
            }
        }
    }

    /// Four of sixteen nodes slow at once (a ToR, say), their re-pairings reproducing:
    /// a crowd, reported as a fabric-level event, and none of them is confirmed or
    /// recommended for quarantine.
    #[test]
    fn many_nodes_slow_at_once_are_a_crowd_not_stragglers() {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let slow: Vec<(usize, f64)> = (4..8).map(|i| (i, 1.3)).collect();
        let (mut confirm, mut crowd) = (Vec::new(), false);
        for r in 0..60 {
            let mut input = round(n, 1 + r % 7, &slow, |i| (i % 3) as f64 * 0.002);
            repairings(&mut input, &confirm, n, |s| {
                if (4..8).contains(&s) { 1.3 } else { 1.0 }
            });
            let out = e.step(&input);
            crowd |= out.fabric_degraded;
            for t in &out.transitions {
                assert!(
                    !matches!(
                        t.to,
                        NodeState::Confirmed | NodeState::QuarantineRecommended
                    ),
                    "round {r}: {t:?}"
                );
            }
            confirm = out.confirm_requests;
        }
        assert!(crowd);
    }

    /// A node slow by different amounts from round to round (queueing behind other
    /// traffic) is never recommended for quarantine, even when every re-pairing
    /// reproduces; a node slowed by the same amount every round is.
    #[test]
    fn scattered_slowness_is_never_recommended_steady_slowness_is() {
        let n = 16;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let cycle = [1.15, 1.6, 1.2, 1.5, 1.3, 1.9, 1.12];
        let mut confirm = Vec::new();
        for r in 0..80 {
            let f = cycle[r % cycle.len()];
            let mut input = round(n, 1 + r % 7, &[(5, f), (9, 1.3)], |i| {
                (i % 3) as f64 * 0.002
            });
            repairings(&mut input, &confirm, n, |s| {
                if s == 5 {
                    cycle[(r + s) % cycle.len()]
                } else {
                    1.3
                }
            });
            let out = e.step(&input);
            assert_ne!(e.states()[5], NodeState::QuarantineRecommended, "round {r}");
            confirm = out.confirm_requests;
        }
        assert_eq!(e.states()[9], NodeState::QuarantineRecommended);
    }

    /// A node whose every probe is slow (a congested uplink) makes no link verdict on its
    /// pairs, however often they are re-measured slow: the slowness is not the pair's.
    #[test]
    fn a_congested_end_makes_no_link_verdict() {
        let n = 8;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let mut requests: Vec<(usize, usize)> = Vec::new();
        for r in 0..30 {
            let mut input = round(n, 1 + r % 7, &[(3, 1.4)], |i| (i % 2) as f64 * 0.003);
            input.link_probes = requests
                .iter()
                .map(|&(a, b)| Probe {
                    src: a,
                    dst: b,
                    seconds: if a == 3 || b == 3 { 1.4 } else { 1.0 },
                })
                .collect();
            let out = e.step(&input);
            assert!(
                out.link_verdicts.iter().all(|(a, b)| *a != 3 && *b != 3),
                "round {r}: {:?}",
                out.link_verdicts
            );
            requests = out.link_requests;
        }
    }
}

/// The engine's state is a wire form: members hash it (`probe::group`) and take over the
/// majority's, so members of two versions must write the same bytes for the same state.
#[cfg(test)]
mod wire {
    use super::*;

    /// Two nodes, one round of two 1 s probes, worked out by hand: residuals and z 0 (the
    /// round median is 1 s, the spread its floor), both nodes within bounds once, the
    /// baseline at ln 1, two probes judged and none slow (too few for a partial-fabric
    /// test, so the base rate learns 0).
    #[test]
    fn one_quiet_round_has_this_wire_form() {
        let mut e = HealthEngine::new(2, HealthConfig::default());
        e.step(&RoundInput {
            probes: vec![
                Probe {
                    src: 0,
                    dst: 1,
                    seconds: 1.0,
                },
                Probe {
                    src: 1,
                    dst: 0,
                    seconds: 1.0,
                },
            ],
            ..RoundInput::default()
        });
        let node = r#"{"state":"Healthy","out_hist":[[0.0,0.0]],"in_hist":[[0.0,0.0]],"below":1,"above":0,"quiet":0,"since":0,"confirm_pending":false,"confirmations":0,"hard_clear":null,"reports":[]}"#;
        let want = format!(
            r#"{{"nodes":[{node},{node}],"round":1,"baseline":0.0,"fabric_hist":[false],"slow_rate":0.0,"partial_hist":[[0,2]],"links":[],"held":[]}}"#
        );
        assert_eq!(String::from_utf8(e.snapshot()).unwrap(), want);
    }

    /// Eight nodes through 60 rounds that reach every field: node 5 steadily slow and
    /// re-paired (suspect, confirmed, recommended), a hard fault on node 2 (its hold-down
    /// counting), a reporter (6) the others contradict, a slow pair (6, 7) re-measured,
    /// node 5's uplink congested every other round, node 3 absent for a while, and a
    /// fabric-wide slowdown in rounds 44 to 49.
    fn rich_run() -> Vec<Vec<u8>> {
        let n = 8;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let jitter = |i: usize| (i % 3) as f64 * 0.002;
        let (mut confirm, mut links): (Vec<usize>, Vec<(usize, usize)>) = (vec![], vec![]);
        let mut snaps = Vec::new();
        for r in 0..60usize {
            let mut input = RoundInput {
                hard_faults: if (10..14).contains(&r) {
                    vec![(2, "card dropped".into())]
                } else {
                    vec![]
                },
                reports: vec![(1, 5, 1.3), (4, 5, 1.3), (3, 5, 10.0), (6, 5, 1.0)],
                congested: if r % 2 == 0 { vec![5] } else { vec![] },
                absent: if (30..35).contains(&r) {
                    vec![3]
                } else {
                    vec![]
                },
                ..RoundInput::default()
            };
            let stride = 1 + r % 7;
            for i in 0..n {
                let j = (i + stride) % n;
                if (30..35).contains(&r) && (i == 3 || j == 3) {
                    continue;
                }
                let mut s = 1.0 + jitter(i);
                if i == 5 || j == 5 {
                    s *= 1.3;
                }
                if (i, j) == (6, 7) {
                    s *= 1.5;
                }
                if (44..50).contains(&r) {
                    s *= 1.25;
                }
                input.probes.push(Probe {
                    src: i,
                    dst: j,
                    seconds: s,
                });
            }
            for &s in &confirm {
                for k in [1, 3, 6] {
                    input.confirmations.push(Probe {
                        src: s,
                        dst: (s + k) % n,
                        seconds: if s == 5 { 1.3 } else { 1.0 },
                    });
                }
            }
            for &(a, b) in &links {
                input.link_probes.push(Probe {
                    src: a,
                    dst: b,
                    seconds: if (a, b) == (6, 7) { 1.5 } else { 1.0 },
                });
            }
            let out = e.step(&input);
            confirm = out.confirm_requests;
            links = out.link_requests;
            if [12, 25, 40, 47, 59].contains(&r) {
                snaps.push(e.snapshot());
            }
        }
        snaps
    }

    /// The states of [`rich_run`] as the engine wrote them before it was split into
    /// `health/host/` (recorded with `UPDATE_GOLDEN=1`; a change here is a change of the
    /// wire form, and members of two versions would stop agreeing on their digests).
    #[test]
    fn a_rich_run_keeps_its_wire_form() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/health-engine-state.jsonl"
        );
        let mut got = Vec::new();
        for s in rich_run() {
            got.extend(s);
            got.push(b'\n');
        }
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &got).unwrap();
        }
        let want = std::fs::read(path).unwrap();
        assert!(got == want, "the engine state's wire form changed");
    }
}
