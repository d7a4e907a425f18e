//! What a whole round says about the fabric, for both planes: the learned baseline of a
//! normal round (a fabric-wide slowdown moves the round median above it), the learned base
//! rate of measurements slow on their own (more of them than it explains is a *partial*
//! fabric event: a spine, a share of the links, which moves no median), and the crowd rule
//! (many entities at once are a shared cause, not that many independent faults).
//!
//! Each plane keeps one of each for its group today; judging every entity against the
//! peers that share its ToR or spine means keeping one per domain.

use std::collections::VecDeque;

use super::stats::upper_tail;

/// A round is a partial fabric event when its count of measurements slow on their own has
/// a binomial tail below this under the learned base rate.
pub const PARTIAL_ALPHA: f64 = 1e-3;
/// Rounds over which slow probes are also summed for link decisions: an event that lasts
/// (a congested spine) shows in the sum before it shows in any one round.
pub const PARTIAL_ROUNDS: usize = 3;
/// A round teaches the partial-fabric base rate only when its count of slow measurements
/// has a binomial tail above this under the rate learnt so far (it is comfortably normal).
pub const LEARN_ALPHA: f64 = 0.05;
/// Rounds with fewer measurements are never judged partial fabric events (too few to tell).
pub const PARTIAL_MIN_PROBES: usize = 8;
/// Floor on the learned share of measurements slow on their own.
pub const SLOW_RATE_FLOOR: f64 = 0.01;
/// Rounds (each of at least [`PARTIAL_MIN_PROBES`] measurements, not fabric-slow) pooled
/// to set the base rate before any round is judged: one round alone is a draw (a quiet
/// first round of a noisy group set the rate low, and its usual rounds were events), and
/// a fault or a dip under way at the start would be the rate.
pub const RATE_WARMUP_ROUNDS: usize = 10;
/// Nodes elevated at once (not counting those already recommended for quarantine) that
/// make a crowd: with independent faults and the congestion of the noise model, three at
/// once in one group happens in well under 0.1 % of rounds, so three or more (and at least
/// [`CROWD_SHARE`] of the group) are a shared cause, a ToR, a spine or the fabric.
pub const CROWD_MIN: usize = 3;
/// Share of the group elevated at once that makes a crowd (the detection design's "more
/// than 5 % of nodes flagged is a fabric incident").
pub const CROWD_SHARE: f64 = 0.05;

/// Whether `count` of `members` entities elevated at once are a crowd: at least `min` of
/// them and at least `share` of all (the host plane counts nodes with [`CROWD_MIN`] and
/// [`CROWD_SHARE`]; the device plane nodes with a node verdict, with its `tor_nodes` and a
/// tenth).
pub(crate) fn crowd(count: usize, members: usize, min: usize, share: f64) -> bool {
    count >= min && count as f64 >= share * members as f64
}

/// The round median of a normal round (log units), learned slowly outside fabric events.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Baseline(pub Option<f64>);

impl Baseline {
    /// Whether this round's median is more than `threshold` above the baseline (a
    /// fabric-slow round); outside one, the baseline moves `rate` of the way towards it
    /// (the first round sets it).
    pub fn judge(&mut self, median_log: f64, threshold: f64, rate: f64) -> bool {
        let slow = self.0.is_some_and(|b| median_log - b > threshold);
        if !slow {
            self.0 = Some(match self.0 {
                None => median_log,
                Some(b) => b + rate * (median_log - b),
            });
        }
        slow
    }
}

/// A learned normal level that accepts a lasting change: the [`Baseline`] and the run of
/// slow rounds in a row. After `horizon` of them the level is the new normal (a step that
/// stays is how things are now, not an event: the verdict it made ends, and the round
/// says the normal changed). The host engine's fabric normal carries its run in its wire
/// form (`baseline_run`); the others (a ToR's, the device plane's) are in none: a
/// restored engine counts the run again from zero, which only delays a new normal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Normal {
    /// The learned level.
    pub baseline: Baseline,
    /// Slow rounds in a row.
    pub run: usize,
}

/// What [`Normal::judge`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Judged {
    /// The level is more than the threshold above the normal.
    pub slow: bool,
    /// It had been for `horizon` rounds: this round it became the normal.
    pub renewed: bool,
}

