//! Link verdicts when several pairs are slow at once: a shared cause (a spine, a dip the
//! partial-fabric tally misses) is no link's, while one degraded link, its way back, or
//! two of them in one group still are.

use std::collections::BTreeSet;

use super::tests::round;
use super::*;
use crate::health::pairs::Pair;

/// A 16-node group whose permutation probes cycle through strides 1–15 (every pair, both
/// ways); from round 20 the ordered pairs in `slow` take 1.5 times as long, every time
/// they are measured (their permutation probes and the re-measurements the engine asks
/// for, at most [`LINK_REMEASURES`] a round as the daemon makes, each both ways).
/// Returns every pair that had a link verdict, whether any node left `Healthy`, the most
/// slow observations of its own any pair of `slow` had gathered at the end, and every
/// pair whose verdict was withheld.
fn run(slow: &[(usize, usize)], rounds: usize) -> (Vec<Pair>, bool, usize, BTreeSet<Pair>) {
    let n = 16;
    let seconds = |r: usize, a: usize, b: usize| {
        let base = 1.0 + (a % 2) as f64 * 0.003;
        if r >= 20 && slow.contains(&(a, b)) {
            base * 1.5
        } else {
            base
        }
    };
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let (mut requests, mut verdicts, mut moved) = (Vec::<(usize, usize)>::new(), Vec::new(), false);
    let mut withheld = BTreeSet::new();
    for r in 0..rounds {
        let mut input = round(n, 1 + r % 15, &[], |_| 0.0);
        for p in &mut input.probes {
            p.seconds = seconds(r, p.src, p.dst);
        }
        // A re-measurement is one exchange both ways, timed by its slower end.
        input.link_probes = requests
            .iter()
            .take(LINK_REMEASURES)
            .map(|&(a, b)| Probe {
                src: a,
                dst: b,
                seconds: seconds(r, a, b).max(seconds(r, b, a)),
            })
            .collect();
        let out = e.step(&input);
        for v in out.link_verdicts {
            if !verdicts.contains(&v) {
                verdicts.push(v);
            }
        }
        moved |= e.states().iter().any(|s| *s != NodeState::Healthy);
        withheld.extend(out.link_withheld);
        requests = out.link_requests;
    }
    let most = slow
        .iter()
        .filter_map(|k| e.links.watched.get(k).map(VecDeque::len))
        .max()
        .unwrap_or(0);
    (verdicts, moved, most, withheld)
}

/// Four pairs with no end in common, one per stride of the cycle (so that no round has
/// more than one slow permutation probe, too few for the partial-fabric tally): a spine
/// that a small share of the pairs crosses looks like this.
const SPINE: [(usize, usize); 4] = [(0, 1), (2, 4), (5, 8), (9, 13)];

#[test]
fn four_pairs_slow_at_once_make_no_link_verdict() {
    let (verdicts, moved, most, withheld) = run(&SPINE, 120);
    assert!(verdicts.is_empty(), "{verdicts:?}");
    assert!(!moved, "no node is judged on a spine's pairs");
    // They were candidates all the same: the rule held them back, not the tally.
    let need = HealthConfig::default().link_observations;
    assert!(most >= need, "{most} observations, {need} needed");
    // And the round says so, for each of them.
    assert_eq!(withheld, SPINE.into_iter().collect(), "withheld");
}

/// Four links slow at once, two of them both ways: more pairs to re-measure than a
/// round's re-measurements. The two links both ways took all four, while the other two,
/// seen slow once and measured again only a turn later (15 rounds), did not count as slow
/// together with them yet: the two were verdicts before the shared cause showed (fails
/// without `give_a_slot_to_a_fresh_pair`).
#[test]
fn more_pairs_slow_at_once_than_re_measurements_make_no_link_verdict() {
    let slow = [(0, 1), (1, 0), (2, 4), (4, 2), (5, 8), (9, 13)];
    let (verdicts, moved, _, withheld) = run(&slow, 120);
    assert!(verdicts.is_empty(), "{verdicts:?}");
    assert!(!moved, "no node is judged on a shared cause's pairs");
    assert!(withheld.contains(&(0, 1)), "{withheld:?}");
}

