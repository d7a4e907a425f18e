//! Moving a port through its lifecycle by its elevation and its re-pings.

use super::confirm::{Confirmation, Reproduction};
use super::score::Elevation;
use super::{DeviceEngine, DeviceOutput};
use crate::health::evidence::Key;
use crate::health::lifecycle::PortIx;
use crate::snapshot::probe::NodeState;

impl DeviceEngine {
    /// Moves port `i`: elevated on its own (`elevated`) it becomes a suspect and is
    /// re-pinged; reproduced it is confirmed, and after `confirm_hold` lossy or steadily
    /// slow rounds in a row recommended for quarantine; `exit_rounds` clean rounds clear
    /// it (or move a recommendation to probation).
    ///
    /// A round a fabric (or ToR) event `explained` counts neither as clean nor as bad: a
    /// port keeps its verdict through the event (a recommendation does not lift during it
    /// and come back after, uncordoning and re-cordoning the node), and only a suspect's
    /// re-pings are still read (they may clear it, not confirm it).
    pub(super) fn advance(
        &mut self,
        i: PortIx,
        elevated: bool,
        explained: bool,
        e: &Elevation,
        confirm: Reproduction,
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
            // A quarantine waits for `confirm_hold` elevated rounds in a row that are lossy
            // or steadily slow: queueing behind other traffic scatters RTTs, a slow port
            // shifts them.
            counts.steady_round(e.steady, false);
        }
        let counts = self.ports[i].counts;
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
            NodeState::Confirmed if elevated && counts.steady >= cfg.confirm_hold => {
                self.set(
                    i,
                    NodeState::QuarantineRecommended,
                    format!("confirmed bad NPU port: {}", e.describe()),
                    e.evidence(),
                    out,
                );
            }
            NodeState::Confirmed if counts.clean >= cfg.exit_rounds => {
                self.set(
                    i,
                    NodeState::Healthy,
                    "back within bounds".into(),
                    e.evidence(),
                    out,
                );
            }
            NodeState::QuarantineRecommended if counts.clean >= cfg.exit_rounds => {
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
                    format!(
                        "re-pinged from known-good ports on other nodes: {}",
                        e.describe()
                    ),
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
}
