//! What a verdict rests on: the numbers recorded with every transition (one enum of keys
//! for both planes, so a key is spelt once; the exported and JSON names are
//! [`Key::as_str`]), and the two rules that say when evidence is enough to move an entity
//! beyond suspect whatever the thresholds say.

/// Distinct reporters, other than the accused (its node, on the device plane), whose own
/// re-measurements must each reproduce a slowness or loss before an entity is confirmed or
/// recommended, whatever `confirm_peers` says: no single member's reports can move another
/// node or another node's port beyond suspect.
pub const MIN_REPORTERS: usize = 2;

/// A slowness is *steady* when the residuals behind it scatter at most this many times the
/// round's robust spread: a component that is slow adds a constant and leaves the scatter
/// of healthy measurements; queueing behind other traffic, or an intermittent fault,
/// scatters them. A quarantine is recommended for steady slowness only.
pub const STEADY_RATIO: f64 = 2.0;

/// Whether `spread` (a robust spread of residuals) is steady against the round's spread.
pub(crate) fn steady(spread: f64, round_spread: f64) -> bool {
    spread <= STEADY_RATIO * round_spread
}

/// A slowness *moves as one* when, round by round, the node's sending and receiving
/// probes agree with each other: the median of their gap over the window is at most this
/// many times the round's robust spread (two healthy probes differ by about one spread).
/// A component whose speed varies (a clock, a thermal limit, a shared CPU) slows the
/// probes of one round alike and changes between rounds; queueing behind other traffic is
/// drawn afresh for each probe, since a queue drains in milliseconds and the two probes
/// cross different queues (the uplink's egress and ingress), so their gap scatters as
/// widely as the slowdown itself. Held out, a first form with 1.5 spreads found 2 fewer
/// ≥ 20 % stragglers than with 2 and made 3 more false quarantines (docs/detection.md).
pub const AGREEMENT_RATIO: f64 = 2.0;

/// Whether a node's per-round gaps between its sending and receiving probes (`gaps`, log
/// units; reordered in place) agree against the round's spread: at least half a window of
/// them (`min_rounds`), their median within [`AGREEMENT_RATIO`] spreads.
pub(crate) fn moves_as_one(gaps: &mut [f64], min_rounds: usize, round_spread: f64) -> bool {
    if gaps.len() < min_rounds.max(1) {
        return false;
    }
    crate::health::stats::median(gaps) <= AGREEMENT_RATIO * round_spread
}

/// One number behind a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// Host: window median of the node's log residual (its slower side).
    WindowMedianLogResidual,
    /// Host: window median of its robust z.
    WindowMedianZ,
    /// Host: robust spread of that side's residuals.
    WindowLogResidualSpread,
    /// Host: the smallest log residual of the first re-pairings.
    ConfirmationMinLogResidual,
    /// Host: re-pairings that confirmed.
    ConfirmationProbes,
    /// Host: the smallest log residual of the re-pairings before a quarantine.
    SecondConfirmationMinLogResidual,
    /// Host: steadily slow rounds in a row.
    SteadySlowRounds,
    /// Host: of those, rounds without congestion on the node's uplink.
    UncongestedSlowRounds,
    /// Host: the episode's slow rounds, steady or not, that its counters did not explain
    /// (what the hold of a straggler that varies round to round counts).
    UnexplainedSlowRounds,
    /// Host: the episode's slow rounds its counters did not explain in which its sending
    /// and receiving probes moved as one (what the persistence horizon of a straggler
    /// that varies round to round counts).
    AgreeingSlowRounds,
    /// Host: the hardware signs of the slow run, as their flags (0: none; see
    /// [`crate::health::hardware::Signs`]).
    HardwareSigns,
    /// Host: rounds a hard fault has been absent.
    RoundsWithoutHardFault,
    /// Host: the level (log units) of the ToR event the node was in that its re-pairings
    /// were judged beyond (its whole ToR slow at once, or its ToR's uplinks marked slow;
    /// left out without one): a re-pairing that crosses the event shows its slowdown too,
    /// so only what it shows beyond this level is the node's own.
    TorEventLogLevel,
    /// Device: loss ratio of the port's packets over its window.
    WindowLossRatio,
    /// Device: binomial tail of that loss under the fabric's loss rate.
    LossBinomialTail,
    /// Device: window median of the port's log RTT residual.
    WindowMedianLogRttResidual,
    /// Device: its robust z.
    WindowRttRobustZ,
    /// Device: robust spread of the window's RTT residuals.
    WindowRttResidualSpread,
    /// Device: distinct peers in the window.
    DistinctPeers,
    /// Device: loss ratio of the re-pings from known-good ports.
    ConfirmationLossRatio,
    /// Device: median log RTT residual of those re-pings.
    ConfirmationMedianLogRttResidual,
    /// Device: packets of those re-pings.
    ConfirmationPackets,
}

