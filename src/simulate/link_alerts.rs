//! What the network team is paged for: the shipped `HcclwatchLinkDegraded` rule played
//! over a run's link verdicts.
//!
//! Each probe group's engine judges its links alone: a spine that slows one pair in each
//! of twenty groups gives every group one slow pair with no companion, and so twenty link
//! verdicts (held out, most false link verdicts were such spines, in a few worlds).
//! No engine sees the other groups, but Prometheus sees the whole cluster, and the
//! shipped rules (`alerts/hcclwatch-rules.yml`) count the links of the cluster whose
//! verdict *began* within the last [`WINDOW_SECONDS`]: seen in that window and never in
//! the one before it, so that a missed scrape or a verdict that lifted for a round does
//! not make an old link look new (a pair and its way back count once). A link whose
//! verdict began within that window while the count is at least [`TOGETHER`] is held back:
//! links that begin together across groups are one shared cause, not as many cables. A
//! held-back link stays held back while its verdict lasts (a gap shorter than
//! [`HOLD_SECONDS`] included); one that began apart keeps alerting through a later burst,
//! and one whose alert already fired is held back (resolved) when the burst begins within
//! its first window. The alert also needs the verdict held for [`HOLD_SECONDS`] (its
//! `for:`).
//!
//! The shipped rule also holds nothing back while Prometheus lacks 30 minutes of
//! scrapes (new, or after an outage); the model's Prometheus has scraped from before the
//! run, so it has no such condition.
//!
//! The simulator plays the same rule over the verdict spans, round by round (a round for
//! an evaluation), so that the report can say what the alerts would have been; the rule
//! test `alerts/tests/network.yml` and this module's tests run the same timelines. The
//! engine's own verdicts are unchanged and still scored as the `link` class.

use std::collections::BTreeMap;

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

/// One link's verdict, round by round: whether it was held, and how many of the rounds
/// before each it was held (a prefix sum, for the rule's windows).
struct Held {
    at: Vec<bool>,
    sum: Vec<u32>,
}

impl Held {
    fn new(at: Vec<bool>) -> Held {
        let mut sum = Vec::with_capacity(at.len() + 1);
        sum.push(0u32);
        for (k, &x) in at.iter().enumerate() {
            sum.push(sum[k] + u32::from(x));
        }
        Held { at, sum }
    }

    /// Whether the verdict was held at some round of `from..=to` (rounds before the run
    /// count as not held).
    fn any(&self, from: i64, to: i64) -> bool {
        let last = self.at.len() as i64 - 1;
        let (from, to) = (from.max(0), to.min(last));
        from <= to && self.sum[to as usize + 1] > self.sum[from as usize]
    }

    /// Seen within the window that ends at `t` (`t - w` excluded) and never within the
    /// window before it (`t - 2w ..= t - w`): the verdict began within the last window.
    /// A gap shorter than a window (a missed scrape, a verdict that lifted for a round)
    /// does not make an old verdict look new.
    fn begun(&self, t: i64, w: i64) -> bool {
        self.any(t - w + 1, t) && !self.any(t - 2 * w, t - w)
    }
}