impl Normal {
    /// Judges a round's `level` against the normal (learning it outside slow rounds, as
    /// [`Baseline::judge`] does at a 0.02 rate).
    pub fn judge(&mut self, level: f64, threshold: f64, horizon: usize) -> Judged {
        self.judge_at(level, threshold, horizon, 0.02)
    }

    /// [`Normal::judge`], learning at `rate`.
    pub fn judge_at(&mut self, level: f64, threshold: f64, horizon: usize, rate: f64) -> Judged {
        let slow = self.baseline.judge(level, threshold, rate);
        if !slow {
            self.run = 0;
            return Judged::default();
        }
        if self.run >= horizon {
            self.baseline.0 = Some(level);
            self.run = 0;
            return Judged {
                slow: false,
                renewed: true,
            };
        }
        self.run += 1;
        Judged {
            slow: true,
            renewed: false,
        }
    }

    /// The learned level, once there is one.
    pub fn level(&self) -> Option<f64> {
        self.baseline.0
    }
}

/// The share of a normal round's measurements that are slow on their own (between
/// entities nothing accuses), learned outside fabric events: the base rate a partial fabric
/// event is judged against.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BaseRate(pub Option<f64>);

impl BaseRate {
    /// The binomial tail of `slow` of `probes` under the base rate (floored at
    /// [`SLOW_RATE_FLOOR`], capped at one half); 1 below [`PARTIAL_MIN_PROBES`].
    fn tail(&self, slow: usize, probes: usize) -> f64 {
        if probes < PARTIAL_MIN_PROBES {
            return 1.0;
        }
        let p0 = self.0.unwrap_or(SLOW_RATE_FLOOR).max(SLOW_RATE_FLOOR);
        upper_tail(slow as u64, probes as u64, p0.min(0.5))
    }

    /// Whether `slow` of `probes` is more than the base rate explains (a tail below
    /// [`PARTIAL_ALPHA`]).
    pub fn exceeded(&self, slow: usize, probes: usize) -> bool {
        self.tail(slow, probes) < PARTIAL_ALPHA
    }

    /// Learns from a round that is no fabric event (`probes` > 0).
    pub fn learn(&mut self, slow: usize, probes: usize) {
        let share = slow as f64 / probes as f64;
        self.0 = Some(self.0.map_or(share, |x| x + 0.02 * (share - x)));
    }
}

/// What a round did to the run of event rounds ([`EventRun::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunStep {
    /// No event: the run, if there was one, ended. The round may teach the rate.
    Quiet,
    /// Too weak to tell: the run goes on without it. It shows the run's level, so it does
    /// not teach the rate.
    Skipped,
    /// An event, counted.
    Event,
    /// The event that completed the horizon: the rate was forgotten.
    Renewed,
}

/// The warm-up that sets the base rate before the gated updates of [`BaseRate::learn`]
/// move it. It is learnt again after a renewal: on the device plane, which tracks no dip,
/// once events have lasted a horizon ([`EventRun`]); on the host plane when its dip
/// becomes the normal ([`PartialFabric::relearn`]). Not in any wire form: a restored
/// engine without a rate warms up again.
///
/// Judged against the floor until some round was comfortably normal (the rule before), a
/// group whose healthy measurements are slow on their own more often than a few in a
/// hundred (heavy tails, spikes) was a partial event from its first round, and since event
/// rounds never teach the rate, for good: held out, one group of 128 was under a fabric
/// verdict from its third round to the end of its run, with no node confirmed and no link
/// watched.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RateLearning {
    /// (rounds, slow, measurements) pooled while there is no rate.
    warmup: (usize, usize, usize),
}

impl RateLearning {
    /// While `rate` is unknown: pools a round of `slow` of `probes` (one of at least
    /// [`PARTIAL_MIN_PROBES`], not `fabric_slow`), and sets the rate to the pooled share
    /// after [`RATE_WARMUP_ROUNDS`] such rounds. True while warming up: the round is
    /// judged no event.
    pub fn warming(
        &mut self,
        rate: &mut BaseRate,
        (slow, probes): (usize, usize),
        fabric_slow: bool,
    ) -> bool {
        if rate.0.is_some() {
            return false;
        }
        if probes >= PARTIAL_MIN_PROBES && !fabric_slow {
            let (rounds, s, n) = &mut self.warmup;
            *rounds += 1;
            *s += slow;
            *n += probes;
            if *rounds >= RATE_WARMUP_ROUNDS {
                rate.0 = Some(*s as f64 / *n as f64);
                self.warmup = (0, 0, 0);
            }
        }
        true
    }
}