impl Key {
    /// The name in transitions (`/api/v1/state`, logs, the simulator's report).
    pub fn as_str(self) -> &'static str {
        match self {
            Key::WindowMedianLogResidual => "window_median_log_residual",
            Key::WindowMedianZ => "window_median_z",
            Key::WindowLogResidualSpread => "window_log_residual_spread",
            Key::ConfirmationMinLogResidual => "confirmation_min_log_residual",
            Key::ConfirmationProbes => "confirmation_probes",
            Key::SecondConfirmationMinLogResidual => "second_confirmation_min_log_residual",
            Key::SteadySlowRounds => "steady_slow_rounds",
            Key::UncongestedSlowRounds => "uncongested_slow_rounds",
            Key::UnexplainedSlowRounds => "unexplained_slow_rounds",
            Key::AgreeingSlowRounds => "agreeing_slow_rounds",
            Key::HardwareSigns => "hardware_signs",
            Key::RoundsWithoutHardFault => "rounds_without_hard_fault",
            Key::TorEventLogLevel => "tor_event_log_level",
            Key::WindowLossRatio => "window_loss_ratio",
            Key::LossBinomialTail => "loss_binomial_tail",
            Key::WindowMedianLogRttResidual => "window_median_log_rtt_residual",
            Key::WindowRttRobustZ => "window_rtt_robust_z",
            Key::WindowRttResidualSpread => "window_rtt_residual_spread",
            Key::DistinctPeers => "distinct_peers",
            Key::ConfirmationLossRatio => "confirmation_loss_ratio",
            Key::ConfirmationMedianLogRttResidual => "confirmation_median_log_rtt_residual",
            Key::ConfirmationPackets => "confirmation_packets",
        }
    }
}

/// The numbers behind one transition, in the order they were recorded.
///
/// Only finite numbers are kept: a figure that was not measured (the median RTT of a
/// window in which no ping was answered is NaN) is left out, as a failed read leaves out
/// its series, so the state API, the audit trail and the logs never show a value nobody
/// measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Evidence(Vec<(Key, f64)>);

impl Evidence {
    /// Evidence of these numbers (those not finite left out).
    pub fn of<const N: usize>(items: [(Key, f64); N]) -> Self {
        let mut e = Evidence(Vec::with_capacity(N));
        for (key, value) in items {
            e.push(key, value);
        }
        e
    }

    /// Adds a number, unless it is not finite (not measured).
    pub fn push(&mut self, key: Key, value: f64) {
        if value.is_finite() {
            self.0.push((key, value));
        }
    }

    /// The (name, value) pairs a transition carries.
    pub fn named(self) -> Vec<(String, f64)> {
        self.0
            .into_iter()
            .map(|(k, v)| (k.as_str().to_string(), v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Too few rounds never agree; a median gap within two spreads does, beyond it not
    /// (the median: one wild gap among five does not decide).
    #[test]
    fn a_slowness_moves_as_one_by_its_median_gap() {
        let spread = 0.01;
        assert!(!moves_as_one(&mut [0.0; 4], 5, spread));
        assert!(moves_as_one(&mut [0.0, 0.019, 0.5, 0.01, 0.015], 5, spread));
        assert!(!moves_as_one(
            &mut [0.0, 0.021, 0.5, 0.03, 0.025],
            5,
            spread
        ));
        assert!(!moves_as_one(&mut [], 0, spread));
    }

    /// A number that was not measured (NaN, or infinite from a ratio of nothing) is left
    /// out; the measured ones stay, in their order.
    #[test]
    fn evidence_keeps_only_measured_numbers() {
        let mut e = Evidence::of([
            (Key::WindowLossRatio, 0.25),
            (Key::WindowMedianLogRttResidual, f64::NAN),
            (Key::WindowRttRobustZ, f64::INFINITY),
        ]);
        e.push(Key::ConfirmationMedianLogRttResidual, f64::NAN);
        e.push(Key::ConfirmationPackets, 40.0);
        assert_eq!(
            e.named(),
            vec![
                ("window_loss_ratio".to_string(), 0.25),
                ("confirmation_packets".to_string(), 40.0),
            ]
        );
    }

    /// The names are part of the exported state and the simulator's report: each is the
    /// key's variant name in snake case, and no two keys share one.
    #[test]
    fn every_key_has_its_own_snake_case_name() {
        use Key::*;
        let all = [
            WindowMedianLogResidual,
            WindowMedianZ,
            WindowLogResidualSpread,
            ConfirmationMinLogResidual,
            ConfirmationProbes,
            SecondConfirmationMinLogResidual,
            SteadySlowRounds,
            UncongestedSlowRounds,
            UnexplainedSlowRounds,
            AgreeingSlowRounds,
            HardwareSigns,
            RoundsWithoutHardFault,
            TorEventLogLevel,
            WindowLossRatio,
            LossBinomialTail,
            WindowMedianLogRttResidual,
            WindowRttRobustZ,
            WindowRttResidualSpread,
            DistinctPeers,
            ConfirmationLossRatio,
            ConfirmationMedianLogRttResidual,
            ConfirmationPackets,
        ];
        let mut names = std::collections::BTreeSet::new();
        for k in all {
            let mut snake = String::new();
            for (i, c) in format!("{k:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            assert_eq!(k.as_str(), snake);
            assert!(names.insert(k.as_str()));
        }
        let e = Evidence::of([(DistinctPeers, 3.0)]);
        assert_eq!(e.named(), vec![("distinct_peers".to_string(), 3.0)]);
    }
}
