//! Moving a node through its lifecycle: by its window and this round's re-pairings
//! (suspect → confirmed → quarantine recommended, and back), and by hard faults, which
//! skip the hysteresis.

use super::score::{RoundStats, TorEventLevel, Window};
use super::{HealthEngine, RoundInput, RoundOutput};
use crate::health::evidence::{Evidence, Key, MIN_REPORTERS, STEADY_RATIO, steady};
use crate::health::hardware::Signs;
use crate::health::horizon::Taught;
use crate::health::lifecycle::NodeIx;
use crate::health::stats::robust_spread;
use crate::snapshot::probe::NodeState;

/// What the round brought a node besides its window.
pub(super) struct Seen {
    /// The log residuals of its re-pairings, when it asked for them.
    pub confirm: Option<Vec<f64>>,
    /// The peer of each of those re-pairings.
    pub peers: Vec<usize>,
    /// Whether each is beyond the reach of the dip on (within its ToR; computed only
    /// under a partial fabric verdict, else empty).
    pub spared: Vec<bool>,
    /// Its ToR is known and no other member of it is confirmed: only then do
    /// re-pairings within the ToR tell its own slowness inside a dip. Two members slow
    /// with the rest but not with each other are how a ToR's uplinks look when the
    /// topology lumps them with others; two stragglers in one ToR wait for the dip's end.
    /// (Suspects are not counted: a dip makes many, for a round or two each.)
    pub alone: bool,
    /// Its ToR's other members that are healthy (the peers re-pairings within the ToR
    /// can have).
    pub mates: usize,
    /// Its own uplink counters showed congestion.
    pub congested: bool,
    /// The hardware signs its own interface showed.
    pub signs: Signs,
    /// It is bound to a dip that became the normal (`DipPairs::binds`): it stays frozen
    /// as it was while the dip was an event.
    pub bound: bool,
    /// The levels of the ToR event it is in (its whole ToR slow at once, its ToR's
    /// uplinks marked slow; zero without one): its re-pairings with peers behind other
    /// ToRs cross both, so they reproduce a slowness of its own only by what they show
    /// beyond the larger ([`TorEventLevel::across`]); those within its ToR cross the ToR
    /// only (`whole`). Held out, members that stood out of a slow ToR for a round, their
    /// re-pairings no slower than the ToR made them, were cordoned once their slowdown
    /// (the ToR's) had outlasted the persistence horizon.
    pub beyond: TorEventLevel,
}

impl HealthEngine {
    /// Hard faults are a current state: present, the node is recommended for quarantine
    /// at once (the telemetry already debounced them); absent for `hard_hold_down` rounds,
    /// a node they put there moves to probation. Returns the nodes not to judge on scores
    /// this round (a hard fault present, or its hold-down running).
    pub(super) fn hard_faults(&mut self, input: &RoundInput, out: &mut RoundOutput) -> Vec<usize> {
        let n = self.nodes.len();
        let present: Vec<usize> = input
            .hard_faults
            .iter()
            .map(|(n, _)| *n)
            .filter(|i| *i < n)
            .collect();
        for (node, reason) in input.hard_faults.iter().filter(|(i, _)| *i < n) {
            let node = NodeIx(*node);
            self.nodes[node].data.hard_clear = Some(0);
            if self.nodes[node].state != NodeState::QuarantineRecommended {
                self.set(
                    node,
                    NodeState::QuarantineRecommended,
                    format!("hard fault: {reason}"),
                    Evidence::default(),
                    out,
                );
            }
        }
        let mut held = present.clone();
        for i in 0..n {
            if present.contains(&i) || input.absent.contains(&i) {
                continue;
            }
            if self.hard_hold(NodeIx(i), out) {
                held.push(i);
            }
        }
        held
    }