/// The alert spans the rule gives over link verdict `spans` ((pair, first round, first
/// round after)) of a run of `rounds` rounds. Memory is a few bytes per round for each
/// link with a verdict (the simulator's runs are bounded in rounds by the scenario
/// check).
pub fn alerts(spans: &[((usize, usize), u64, u64)], rounds: u64, rule: Rule) -> Vec<LinkAlert> {
    if spans.is_empty() {
        return Vec::new();
    }
    let len = usize::try_from(rounds).map_or(usize::MAX, |r| r.saturating_add(1));
    let mut at: BTreeMap<(usize, usize), Vec<bool>> = BTreeMap::new();
    for &(pair, s, e) in spans {
        let h = at.entry(pair).or_insert_with(|| vec![false; len]);
        let (s, e) = (
            usize::try_from(s).unwrap_or(len),
            usize::try_from(e).unwrap_or(len),
        );
        for x in h.iter_mut().take(e).skip(s) {
            *x = true;
        }
    }
    let held: BTreeMap<(usize, usize), Held> =
        at.into_iter().map(|(k, h)| (k, Held::new(h))).collect();
    let w = rule.window as i64;
    let begun = begun_together(&held, len, w);
    let mut out = Vec::new();
    for (&pair, h) in &held {
        // The last round the flag was set.
        let mut last_latched: Option<usize> = None;
        let mut run = 0u64;
        let mut firing: Option<u64> = None;
        for (t, &together) in begun.iter().enumerate() {
            // Kept while the verdict is held and the flag was set within the last `hold`
            // rounds (the rule reads its own values of the last 5 minutes, so a gap
            // shorter than that does not drop it).
            let kept = last_latched.is_some_and(|l| t - l <= rule.hold as usize);
            let began = h.at[t] && !h.any(t as i64 - 2 * w, t as i64 - w);
            let latched = h.at[t] && (kept || (began && together >= rule.together));
            if latched {
                last_latched = Some(t);
            }
            let cond = h.at[t] && !latched;
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

/// Per round `t`, the links whose verdict began within the window ending at `t`
/// ([`Held::begun`]), a pair and its way back counted once: the rule's count of links
/// begun together.
fn begun_together(held: &BTreeMap<(usize, usize), Held>, len: usize, w: i64) -> Vec<usize> {
    let mut count = vec![0usize; len];
    for (&(a, b), h) in held {
        // A pair whose way back has a verdict too is counted at its lower direction's
        // entry, once for either direction begun.
        let back = held.get(&(b, a)).filter(|_| a != b);
        if back.is_some() && a > b {
            continue;
        }
        for (t, c) in count.iter_mut().enumerate() {
            let t = t as i64;
            if h.begun(t, w) || back.is_some_and(|x| x.begun(t, w)) {
                *c += 1;
            }
        }
    }
    count
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

    /// A span list's alerts as (pair, first round, first round after).
    fn fired(spans: &[((usize, usize), u64, u64)], rounds: u64) -> Vec<((usize, usize), u64, u64)> {
        alerts(spans, rounds, RULE)
            .iter()
            .map(|x| (x.pair, x.start, x.end))
            .collect()
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

    #[test]
    fn links_begun_together_are_held_back_while_they_last() {
        // Four begun at minutes 10 to 13: the fourth makes four begun within 15 minutes
        // before the first has held for five, and none ever fires.
        assert!(fired(&places(&[10, 11, 12, 13]), 80).is_empty());
        // The fourth at minute 18: the first two have held for their five minutes by then
        // (at 15 and 17) and fire until the burst is counted at 18; none fires after.
        let a = fired(&places(&[10, 12, 13, 18]), 80);
        assert_eq!(a, [((0, 1), 15, 18), ((10, 11), 17, 18)]);
        // Three only: every one fires five minutes after it began, to its end.
        let a = fired(&places(&[10, 12, 13]), 80);
        assert_eq!(
            a,
            [((0, 1), 15, 60), ((10, 11), 17, 60), ((20, 21), 18, 60)]
        );
    }

    #[test]
    fn the_window_is_fifteen_minutes_to_the_round() {
        // The fourth 14 minutes after the first: all four begun within the window ending
        // at minute 24, every one held back from then (the first three fired before).
        let a = fired(&places(&[10, 11, 12, 24]), 80);
        assert_eq!(
            a,
            [((0, 1), 15, 24), ((10, 11), 16, 24), ((20, 21), 17, 24)]
        );
        // 15 minutes after: the first has been seen for longer than the window, and three
        // are left; every one fires to its end.
        let a = fired(&places(&[10, 11, 12, 25]), 80);
        assert_eq!(
            a,
            [
                ((0, 1), 15, 60),
                ((10, 11), 16, 60),
                ((20, 21), 17, 60),
                ((30, 31), 30, 60)
            ]
        );
    }

    #[test]
    fn a_verdict_that_lifted_counts_as_begun_for_the_window() {
        // A verdict held for two minutes from minute 10, three more links from 20 to 22:
        // the short one was seen within the 15 minutes, so four began and the three are
        // held back (counted only while held, the three would fire from 25).
        let mut spans = vec![((1, 2), 10, 12)];
        spans.extend((0..3).map(|k| ((k + 10, k + 20), 20 + k as u64, 60)));
        assert!(fired(&spans, 80).is_empty());
        // From minute 26 the short one is 15 minutes back: three new ones fire.
        let mut later = vec![((1, 2), 10, 12)];
        later.extend((0..3).map(|k| ((k + 10, k + 20), 26 + k as u64, 60)));
        assert_eq!(
            fired(&later, 80),
            [((10, 20), 31, 60), ((11, 21), 32, 60), ((12, 22), 33, 60)]
        );
    }

    #[test]
    fn a_pair_and_its_way_back_count_once() {
        // Link 1-2 both ways, 3→4 and 5→6: three links, four series; each fires.
        let mut spans = vec![((1, 2), 10, 60), ((2, 1), 10, 60), ((3, 4), 11, 60)];
        spans.push(((5, 6), 12, 60));
        let a = fired(&spans, 80);
        let starts: Vec<_> = a.iter().map(|x| (x.0, x.1)).collect();
        assert_eq!(
            starts,
            [((1, 2), 15), ((2, 1), 15), ((3, 4), 16), ((5, 6), 17)]
        );
        // A fourth link at minute 13 holds all five series back.
        spans.push(((7, 8), 13, 60));
        assert!(fired(&spans, 80).is_empty());
    }

    #[test]
    fn a_link_begun_long_before_is_not_counted_and_keeps_alerting() {
        // One link held from minute 0; three others begin at minutes 40 to 42: three
        // begun, not four, and all four fire (the old one counted, all would be held).
        let mut spans = vec![((100, 101), 0, 90)];
        spans.extend((0..3).map(|k| ((k, k + 50), 40 + k as u64, 90)));
        let a = fired(&spans, 100);
        assert_eq!(
            a,
            [
                ((0, 50), 45, 90),
                ((1, 51), 46, 90),
                ((2, 52), 47, 90),
                ((100, 101), 5, 90)
            ]
        );
        // A fourth new one at 43: the four new ones are held back, the old one fires on.
        spans.push(((3, 53), 43, 90));
        assert_eq!(fired(&spans, 100), [((100, 101), 5, 90)]);
    }

    #[test]
    fn a_gap_does_not_make_old_links_look_new() {
        // Four links begun 16 minutes apart, each alerting, all missing from minute 60
        // for one minute (a missed scrape of every member): the gap resets each alert's
        // `for:` (it fires again from 66), but none looks begun at 75, when the verdicts
        // of 15 minutes before are in the gap.
        let spans: Vec<_> = [0u64, 16, 32, 48]
            .iter()
            .enumerate()
            .flat_map(|(k, &s)| [((k, k + 10), s, 60), ((k, k + 10), 61, 120)])
            .collect();
        let a = fired(&spans, 130);
        for (k, s) in [0u64, 16, 32, 48].iter().enumerate() {
            assert!(a.contains(&((k, k + 10), s + 5, 60)), "{a:?}");
            assert!(a.contains(&((k, k + 10), 66, 120)), "{a:?}");
        }
        assert_eq!(a.len(), 8, "{a:?}");
    }

    #[test]
    fn a_held_back_link_that_lifts_for_a_minute_stays_held_back() {
        // Four begun at 10 to 13 (held back), the first lifting at minute 30 for one
        // minute: back at 31 it is still held back (the flag was set a minute before);
        // without that memory it would not look begun (seen 15 to 30 minutes before) and
        // would fire from 36.
        let mut spans = places(&[10, 11, 12, 13]);
        spans[0] = ((0, 1), 10, 30);
        spans.push(((0, 1), 31, 60));
        assert!(fired(&spans, 80).is_empty());
    }

    #[test]
    fn a_link_that_comes_back_long_after_starts_apart() {
        // A short verdict at minute 0, the same link again at 40 with three others
        // (41 to 43): held back; alone again at 80, after 30 minutes without it, it
        // fires.
        let mut spans = vec![((7, 8), 0, 2), ((7, 8), 40, 50), ((7, 8), 80, 100)];
        spans.extend((0..3).map(|k| ((k, k + 50), 41 + k as u64, 50)));
        let a = alerts(&spans, 110, RULE);
        assert_eq!(
            a,
            vec![LinkAlert {
                pair: (7, 8),
                verdict_start: 80,
                start: 85,
                end: 100
            }]
        );
    }
}
