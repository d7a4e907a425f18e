//! The persistence horizon, learnt from the congestion the group's own counters report
//! and from the slow episodes that ended by themselves.
//!
//! A straggler that no hardware sign corroborates is recommended only after it has been
//! steadily slow longer than congestion lasts: congestion its counters miss looks exactly
//! like a slow component until it ends. How long congestion lasts is the fleet's, not
//! ours: held out, uplink congestion episodes of 200 to 900 rounds went past the shipped
//! `uncorroborated_hold` (180 rounds) in the worlds that have them, and each became a
//! false cordon once nothing else held it back.
//!
//! The counters see some episodes and miss others of the same process, so the ones they
//! see tell how long the ones they miss last. [`CongestionHorizon`] measures every run of
//! rounds a node's counters report congestion (short gaps bridged), and the horizon is
//! the configured one or [`HORIZON_MARGIN`] times a long run of this group's, whichever
//! is longer, and at most [`HORIZON_CAP`] times the configured one. A group whose counters
//! never report a long run (or fewer than [`HORIZON_MIN_RUNS`]) keeps the configured
//! horizon.
//!
//! Where the counters are blind (an NPU port's pause-frame and CNP counters not read, a
//! NIC that exports none), they report nothing, and congestion would only ever show as
//! stragglers. So the episodes that ended by themselves are measured too
//! ([`CongestionHorizon::episode_ended`]): a member (node or port) slow with nothing to
//! corroborate it (no hardware sign) that went back within bounds on its own, its length
//! the slow rounds its counters did not explain. Whatever slowed it ended, so a straggler
//! that has lasted no longer may end too. A persistent straggler never ends, so it
//! teaches nothing; a transient fault that ends teaches caution, never haste. They are
//! kept apart from the counters' runs, and the long run is the longer of the two
//! sources' (each needing [`HORIZON_MIN_RUNS`]): pooled, many short episodes would lower
//! the quantile of a group whose counters report long runs, and so shorten its horizon.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use crate::snapshot::probe::Horizon;

/// Finished runs remembered, the newest kept: the horizon follows the fleet's congestion
/// as its traffic changes, and the memory stays bounded.
pub const HORIZON_RUNS: usize = 128;
/// Rounds without a report that still continue a node's run: a counter read now and
/// then misses a round of an episode that is still there.
pub const HORIZON_BRIDGE: u64 = 3;
/// Runs shorter than this are not remembered: the receiver of a flow that crossed a
/// congested uplink, or a busy moment, reports a round or a few, hundreds of times a
/// day, and counted they made every long run an outlier of the quantile (held out, a
/// group's last 128 runs were all under 40 rounds beside an episode of 300 under way).
pub const HORIZON_MIN_RUN: u64 = 30;
/// The horizon is this many times the long run: congestion lasts about as long whether
/// or not the counters see it, and the runs seen are only a sample of those to come.
pub const HORIZON_MARGIN: f64 = 1.5;
/// The learnt horizon is at most this many times the configured one: a group whose
/// counters report congestion for hours (a PFC storm, a counter misread as congestion)
/// holds a straggler nothing corroborates for that long at most, not for ever.
pub const HORIZON_CAP: usize = 8;
/// The long run is this quantile of the runs (the longest of fewer than twenty): one
/// node busy for a day among twenty runs or more does not hold every straggler of its
/// group for a day.
pub const HORIZON_QUANTILE: f64 = 0.95;
/// Runs needed before the horizon is learnt at all: one counter stuck at congested (a PFC
/// storm, a counter misread) is one run, and alone it sets nothing.
pub const HORIZON_MIN_RUNS: usize = 3;

/// What set a persistence horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taught {
    /// The configured one: nothing taught a longer one.
    Configured,
    /// The runs of congestion the counters reported.
    Runs,
    /// The slow episodes that ended by themselves.
    Episodes,
}

/// The wire form of a [`CongestionHorizon`]: the runs under way as (node, first round,
/// last round), the lengths of the runs that ended, and of the episodes that ended.
pub(crate) type HorizonWire = (Vec<(usize, u64, u64)>, VecDeque<u64>, VecDeque<u64>);

/// Remembers a length in `lengths` if it is at least [`HORIZON_MIN_RUN`], keeping the
/// newest [`HORIZON_RUNS`].
fn remember(lengths: &mut VecDeque<u64>, length: u64) {
    if length < HORIZON_MIN_RUN {
        return;
    }
    lengths.push_back(length);
    if lengths.len() > HORIZON_RUNS {
        lengths.pop_front();
    }
}

