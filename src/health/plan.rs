//! The pure planning both the daemon (`probe/`) and the simulator run, so that the simulator
//! judges the thresholds on groups and re-pairings cut exactly as the daemons cut them:
//! how a fleet is cut into probe groups, which known-good peers re-pair with a suspect, and
//! the shipped cadence the engines' round-counted thresholds were chosen at.

use std::time::Duration;

use crate::snapshot::probe::NodeState;

/// The shipped `probe.interval` (the configuration's default; `probe::settings` checks
/// they agree). The host-plane thresholds count rounds (`exit_rounds`, `probation_rounds`,
/// `hard_hold_down`), so their times hold at this cadence; the simulator runs its
/// scenarios at it unless told otherwise.
pub const SHIPPED_PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// The shipped `device_probe.interval` (the configuration's default).
pub const SHIPPED_DEVICE_INTERVAL: Duration = Duration::from_secs(20);

/// Probe rounds per device-plane round: `device_probe.interval` in whole probe intervals,
/// rounded, at least one.
pub fn device_every(device: Duration, probe: Duration) -> u64 {
    let p = probe.as_secs_f64();
    if p <= 0.0 {
        return 1;
    }
    ((device.as_secs_f64() / p).round() as u64).max(1)
}

/// Probe rounds per device-plane round at the shipped intervals.
pub fn shipped_device_every() -> u64 {
    device_every(SHIPPED_DEVICE_INTERVAL, SHIPPED_PROBE_INTERVAL)
}

/// `0..len` cut into contiguous groups of balanced size, at most `max` each unless that
/// would leave a member alone (what every member computes for itself in
/// `probe::membership::probe_group`, and what the simulator runs).
pub fn balanced_groups(len: usize, max: usize) -> Vec<Vec<usize>> {
    let mut groups = len.div_ceil(max.max(2)).max(1);
    while groups > 1 && len / groups < 2 {
        groups -= 1;
    }
    let mut out = vec![Vec::new(); groups];
    for p in 0..len {
        out[p * groups / len].push(p);
    }
    out
}

/// The `k`-th of `len` candidates for entity `x` (`offset` turns the choice with the
/// round): spread over the candidates so that two suspects rarely share all their peers,
/// and the same on every member.
pub(crate) fn spread_pick(x: usize, k: usize, offset: usize, len: usize) -> usize {
    (x * 7 + k * 13 + offset) % len
}

/// Re-pairings asked among a suspect's own ToR's members (see [`confirm_pairs`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnTor<'a> {
    /// Each candidate's ToR (empty, or `None` for a node: unknown).
    pub tors: &'a [Option<u32>],
    /// The requested nodes whose peers are to share their ToR.
    pub nodes: &'a [usize],
    /// The engine's round count: the peers turn with it, so that the rounds of one
    /// episode meet different members of the ToR.
    pub round: u64,
}

