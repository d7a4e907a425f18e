//! The plan of a probe round: what it does beyond its fixed parts, agreed by majority.
//!
//! Members derive the same plan on their own while their engines saw the same rounds (the
//! confirmation peers follow deterministically from the engine's state), but one that just
//! joined (or re-joined) may have its own engine and round count, and a round whose members
//! run different exchanges deadlocks. So every member proposes a plan, the proposals are
//! all-gathered, and every member runs the one a strict majority proposed. No single member
//! (rank 0 included) can choose which pairs confirm a suspect: without a majority, the
//! round runs no extra pairs at all.

/// What a round does beyond its fixed parts (the barrier, latency all-reduce, ping-pong,
/// permutation exchange and all-gather every round has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Round number (sets the stride and whether the ring runs).
    pub round: u64,
    /// Latency-sized exchanges only (a strict majority of the members was over budget in
    /// the last round).
    pub limited: bool,
    /// Extra pairs in communicator ranks: the first `n_confirm` are confirmations, the
    /// rest link re-measurements.
    pub pairs: Vec<(usize, usize)>,
    /// How many of `pairs` are confirmations.
    pub n_confirm: usize,
    /// The device plane runs on rounds that are a multiple of this (1..=[`MAX_DEVICE_EVERY`]):
    /// agreed with the rest of the plan, so that members whose `device_probe.interval` or
    /// `probe.interval` differ (a rolling configuration change) still run its exchange
    /// together.
    pub device_every: u64,
}

/// Most probe rounds between device-plane rounds a plan may carry.
pub const MAX_DEVICE_EVERY: u64 = 3600;

/// Most extra pairs a plan carries (confirmations and link re-measurements).
const PLAN_PAIRS: usize = 64;

impl Plan {
    /// Words (u64) of the wire form: round, limited, pairs, confirmations, the pairs, and
    /// the device plane's spacing.
    pub const WORDS: usize = 5 + 2 * PLAN_PAIRS;

    /// The fixed-size wire form (rank 0 broadcasts it).
    pub fn encode(&self) -> Vec<u8> {
        let pairs = &self.pairs[..self.pairs.len().min(PLAN_PAIRS)];
        let mut w: Vec<u64> = vec![
            self.round,
            u64::from(self.limited),
            pairs.len() as u64,
            self.n_confirm.min(pairs.len()) as u64,
        ];
        w.extend(pairs.iter().flat_map(|(a, b)| [*a as u64, *b as u64]));
        w.resize(Self::WORDS - 1, 0);
        w.push(self.device_every.clamp(1, MAX_DEVICE_EVERY));
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The plan every member runs, from all members' proposals (in rank order): the one a
    /// strict majority proposed; otherwise none of the extra pairs, at the median round, and
    /// limited when a majority says so.
    pub fn agree(proposals: &[Plan]) -> Plan {
        let n = proposals.len();
        for p in proposals {
            if proposals.iter().filter(|q| *q == p).count() * 2 > n {
                return p.clone();
            }
        }
        let median = |f: fn(&Plan) -> u64| {
            let mut v: Vec<u64> = proposals.iter().map(f).collect();
            v.sort_unstable();
            v.get(n / 2).copied()
        };
        Plan {
            round: median(|p| p.round).unwrap_or(0),
            limited: proposals.iter().filter(|p| p.limited).count() * 2 > n,
            pairs: Vec::new(),
            n_confirm: 0,
            device_every: median(|p| p.device_every).unwrap_or(1),
        }
    }

    /// Decodes a member's plan; pairs naming a rank outside the group are dropped.
    pub fn decode(b: &[u8], size: usize) -> Plan {
        let w: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let at = |i: usize| w.get(i).copied().unwrap_or(0);
        let len = (at(2) as usize).min(PLAN_PAIRS);
        let n_confirm = (at(3) as usize).min(len);
        let mut pairs = Vec::new();
        let mut confirms = 0;
        for k in 0..len {
            let (a, b) = (at(4 + 2 * k) as usize, at(5 + 2 * k) as usize);
            if a < size && b < size && a != b {
                pairs.push((a, b));
                if k < n_confirm {
                    confirms += 1;
                }
            }
        }
        Plan {
            round: at(0),
            limited: at(1) != 0,
            pairs,
            n_confirm: confirms,
            device_every: at(Self::WORDS - 1).clamp(1, MAX_DEVICE_EVERY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_single_member_chooses_the_plan() {
        let honest = Plan {
            round: 10,
            limited: false,
            pairs: vec![(2, 0), (2, 3)],
            n_confirm: 2,
            device_every: 2,
        };
        // Rank 0 lies about the pairs (it wants itself and a colluder to confirm node 2)
        // and the round: the majority's plan wins.
        let liar = Plan {
            round: 99,
            limited: false,
            pairs: vec![(2, 0), (2, 1)],
            n_confirm: 2,
            device_every: 2,
        };
        let got = Plan::agree(&[liar.clone(), honest.clone(), honest.clone(), honest.clone()]);
        assert_eq!(got, honest);
        // No majority (2 against 2): no extra pairs at all, the median round.
        let split = Plan::agree(&[liar.clone(), liar, honest.clone(), honest.clone()]);
        assert!(split.pairs.is_empty() && split.n_confirm == 0);
        assert_eq!(split.round, 99);
        // Members that disagree on the device plane's spacing still agree on one.
        let mut a = honest.clone();
        a.device_every = 3;
        let mut b = honest.clone();
        b.device_every = 1;
        let odd = Plan::agree(&[a, b, honest.clone()]);
        assert_eq!(odd.device_every, 2);
    }

    #[test]
    fn a_plan_survives_its_encoding_and_drops_pairs_outside_the_group() {
        let p = Plan {
            round: 1 << 40,
            limited: true,
            pairs: vec![(0, 3), (2, 1), (1, 4)],
            n_confirm: 2,
            device_every: 2,
        };
        let b = p.encode();
        assert_eq!(b.len(), Plan::WORDS * 8);
        assert_eq!(Plan::decode(&b, 5), p);
        // In a group of four, (1, 4) names nobody; a confirmation stays a confirmation.
        let small = Plan::decode(&b, 4);
        assert_eq!(small.pairs, vec![(0, 3), (2, 1)]);
        assert_eq!(small.n_confirm, 2);
        let small = Plan::decode(&b, 3);
        assert_eq!((small.pairs.clone(), small.n_confirm), (vec![(2, 1)], 1));
        // Too many pairs are cut, garbage decodes to something bounded.
        let many = Plan {
            round: 1,
            limited: false,
            pairs: vec![(0, 1); 100],
            n_confirm: 100,
            device_every: 1,
        };
        let d = Plan::decode(&many.encode(), 2);
        assert_eq!((d.pairs.len(), d.n_confirm), (PLAN_PAIRS, PLAN_PAIRS));
        let junk = Plan::decode(&[0xff; 17], 8);
        assert!(junk.pairs.is_empty() && junk.n_confirm == 0);
    }
}