#[test]
fn a_fresh_pair_gets_the_last_re_measurement() {
    let evidence: BTreeMap<Pair, usize> = [
        ((0, 1), 9),
        ((2, 3), 7),
        ((4, 5), 5),
        ((6, 7), 3),
        ((8, 9), 2),
        ((10, 11), 1),
        ((12, 13), 0),
    ]
    .into_iter()
    .collect();
    let ev = |k: &Pair| evidence[k];
    let sorted: Vec<Pair> = evidence.keys().copied().collect();
    // In turn, by round: the pairs seen slow fewer than twice.
    for (round, fresh) in [(0, (10, 11)), (1, (12, 13)), (2, (10, 11))] {
        let mut requests = sorted.clone();
        super::links::give_a_slot_to_a_fresh_pair(&mut requests, &ev, round);
        assert_eq!(requests[..3], sorted[..3], "round {round}");
        assert_eq!(requests[LINK_REMEASURES - 1], fresh, "round {round}");
        assert_eq!(requests.len(), sorted.len());
    }
    // Nothing moves when the slots are not all taken by pairs with more, or no pair is
    // fresh.
    let mut requests = vec![(0, 1), (2, 3), (4, 5), (10, 11), (12, 13)];
    super::links::give_a_slot_to_a_fresh_pair(&mut requests, &ev, 1);
    assert_eq!(requests, vec![(0, 1), (2, 3), (4, 5), (10, 11), (12, 13)]);
    let mut requests = sorted[..5].to_vec();
    super::links::give_a_slot_to_a_fresh_pair(&mut requests, &ev, 0);
    assert_eq!(requests, sorted[..5].to_vec());
}

#[test]
fn each_of_those_pairs_alone_is_a_link_verdict() {
    // The control: the same pair, the same world, nothing else slow.
    for pair in SPINE {
        let (verdicts, _, _, withheld) = run(&[pair], 120);
        assert_eq!(verdicts, vec![pair], "{pair:?} alone");
        assert!(withheld.is_empty(), "{pair:?} alone: {withheld:?}");
    }
}

#[test]
fn a_link_slow_both_ways_is_one_link_not_a_cohort() {
    // Its way back shares its ends: it is no companion, and both directions are found.
    let both = [(2, 4), (4, 2)];
    let (mut verdicts, _, _, _) = run(&both, 120);
    verdicts.sort_unstable();
    assert_eq!(verdicts, vec![(2, 4), (4, 2)]);
}

#[test]
fn two_degraded_links_in_one_group_are_both_found() {
    // One companion is fewer than LINK_COHORT: two links at once are still two links.
    let (mut verdicts, _, _, _) = run(&SPINE[..2], 120);
    verdicts.sort_unstable();
    assert_eq!(verdicts, vec![(0, 1), (2, 4)]);
}

#[test]
fn companions_are_recent_twice_slow_pairs_with_healthy_ends_counted_when_disjoint() {
    let watched: BTreeMap<Pair, VecDeque<f64>> = [
        ((0, 1), vec![0.4, 0.4]),
        // Slow on its own once: chance, as often as not.
        ((2, 3), vec![0.4]),
        ((4, 5), vec![0.4, 0.4, 0.4]),
        ((1, 6), vec![0.4, 0.4]),
        // Watched (a slow probe that was not its own) but never slow on its own.
        ((7, 8), vec![]),
        // Slow on its own, but not recently: not in `seen`.
        ((9, 11), vec![0.4, 0.4]),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.into_iter().collect()))
    .collect();
    let seen: BTreeMap<Pair, u64> = [(0, 1), (2, 3), (4, 5), (1, 6), (7, 8)]
        .into_iter()
        .map(|k| (k, 100))
        .collect();
    let cohort = super::links::slow_together(&watched, &seen, |_, _| true);
    assert_eq!(cohort, vec![(0, 1), (1, 6), (4, 5)]);
    // A pair with an end not healthy is that end's.
    let without = super::links::slow_together(&watched, &seen, |a, b| a != 4 && b != 4);
    assert_eq!(without, vec![(0, 1), (1, 6)]);
    // (2, 3) has three disjoint companions: shared.
    assert!(super::links::shared(&cohort, (2, 3)));
    // (0, 1) has one, (4, 5) ((1, 6) shares node 1): not shared.
    assert!(!super::links::shared(&cohort, (0, 1)));
    // (6, 9) has two, (0, 1) and (4, 5); without (4, 5) one.
    assert!(super::links::shared(&cohort, (6, 9)));
    assert!(!super::links::shared(&without, (6, 9)));
    // (1, 4) shares an end with every one of them.
    assert!(!super::links::shared(&cohort, (1, 4)));
}