    /// A node a hard fault put in quarantine, the fault absent this round: counts the
    /// hold-down, and moves the node to probation at its end. Whether the node is held
    /// from judging this round.
    fn hard_hold(&mut self, i: NodeIx, out: &mut RoundOutput) -> bool {
        let Some(k) = self.nodes[i].data.hard_clear else {
            return false;
        };
        if self.nodes[i].state != NodeState::QuarantineRecommended {
            self.nodes[i].data.hard_clear = None;
            return false;
        }
        let k = k + 1;
        if k >= self.cfg.hard_hold_down {
            self.nodes[i].data.hard_clear = None;
            self.set(
                i,
                NodeState::Probation,
                format!("hard fault absent for {k} rounds; probation"),
                Evidence::of([(Key::RoundsWithoutHardFault, k as f64)]),
                out,
            );
        } else {
            self.nodes[i].data.hard_clear = Some(k);
        }
        true
    }

    /// Moves node `i` through its states by its window and this round's confirmations.
    pub(super) fn advance(
        &mut self,
        i: NodeIx,
        w: Window,
        r: &RoundStats,
        seen: Seen,
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        let state = self.nodes[i].state;
        let counts = &mut self.nodes[i].counts;
        counts.within(w.score < r.exit);
        // Rounds slow in a row, and steadily so (see `STEADY_RATIO`): a quarantine waits
        // for `confirm_hold` of them. A round its own counters explain does not count
        // towards the short hold, nor does it start it again: congestion that lasts shows
        // in every round it lasts, a busy moment on a slow node's NIC only delays its
        // verdict by that round.
        let steady_now = w.elevated && steady(w.spread, r.spread());
        counts.steady_round(steady_now, seen.congested);
        // The episode's evidence, from the first slow round until the node is back to
        // healthy: its hardware signs, and its slow rounds its counters did not explain,
        // in a row or not (an intermittent fault is slow in stretches; congestion that
        // would match it comes in one episode of its own length).
        // Both are cleared when the node recovers (in `set`), and in a round it starts
        // healthy or in probation within bounds.
        // Rounds a crowd or a partial fabric event froze still count: leaving them out
        // left 3 of campaign's 8 stragglers short of the horizon in a 3-hour run
        // (docs/detection.md).
        let data = &mut self.nodes[i].data;
        if matches!(state, NodeState::Healthy | NodeState::Probation) && !w.elevated {
            data.forget_episode();
        } else if w.elevated {
            data.signs = data.signs.union(seen.signs);
            data.persist = data
                .persist
                .saturating_add(usize::from(steady_now && !seen.congested));
            data.unexplained = data
                .unexplained
                .saturating_add(usize::from(!seen.congested));
            data.agreeing = data
                .agreeing
                .saturating_add(usize::from(!seen.congested && w.agrees));
            data.slow_rounds = data.slow_rounds.saturating_add(1);
            data.sign_rounds = data
                .sign_rounds
                .saturating_add(usize::from(!seen.signs.is_empty()));
        }
        match state {
            NodeState::Healthy | NodeState::Probation if w.elevated => {
                self.nodes[i].data.confirm_pending = true;
                self.nodes[i].data.confirmations = 0;
                out.confirm_requests.push(i.0);
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
            NodeState::Probation if self.nodes.age(i) >= cfg.probation_rounds as u64 => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "probation passed".into(),
                    w.evidence(),
                    out,
                );
            }
            NodeState::Suspect => self.advance_suspect(i, &w, r, seen, out),
            NodeState::Confirmed => self.advance_confirmed(i, &w, r, seen, out),
            NodeState::QuarantineRecommended if self.nodes[i].counts.clean >= cfg.exit_rounds => {
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

    /// Asks for re-pairings of `i` next round.
    fn ask(&mut self, i: NodeIx, out: &mut RoundOutput) {
        self.nodes[i].data.confirm_pending = true;
        out.confirm_requests.push(i.0);
    }

    /// Asks for re-pairings of `i` with members of its own ToR next round.
    fn ask_within(&mut self, i: NodeIx, out: &mut RoundOutput) {
        self.ask(i, out);
        out.confirm_own_tor.push(i.0);
    }

    /// Judges confirmed node `i` inside a partial fabric verdict by its re-pairings within
    /// its own ToR that the dip does not reach (`spared`: peer, log residual; see
    /// [`DipPairs::spares`](crate::health::dips::DipPairs::spares)). They are collected
    /// over the rounds of the event, one per peer (the plan turns the peers with the
    /// round), and judged once `confirm_peers` distinct peers answered: recommended when
    /// every one reproduces, steadily, and its hold has passed (`held`: the persistence
    /// horizon still applies, since its own uplink's congestion reaches such pairs too);
    /// one that does not reproduce drops the collection (it stays confirmed, frozen as
    /// before). A healthy node the dip slowed is quick with its ToR's members; a
    /// straggler is slow with every peer.
    fn judge_within(
        &mut self,
        i: NodeIx,
        (w, r): (&Window, &RoundStats),
        (spared, (mates, level)): (Vec<(usize, f64)>, (usize, f64)),
        out: &mut RoundOutput,
    ) {
        let need = self.cfg.confirm_peers.max(MIN_REPORTERS);
        let need = need.max(mates.min(2 * need));
        let held = self.held(i);
        let within = &mut self.nodes[i].data.within;
        for (peer, x) in spared {
            within.retain(|(q, _)| *q != peer);
            within.push((peer, x));
        }
        let excess = within.len().saturating_sub(need);
        within.drain(..excess);
        let c: Vec<f64> = within.iter().map(|(_, x)| *x).collect();
        if c.len() < need {
            if held && w.elevated {
                self.ask_within(i, out);
            }
            return;
        }
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        // Beyond its whole ToR's slowdown, when its ToR is slow as a whole (the pairs
        // within cross it; `Seen::beyond`).
        if cm - level <= r.entry {
            within.clear();
            return;
        }
        if held && steady_slowness(w, &c, r, true) {
            within.clear();
            let mut e = w.evidence();
            e.push(Key::SecondConfirmationMinLogResidual, cm);
            push_level(&mut e, level);
            self.recommend(i, (w, r), (&c, true, level), true, e, out);
        } else if w.elevated {
            self.ask_within(i, out);
        }
    }

    /// A suspect is confirmed when every re-pairing reproduces the slowness, in
    /// `confirm_rounds` consecutive rounds; cleared when one does not, or when it has been
    /// back within bounds for `exit_rounds`.
    fn advance_suspect(
        &mut self,
        i: NodeIx,
        w: &Window,
        r: &RoundStats,
        seen: Seen,
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        let Some(c) = seen.confirm else {
            if self.nodes[i].counts.clean >= cfg.exit_rounds {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    w.evidence(),
                    out,
                );
            } else if w.elevated {
                // Still slow and no confirmation arrived: ask again.
                self.ask(i, out);
            }
            return;
        };
        let got = c.len();
        // Every re-pairing must reproduce the slowness: one congested path must not be
        // enough to condemn a node.
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        let level = seen.beyond.across();
        let need = cfg.confirm_peers.max(MIN_REPORTERS);
        let reproduced = got >= need && cm - level > r.entry;
        // The re-pairings went through an uplink that reported congestion: they reproduce
        // the congestion as much as the node, however long it lasts (a round its counters
        // explain is never evidence against the node).
        let explained = seen.congested;
        // A window that varies from round to round is let through when `varying_held`
        // (hardware evidence, or the horizon of rounds that moved as one); a steady
        // window whose re-pairings scatter is not.
        let varying = self.varying_held(i) && !steady(w.spread, r.spread());
        let unsteady = !steady_slowness(w, &c, r, false) && !varying;
        if r.partial.now || r.crowded(i.0) || reproduced && (explained || unsteady) {
            // A share of the links slow (the re-pairings may cross them too), many nodes at
            // once (not this node's doing alone), congestion its own counters show, or slow
            // but not steadily (queueing behind other traffic scatters the residuals, see
            // `STEADY_RATIO`) and not held by `varying_held`: it stays a suspect (a
            // ticket) and is re-paired again.
            self.nodes[i].data.confirm_pending = w.elevated;
            if w.elevated {
                out.confirm_requests.push(i.0);
            }
            return;
        }
        self.nodes[i].data.confirm_pending = false;
        if reproduced {
            self.nodes[i].data.confirmations += 1;
        }
        let mut e = w.evidence();
        e.push(Key::ConfirmationMinLogResidual, cm);
        push_level(&mut e, level);
        if reproduced && self.nodes[i].data.confirmations < cfg.confirm_rounds {
            // Reproduced once: ask again next round before condemning.
            self.ask(i, out);
        } else if reproduced {
            self.nodes[i].data.confirmations = 1;
            e.push(Key::ConfirmationProbes, got as f64);
            self.set(
                i,
                NodeState::Confirmed,
                format!(
                    "re-paired with {got} known-good peers: still {:.1}% slower{}",
                    (cm.exp() - 1.0) * 100.0,
                    beyond_event(cm, level)
                ),
                e,
                out,
            );
        } else {
            let reason = if let Some(short) = too_few(got, need) {
                format!("not reproduced: {short}")
            } else {
                format!(
                    "not reproduced against {got} known-good peers ({:.1}%{}): transient or path congestion",
                    (cm.exp() - 1.0) * 100.0,
                    beyond_event(cm, level)
                )
            };
            self.set(i, NodeState::Healthy, reason, e, out);
        }
    }

    /// A confirmed node is recommended for quarantine after its hold (see
    /// [`HealthEngine::held`]) and a second re-pairing that reproduces; a fabric-wide event,
    /// or being bound to a dip that became the normal (`bound`), freezes it. A node slow
    /// but not steadily is recommended only when [`HealthEngine::varying_held`] (hardware
    /// evidence, or the horizon of rounds that moved as one), and a re-pairing that lands
    /// in one of its quicker rounds then does not clear it.
    fn advance_confirmed(
        &mut self,
        i: NodeIx,
        w: &Window,
        r: &RoundStats,
        seen: Seen,
        out: &mut RoundOutput,
    ) {
        let cfg = self.cfg.clone();
        // Held while its slowness varies (`varying_held`: hardware evidence, or the
        // horizon of rounds that moved as one; a steady one waits for `held`).
        let varying = self.varying_held(i) && !seen.congested;
        // Inside a partial fabric verdict (a dip), neither crowded nor bound to a normal:
        // judged by re-pairings within its own ToR, which the dip does not reach.
        let inside = r.partial_fabric && !r.crowded(i.0) && !seen.bound && seen.alone;
        if !inside {
            self.nodes[i].data.within.clear();
        }
        if r.partial_fabric || r.crowded(i.0) || seen.bound {
            self.frozen(i, (w, r), &seen, inside, out);
            return;
        }
        let Some(c) = seen.confirm else {
            if self.held(i) && w.elevated {
                self.ask(i, out);
                self.nodes[i].data.asked_varying = false;
            } else if varying && w.elevated && !steady(w.spread, r.spread()) {
                self.ask(i, out);
                self.nodes[i].data.asked_varying = true;
            } else if self.nodes[i].counts.clean >= cfg.exit_rounds {
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
        self.nodes[i].data.confirm_pending = false;
        let asked_varying = std::mem::take(&mut self.nodes[i].data.asked_varying);
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        let level = seen.beyond.across();
        let mut e = w.evidence();
        e.push(Key::SecondConfirmationMinLogResidual, cm);
        push_level(&mut e, level);
        let (got, need) = (c.len(), cfg.confirm_peers.max(MIN_REPORTERS));
        let reproduced = got >= need && cm - level > r.entry;
        let gone = || {
            if let Some(short) = too_few(got, need) {
                format!("second re-pairing did not reproduce: {short}")
            } else {
                format!(
                    "second re-pairing did not reproduce{}",
                    beyond_event(cm, level)
                )
            }
        };
        if asked_varying {
            // Asked on `varying_held` while its slowness varied (in a round its counters
            // did not explain): recommended if that still holds and the re-pairings
            // reproduce. A re-pairing that lands in one of its quicker rounds
            // while its window is still slow is no sign it recovered: it stays confirmed
            // and is asked again at once.
            let held = self.varying_held(i);
            let signed = self.nodes[i].data.corroborated();
            if reproduced && held {
                self.recommend(i, (w, r), (&c, false, level), false, e, out);
            } else if !reproduced && w.elevated && held {
                self.ask(i, out);
                self.nodes[i].data.asked_varying = true;
            } else if !reproduced && !w.elevated && signed {
                self.set(i, NodeState::Healthy, gone(), e, out);
            }
            // Asked on the horizon of rounds that moved as one (no sign), an answer that
            // lands in a quick moment once its window has turned does not clear it: its
            // clean rounds do (`exit_rounds`), as for any confirmed node. Clearing it
            // here threw an intermittent straggler's episode away at each pause, before
            // its steady rounds reached the horizon.
            return;
        }
        if reproduced && !steady_slowness(w, &c, r, true) {
            // Slow, but not steadily: the window's residuals scatter far more than healthy
            // probes do, as queueing behind other traffic (or an intermittent fault) makes
            // them. A cordon waits for steady slowness, or for hardware evidence that
            // congestion cannot give; the node stays confirmed.
            return;
        }
        if reproduced {
            self.recommend(i, (w, r), (&c, false, level), true, e, out);
        } else {
            self.set(i, NodeState::Healthy, gone(), e, out);
        }
    }

    /// A confirmed node whose escalation a fabric event freezes: a share of the links
    /// slow (re-pairings may cross it), a crowd sharing its condition, or a dip that
    /// became the normal and slowed it and its ToR's members alike (`bound`). It stays
    /// confirmed and is asked again once that is over. Inside a dip (`inside`: neither
    /// crowded nor bound, alone on its ToR) only re-pairings within its own ToR can
    /// still tell ([`HealthEngine::judge_within`]). A round median above the baseline
    /// alone freezes nothing: residuals are relative to the round, so a straggler in a
    /// fleet that stepped up is still found.
    fn frozen(
        &mut self,
        i: NodeIx,
        (w, r): (&Window, &RoundStats),
        seen: &Seen,
        inside: bool,
        out: &mut RoundOutput,
    ) {
        let Some(c) = &seen.confirm else {
            if inside && self.held(i) && w.elevated {
                self.ask_within(i, out);
            }
            return;
        };
        self.nodes[i].data.confirm_pending = false;
        self.nodes[i].data.asked_varying = false;
        if inside {
            if seen.spared.iter().any(|spared| !spared) {
                // The dip reaches the ToR now (or the normal holds a pair of it): what
                // was collected before may be the dip's too.
                self.nodes[i].data.within.clear();
            }
            let answers = seen.peers.iter().copied().zip(c.iter().copied());
            let spared: Vec<(usize, f64)> = answers
                .zip(&seen.spared)
                .filter_map(|(x, spared)| spared.then_some(x))
                .collect();
            let mates = (seen.mates, seen.beyond.within());
            self.judge_within(i, (w, r), (spared, mates), out);
        }
    }

    /// Recommends confirmed node `i` for quarantine, its re-pairings `c` having reproduced
    /// its slowness: after its hold ([`HealthEngine::held`], `steady`), or varying from
    /// round to round and held by [`HealthEngine::varying_held`].
    fn recommend(
        &mut self,
        i: NodeIx,
        (w, r): (&Window, &RoundStats),
        (c, own_tor, level): (&[f64], bool, f64),
        steady: bool,
        mut e: Evidence,
        out: &mut RoundOutput,
    ) {
        self.nodes[i].data.confirmations += 1;
        let counts = self.nodes[i].counts;
        let (above, quiet) = (counts.steady, counts.quiet);
        let d = &self.nodes[i].data;
        e.push(Key::SteadySlowRounds, above as f64);
        e.push(Key::UncongestedSlowRounds, quiet as f64);
        e.push(Key::UnexplainedSlowRounds, d.unexplained as f64);
        e.push(Key::HardwareSigns, f64::from(d.signs.bits()));
        let how = if steady {
            format!("after {above} steady rounds ({quiet} without congestion on its uplink)")
        } else {
            format!(
                "varying from round to round (residual scatter {:.3}, steady is at most {:.3}, {STEADY_RATIO}x the round's), slow in {} rounds its uplink's congestion counters did not explain (not necessarily in a row),",
                w.spread,
                STEADY_RATIO * r.spread(),
                d.unexplained
            )
        };
        e.push(Key::AgreeingSlowRounds, d.agreeing as f64);
        let peers = if own_tor {
            "known-good members of its own ToR (a partial fabric event is on; a pair within one ToR crosses no ToR uplink and no spine, and the ToR's other inner pairs were not slow)"
        } else {
            "known-good peers"
        };
        let cm = c.iter().copied().fold(f64::INFINITY, f64::min);
        let event = if level > 0.0 {
            format!(" (the least slow of them{})", beyond_event(cm, level))
        } else {
            String::new()
        };
        let reason = format!(
            "confirmed straggler: still {:.1}% slower {how} and a second re-pairing with {} {peers}{event}; {}",
            (w.score.exp() - 1.0) * 100.0,
            c.len(),
            corroboration(d, steady, self.horizon_said(i))
        );
        self.set(i, NodeState::QuarantineRecommended, reason, e, out);
    }

    /// Whether a confirmed node has been steadily slow long enough for a quarantine, by
    /// rounds its own uplink did not explain (rounds whose counters showed congestion never
    /// count, however long the congestion lasts):
    /// - with hardware signs that corroborate the run (evidence congestion cannot give, in
    ///   enough of its slow rounds: [`corroborates`]), `confirm_hold` of them, or `congested_hold` when most rounds of the run were congested (a busy
    ///   moment now and then only delays a slow node by those rounds);
    /// - without, that and the persistence horizon ([`HealthEngine::horizon`]): steadily
    ///   slow rounds the counters did not explain since the episode began (in a row or not).
    ///   Steady congestion the counters miss looks exactly like a slow component until it
    ///   ends.
    fn held(&self, i: NodeIx) -> bool {
        let c = &self.nodes[i].counts;
        let d = &self.nodes[i].data;
        let hold = self.short_hold(c.quiet, c.steady);
        let corroborated = d.corroborated();
        c.quiet >= hold && (corroborated || d.persist >= self.horizon(i))
    }

    /// Node `i`'s persistence horizon now: `uncorroborated_hold`, or longer when the
    /// group's counters have reported longer congestion or its slow episodes that ended by
    /// themselves lasted longer ([`crate::health::horizon`]).
    pub(super) fn horizon(&self, i: NodeIx) -> usize {
        self.congestion
            .horizon(self.cfg.uncorroborated_hold, Some(i.0))
    }

    /// Node `i`'s horizon and where it came from, in words for a reason: as configured,
    /// or learnt from the counters' runs or from the slow episodes that ended by
    /// themselves (whichever set it).
    fn horizon_said(&self, i: NodeIx) -> (usize, &'static str) {
        let (horizon, taught) = self
            .congestion
            .taught(self.cfg.uncorroborated_hold, Some(i.0));
        let whence = match taught {
            Taught::Configured => "as configured",
            Taught::Episodes => "learnt from the group's slow episodes that ended by themselves",
            Taught::Runs => "learnt from the congestion its group's counters reported",
        };
        (horizon, whence)
    }

    /// The short hold of a run of `slow` rounds of which `unexplained` its counters did not
    /// explain: `congested_hold` when they explained most of them (congestion the counters
    /// see most of the time is still there in the rounds they miss), else `confirm_hold`.
    fn short_hold(&self, unexplained: usize, slow: usize) -> usize {
        if slow.saturating_sub(unexplained) > slow / 2 {
            self.cfg.congested_hold
        } else {
            self.cfg.confirm_hold
        }
    }

    /// Whether a node slow but not steadily has been so long enough for a quarantine:
    /// `confirm_hold` slow rounds in the episode that its counters did not explain (in a
    /// row or not), and either hardware signs that corroborate its episode (evidence
    /// congestion cannot give) or the persistence horizon ([`HealthEngine::horizon`]) of
    /// such rounds in which its sending and receiving probes moved as one. A straggler
    /// whose slowdown varies from round to round scatters its residuals as queueing does,
    /// so it never passes [`steady_slowness`]; what still tells it from congestion the
    /// counters miss is that a component slows the probes of one round alike, and queueing
    /// does not ([`crate::health::evidence::moves_as_one`]). Without that test, a horizon
    /// for every such node gained 79 recommendations and made 92 false ones on the
    /// held-out batch (docs/detection.md). As for a steady one, the hold is
    /// `congested_hold` when its counters explained most of the episode's slow rounds
    /// ([`HealthEngine::short_hold`]).
    fn varying_held(&self, i: NodeIx) -> bool {
        let d = &self.nodes[i].data;
        let hold = self.short_hold(d.unexplained, d.slow_rounds);
        d.unexplained >= hold && (d.corroborated() || d.agreeing >= self.horizon(i))
    }
}

/// What a reason adds when re-pairings (their smallest log residual `cm`) were judged
/// beyond the level of a ToR event the node is in (`level`, log units; nothing without
/// one): how far beyond, or that they were within it. The level is what the event
/// leaves in the re-pairings' residuals (with `health.tor_aware`, less what was already
/// taken out of them), so the reason calls it that.
fn beyond_event(cm: f64, level: f64) -> String {
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    if level <= 0.0 {
        String::new()
    } else if cm > level {
        format!(
            ", {:.1}% beyond the {:.1}% its ToR's event leaves in them",
            pct(cm - level),
            pct(level)
        )
    } else {
        format!(
            ", within the {:.1}% its ToR's event leaves in them",
            pct(level)
        )
    }
}

/// What a reason says when fewer re-pairings answered (`got`) than a verdict needs
/// (`need`): the counts, and nothing of the slowness or of an event's level, which so few
/// answers cannot support. None when enough answered.
fn too_few(got: usize, need: usize) -> Option<String> {
    (got < need).then(|| format!("{got} known-good peers answered, {need} are needed"))
}

/// Records the level of the ToR event the re-pairings were judged beyond, when there
/// is one (see [`Key::TorEventLogLevel`]).
fn push_level(e: &mut Evidence, level: f64) {
    if level > 0.0 {
        e.push(Key::TorEventLogLevel, level);
    }
}

/// What a quarantine rests on besides the probes, for its reason: the hardware signs
/// that corroborate the episode, or the length of the run when none do (its steadily slow
/// rounds, or for a node whose slowness varies, its rounds that moved as one) and the
/// horizon it passed (`horizon`: see [`HealthEngine::horizon_said`]).
fn corroboration(d: &super::NodeData, steady: bool, horizon: (usize, &'static str)) -> String {
    if d.corroborated() {
        return format!(
            "corroborated by its own hardware in {} of its slow rounds: {}",
            d.sign_rounds,
            d.signs.names().join(", ")
        );
    }
    let rounds = if steady {
        format!(
            "{} steadily slow rounds its counters did not explain",
            d.persist
        )
    } else {
        format!(
            "{} slow rounds its counters did not explain in which its sending and receiving probes moved as one, as a component's slowdown does and queueing does not",
            d.agreeing
        )
    };
    let (horizon, whence) = horizon;
    format!(
        "no hardware evidence: slow beyond the persistence horizon ({rounds}; the horizon is {horizon} rounds, {whence})"
    )
}

/// Whether a node's slowness is steady: its window's residuals, and this round's
/// re-pairings, scatter no more than [`STEADY_RATIO`] times the round's healthy spread.
/// Before a quarantine (`anchored`), each re-pairing must also land where the window
/// says the node is: a constant slowdown puts them there, queueing puts them anywhere.
/// (Within 3 × the spread: a healthy probe lands farther about one time in a hundred.)
fn steady_slowness(w: &Window, confirmations: &[f64], r: &RoundStats, anchored: bool) -> bool {
    let limit = STEADY_RATIO * r.spread();
    let consistent = !anchored
        || confirmations
            .iter()
            .all(|c| (c - w.score).abs() <= 3.0 * r.spread().max(w.spread));
    w.spread <= limit && robust_spread(confirmations) <= limit && consistent
}
