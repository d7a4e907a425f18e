//! The nodes' own congestion counters as the daemon reads them.
//!
//! The world knows which node's counters would show congestion in a round
//! ([`super::world::World::host_congested`]). The daemon does not read that truth: it reads
//! its counters at the start of a round, so its flag describes the round before (`lag`);
//! a counter sometimes misses congestion that is there (`miss`, per node-round) and
//! sometimes reports some that is not (`false_alarm`, per node-round). `[counters]` in a
//! scenario says how; its default (no lag, no misses, no false alarms) is the idealised
//! reading every scenario had before.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::draw::unit_hash;

/// `[counters]`: how the nodes' congestion counters are read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Counters {
    /// Rounds late: the flag the engine gets in round r is the reading of round r − lag
    /// (0: the round itself, idealised; 1: as the daemon reads them, at a round's start).
    pub lag: u64,
    /// Share of node-rounds whose counters miss the congestion they would show.
    pub miss: f64,
    /// Share of node-rounds whose counters report congestion with nothing behind it.
    pub false_alarm: f64,
    /// Share of node-rounds in which a node's interface shows a hardware sign with no
    /// slowness behind it (a stray corrupted frame).
    pub hardware_false: f64,
}

impl Counters {
    /// Whether this is the idealised reading (the default).
    pub fn is_ideal(&self) -> bool {
        *self == Counters::default()
    }
}

/// Salts of the order-free draws: misses and false alarms come from streams of their own.
const MISS_SALT: u64 = 0x6d69_7373_0000_0001;
const FALSE_ALARM_SALT: u64 = 0x6661_6c73_6500_0002;

/// One probe group's counter readings, kept for `lag` rounds.
#[derive(Debug, Clone, Default)]
pub struct Reader {
    late: VecDeque<BTreeSet<usize>>,
}

impl Reader {
    /// What the engine is told in round `r`: the true readings `raw` of `members`, with
    /// this round's misses and false alarms, as read `lag` rounds later.
    pub fn read(
        &mut self,
        c: &Counters,
        seed: u64,
        r: u64,
        members: &[usize],
        raw: BTreeSet<usize>,
    ) -> BTreeSet<usize> {
        if c.is_ideal() {
            return raw;
        }
        let mut now: BTreeSet<usize> = raw
            .into_iter()
            .filter(|&n| c.miss <= 0.0 || unit_hash(seed ^ MISS_SALT, r, n) >= c.miss)
            .collect();
        if c.false_alarm > 0.0 {
            now.extend(
                members
                    .iter()
                    .filter(|&&n| unit_hash(seed ^ FALSE_ALARM_SALT, r, n) < c.false_alarm),
            );
        }
        if c.lag == 0 {
            return now;
        }
        self.late.push_back(now);
        if self.late.len() as u64 > c.lag {
            self.late.pop_front().unwrap_or_default()
        } else {
            BTreeSet::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[usize]) -> BTreeSet<usize> {
        v.iter().copied().collect()
    }

    #[test]
    fn the_ideal_reading_is_the_truth_and_a_late_one_is_a_round_behind() {
        let mut ideal = Reader::default();
        let c = Counters::default();
        assert_eq!(ideal.read(&c, 1, 5, &[1, 2, 3], set(&[2])), set(&[2]));
        let late = Counters {
            lag: 1,
            ..Counters::default()
        };
        let mut r = Reader::default();
        assert_eq!(r.read(&late, 1, 1, &[1, 2, 3], set(&[2])), set(&[]));
        assert_eq!(r.read(&late, 1, 2, &[1, 2, 3], set(&[3])), set(&[2]));
        assert_eq!(r.read(&late, 1, 3, &[1, 2, 3], set(&[])), set(&[3]));
    }

    /// Over many node-rounds the misses and false alarms come at their rates (within 1 %
    /// of 100,000 node-rounds).
    #[test]
    fn misses_and_false_alarms_come_at_their_rates() {
        let c = Counters {
            lag: 0,
            miss: 0.3,
            false_alarm: 0.05,
            hardware_false: 0.0,
        };
        let members: Vec<usize> = (0..100).collect();
        let (mut kept, mut alarms) = (0, 0);
        let mut r = Reader::default();
        for round in 0..1000 {
            // Nodes 0..50 truly congested, 50..100 not.
            let got = r.read(&c, 9, round, &members, (0..50).collect());
            kept += got.iter().filter(|n| **n < 50).count();
            alarms += got.iter().filter(|n| **n >= 50).count();
        }
        let kept = kept as f64 / 50_000.0;
        let alarms = alarms as f64 / 50_000.0;
        // A missed node-round can still be flagged by a false alarm: 0.7 + 0.3 × 0.05.
        assert!((kept - 0.715).abs() < 0.01, "{kept}");
        assert!((alarms - 0.05).abs() < 0.01, "{alarms}");
    }
}