/// Confirmation pairs in candidate indices: each requested suspect with `per` healthy
/// members of the current group (`present`), chosen deterministically so that every member
/// computes the same pairs. A suspect in `own.nodes` is re-paired with healthy members of
/// its own ToR only, turning with `own.round` (none when it has no such member): a pair
/// within one ToR crosses no uplink of the ToR and no spine, so a dip or a slow switch
/// beyond the ToR does not slow it (the engine asks so during a partial fabric event).
pub fn confirm_pairs(
    requests: &[usize],
    states: &[NodeState],
    present: &[bool],
    per: usize,
    own: OwnTor<'_>,
) -> Vec<(usize, usize)> {
    let n = states.len();
    let good: Vec<usize> = (0..n)
        .filter(|i| states[*i] == NodeState::Healthy && present.get(*i) == Some(&true))
        .collect();
    let tor = |i: usize| own.tors.get(i).copied().flatten();
    let mut out = Vec::new();
    for &x in requests.iter().filter(|x| present.get(**x) == Some(&true)) {
        if own.nodes.contains(&x) {
            let mates: Vec<usize> = good
                .iter()
                .copied()
                .filter(|p| *p != x && tor(x).is_some() && tor(*p) == tor(x))
                .collect();
            let len = mates.len();
            // Consecutive from the round's turn, which moves on by `per` a round: distinct
            // peers, as many as there are, and fresh ones each round while they last.
            let turn = (own.round % len.max(1) as u64) as usize * per % len.max(1);
            out.extend((0..per.min(len)).map(|k| (x, mates[(turn + k) % len])));
            continue;
        }
        let peers: Vec<usize> = good.iter().copied().filter(|p| *p != x).collect();
        for k in 0..per.min(peers.len()) {
            out.push((x, peers[spread_pick(x, k, 0, peers.len())]));
        }
        out.dedup();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn confirmation_pairs_avoid_suspects_and_left_out_members_and_are_deterministic() {
        let mut states = vec![NodeState::Healthy; 8];
        states[2] = NodeState::Suspect;
        states[5] = NodeState::Suspect;
        let all = vec![true; 8];
        let a = confirm_pairs(&[2, 5], &states, &all, 3, OwnTor::default());
        assert_eq!(
            a,
            confirm_pairs(&[2, 5], &states, &all, 3, OwnTor::default())
        );
        assert_eq!(a.len(), 6);
        for (x, p) in &a {
            assert!(*x == 2 || *x == 5);
            assert_eq!(states[*p], NodeState::Healthy);
        }
        // Node 7 is out of the group and node 5 too: neither pairs.
        let mut present = all.clone();
        present[7] = false;
        present[5] = false;
        let b = confirm_pairs(&[2, 5], &states, &present, 3, OwnTor::default());
        assert_eq!(b.len(), 3);
        assert!(
            b.iter().all(|(x, p)| *x == 2 && *p != 7 && *p != 5),
            "{b:?}"
        );
    }

    /// A request in `own.nodes` is re-paired with the healthy members of its own ToR
    /// only, distinct, and with others the next round (while there are others); a request
    /// not in it keeps the peers it always had; no ToR known, no own-ToR pair.
    #[test]
    fn own_tor_re_pairings_stay_in_the_tor_and_turn_with_the_round() {
        // ToR 0: nodes 0..6 (node 4 suspect), ToR 1: nodes 6..12.
        let mut states = vec![NodeState::Healthy; 12];
        states[1] = NodeState::Confirmed;
        states[4] = NodeState::Suspect;
        let tors: Vec<Option<u32>> = (0..12).map(|i| Some((i / 6) as u32)).collect();
        let all = vec![true; 12];
        let own = |round| OwnTor {
            tors: &tors,
            nodes: &[1],
            round,
        };
        let mates = [0, 2, 3, 5];
        let mut met = BTreeSet::new();
        for round in [40, 41] {
            let pairs = confirm_pairs(&[1, 7], &states, &all, 3, own(round));
            let of = |x: usize| -> Vec<usize> {
                pairs.iter().filter(|p| p.0 == x).map(|p| p.1).collect()
            };
            let peers = of(1);
            assert_eq!(peers.len(), 3, "{pairs:?}");
            assert!(peers.iter().all(|p| mates.contains(p)), "{peers:?}");
            assert_eq!(peers.iter().collect::<BTreeSet<_>>().len(), 3, "{peers:?}");
            met.extend(peers);
            // Node 7 is not asked within its ToR: the usual spread over the group, worked
            // out by hand: the healthy members but itself are [0, 2, 3, 5, 6, 8, 9, 10,
            // 11] (nine), and its k-th peer the one at (7·7 + 13·k) mod 9 = 4, 8, 3,
            // whichever the round: nodes 6 and 11 of its ToR, and node 5 of the other.
            assert_eq!(of(7), vec![6, 11, 5]);
        }
        assert_eq!(
            met.len(),
            mates.len(),
            "two rounds meet every mate: {met:?}"
        );
        let unknown = OwnTor {
            tors: &[],
            nodes: &[1],
            round: 40,
        };
        assert!(confirm_pairs(&[1], &states, &all, 3, unknown).is_empty());
    }

    /// Five members in groups of at most two: two groups of two and one would leave a
    /// member alone, so 3 + 2; four in groups of two: 2 + 2; one group when `max` covers all.
    #[test]
    fn groups_are_balanced_and_never_leave_a_member_alone() {
        assert_eq!(balanced_groups(5, 2), vec![vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(balanced_groups(4, 2), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(balanced_groups(3, 64), vec![vec![0, 1, 2]]);
        assert_eq!(balanced_groups(3, 2), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn the_device_plane_runs_on_whole_probe_rounds() {
        let s = Duration::from_secs;
        assert_eq!(device_every(s(30), s(10)), 3);
        assert_eq!(device_every(s(30), s(30)), 1);
        // 30 / 7 = 4.3: the nearest whole number of rounds.
        assert_eq!(device_every(s(30), s(7)), 4);
        assert_eq!(device_every(s(30), s(20)), 2);
        // Shorter than a round (refused by the config check): every round.
        assert_eq!(device_every(s(1), s(30)), 1);
        assert_eq!(device_every(s(30), Duration::ZERO), 1);
        // The shipped 20 s device plane on 10 s probe rounds.
        assert_eq!(shipped_device_every(), 2);
    }
}