/// The [`HORIZON_QUANTILE`] of `lengths` (the longest of fewer than twenty), or `None`
/// with fewer than [`HORIZON_MIN_RUNS`].
fn quantile(mut lengths: Vec<u64>) -> Option<u64> {
    if lengths.len() < HORIZON_MIN_RUNS {
        return None;
    }
    lengths.sort_unstable();
    let rank = ((lengths.len() as f64) * HORIZON_QUANTILE).ceil() as usize;
    Some(lengths[rank.clamp(1, lengths.len()) - 1])
}

/// The runs of congestion the counters reported in one group: each node's run under way
/// (first and last round), and the lengths of the last [`HORIZON_RUNS`] that ended of at
/// least [`HORIZON_MIN_RUN`] rounds; and, apart, those of the slow episodes that ended by
/// themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CongestionHorizon {
    /// Per node, the run under way: its first and last reported round.
    pub open: BTreeMap<usize, (u64, u64)>,
    /// Lengths (rounds, first to last inclusive) of the runs that ended, oldest first.
    pub ended: VecDeque<u64>,
    /// Lengths (slow rounds nothing explained) of the last [`HORIZON_RUNS`] slow episodes
    /// of at least [`HORIZON_MIN_RUN`] that ended by themselves, oldest first.
    pub episodes: VecDeque<u64>,
}

impl CongestionHorizon {
    /// Round `round`: the nodes whose own counters reported congestion (a node named more
    /// than once is one report).
    pub fn observe(&mut self, round: u64, congested: &[usize]) {
        // Close the runs whose gap is over first (rounds without a report since the last,
        // this one included unless it reports): a node reported again after a longer gap
        // starts a new run.
        let reported: BTreeSet<usize> = congested.iter().copied().collect();
        let over: Vec<usize> = self
            .open
            .iter()
            .filter(|(i, (_, last))| {
                let missed = round
                    .saturating_sub(*last)
                    .saturating_sub(u64::from(reported.contains(i)));
                missed > HORIZON_BRIDGE
            })
            .map(|(i, _)| *i)
            .collect();
        for i in over {
            if let Some(run) = self.open.remove(&i) {
                self.end(run);
            }
        }
        for &i in congested {
            let run = self.open.entry(i).or_insert((round, round));
            run.1 = run.1.max(round);
        }
    }

    /// Remembers a slow episode that ended by itself after `rounds` slow rounds nothing
    /// explained or corroborated (a straggler back within bounds with no hardware sign,
    /// never recommended), apart from the counters' runs: whatever it was, it ended, so a
    /// straggler that has lasted no longer may end too. Congestion the counters miss shows
    /// here only.
    pub fn episode_ended(&mut self, rounds: u64) {
        remember(&mut self.episodes, rounds);
    }

    /// Remembers a run that ended, if it is long enough to count.
    fn end(&mut self, (first, last): (u64, u64)) {
        remember(&mut self.ended, last.saturating_sub(first) + 1);
    }

    /// The long run: the [`HORIZON_QUANTILE`] of the ended runs and those under way but
    /// `except`'s (each so far, to its last report: a run still going is at least that
    /// long), or of the episodes that ended by themselves, whichever is longer; `None`
    /// when neither source has [`HORIZON_MIN_RUNS`]. A node's own run under way is its own
    /// doing as much as the fleet's: counted, a node whose counters show congestion every
    /// other round would lengthen its own horizon for as long as they did. (Its own runs
    /// that ended count, as anyone's.) The engines read it through [`Self::taught`],
    /// which needs each source's apart; the tests read it whole.
    #[cfg(test)]
    pub fn long_run(&self, except: Option<usize>) -> Option<u64> {
        let (runs, episodes) = self.long_runs(except);
        runs.max(episodes)
    }

    /// The long run of each source: the counters' runs (those under way but `except`'s
    /// included) and the episodes that ended.
    fn long_runs(&self, except: Option<usize>) -> (Option<u64>, Option<u64>) {
        let mut runs: Vec<u64> = self.ended.iter().copied().collect();
        runs.extend(self.open_long(except));
        let episodes: Vec<u64> = self.episodes.iter().copied().collect();
        (quantile(runs), quantile(episodes))
    }

    /// The persistence horizon of node `node` (None: of one with no run under way):
    /// `floor` (the configured one), or [`HORIZON_MARGIN`] times the long run when that is
    /// longer, at most [`HORIZON_CAP`] times `floor`.
    pub fn horizon(&self, floor: usize, node: Option<usize>) -> usize {
        self.taught(floor, node).0
    }

    /// [`Self::horizon`], and what set it (what a reason names).
    pub fn taught(&self, floor: usize, node: Option<usize>) -> (usize, Taught) {
        let (runs, episodes) = self.long_runs(node);
        let learnt = runs
            .max(episodes)
            .map_or(0, |r| (r as f64 * HORIZON_MARGIN).ceil() as usize);
        let horizon = floor.max(learnt.min(floor.saturating_mul(HORIZON_CAP)));
        let taught = if horizon <= floor {
            Taught::Configured
        } else if episodes > runs {
            Taught::Episodes
        } else {
            Taught::Runs
        };
        (horizon, taught)
    }

