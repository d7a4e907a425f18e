//! Spine events on the device plane: a partial fabric event whose slow pings run between
//! ToRs, spread over every ToR pair, and spare the pings within ToRs.
//!
//! An NPU port's pings to a port behind another ToR leave through the ToR's uplinks and
//! cross one spine of several, chosen by the switches' ECMP hash; pings within a ToR turn
//! at the ToR. So a spine that delays packets slows a share of the pings between ToRs and
//! none within one, which moves no port's median (each port's peers are spread over the
//! spines) and no round median: the device engine sees it only as more slow pings between
//! ports nothing accuses than its base rate explains, a partial fabric event. Telling that
//! event's shape from a slow ToR, one ToR's uplinks, the link between two ToRs or a random
//! share of the paths is the host plane's question too, and the answer is the same
//! [`Shape`]: see [`crate::health::spine`] for its rules and thresholds.
//!
//! The event is *on* from a round with a partial fabric event until [`SPINE_QUIET_ROUNDS`]
//! rounds pass without one (the shape tallies every round in between, not only event
//! rounds: a round whose pings run mostly within ToRs is seldom an event under a spine,
//! which spares them). While the device fabric verdict holds, a shape that passes is a
//! spine verdict: for the network team, never a port's, a node's or a pair's (the fabric
//! verdict already keeps every port from escalating). The tally starts again when the
//! ToR numbers change or the port table is remapped, and is not in any wire form: a
//! restarted daemon tallies afresh.

use crate::health::spine::{SPINE_QUIET_ROUNDS, Shape, SpineVerdict};

/// The current device-plane dip's shape, and whether one is on.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct SpineTrack {
    /// Rounds since the last partial fabric event; `None` when no event is on.
    quiet: Option<usize>,
    /// Where the event's pings fell and which it slowed.
    shape: Shape,
    /// The ToR numbers the shape was counted under.
    tors: Vec<Option<u32>>,
}

impl SpineTrack {
    /// Starts a round with the ToR numbers `tors`: `event` (a partial fabric event this
    /// round) turns the tally on; after [`SPINE_QUIET_ROUNDS`] rounds without one it is off
    /// and dropped. New ToR numbers drop it too (its ToR pairs would be someone else's).
    pub fn round(&mut self, event: bool, tors: &[Option<u32>]) {
        if self.tors != tors {
            self.forget();
            self.tors = tors.to_vec();
        }
        self.quiet = match (event, self.quiet) {
            (true, _) => Some(0),
            (false, Some(q)) if q < SPINE_QUIET_ROUNDS => Some(q + 1),
            (false, _) => None,
        };
        if self.quiet.is_none() {
            self.shape = Shape::default();
            return;
        }
        self.shape.next_round(event);
    }

    /// Whether an event is on (the round's pings are to be tallied).
    pub fn on(&self) -> bool {
        self.quiet.is_some()
    }

    /// A ping of this round between ports on ToRs `places`, `slow` or not (ignored when no
    /// event is on).
    pub fn measure(&mut self, places: (Option<u32>, Option<u32>), slow: bool) {
        if self.on() {
            self.shape.measure(places, slow);
        }
    }

    /// The spine verdict the event's shape supports (none without one on), with `base`
    /// the share of pings slow on their own outside events.
    pub fn judge(&self, base: f64) -> Option<SpineVerdict> {
        self.quiet.and_then(|_| self.shape.judge(base))
    }

    /// Drops the tally (the port table or the ToR numbers changed).
    pub fn forget(&mut self) {
        self.quiet = None;
        self.shape = Shape::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four ToRs of eight nodes; one round of every ordered node pair, `slowed` saying
    /// which the event slowed.
    fn round(t: &mut SpineTrack, event: bool, slowed: impl Fn(usize, usize) -> bool) {
        let tors: Vec<Option<u32>> = (0..32).map(|n| Some((n / 8) as u32)).collect();
        t.round(event, &tors);
        for a in 0..32 {
            for b in (0..32).filter(|&b| b != a) {
                t.measure((tors[a], tors[b]), slowed(a, b));
            }
        }
    }

    /// One spine of four: a quarter of the node pairs between ToRs, by a hash.
    fn spine(a: usize, b: usize) -> bool {
        a / 8 != b / 8 && (a * 7 + b * 13 + a * b).is_multiple_of(4)
    }

    #[test]
    fn a_spine_shape_is_judged_while_on_and_dropped_after_the_quiet_rounds() {
        let mut t = SpineTrack::default();
        round(&mut t, false, spine);
        assert!(!t.on(), "no event, no tally");
        assert_eq!(t.judge(0.01), None);
        for _ in 0..3 {
            round(&mut t, true, spine);
        }
        let v = t
            .judge(0.01)
            .expect("a spine's shape after three event rounds");
        assert_eq!(v.tors, vec![0, 1, 2, 3]);
        assert_eq!(v.inner_share, 0.0);
        for _ in 0..SPINE_QUIET_ROUNDS {
            round(&mut t, false, |_, _| false);
        }
        assert!(t.on(), "still on within the quiet rounds");
        round(&mut t, false, |_, _| false);
        assert!(!t.on());
        assert_eq!(t.judge(0.01), None);
    }

    #[test]
    fn a_slow_tor_is_no_spine_and_new_tor_numbers_drop_the_tally() {
        let mut t = SpineTrack::default();
        // ToR 1 slow: its pairs within it and to every other ToR.
        for _ in 0..3 {
            round(&mut t, true, |a, b| a / 8 == 1 || b / 8 == 1);
        }
        assert_eq!(t.judge(0.01), None);
        let mut t = SpineTrack::default();
        for _ in 0..3 {
            round(&mut t, true, spine);
        }
        assert!(t.judge(0.01).is_some());
        // The same event under other ToR numbers starts again: nothing to judge yet.
        let other: Vec<Option<u32>> = (0..32).map(|n| Some((n % 4) as u32)).collect();
        t.round(false, &other);
        assert!(!t.on());
        assert_eq!(t.judge(0.01), None);
    }
}