/// The device plane's run of partial-event rounds, which renews the base rate once it has
/// lasted a horizon. Not in any wire form: a restored engine counts its event rounds from
/// zero, which only delays a renewal.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EventRun {
    /// Event rounds in the run.
    events: usize,
    /// (slow, measurements) pooled over those event rounds.
    event_share: (usize, usize),
    /// Rounds skipped in the run ([`EventRun::step`]).
    skipped: usize,
}

impl EventRun {
    /// Moves the run of event rounds on by a round of `slow` of `probes` (`event` or not):
    /// once `horizon` event rounds have come in a run the level they show is how things
    /// are now (the noise grew, or a dip lasted), as for the [`Normal`]: the rate is
    /// forgotten and warms up again from the next round ([`RunStep::Renewed`]).
    ///
    /// A round that is no event ends the run, unless it is too weak to tell and the run
    /// still has a skip left ([`RunStep::Skipped`]): fewer than [`PARTIAL_MIN_PROBES`]
    /// measurements (never judged), or fewer measurements than the run's rounds have on
    /// average (ports under suspicion leave theirs out) with a share nearer the run's own
    /// (pooled over its event rounds) than the rate. A run has one skip for every ten of
    /// its events. Such a round lacks the power to call the run's level an event: in the
    /// device engine's test of a lasting tenth of slow pings, rounds of 48 pings where 256
    /// are usual (4 of them slow) cut every run short, and the rate was never renewed.
    pub fn step(
        &mut self,
        rate: &mut BaseRate,
        event: bool,
        (slow, probes): (usize, usize),
        horizon: usize,
    ) -> RunStep {
        if !event {
            let skip = self.events > 0
                && (self.skipped + 1) * 10 <= self.events
                && (probes < PARTIAL_MIN_PROBES || self.weak_share(rate, (slow, probes)));
            if skip {
                self.skipped += 1;
                return RunStep::Skipped;
            }
            self.end_run();
            return RunStep::Quiet;
        }
        self.events += 1;
        self.event_share.0 += slow;
        self.event_share.1 += probes;
        if self.events < horizon.max(1) {
            return RunStep::Event;
        }
        self.end_run();
        *rate = BaseRate::default();
        RunStep::Renewed
    }

    /// Whether a judged round has fewer measurements than the run's rounds on average and
    /// a share of slow ones nearer the run's than the rate's.
    fn weak_share(&self, rate: &BaseRate, (slow, probes): (usize, usize)) -> bool {
        let (s, n) = self.event_share;
        if self.events == 0 || n == 0 || probes == 0 {
            return false;
        }
        let base = rate.0.unwrap_or(SLOW_RATE_FLOOR).max(SLOW_RATE_FLOOR);
        let midpoint = (base + s as f64 / n as f64) / 2.0;
        probes.saturating_mul(self.events) < n && slow as f64 / probes as f64 >= midpoint
    }

    /// Ends the current run of event rounds.
    fn end_run(&mut self) {
        self.events = 0;
        self.skipped = 0;
        self.event_share = (0, 0);
    }
}

/// The host plane's partial-fabric detector: the base rate, and the (slow, judged)
/// measurements of the last [`PARTIAL_ROUNDS`] rounds, so that an event that lasts shows in
/// their sum before it shows in any one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PartialFabric {
    /// The learned base rate.
    pub rate: BaseRate,
    /// (slow, judged) per recent round, oldest first.
    pub recent: VecDeque<(usize, usize)>,
    /// The warm-up and renewal of the rate.
    pub learning: RateLearning,
}

/// What [`PartialFabric::judge`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Partial {
    /// This round alone has more slow measurements than the base rate explains.
    pub now: bool,
    /// This round or the last few together do.
    pub recent: bool,
}

