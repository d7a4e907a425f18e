//! Moving a port through its lifecycle by its elevation and its re-pings, and what a
//! quarantine rests on besides them.
//!
//! A port that is steadily slow or lossy because its link is congested looks, to pings,
//! exactly like a failing port; only the port's own counters (pause frames and congestion
//! notifications it receives) and its hardware (corrupted frames, a link below its speed)
//! tell them apart. So, as on the host plane, a round its counters call congested never
//! counts towards a quarantine, a port whose episode showed a hardware sign is recommended
//! after the short hold, and one without waits for the persistence horizon
//! (`uncorroborated_hold`).

use super::confirm::{Confirmation, Reproduction};
use super::score::{Elevation, percent_slower};
use super::{DeviceEngine, DeviceInput, DeviceOutput};
use crate::health::evidence::Key;
use crate::health::hardware::{Signs, corroborates};
use crate::health::horizon::Taught;
use crate::health::lifecycle::PortIx;
use crate::snapshot::probe::NodeState;

impl super::PortData {
    /// Whether the episode's hardware corroborates it (see [`corroborates`]).
    pub(super) fn corroborated(&self) -> bool {
        corroborates(self.sign_rounds, self.elevated_rounds)
    }
}

/// What the round told about a port besides its pings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Seen {
    /// Its own counters showed congestion.
    pub congested: bool,
    /// The hardware signs it showed.
    pub signs: Signs,
}

impl Seen {
    /// Each of `n` ports' readings from the input (ports out of range are ignored).
    pub fn of(input: &DeviceInput, n: usize) -> Vec<Seen> {
        let mut seen = vec![Seen::default(); n];
        for &p in &input.congested_ports {
            if let Some(s) = seen.get_mut(p) {
                s.congested = true;
            }
        }
        for &(p, signs) in &input.port_signs {
            if let Some(s) = seen.get_mut(p) {
                s.signs = s.signs.union(signs);
            }
        }
        seen
    }
}

/// Why a suspect was confirmed: its window's elevation, or, when the window is within
/// bounds this round (its re-pings decided it in a round an event explained), what the
/// re-pings themselves showed; their RTT only when one was answered.
fn confirmed_reason(e: &Elevation, loss_ratio: f64, slow: f64) -> String {
    let said = if e.any() {
        e.describe()
    } else {
        let rtt = percent_slower(slow);
        let rtt = if rtt.is_finite() {
            format!(", their answers {rtt:+.0}% against the round median")
        } else {
            String::new()
        };
        format!(
            "the re-pings lost {:.1}% of their packets{rtt}; {}",
            loss_ratio * 100.0,
            e.describe()
        )
    };
    format!("re-pinged from known-good ports on other nodes: {said}")
}