#[test]
fn a_companion_is_forgotten_two_turns_after_it_was_last_slow_or_once_unwatched() {
    let watched: BTreeMap<Pair, VecDeque<f64>> = [(0, 1), (2, 3), (4, 5)]
        .into_iter()
        .map(|k| (k, [0.4, 0.4].into_iter().collect()))
        .collect();
    // Turns of 16 rounds, now round 100: slow at 68 is two turns back, at 67 more.
    let mut seen: BTreeMap<Pair, u64> = [((0, 1), 68), ((2, 3), 67), ((6, 7), 99)].into();
    super::links::keep_recent(&mut seen, &watched, 100, 16);
    // (2, 3) too old; (6, 7) no longer watched (measured normal since).
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![((0, 1), 68)]);
}

#[test]
fn a_pair_and_its_way_back_are_one_companion() {
    // Two degraded links both ways in one group besides the candidate: two links, four
    // pairs. One companion link is fewer than LINK_COHORT.
    let cohort = vec![(2, 3), (3, 2)];
    assert!(!super::links::shared(&cohort, (0, 1)));
    let cohort = vec![(2, 3), (3, 2), (4, 5), (5, 4)];
    assert!(super::links::shared(&cohort, (0, 1)));
}

#[test]
fn two_links_both_ways_in_one_group_are_both_found() {
    // The shipped `shapes` scenario has this: links both ways, several in a group of 64.
    let slow = [(0, 1), (1, 0), (2, 4), (4, 2)];
    let (mut verdicts, _, _, _) = run(&slow, 160);
    verdicts.sort_unstable();
    assert_eq!(verdicts, vec![(0, 1), (1, 0), (2, 4), (4, 2)]);
}

/// An engine of 8 nodes after 5 quiet rounds, watching `pairs`, each slow on its own twice
/// and last this round.
fn watching(pairs: &[Pair]) -> HealthEngine {
    let mut e = HealthEngine::new(8, HealthConfig::default());
    for _ in 0..5 {
        e.step(&round(8, 1, &[], |_| 0.0));
    }
    let now = e.rounds();
    for &k in pairs {
        e.links.watched.insert(k, [0.4, 0.4].into_iter().collect());
        e.link_seen.insert(k, now);
    }
    e
}

#[test]
fn the_engine_takes_companions_with_healthy_ends_only() {
    let mut e = watching(&[(0, 1), (2, 3), (4, 5)]);
    assert_eq!(e.companions(), vec![(0, 1), (2, 3), (4, 5)]);
    // Node 4 judged: (4, 5) is its pair, not a companion.
    e.nodes.set(
        NodeIx(4),
        NodeState::Suspect,
        String::new(),
        Evidence::default(),
    );
    assert_eq!(e.companions(), vec![(0, 1), (2, 3)]);
}

#[test]
fn held_verdicts_are_no_companions() {
    // Two links found earlier and still degraded do not keep a third from its own.
    let mut e = watching(&[(0, 1), (2, 3), (4, 5)]);
    e.links.held.insert((2, 3));
    e.links.held.insert((4, 5));
    assert_eq!(e.companions(), vec![(0, 1)]);
}

#[test]
fn a_restored_engine_starts_its_companions_afresh() {
    let mut e = watching(&[(0, 1), (2, 3)]);
    let mut restored = e.clone();
    restored
        .restore(&e.snapshot())
        .expect("its own state is taken");
    // The watched pairs come across (they are in the wire form), their slow rounds not.
    assert_eq!(restored.links.watched.len(), 2);
    assert!(restored.companions().is_empty());
    assert_eq!(e.companions(), vec![(0, 1), (2, 3)]);
}
