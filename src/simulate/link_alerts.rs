//! What the network team is paged for: the shipped `HcclwatchLinkDegraded` rule played
//! over a run's link verdicts.
//!
//! Each probe group's engine judges its links alone: a spine that slows one pair in each
//! of twenty groups gives every group one slow pair with no companion, and so twenty link
//! verdicts (held out, most false link verdicts were such spines, in a few worlds).
//! No engine sees the other groups, but Prometheus sees the whole cluster, and the
//! shipped rules (`alerts/hcclwatch-rules.yml`) hold a link's alert back when at least
//! [`TOGETHER`] links of the cluster (a pair and its way back counted once) began within
//! [`WINDOW_SECONDS`] of its own start: links that begin together across groups are one
//! shared cause, not as many cables. A held-back link stays held back while its verdict
//! lasts; one that began apart keeps alerting through a later burst. The alert also needs
//! the verdict held for [`HOLD_SECONDS`] (its `for:`).
//!
//! The simulator plays the same rule over the verdict spans, round by round (a round for
//! an evaluation), so that the report can say what the alerts would have been; the rule
//! test `alerts/tests/network.yml` and this module's tests run the same timelines. The
//! engine's own verdicts are unchanged and still scored as the `link` class.

use std::collections::{BTreeMap, BTreeSet};

/// Links begun within the window (a pair and its way back counted once) that make each a
/// shared cause.
pub const TOGETHER: usize = 4;

/// The window within which links count as begun together (15 minutes).
pub const WINDOW_SECONDS: f64 = 900.0;

/// How long a verdict must hold before its alert fires: the alert's `for:` (5 minutes).
pub const HOLD_SECONDS: f64 = 300.0;

/// The rule in rounds of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// [`WINDOW_SECONDS`] in rounds.
    pub window: u64,
    /// [`HOLD_SECONDS`] in rounds.
    pub hold: u64,
    /// [`TOGETHER`].
    pub together: usize,
}

impl Rule {
    /// The shipped rule at `round_seconds` per round (a round for an evaluation; windows
    /// rounded up to whole rounds).
    pub fn shipped(round_seconds: f64) -> Rule {
        let rounds = |s: f64| (s / round_seconds.max(1e-9)).ceil().max(1.0) as u64;
        Rule {
            window: rounds(WINDOW_SECONDS),
            hold: rounds(HOLD_SECONDS),
            together: TOGETHER,
        }
    }
}

/// One span of rounds during which a link's alert fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkAlert {
    /// The link (source, destination), as its verdict names it.
    pub pair: (usize, usize),
    /// The first round of the verdict span the alert belongs to.
    pub verdict_start: u64,
    /// The first round it fires.
    pub start: u64,
    /// The first round after.
    pub end: u64,
}

/// The alert spans the rule gives over link verdict `spans` ((pair, first round, first
/// round after)) of a run of `rounds` rounds.
pub fn alerts(spans: &[((usize, usize), u64, u64)], rounds: u64, rule: Rule) -> Vec<LinkAlert> {
    let len = rounds as usize + 1;
    let mut held: BTreeMap<(usize, usize), Vec<bool>> = BTreeMap::new();
    for &(pair, s, e) in spans {
        let h = held.entry(pair).or_insert_with(|| vec![false; len]);
        for x in h
            .iter_mut()
            .take(e.min(rounds + 1) as usize)
            .skip(s as usize)
        {
            *x = true;
        }
    }
    let w = rule.window as usize;
    // A link held at `t` whose verdict was not held `w` rounds before (never, before
    // round `w`): it began within the window.
    let began = |h: &[bool], t: usize| h[t] && (t < w || !h[t - w]);
    let begun = begun_together(&held, len, w);
    let mut out = Vec::new();
    for (&pair, h) in &held {
        let mut latched = false;
        let mut run = 0u64;
        let mut firing: Option<u64> = None;
        for t in 0..len {
            latched = h[t] && (latched || (began(h, t) && begun[t] >= rule.together));
            let cond = h[t] && !latched;
            run = if cond { run + 1 } else { 0 };
            let fires = run > rule.hold;
            match (fires, firing) {
                (true, None) => firing = Some(t as u64),
                (false, Some(start)) => {
                    out.push(alert(pair, spans, start, t as u64));
                    firing = None;
                }
                _ => {}
            }
        }
        if let Some(start) = firing {
            out.push(alert(pair, spans, start, len as u64));
        }
    }
    out
}

/// Per round `t`, the links with a verdict at some round of `(t - w, t]` that had none at
/// `t - w`, a pair and its way back counted once: the rule's count of links begun
/// together.
fn begun_together(held: &BTreeMap<(usize, usize), Vec<bool>>, len: usize, w: usize) -> Vec<usize> {
    let mut begun: Vec<BTreeSet<(usize, usize)>> = vec![BTreeSet::new(); len];
    for (&(a, b), h) in held {
        // Held rounds within the window ending at `t`, kept as a running sum.
        let mut within = 0usize;
        for t in 0..len {
            within += usize::from(h[t]);
            if t >= w {
                within -= usize::from(h[t - w]);
            }
            let before = t >= w && h[t - w];
            if within > 0 && !before {
                begun[t].insert((a.min(b), a.max(b)));
            }
        }
    }
    begun.iter().map(BTreeSet::len).collect()
}