    /// The horizon of a member with no run of its own under way (what most stragglers
    /// wait), over the configured `floor`.
    pub fn group(&self, floor: usize) -> Horizon {
        Horizon {
            rounds: self.horizon(floor, None),
            configured: floor,
            runs: self.ended.len() + self.open_long(None).count() + self.episodes.len(),
        }
    }

    /// The lengths of the runs under way but `except`'s that are long enough to count
    /// (each so far, to its last report).
    fn open_long(&self, except: Option<usize>) -> impl Iterator<Item = u64> + '_ {
        self.open
            .iter()
            .filter(move |(i, _)| Some(**i) != except)
            .map(|(_, (first, last))| last.saturating_sub(*first) + 1)
            .filter(|&length| length >= HORIZON_MIN_RUN)
    }

    /// The wire form: the runs under way as (node, first round, last round), the
    /// lengths of those that ended, and those of the episodes that ended by themselves.
    pub fn wire(&self) -> HorizonWire {
        let open = self
            .open
            .iter()
            .map(|(i, (first, last))| (*i, *first, *last))
            .collect();
        (open, self.ended.clone(), self.episodes.clone())
    }

    /// The runs of a [`CongestionHorizon::wire`] form from an engine over `n` nodes at round
    /// `round`; or the field and why no such engine could have written it (more than
    /// [`HORIZON_RUNS`] ended runs, one shorter than [`HORIZON_MIN_RUN`] or longer than the
    /// rounds so far; a run under way of a node out of range, twice, from round 0, ending
    /// before it begins or after `round`; the same for the episodes as for the ended runs).
    pub fn from_wire(
        (open, ended, episodes): HorizonWire,
        n: usize,
        round: u64,
    ) -> Result<Self, (&'static str, String)> {
        for (field, lengths) in [("congestion_ended", &ended), ("episodes_ended", &episodes)] {
            if lengths.len() > HORIZON_RUNS
                || lengths.iter().any(|&l| l < HORIZON_MIN_RUN || l > round)
            {
                return Err((
                    field,
                    format!(
                        "more than {HORIZON_RUNS} runs, or a run under {HORIZON_MIN_RUN} rounds or over {round}"
                    ),
                ));
            }
        }
        let mut runs = BTreeMap::new();
        for (i, first, last) in open {
            if i >= n || first == 0 || first > last || last > round || runs.contains_key(&i) {
                return Err((
                    "congestion_open",
                    format!(
                        "node {i}: a run from round {first} to {last} in {round} rounds of {n} nodes, or a second run of the node"
                    ),
                ));
            }
            runs.insert(i, (first, last));
        }
        Ok(Self {
            open: runs,
            ended,
            episodes,
        })
    }

    /// Carries the runs under way over to a new member list (`map[old]`: the old node's
    /// new index, `None`: gone); a gone node's run ends where its last report was. The
    /// ended lengths stay: they are the fleet's traffic, not a node's.
    pub fn remap(&mut self, map: &[Option<usize>]) {
        let open = std::mem::take(&mut self.open);
        for (i, run) in open {
            match map.get(i).copied().flatten() {
                Some(j) => {
                    self.open.insert(j, run);
                }
                None => self.end(run),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slow episode that ended by itself is remembered by its length: under
    /// [`HORIZON_MIN_RUN`] it is not, two teach nothing, three of 100 rounds set a horizon
    /// of 150 over a floor of 60 (as three reported runs of 100 rounds would). The two
    /// sources are not pooled: beside three reported runs of 200, two hundred episodes of 40
    /// leave the horizon at 300, the runs' (pooled, the quantile would be 40 and the
    /// horizon the floor), and only the last [`HORIZON_RUNS`] are kept.
    #[test]
    fn an_episode_that_ended_is_remembered_apart_from_the_runs() {
        let mut h = CongestionHorizon::default();
        h.episode_ended(0);
        h.episode_ended(HORIZON_MIN_RUN - 1);
        assert!(h.episodes.is_empty());
        for _ in 0..2 {
            h.episode_ended(100);
        }
        assert_eq!(h.horizon(60, None), 60, "two episodes teach nothing");
        h.episode_ended(100);
        assert_eq!(h.episodes, VecDeque::from([100, 100, 100]));
        assert!(h.ended.is_empty());
        assert_eq!(h.horizon(60, None), 150);
        assert_eq!(h.group(60).runs, 3);
        h.ended.extend([200, 200, 200]);
        for _ in 0..200 {
            h.episode_ended(40);
        }
        assert_eq!(h.horizon(60, None), 300);
        assert_eq!(h.episodes.len(), HORIZON_RUNS);
        assert_eq!(h.group(60).runs, 3 + HORIZON_RUNS);
    }

    /// Runs close after more than [`HORIZON_BRIDGE`] quiet rounds, a gap up to it does not
    /// end one, runs shorter than [`HORIZON_MIN_RUN`] are not counted, nothing is learnt
    /// from fewer than [`HORIZON_MIN_RUNS`], and the horizon is the margin over the long
    /// run, never under the floor nor over [`HORIZON_CAP`] times it.
    #[test]
    fn runs_are_measured_and_the_horizon_follows_the_long_ones() {
        let mut h = CongestionHorizon::default();
        assert_eq!(h.horizon(180, Some(0)), 180);
        // Nodes 1, 2 and 3 reported in rounds 10..=209, node 1 with a gap of three rounds
        // at 100..=102.
        for r in 10..=215 {
            let on = (10..=209).contains(&r);
            let nodes: &[usize] = match (on, (100..=102).contains(&r)) {
                (false, _) => &[],
                (true, true) => &[2, 3],
                (true, false) => &[1, 2, 3],
            };
            h.observe(r, nodes);
        }
        assert_eq!(h.ended, VecDeque::from([200, 200, 200]));
        assert_eq!(h.horizon(180, Some(0)), 300);
        assert_eq!(h.horizon(400, Some(0)), 400);
        assert_eq!(h.horizon(20, Some(0)), 20 * HORIZON_CAP);
        // Two runs are not enough, however long.
        h.ended.pop_back();
        assert_eq!((h.long_run(None), h.horizon(180, Some(0))), (None, 180));
        // A gap of four rounds (40..=43) splits a run in two: 0..=39 is counted, 44..=60
        // is too short; so is node 4's run under way of 21 rounds (80..=100). With two
        // more runs of 30, the long run is the longest of the three.
        let mut g = CongestionHorizon::default();
        for r in 0..=100 {
            let mut nodes = Vec::new();
            if !(40..=43).contains(&r) && r <= 60 {
                nodes.push(3);
            }
            if (80..=100).contains(&r) {
                nodes.push(4);
            }
            g.observe(r, &nodes);
        }
        assert_eq!(g.ended, VecDeque::from([40]));
        assert_eq!(g.open[&4], (80, 100));
        g.ended.extend([30, 30]);
        assert_eq!(g.long_run(None), Some(40));
    }

    /// The long run is the 95th percentile of many: one node congested for 5,000 rounds
    /// among forty runs of 50 does not set the horizon; a run under way counts at its
    /// length so far, except for its own node; only the newest [`HORIZON_RUNS`] ended
    /// runs are kept.
    #[test]
    fn one_long_run_among_many_does_not_set_the_horizon() {
        let mut h = CongestionHorizon::default();
        h.ended.extend(std::iter::repeat_n(50, 40));
        h.ended.push_back(5000);
        assert_eq!(h.long_run(None), Some(50));
        h.open.insert(7, (1000, 1400));
        h.open.insert(8, (1100, 1400));
        h.open.insert(9, (1200, 1400));
        // 44 runs: the 42nd shortest (ceil of 41.8) is the 301-round run under way; for
        // node 8 itself, 43 (the 41st, ceil of 40.85): the 201-round one.
        assert_eq!(h.long_run(None), Some(301));
        assert_eq!(h.long_run(Some(8)), Some(201));
        // Runs of 30, 31, 32, ... one after another: the first 50 are dropped.
        let mut g = CongestionHorizon::default();
        let (mut round, runs) = (0, HORIZON_RUNS as u64 + 50);
        for k in 0..runs {
            for _ in 0..HORIZON_MIN_RUN + k {
                round += 1;
                g.observe(round, &[7]);
            }
            round += 10;
        }
        g.observe(round + 10, &[]);
        assert_eq!(g.ended.len(), HORIZON_RUNS);
        assert_eq!(g.ended.front(), Some(&(HORIZON_MIN_RUN + 50)));
        assert_eq!(g.ended.back(), Some(&(HORIZON_MIN_RUN + runs - 1)));
    }

    /// A remap moves each run under way to its node's new index; a gone node's run ends
    /// (counted when long enough); the ended runs stay.
    #[test]
    fn a_remap_carries_the_runs_under_way() {
        let mut h = CongestionHorizon::default();
        h.ended.push_back(77);
        h.open.insert(0, (1, 40));
        h.open.insert(1, (1, 40));
        h.open.insert(2, (30, 40));
        h.remap(&[Some(5), None, None]);
        assert_eq!(h.open, BTreeMap::from([(5, (1, 40))]));
        assert_eq!(h.ended, VecDeque::from([77, 40]));
    }
}