impl PartialFabric {
    /// Judges a round of `slow` of `probes` measurements slow on their own, and learns the
    /// base rate from it unless it is a partial event or `fabric_slow` (a round with no
    /// measurement is skipped). No round is an event while the rate warms up
    /// ([`RateLearning`]). Events that last are renewed by the dip they make
    /// ([`PartialFabric::relearn`]), not by a count here: a count of the same horizon fired
    /// a round before the dip's, so a dip slowing every round never became the normal.
    pub fn judge(&mut self, slow: usize, probes: usize, fabric_slow: bool) -> Partial {
        if probes == 0 {
            return Partial::default();
        }
        self.recent.push_back((slow, probes));
        while self.recent.len() > PARTIAL_ROUNDS {
            self.recent.pop_front();
        }
        let round = (slow, probes);
        if self.learning.warming(&mut self.rate, round, fabric_slow) {
            return Partial::default();
        }
        let now = self.rate.exceeded(slow, probes);
        let (s, n) = self
            .recent
            .iter()
            .fold((0, 0), |(s, n), (a, b)| (s + a, n + b));
        let recent = now || self.rate.exceeded(s, n);
        // Learn only from rounds the base rate comfortably explains: a lasting dip has
        // rounds just short of the event threshold, and learning from them would make the
        // dip the normal within minutes (its pairs then look like degraded links).
        if !now && !fabric_slow && self.rate.tail(slow, probes) > LEARN_ALPHA {
            self.rate.learn(slow, probes);
        }
        Partial { now, recent }
    }