impl DeviceEngine {
    /// Moves port `i`: elevated on its own (`elevated`) it becomes a suspect and is
    /// re-pinged; reproduced it is confirmed, and once [`held`](Self::held) recommended for
    /// quarantine; `exit_rounds` clean rounds clear it (or move a recommendation to
    /// probation).
    ///
    /// A round a fabric (or ToR) event `explained` counts neither as clean nor as bad: a
    /// port keeps its verdict through the event (a recommendation does not lift during it
    /// and come back after, uncordoning and re-cordoning the node), and only a suspect's
    /// re-pings are still read (they may clear it, not confirm it).
    pub(super) fn advance(
        &mut self,
        i: PortIx,
        (elevated, explained): (bool, bool),
        e: &Elevation,
        (confirm, seen): (Reproduction, Seen),
        out: &mut DeviceOutput,
    ) {
        let cfg = self.cfg.clone();
        let state = self.ports[i].state;
        if explained {
            if state == NodeState::Suspect {
                self.advance_suspect(i, e, confirm, out);
            }
            return;
        }
        let counts = &mut self.ports[i].counts;
        counts.within(!elevated);
        if elevated {
            // A quarantine waits for elevated rounds in a row that are lossy or steadily
            // slow (queueing behind other traffic scatters RTTs, a slow port shifts them),
            // of which those the port's own counters explain do not count.
            counts.steady_round(e.steady, seen.congested);
        }
        // The episode's evidence, from its first elevated round until the port is healthy
        // again (cleared in `set`, and here in a round it starts healthy or in probation
        // within bounds).
        let data = &mut self.ports[i].data;
        if matches!(state, NodeState::Healthy | NodeState::Probation) && !elevated {
            data.forget_episode();
        } else if elevated {
            data.signs = data.signs.union(seen.signs);
            data.persist = data
                .persist
                .saturating_add(usize::from(e.steady && !seen.congested));
            data.elevated_rounds = data.elevated_rounds.saturating_add(1);
            data.sign_rounds = data
                .sign_rounds
                .saturating_add(usize::from(!seen.signs.is_empty()));
        }
        match state {
            NodeState::Healthy | NodeState::Probation if elevated => {
                self.ports[i].data.confirm = Confirmation::default();
                out.confirm_requests.push(i.0);
                self.set(i, NodeState::Suspect, e.describe(), e.evidence(), out);
            }
            NodeState::Probation if self.ports.age(i) >= cfg.probation_rounds as u64 => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "probation passed".into(),
                    e.evidence(),
                    out,
                );
            }
            NodeState::Suspect => self.advance_suspect(i, e, confirm, out),
            NodeState::Confirmed if elevated && self.held(i) => self.recommend(i, e, out),
            NodeState::Confirmed if self.ports[i].counts.clean >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    e.evidence(),
                    out,
                );
            }
            NodeState::QuarantineRecommended if self.ports[i].counts.clean >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Probation,
                    "back within bounds; probation".into(),
                    e.evidence(),
                    out,
                );
            }
            _ => {}
        }
    }

    /// A suspect: confirmed when its re-pings reproduce, cleared when enough of them do
    /// not (the path, not the port) or after `exit_rounds` clean rounds, re-pinged again
    /// while undecided.
    fn advance_suspect(
        &mut self,
        i: PortIx,
        e: &Elevation,
        confirm: Reproduction,
        out: &mut DeviceOutput,
    ) {
        match confirm {
            Reproduction::Reproduced { loss_ratio, slow } => {
                let mut ev = e.evidence();
                ev.push(Key::ConfirmationLossRatio, loss_ratio);
                ev.push(Key::ConfirmationMedianLogRttResidual, slow);
                ev.push(
                    Key::ConfirmationPackets,
                    f64::from(self.ports[i].data.confirm.all.sent),
                );
                self.set(
                    i,
                    NodeState::Confirmed,
                    confirmed_reason(e, loss_ratio, slow),
                    ev,
                    out,
                );
            }
            Reproduction::NotReproduced { loss_ratio } => {
                let mut ev = e.evidence();
                ev.push(Key::ConfirmationLossRatio, loss_ratio);
                self.set(
                    i,
                    NodeState::Healthy,
                    "not reproduced from known-good ports: path, not port".into(),
                    ev,
                    out,
                );
            }
            Reproduction::Undecided if self.ports[i].counts.clean >= self.cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    e.evidence(),
                    out,
                );
            }
            // Not decided yet: keep re-pinging.
            Reproduction::Undecided => out.confirm_requests.push(i.0),
        }
    }

    /// Whether a confirmed port has been elevated long enough for a quarantine, counting
    /// only rounds its own counters did not call congested (however long congestion lasts,
    /// it never counts):
    /// - with its hardware corroborating the episode ([`PortData::corroborated`]),
    ///   `confirm_hold` of them, or `congested_hold` when most rounds of the run were
    ///   congested;
    /// - without, that and the persistence horizon such rounds since the episode began:
    ///   `uncorroborated_hold`, or longer when the ports' own counters have reported longer
    ///   congestion or their slow episodes that ended by themselves lasted longer
    ///   ([`crate::health::horizon`]; the same rule as the host plane's).
    fn held(&self, i: PortIx) -> bool {
        let (c, d) = (&self.ports[i].counts, &self.ports[i].data);
        let congested = c.steady - c.quiet;
        let hold = if congested * 2 > c.steady {
            self.cfg.congested_hold
        } else {
            self.cfg.confirm_hold
        };
        c.quiet >= hold && (d.corroborated() || d.persist >= self.horizon(i))
    }

    /// Port `i`'s persistence horizon: the configured one, or longer when the ports'
    /// counters reported longer congestion (its node's run under way left out: its own
    /// doing as much as the fabric's) or their slow episodes that ended lasted longer.
    fn horizon(&self, i: PortIx) -> usize {
        let node = self.ports[i].data.node.0;
        self.congestion
            .horizon(self.cfg.uncorroborated_hold, Some(node))
    }

    /// Recommends port `i`'s node for quarantine, saying what the verdict rests on.
    fn recommend(&mut self, i: PortIx, e: &Elevation, out: &mut DeviceOutput) {
        self.ports[i].data.recommended = true;
        let (c, d) = (self.ports[i].counts, &self.ports[i].data);
        let (signs, persist) = (d.signs, d.persist);
        let sign_rounds = d.sign_rounds;
        let mut ev = e.evidence();
        ev.push(Key::SteadySlowRounds, c.steady as f64);
        ev.push(Key::UncongestedSlowRounds, c.quiet as f64);
        ev.push(Key::HardwareSigns, f64::from(signs.bits()));
        let basis = if !d.corroborated() {
            let node = Some(self.ports[i].data.node.0);
            let (horizon, taught) = self.congestion.taught(self.cfg.uncorroborated_hold, node);
            let learnt = match taught {
                Taught::Configured => "as configured",
                Taught::Episodes => "learnt from the ports' slow episodes that ended by themselves",
                Taught::Runs => "learnt from the congestion the ports' counters reported",
            };
            format!(
                "no hardware evidence: elevated beyond the persistence horizon ({persist} steady rounds its counters did not explain; the horizon is {horizon} rounds, {learnt})"
            )
        } else {
            format!(
                "corroborated by the port's own hardware in {sign_rounds} of its elevated rounds: {}",
                signs.names().join(", ")
            )
        };
        self.set(
            i,
            NodeState::QuarantineRecommended,
            format!("confirmed bad NPU port: {}; {basis}", e.describe()),
            ev,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window elevated by RTT or not, its RTT residual NaN when it had none to judge by.
    fn window(loss: bool, rtt: bool, rtt_residual: f64) -> Elevation {
        Elevation {
            loss,
            rtt,
            loss_ratio: 0.02,
            tail: 0.5,
            rtt_residual,
            rtt_z: rtt_residual / 0.05,
            rtt_spread: 0.05,
            steady: true,
            peers: 41,
        }
    }

    /// Held out, 22 confirmations said "pings NaN% slower": the suspect's re-pings
    /// decided it in a round a fabric event explained, when its window (pings with
    /// ports behind another switch in an event left out) had no RTT to judge it by and
    /// was elevated by nothing. The reason now
    /// gives the re-pings' own figures and says the window is within bounds.
    #[test]
    fn a_confirmation_never_shows_a_figure_nobody_measured() {
        // ln 2.2 is 120 % slower; the window had no answered ping.
        let r = confirmed_reason(&window(false, false, f64::NAN), 0.3, 2.2f64.ln());
        assert!(!r.contains("NaN") && !r.contains("inf"), "{r}");
        assert!(r.contains("lost 30.0%"), "{r}");
        assert!(r.contains("+120% against the round median"), "{r}");
        assert!(r.contains("no RTT to judge it by"), "{r}");
        // Re-pings that were all lost have no RTT either: none is said.
        let r = confirmed_reason(&window(false, false, f64::NAN), 1.0, f64::NAN);
        assert!(!r.contains("NaN") && !r.contains("against"), "{r}");
        // A window elevated by RTT says so with its own figure (ln 1.5: 50 % slower).
        let r = confirmed_reason(&window(false, true, 1.5f64.ln()), 0.0, f64::NAN);
        assert!(
            r.ends_with("pings 50% slower than the round median with 41 peers"),
            "{r}"
        );
        // Within bounds with an RTT: its sign is shown (ln 0.9: 10 % quicker).
        let r = window(false, false, 0.9f64.ln()).describe();
        assert!(r.contains("pings -10% against the round median"), "{r}");
    }
}
