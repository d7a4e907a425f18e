//! How long each quarantine recommendation took from its episode's onset: the daemon's
//! side of the remediation latency (`hcclwatch_verdict_onset_to_recommendation_seconds`).
//!
//! An episode begins at a member's first transition out of healthy or probation (to
//! suspect or confirmed) and ends at its recommendation, or without one when it goes back
//! to healthy or probation. A hard fault goes straight to the recommendation in the round
//! that first sees it: 0 s here (its way from the read to the round is the push's).
//! Members are named, so a re-numbering of the candidates does not mix them up.

use std::collections::HashMap;
use std::time::Instant;

use crate::snapshot::probe::{NodeState, QuarantineReason};

/// The open episodes, by member name.
#[derive(Debug, Default)]
pub struct Onsets(HashMap<String, Instant>);

impl Onsets {
    /// Notes `name`'s transition to `to` at `now`; for a recommendation, returns the
    /// seconds since its episode's onset.
    pub fn note(&mut self, name: &str, to: NodeState, now: Instant) -> Option<f64> {
        match to {
            NodeState::Healthy | NodeState::Probation => {
                self.0.remove(name);
                None
            }
            NodeState::Suspect | NodeState::Confirmed => {
                self.0.entry(name.to_string()).or_insert(now);
                None
            }
            NodeState::QuarantineRecommended => {
                let onset = self.0.remove(name).unwrap_or(now);
                Some(now.saturating_duration_since(onset).as_secs_f64())
            }
        }
    }
}

/// The quarantine reason a transition to quarantine_recommended stands for, by its words.
pub fn reason_of(words: &str) -> QuarantineReason {
    if words.starts_with("hard fault") {
        QuarantineReason::HardFault
    } else {
        QuarantineReason::Straggler
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_episode_is_timed_from_its_first_step_out_of_healthy() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut o = Onsets::default();
        // n2: suspect at 10 s, confirmed at 40 s (the onset stays), recommended at 130 s.
        assert_eq!(o.note("n2", NodeState::Suspect, at(10)), None);
        assert_eq!(o.note("n2", NodeState::Confirmed, at(40)), None);
        assert_eq!(
            o.note("n2", NodeState::QuarantineRecommended, at(130)),
            Some(120.0)
        );
        // n3: suspect, then healthy again: that episode ends unrecommended; the next one
        // starts at its own first step.
        o.note("n3", NodeState::Suspect, at(0));
        o.note("n3", NodeState::Healthy, at(30));
        o.note("n3", NodeState::Suspect, at(50));
        assert_eq!(
            o.note("n3", NodeState::QuarantineRecommended, at(80)),
            Some(30.0)
        );
        // A hard fault: straight from healthy to the recommendation.
        assert_eq!(
            o.note("n4", NodeState::QuarantineRecommended, at(5)),
            Some(0.0)
        );
        // Out of probation into a new episode.
        o.note("n2", NodeState::Probation, at(200));
        o.note("n2", NodeState::Suspect, at(210));
        assert_eq!(
            o.note("n2", NodeState::QuarantineRecommended, at(215)),
            Some(5.0)
        );
    }

    #[test]
    fn reasons_by_their_words() {
        assert_eq!(
            reason_of("hard fault: NPU health critical"),
            QuarantineReason::HardFault
        );
        assert_eq!(reason_of("confirmed slow"), QuarantineReason::Straggler);
    }
}