    /// Learns the rate again, from the next round on, over the warm-up: called when a dip
    /// that lasted `new_normal_rounds` became the normal. Its pairs then leave the tally,
    /// and the rest are judged against what they show now (a dip of noise, where any pair
    /// may be slow on its own more often than before, leaves them all).
    pub fn relearn(&mut self) {
        self.rate = BaseRate::default();
        self.learning = RateLearning::default();
        self.recent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three of 40 at a 1 % base rate: P(X ≥ 3) for Bin(40, 0.01) ≈ 0.0075, not enough;
    /// six: ≈ 2.9e-6, a partial event.
    #[test]
    fn a_partial_event_is_judged_against_the_base_rate() {
        let rate = BaseRate(None);
        assert!(!rate.exceeded(3, 40));
        assert!(rate.exceeded(6, 40));
        // Too few measurements are never judged.
        assert!(!rate.exceeded(7, 7));
    }

    /// A slow round summed with the ones before it. Ten rounds of 1 of 40 set the base
    /// rate, 2.5 %. Then 4 of 40 is no event (P(X ≥ 4) for Bin(40, 0.025) ≈ 0.017) but
    /// not comfortably normal either (below `LEARN_ALPHA`): it teaches nothing. With the
    /// rounds before it, two such rounds are still explained (9 of 120, P ≈ 0.0033); three
    /// of them together are not (12 of 120, P ≈ 5.2e-5).
    #[test]
    fn a_lasting_event_shows_in_the_recent_sum() {
        let mut p = PartialFabric::default();
        for _ in 0..RATE_WARMUP_ROUNDS {
            assert_eq!(p.judge(1, 40, false), Partial::default());
        }
        assert_eq!(p.rate, BaseRate(Some(0.025)));
        assert_eq!(p.judge(4, 40, false), Partial::default());
        assert_eq!(p.rate, BaseRate(Some(0.025)), "a round below LEARN_ALPHA");
        assert_eq!(p.judge(4, 40, false), Partial::default());
        let third = p.judge(4, 40, false);
        assert!(!third.now && third.recent);
    }

    /// A group whose healthy probes are slow on their own in about 20 of 128 a round (heavy
    /// tails, spikes). The first ten rounds of at least `PARTIAL_MIN_PROBES` that are not
    /// fabric-slow set the rate to their pooled share, however low the first of them is
    /// (8 of 128, a one-in-a-thousand draw); no round of the same world (16 to 24 of 128)
    /// is an event after them, while 50 of 128 is (P ≈ 1.3e-10 at 20/128). Judged against
    /// the floor instead, every one of those rounds would be an event (20 of 128 at 1 %:
    /// P ≈ 4e-18), and an event round never teaches the rate.
    #[test]
    fn the_first_rounds_set_the_base_rate() {
        assert!(BaseRate(None).exceeded(20, 128), "the floor alone");
        let mut p = PartialFabric::default();
        // Too few measurements, and a fabric-slow round, do not count.
        assert_eq!(
            p.judge(3, PARTIAL_MIN_PROBES - 1, false),
            Partial::default()
        );
        assert_eq!(p.judge(60, 128, true), Partial::default());
        let warmup = [8, 20, 22, 19, 21, 20, 23, 18, 24, 20];
        for slow in warmup {
            assert_eq!(p.judge(slow, 128, false), Partial::default());
        }
        let pooled = warmup.iter().sum::<usize>() as f64 / (128 * warmup.len()) as f64;
        assert_eq!(p.rate, BaseRate(Some(pooled)));
        for slow in (0..100).map(|i| 16 + i % 9) {
            let got = p.judge(slow, 128, false);
            assert!(!got.now && !got.recent, "{slow} of 128");
        }
        let rate = p.rate.0.expect("learned");
        assert!((0.12..0.20).contains(&rate), "{rate}");
        assert!(p.judge(50, 128, false).now);
    }

    /// The device plane's renewal: a rate learnt at 1 of 40 a round, then 10 of 40 for good
    /// (the noise grew): every round is an event (P ≈ 4e-8 at 2.5 %) until `horizon` of
    /// them have come in a run; the rate is then forgotten and warms up again. A round that
    /// is no event at the old level ends the run; a weak one at the run's level does not.
    #[test]
    fn events_that_last_the_horizon_renew_the_rate() {
        let horizon = 30;
        let (mut rate, mut learning) = (BaseRate::default(), RateLearning::default());
        for _ in 0..RATE_WARMUP_ROUNDS {
            assert!(learning.warming(&mut rate, (1, 40), false));
        }
        assert_eq!(rate, BaseRate(Some(0.025)));
        assert!(!learning.warming(&mut rate, (1, 40), false), "warm");
        let mut run = EventRun::default();
        let round = |run: &mut EventRun, rate: &mut BaseRate, (slow, probes)| {
            let now = rate.exceeded(slow, probes);
            run.step(rate, now, (slow, probes), horizon)
        };
        for _ in 0..horizon - 1 {
            assert_eq!(round(&mut run, &mut rate, (10, 40)), RunStep::Event);
        }
        assert_eq!(round(&mut run, &mut rate, (1, 40)), RunStep::Quiet);
        assert_eq!(run, EventRun::default(), "the run ended");
        for _ in 0..horizon - 1 {
            assert_eq!(round(&mut run, &mut rate, (10, 40)), RunStep::Event);
        }
        // A round of few measurements, too few to call the run's level an event (2 of 8,
        // the run's 25 %), is skipped; without that rule the next round would not renew.
        // 1 of 8 (12.5 %) is nearer the old 2.5 % than the run's 25 % (the midpoint is
        // 13.75 %), and 6 of 40 has as many measurements as the run's rounds: either
        // ends the run (checked on copies).
        assert!(!rate.exceeded(2, 8) && !rate.exceeded(1, 8) && !rate.exceeded(5, 40));
        for quiet in [(1, 8), (5, 40)] {
            let mut ended = run.clone();
            assert_eq!(round(&mut ended, &mut rate.clone(), quiet), RunStep::Quiet);
            assert_eq!(ended, EventRun::default(), "{quiet:?} ended the run");
        }
        assert_eq!(round(&mut run, &mut rate, (2, 8)), RunStep::Skipped);
        // So is a round too small to judge at all (fewer than 8): the run has a skip left.
        assert_eq!(round(&mut run, &mut rate, (0, 4)), RunStep::Skipped);
        assert_eq!(round(&mut run, &mut rate, (10, 40)), RunStep::Renewed);
        assert_eq!(rate, BaseRate(None), "renewed across the skipped rounds");
        for _ in 0..RATE_WARMUP_ROUNDS {
            assert!(learning.warming(&mut rate, (1, 40), false));
        }
        for _ in 0..horizon - 1 {
            assert_eq!(round(&mut run, &mut rate, (10, 40)), RunStep::Event);
        }
        assert_eq!(rate, BaseRate(Some(0.025)), "not yet");
        assert_eq!(round(&mut run, &mut rate, (10, 40)), RunStep::Renewed);
        assert_eq!(rate, BaseRate(None), "renewed");
        for _ in 0..RATE_WARMUP_ROUNDS {
            assert!(learning.warming(&mut rate, (10, 40), false));
        }
        assert_eq!(rate, BaseRate(Some(0.25)));
        assert!(!rate.exceeded(10, 40));
    }

    /// A run has one skip for every ten of its events: none after 9 events, one after 10,
    /// two after 20; the round past the skips ends the run. Unjudged rounds (fewer than 8
    /// measurements) use the same skips, so a long gap ends a run.
    #[test]
    fn a_run_skips_one_weak_round_for_every_ten_events() {
        let rate = BaseRate(Some(0.025));
        let after = |events: usize, skips: usize, round: (usize, usize)| {
            let (mut rate, mut run) = (rate, EventRun::default());
            for _ in 0..events {
                assert_eq!(run.step(&mut rate, true, (10, 40), 100), RunStep::Event);
            }
            let steps: Vec<RunStep> = (0..=skips)
                .map(|_| run.step(&mut rate, false, round, 100))
                .collect();
            (steps, run)
        };
        for (events, skips) in [(9, 0), (10, 1), (19, 1), (20, 2)] {
            for round in [(2, 8), (0, 0)] {
                let (steps, run) = after(events, skips, round);
                let mut want = vec![RunStep::Skipped; skips];
                want.push(RunStep::Quiet);
                assert_eq!(steps, want, "{events} events, {round:?}");
                assert_eq!(run, EventRun::default(), "{events} events: ended");
            }
        }
    }

    /// The host plane learns the rate again when its dip becomes the normal: the rate, its
    /// warm-up and the recent sum start afresh, and the next ten rounds set the new level.
    #[test]
    fn a_relearnt_rate_warms_up_again() {
        let mut p = PartialFabric::default();
        for _ in 0..RATE_WARMUP_ROUNDS {
            p.judge(1, 40, false);
        }
        assert!(p.judge(10, 40, false).now);
        p.relearn();
        assert_eq!((p.rate, p.recent.len()), (BaseRate(None), 0));
        for _ in 0..RATE_WARMUP_ROUNDS {
            assert_eq!(p.judge(10, 40, false), Partial::default());
        }
        assert_eq!(p.rate, BaseRate(Some(0.25)));
        assert_eq!(p.judge(10, 40, false), Partial::default());
    }

    /// A step of 0.3 that stays: slow for `horizon` rounds, then the normal; the first
    /// round after is judged against the step.
    #[test]
    fn a_lasting_step_becomes_the_normal_after_the_horizon() {
        let mut n = Normal::default();
        assert_eq!(n.judge(1.0, 0.1, 4), Judged::default());
        let got: Vec<Judged> = (0..6).map(|_| n.judge(1.3, 0.1, 4)).collect();
        let slow = Judged {
            slow: true,
            renewed: false,
        };
        assert_eq!(got[..4], [slow; 4]);
        assert_eq!(
            got[4],
            Judged {
                slow: false,
                renewed: true
            }
        );
        assert_eq!(got[5], Judged::default());
        assert_eq!(n.level(), Some(1.3));
        // A dip back below the threshold starts the run again.
        let mut m = Normal::default();
        m.judge(1.0, 0.1, 2);
        m.judge(1.3, 0.1, 2);
        m.judge(1.0, 0.1, 2);
        assert!(m.judge(1.3, 0.1, 2).slow && m.judge(1.3, 0.1, 2).slow);
        assert!(m.judge(1.3, 0.1, 2).renewed);
    }

    #[test]
    fn the_baseline_learns_outside_slow_rounds_only() {
        let mut b = Baseline::default();
        assert!(!b.judge(1.0, 0.1, 0.5));
        assert_eq!(b, Baseline(Some(1.0)));
        assert!(b.judge(1.2, 0.1, 0.5));
        assert_eq!(b, Baseline(Some(1.0)));
        assert!(!b.judge(1.05, 0.1, 0.5));
        assert_eq!(b, Baseline(Some(1.025)));
    }

    /// Host plane: 3 of 16 (at least 3 and 5 %); 3 of 100 is not 5 %. Device plane: 3 of
    /// 8 nodes with `tor_nodes` 3 and a tenth.
    #[test]
    fn a_crowd_needs_both_a_count_and_a_share() {
        assert!(crowd(3, 16, CROWD_MIN, CROWD_SHARE));
        assert!(!crowd(2, 16, CROWD_MIN, CROWD_SHARE));
        assert!(!crowd(3, 100, CROWD_MIN, CROWD_SHARE));
        assert!(crowd(5, 100, CROWD_MIN, CROWD_SHARE));
        assert!(crowd(3, 8, 3, 0.1));
    }
}