/// The alert span of `pair` from `start` to `end`, with the start of the verdict span
/// that holds it.
fn alert(
    pair: (usize, usize),
    spans: &[((usize, usize), u64, u64)],
    start: u64,
    end: u64,
) -> LinkAlert {
    let verdict_start = spans
        .iter()
        .filter(|(p, s, e)| *p == pair && *s <= start && start < *e)
        .map(|x| x.1)
        .next()
        .unwrap_or(start);
    LinkAlert {
        pair,
        verdict_start,
        start,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minutes as rounds: the tests run the rule at one round a minute, as the rule test
    /// evaluates it (`evaluation_interval: 1m`), so that both run the same timelines.
    const RULE: Rule = Rule {
        window: 15,
        hold: 5,
        together: 4,
    };

    #[test]
    fn the_shipped_rule_in_rounds() {
        assert_eq!(Rule::shipped(60.0), RULE);
        // 10 s rounds: 15 minutes are 90 rounds, 5 are 30.
        let r = Rule::shipped(10.0);
        assert_eq!((r.window, r.hold, r.together), (90, 30, 4));
        // 7 s rounds: rounded up.
        let r = Rule::shipped(7.0);
        assert_eq!((r.window, r.hold), (129, 43));
    }

    #[test]
    fn a_lone_link_fires_once_held_for_the_hold() {
        // Held from minute 2 to 19: fires from minute 7 (held at 2..=7, six evaluations,
        // the `for:` of five minutes passed) until its verdict ends.
        let a = alerts(&[((1, 2), 2, 20)], 30, RULE);
        assert_eq!(
            a,
            vec![LinkAlert {
                pair: (1, 2),
                verdict_start: 2,
                start: 7,
                end: 20
            }]
        );
        // Held for five minutes only: never fires.
        assert!(alerts(&[((1, 2), 2, 7)], 30, RULE).is_empty());
    }

    /// Links in as many places as `starts` (each its own pair), begun at `starts`, held
    /// to minute 60.
    fn places(starts: &[u64]) -> Vec<((usize, usize), u64, u64)> {
        starts
            .iter()
            .enumerate()
            .map(|(k, &s)| ((k * 10, k * 10 + 1), s, 60))
            .collect()
    }

    #[test]
    fn links_begun_together_are_held_back_while_they_last() {
        // Four begun at minutes 10 to 13: the fourth makes four begun within 15 minutes
        // before the first has held for five, and none ever fires.
        assert!(alerts(&places(&[10, 11, 12, 13]), 80, RULE).is_empty());
        // The fourth at minute 18: the first two have held for their five minutes by then
        // (at 15 and 17) and fire until the burst is counted at 18; none fires after.
        let a = alerts(&places(&[10, 12, 13, 18]), 80, RULE);
        let spans: Vec<_> = a.iter().map(|x| (x.pair, x.start, x.end)).collect();
        assert_eq!(spans, [((0, 1), 15, 18), ((10, 11), 17, 18)]);
        // Three only: every one fires five minutes after it began, to its end.
        let a = alerts(&places(&[10, 12, 13]), 80, RULE);
        let spans: Vec<_> = a.iter().map(|x| (x.pair.0, x.start, x.end)).collect();
        assert_eq!(spans, [(0, 15, 60), (10, 17, 60), (20, 18, 60)]);
    }

    #[test]
    fn a_pair_and_its_way_back_count_once() {
        // Link 1-2 both ways, 3→4 and 5→6: three links, four series; each fires.
        let mut spans = vec![((1, 2), 10, 60), ((2, 1), 10, 60), ((3, 4), 11, 60)];
        spans.push(((5, 6), 12, 60));
        let a = alerts(&spans, 80, RULE);
        let starts: Vec<_> = a.iter().map(|x| (x.pair, x.start)).collect();
        assert_eq!(
            starts,
            [((1, 2), 15), ((2, 1), 15), ((3, 4), 16), ((5, 6), 17)]
        );
        // A fourth link at minute 13 holds all five series back.
        spans.push(((7, 8), 13, 60));
        assert!(alerts(&spans, 80, RULE).is_empty());
    }

    #[test]
    fn a_link_begun_long_before_a_burst_keeps_alerting() {
        // One link held from minute 0; five others begin at minutes 40 to 44.
        let mut spans = vec![((100, 101), 0, 90)];
        spans.extend((0..5).map(|k| ((k, k + 50), 40 + k as u64, 90)));
        let a = alerts(&spans, 100, RULE);
        assert_eq!(
            a,
            vec![LinkAlert {
                pair: (100, 101),
                verdict_start: 0,
                start: 5,
                end: 90
            }]
        );
    }

    #[test]
    fn a_link_that_comes_back_after_the_window_starts_apart() {
        // A short verdict at minute 0 and the same link again at 20: the burst of minute
        // 20 to 24 (five links with it) holds it back; alone again at 50, it fires.
        let mut spans = vec![((7, 8), 0, 2), ((7, 8), 20, 30), ((7, 8), 50, 70)];
        spans.extend((0..4).map(|k| ((k, k + 50), 21 + k as u64, 30)));
        let a = alerts(&spans, 80, RULE);
        assert_eq!(
            a,
            vec![LinkAlert {
                pair: (7, 8),
                verdict_start: 50,
                start: 55,
                end: 70
            }]
        );
    }
}
