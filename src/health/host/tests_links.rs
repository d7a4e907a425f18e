//! Link verdicts when several pairs are slow at once: a shared cause (a spine, a dip the
//! partial-fabric tally misses) is no link's, while one degraded link, its way back, or
//! two of them in one group still are.

use std::collections::BTreeSet;
use std::ops::Range;

use super::links::Onset;
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
    let from: Vec<(Pair, usize)> = slow.iter().map(|&k| (k, 20)).collect();
    run_from(&from, rounds)
}

/// [`run`], each ordered pair slow from its own round on.
fn run_from(slow: &[(Pair, usize)], rounds: usize) -> (Vec<Pair>, bool, usize, BTreeSet<Pair>) {
    let during: Vec<(Pair, Range<usize>)> =
        slow.iter().map(|&(k, at)| (k, at..usize::MAX)).collect();
    run_during(&during, rounds)
}

/// [`run`], each ordered pair slow in its own rounds (a pair may be listed more than once).
fn run_during(
    slow: &[(Pair, Range<usize>)],
    rounds: usize,
) -> (Vec<Pair>, bool, usize, BTreeSet<Pair>) {
    let [(e, d)]: [(HealthEngine, Decided); 1] = drive(slow, rounds, None)
        .try_into()
        .unwrap_or_else(|_| unreachable!("one engine without a hand-over"));
    let most = slow
        .iter()
        .filter_map(|(k, _)| e.links.watched.get(k).map(VecDeque::len))
        .max()
        .unwrap_or(0);
    let mut verdicts = Vec::new();
    for (_, v) in d.verdicts {
        if !verdicts.contains(&v) {
            verdicts.push(v);
        }
    }
    (verdicts, d.moved, most, d.withheld)
}

/// What one engine decided in [`drive`]: each link verdict with its first round, whether any
/// node left `Healthy`, and every pair whose verdict was withheld.
#[derive(Default)]
struct Decided {
    verdicts: Vec<(usize, Pair)>,
    moved: bool,
    withheld: BTreeSet<Pair>,
}

/// The world of [`run`], each ordered pair slow in its own rounds. With `handover`, a
/// second engine, new, takes the first's state over before that round (as a member that
/// joins a group does) and from then on steps on the same rounds: returns both, each with
/// what it decided (the second from the hand-over on).
fn drive(
    slow: &[(Pair, Range<usize>)],
    rounds: usize,
    handover: Option<usize>,
) -> Vec<(HealthEngine, Decided)> {
    drive_placed(slow, rounds, handover, &[])
}

/// [`drive`], with each node's ToR as the topology gives it (`tors`, empty for none).
fn drive_placed(
    slow: &[(Pair, Range<usize>)],
    rounds: usize,
    handover: Option<usize>,
    tors: &[Option<u32>],
) -> Vec<(HealthEngine, Decided)> {
    let n = 16;
    let seconds = |r: usize, a: usize, b: usize| {
        let base = 1.0 + (a % 2) as f64 * 0.003;
        if slow
            .iter()
            .any(|(k, when)| *k == (a, b) && when.contains(&r))
        {
            base * 1.5
        } else {
            base
        }
    };
    let mut engines = vec![(
        HealthEngine::new(n, HealthConfig::default()),
        Decided::default(),
    )];
    let mut requests = Vec::<(usize, usize)>::new();
    for r in 0..rounds {
        if handover == Some(r) {
            // A member that probed on its own before: its own history must not count.
            let mut joined = HealthEngine::new(n, HealthConfig::default());
            for q in 0..30 {
                let mut own = round(n, 1 + q % 15, &[], |_| 0.0);
                for p in own.probes.iter_mut().filter(|p| (p.src, p.dst) == (3, 7)) {
                    p.seconds = 1.5;
                }
                joined.step(&own);
            }
            joined
                .restore(&engines[0].0.snapshot())
                .expect("the group's state is taken");
            engines.push((joined, Decided::default()));
        }
        let mut input = round(n, 1 + r % 15, &[], |_| 0.0);
        input.tors = tors.to_vec();
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
        for (i, (e, d)) in engines.iter_mut().enumerate() {
            let out = e.step(&input);
            // A held link is a verdict every round: its first is the one recorded.
            for v in out.link_verdicts {
                if !d.verdicts.iter().any(|(_, w)| *w == v) {
                    d.verdicts.push((r, v));
                }
            }
            d.moved |= e.states().iter().any(|s| *s != NodeState::Healthy);
            d.withheld.extend(out.link_withheld);
            // The group's plan follows the member that probed longest.
            if i == 0 {
                requests = out.link_requests;
            }
        }
    }
    engines
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

/// Three links with no end in common, on strides 1, 11 and 15 of the cycle.
const STAGGERED: [Pair; 3] = [(0, 1), (2, 13), (5, 4)];

/// A spine seen one pair at a time: the first pair slow from round 20, the other two
/// from round 45, so that they are first seen 25 rounds after it (a group of a hundred
/// measures a pair once in a hundred rounds, so a spine's pairs are first seen that far
/// apart and more). The first, re-measured every round from its first sighting, earns
/// its verdict before the others are slow at all.
#[test]
fn a_spine_seen_one_pair_at_a_time_makes_no_more_links_after_the_first() {
    let from = [(STAGGERED[0], 20), (STAGGERED[1], 45), (STAGGERED[2], 45)];
    let (verdicts, moved, _, withheld) = run_from(&from, 120);
    // The first had no companion when it earned its verdict: a limit of judging inside
    // one group, kept in view here.
    assert_eq!(verdicts, vec![(0, 1)]);
    assert!(!moved);
    // The other two began with it (within four turns) and are each other's companions and
    // its: two each, a shared cause (fails with `began_together` finding none: all three
    // are verdicts).
    assert_eq!(
        withheld,
        [(2, 13), (5, 4)].into_iter().collect(),
        "withheld"
    );
}

#[test]
fn a_link_found_long_before_keeps_no_later_link_from_its_own() {
    // The same three links, the first slow from round 20, the other two from round 120:
    // they began apart from it, so it is no companion of theirs and, with one companion
    // each, both are links as well.
    let from = [(STAGGERED[0], 20), (STAGGERED[1], 120), (STAGGERED[2], 120)];
    let (mut verdicts, _, _, withheld) = run_from(&from, 240);
    verdicts.sort_unstable();
    let mut all = STAGGERED.to_vec();
    all.sort_unstable();
    assert_eq!(verdicts, all);
    assert!(withheld.is_empty(), "{withheld:?}");
}

/// A link found before, its verdict lifted and its run of sightings over, slow again and
/// held again when two new links turn slow: its new run began then, 40 rounds before
/// theirs (within four turns), but its slowness began long before, so it keeps neither
/// from its own. Sixteen turns after it was last held it is forgotten, and the same
/// moments look like one cause's pairs seen one at a time.
#[test]
fn a_link_found_before_that_is_slow_again_began_before() {
    let again = |at: usize| {
        [
            (STAGGERED[0], 20..60),
            (STAGGERED[0], at..usize::MAX),
            (STAGGERED[1], at + 40..usize::MAX),
            (STAGGERED[2], at + 40..usize::MAX),
        ]
    };
    // Lifted at its first normal measurement (by round 75), its run over four turns after
    // (64 rounds), slow again at 200: remembered (256 rounds). Fails without the memory:
    // the two new links are withheld.
    let (mut verdicts, _, _, withheld) = run_during(&again(200), 360);
    verdicts.sort_unstable();
    let mut all = STAGGERED.to_vec();
    all.sort_unstable();
    assert_eq!(verdicts, all);
    assert!(withheld.is_empty(), "{withheld:?}");
    // Slow again at 400: forgotten, so the three began together.
    let (verdicts, _, _, withheld) = run_during(&again(400), 560);
    assert_eq!(verdicts, vec![STAGGERED[0]]);
    assert_eq!(
        withheld,
        STAGGERED[1..].iter().copied().collect(),
        "withheld"
    );
}

#[test]
fn began_together_takes_held_links_whose_slowness_began_within_four_turns() {
    let turn = 16;
    let at = |first: u64, last: u64| Onset {
        first: Some(first),
        last,
    };
    let onset: BTreeMap<Pair, Onset> = [
        ((0, 1), at(100, 140)),
        // Began 64 rounds earlier: four turns, still together.
        ((2, 3), at(36, 140)),
        // 65 rounds later: apart.
        ((4, 5), at(165, 170)),
        // Together, but not held.
        ((6, 7), at(101, 140)),
    ]
    .into_iter()
    .collect();
    let held: BTreeSet<Pair> = [(2, 3), (4, 5), (8, 9)].into_iter().collect();
    assert_eq!(
        super::links::began_together(&onset, &held, (0, 1), turn),
        vec![(2, 3)]
    );
    // A pair with no run of sightings has no companions this way.
    assert!(super::links::began_together(&onset, &held, (10, 11), turn).is_empty());
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

/// An engine of 8 nodes holding links (2, 3) and (4, 5), with a run for (2, 3) begun at
/// round 2, a run of a pair not held, (0, 1), and a link found before and no longer held,
/// (0, 7).
fn holding_links() -> HealthEngine {
    let mut e = watching(&[(0, 1), (2, 3), (4, 5)]);
    e.links.held.insert((2, 3));
    e.links.held.insert((4, 5));
    let run = |first, last| Onset {
        first: Some(first),
        last,
    };
    e.link_onset.insert((0, 1), run(1, 1));
    e.link_onset.insert((2, 3), run(2, 4));
    e.link_found.insert((0, 7), 1);
    e.link_found.insert((2, 3), 4);
    e
}

/// A held link with no run, as the engine holds it after a remap, or after a restore of
/// a state that carried none: begun at an unknown round, found at `now`.
fn began_before(now: u64) -> Onset {
    Onset {
        first: None,
        last: now,
    }
}

#[test]
fn after_a_remap_only_the_held_links_have_runs_begun_at_an_unknown_round() {
    let e = holding_links();
    // Nodes 2 and 6 swap places: the held (2, 3) is (6, 3) after it. Every run and every
    // memory is dropped (their indices may name other nodes now).
    let mut map: Vec<Option<usize>> = (0..8).map(Some).collect();
    map.swap(2, 6);
    let mut remapped = e.clone();
    remapped.remap(&map, 8);
    let now = remapped.rounds();
    let held = [(6, 3), (4, 5)];
    let runs: BTreeMap<Pair, Onset> = held.iter().map(|&k| (k, began_before(now))).collect();
    assert_eq!(remapped.link_onset, runs);
    let found: BTreeMap<Pair, u64> = held.iter().map(|&k| (k, now)).collect();
    assert_eq!(remapped.link_found, found);
    assert!(remapped.link_seen.is_empty());
}

#[test]
fn a_restore_takes_the_runs_and_the_memory_as_they_were() {
    let e = holding_links();
    let now = e.rounds();
    let mut restored = HealthEngine::new(8, HealthConfig::default());
    restored
        .restore(&e.snapshot())
        .expect("the group's state is taken");
    // Everything comes across; the held (4, 5), which had no run, gets one begun at an
    // unknown round.
    let mut runs = e.link_onset.clone();
    runs.insert((4, 5), began_before(now));
    assert_eq!(restored.link_onset, runs);
    let mut found = e.link_found.clone();
    found.insert((4, 5), now);
    assert_eq!(restored.link_found, found);
    assert_eq!(restored.link_seen, e.link_seen);
    // A state from an older release carries none of them: only the held links have runs,
    // begun at an unknown round.
    let mut v: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    for field in ["link_seen", "link_runs", "link_found"] {
        assert!(
            v.as_object_mut().unwrap().remove(field).is_some(),
            "{field}"
        );
    }
    let mut older = HealthEngine::new(8, HealthConfig::default());
    older.restore(&serde_json::to_vec(&v).unwrap()).unwrap();
    let held = [(2, 3), (4, 5)];
    let runs: BTreeMap<Pair, Onset> = held.iter().map(|&k| (k, began_before(now))).collect();
    assert_eq!(older.link_onset, runs);
    let found: BTreeMap<Pair, u64> = held.iter().map(|&k| (k, now)).collect();
    assert_eq!(older.link_found, found);
}

#[test]
fn a_state_whose_link_memory_could_not_be_this_engines_is_refused() {
    let e = holding_links();
    let round = e.rounds();
    let horizon = HealthConfig::default().new_normal_rounds;
    let cases = [
        ("link_seen", serde_json::json!([[[0, 8], 1]])),
        ("link_seen", serde_json::json!([[[3, 3], 1]])),
        ("link_seen", serde_json::json!([[[2, 3], 1], [[0, 1], 1]])),
        ("link_seen", serde_json::json!([[[0, 1], 1], [[0, 1], 2]])),
        ("link_found", serde_json::json!([[[0, 1], round + 1]])),
        ("link_found", serde_json::json!([[[9, 1], 1]])),
        ("link_runs", serde_json::json!([[[0, 1], null, round + 1]])),
        ("link_runs", serde_json::json!([[[1, 1], 1, 2]])),
        ("link_runs", serde_json::json!([[[0, 1], 3, 2]])),
        // Found by fuzzing: a held self-pair was taken and then written as a link found,
        // which the engine's own snapshot could not restore.
        ("held", serde_json::json!([[0, 0]])),
        ("baseline_run", serde_json::json!(horizon + 1)),
    ];
    for (field, value) in cases {
        let mut v: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
        v[field] = value.clone();
        if field == "baseline_run" {
            // Rounds enough for a run past the horizon: only the horizon refuses it.
            v["round"] = serde_json::json!(horizon + 10);
        }
        // A member with a state of its own, unlike the sender's.
        let mut taker = watching(&[(1, 2)]);
        taker.links.held.insert((1, 2));
        let before = taker.snapshot();
        let err = taker
            .restore(&serde_json::to_vec(&v).unwrap())
            .expect_err(&format!("{field} = {value}"));
        assert!(
            matches!(&err, RestoreError::Invalid { field: f, .. } if *f == field),
            "{field} = {value}: {err}"
        );
        assert!(taker.snapshot() == before, "{field}: left as it was");
    }
    // A run of slow rounds with no baseline to be slow against.
    let mut v: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    v["baseline"] = serde_json::Value::Null;
    v["baseline_run"] = serde_json::json!(1);
    let err = HealthEngine::new(8, HealthConfig::default())
        .restore(&serde_json::to_vec(&v).unwrap())
        .expect_err("a run with no baseline");
    assert!(
        matches!(
            &err,
            RestoreError::Invalid {
                field: "baseline_run",
                ..
            }
        ),
        "{err}"
    );
}

/// A state that would pass the hand-over's size bound drops the links' runs and memory
/// (every member alike) before the dip normal: a group of 160 with every ordered pair
/// seen slow, run and found holds 25,440 entries of each, more than the bound of about
/// 870 kB alone, and its small dip normal stays. A held link's run and memory stay, so
/// that the member that takes the state writes the same bytes back (without them its
/// restore gave the held link a run begun at an unknown round, and its state differed).
#[test]
fn a_state_too_large_drops_the_links_memory() {
    let n = 160;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    e.step(&round(n, 1, &[], |_| 0.0));
    // A dip normal of one pair, taken over from a state that carries one.
    let mut v: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    v["dip_normal"] = serde_json::json!({
        "pairs": [{"pair": [0, 1], "tors": [158, 159], "shares": [0.25, 3]}],
        "tor_pairs": [[[158, 159], 2]],
        "tors": []
    });
    e.restore(&serde_json::to_vec(&v).unwrap()).unwrap();
    let now = e.rounds();
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            e.link_seen.insert((a, b), now);
            e.link_found.insert((a, b), now);
            e.link_onset.insert(
                (a, b),
                Onset {
                    first: Some(now),
                    last: now,
                },
            );
        }
    }
    let bound = 64 * 1024 + n * (1024 + 4 * HealthConfig::default().window * 100);
    let pairs: Vec<(Pair, u64)> = e.link_seen.iter().map(|(k, at)| (*k, *at)).collect();
    let one_list = serde_json::to_vec(&pairs).unwrap().len();
    assert!(
        3 * one_list > bound,
        "{one_list} bytes a list: not past {bound}"
    );
    e.links.held.insert((2, 3));
    let state = e.snapshot();
    assert!(state.len() <= bound, "{} bytes, bound {bound}", state.len());
    let v: serde_json::Value = serde_json::from_slice(&state).unwrap();
    assert!(v.get("link_seen").is_none(), "link_seen kept");
    assert_eq!(
        v["link_runs"],
        serde_json::json!([[[2, 3], now, now]]),
        "only the held link's run"
    );
    assert_eq!(v["link_found"], serde_json::json!([[[2, 3], now]]));
    assert!(
        v.get("dip_normal").is_some(),
        "the dip normal dropped first"
    );
    let mut taker = HealthEngine::new(n, HealthConfig::default());
    taker.restore(&state).expect("a state within the bound");
    assert_eq!(taker.link_onset.len(), 1);
    assert_eq!(taker.link_found.len(), 1);
    assert!(taker.snapshot() == state, "the taker writes other bytes");
}

/// Node 0's link to node 1, held, is not measured for five turns of a group of 8 (the
/// rounds' stride of 2 never crosses it): its run of sightings stays on, begun where it
/// began, and it is remembered as found. Fails without the refresh: a run ends four turns
/// after its last sighting of its own.
#[test]
fn a_held_links_run_lasts_while_it_is_held() {
    let mut e = watching(&[]);
    e.links.held.insert((0, 1));
    let start = e.rounds();
    e.link_onset.insert(
        (0, 1),
        Onset {
            first: Some(start),
            last: start,
        },
    );
    // A turn is max(8 members, the window of 10) rounds.
    for _ in 0..5 * 10 {
        e.step(&round(8, 2, &[], |_| 0.0));
    }
    assert!(e.links.held.contains(&(0, 1)), "still held");
    let now = e.rounds();
    let run = e.link_onset.get(&(0, 1)).copied().expect("the run is on");
    assert_eq!(run.first, Some(start));
    assert!(run.last + 1 >= now, "last {} at round {now}", run.last);
    let found = e.link_found.get(&(0, 1)).copied().expect("remembered");
    assert!(found + 1 >= now, "found {found} at round {now}");
}

#[test]
fn a_restored_engine_keeps_its_companions() {
    let mut e = watching(&[(0, 1), (2, 3)]);
    let mut restored = HealthEngine::new(8, HealthConfig::default());
    restored
        .restore(&e.snapshot())
        .expect("the group's state is taken");
    // The watched pairs come across, and the rounds they were last slow with them.
    assert_eq!(restored.companions(), vec![(0, 1), (2, 3)]);
    assert_eq!(e.companions(), vec![(0, 1), (2, 3)]);
    // A state from an older release carries no such rounds: its pairs count again from
    // their next slow measurement.
    let mut v: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    assert!(v.as_object_mut().unwrap().remove("link_seen").is_some());
    let mut older = HealthEngine::new(8, HealthConfig::default());
    older.restore(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(older.links.watched.len(), 2);
    assert!(older.companions().is_empty());
}

/// A member that takes the group's state over while a spine's first pair is a held
/// link and its other pairs have yet to turn slow (the world of
/// `a_spine_seen_one_pair_at_a_time_makes_no_more_links_after_the_first`) decides as the
/// member it took over from: the held link's run comes across, so the later pairs began
/// with it and are withheld in both. Fails with the runs out of the wire form: the new
/// member's held link began at an unknown round, so the later pairs each had one
/// companion, and were links.
#[test]
fn a_member_that_takes_the_state_over_decides_as_the_one_it_took_over_from() {
    let slow = [
        (STAGGERED[0], 20..usize::MAX),
        (STAGGERED[1], 45..usize::MAX),
        (STAGGERED[2], 45..usize::MAX),
    ];
    let at = 44;
    let [(first, a), (second, b)]: [(HealthEngine, Decided); 2] = drive(&slow, 120, Some(at))
        .try_into()
        .unwrap_or_else(|_| unreachable!("two engines after a hand-over"));
    // The first pair was held before the hand-over, and nothing after it was a verdict:
    // the new member holds it from its first round.
    assert!(
        matches!(a.verdicts[..], [(r, k)] if r < at && k == STAGGERED[0]),
        "{:?}",
        a.verdicts
    );
    assert_eq!(b.verdicts, vec![(at, STAGGERED[0])]);
    let later: BTreeSet<Pair> = STAGGERED[1..].iter().copied().collect();
    assert_eq!(a.withheld, later);
    assert_eq!(b.withheld, later);
    assert!(first.snapshot() == second.snapshot(), "the states differ");
}

/// A link is remembered as found from the round of its verdict, not from the next round
/// it is seen held: a verdict lifted at the next round's normal measurement is never seen
/// held, and its return would otherwise seem to begin with whatever turned slow then.
#[test]
fn a_link_is_remembered_from_the_round_of_its_verdict() {
    let mut e = watching(&[]);
    let k = (0, 1);
    e.links
        .watched
        .insert(k, std::iter::repeat_n(0.4, 9).collect());
    e.link_seen.insert(k, e.rounds());
    // Stride 2 does not measure the pair: its nine slow, steady observations decide.
    let out = e.step(&round(8, 2, &[], |_| 0.0));
    assert_eq!(out.link_verdicts, vec![k]);
    assert!(e.link_found.contains_key(&k), "{:?}", e.link_found);
    // It earned its verdict with no run of sightings (none this round): it gets one begun
    // at an unknown round, as a restore gives a held link without one, so a member that
    // takes this state over holds the same runs (fails without: the taker's state has a
    // run the holder's lacks).
    let now = e.rounds();
    assert_eq!(e.link_onset.get(&k), Some(&began_before(now)));
    let mut taker = HealthEngine::new(8, HealthConfig::default());
    taker.restore(&e.snapshot()).expect("the group's state");
    assert!(taker.snapshot() == e.snapshot(), "the states differ");
}

/// What the state does not carry, and a window relearns, the member that takes it over
/// starts afresh: its own partial-event rounds and last round's ToR levels are gone.
#[test]
fn a_member_that_takes_the_state_over_forgets_its_own_recent_rounds() {
    let holder = watching(&[]);
    let mut taker = watching(&[(1, 2)]);
    taker.partial_hist.push_back(true);
    taker.tor_shift.insert(0, 0.3);
    taker
        .restore(&holder.snapshot())
        .expect("the group's state");
    assert!(taker.partial_hist.is_empty(), "{:?}", taker.partial_hist);
    assert!(taker.tor_shift.is_empty(), "{:?}", taker.tor_shift);
}

/// A link is remembered for sixteen turns after it was last held, and no longer: with 8
/// nodes and the window of 10, a turn is 10 rounds, so a link last held at round `f` is
/// still remembered at round `f + 160` and forgotten at the next.
#[test]
fn a_link_is_remembered_for_sixteen_turns_exactly() {
    let mut e = watching(&[]);
    let k = (0, 7);
    let f = e.rounds();
    e.link_found.insert(k, f);
    let last = f + 16 * 10;
    while e.rounds() < last {
        e.step(&round(8, 1, &[], |_| 0.0));
    }
    assert!(e.link_found.contains_key(&k), "forgotten by round {last}");
    e.step(&round(8, 1, &[], |_| 0.0));
    assert!(
        !e.link_found.contains_key(&k),
        "still remembered at round {}",
        last + 1
    );
}

/// A link found, lifted and still seen slow now and then keeps its run begun before after
/// its memory has passed (a run lasts while sightings come within four turns; the memory
/// sixteen turns from the link's last held round): a state with such a run is one this
/// engine writes, and is taken over as it is.
#[test]
fn a_run_begun_before_outlives_its_links_memory_and_is_taken_over() {
    let mut e = watching(&[]);
    let now = e.rounds();
    e.link_onset.insert((0, 1), began_before(now));
    assert!(!e.links.held.contains(&(0, 1)) && !e.link_found.contains_key(&(0, 1)));
    let mut taker = HealthEngine::new(8, HealthConfig::default());
    taker
        .restore(&e.snapshot())
        .expect("a state this engine writes");
    assert_eq!(taker.link_onset, e.link_onset);
}

/// Nodes 0–7 behind ToR 0, 8–15 behind ToR 1: the group of [`drive`] on two ToRs.
fn two_tors() -> Vec<Option<u32>> {
    tors_of(8)
}

/// The group of [`drive`] on ToRs of `size` members, in node order.
fn tors_of(size: usize) -> Vec<Option<u32>> {
    (0..16).map(|i| Some((i / size) as u32)).collect()
}

/// Every pair that had a link verdict in [`drive_placed`]'s world, and every pair whose
/// verdict was withheld.
fn verdicts_placed(slow: &[Pair], tors: &[Option<u32>]) -> (BTreeSet<Pair>, BTreeSet<Pair>) {
    let during: Vec<(Pair, Range<usize>)> = slow.iter().map(|&k| (k, 20..usize::MAX)).collect();
    let [(_, d)]: [(HealthEngine, Decided); 1] = drive_placed(&during, 120, None, tors)
        .try_into()
        .unwrap_or_else(|_| unreachable!("one engine without a hand-over"));
    (d.verdicts.into_iter().map(|(_, v)| v).collect(), d.withheld)
}

/// Three pairs between the same two ToRs, two of them sharing an end and two another: a
/// spine's pairs in a group of two ToRs of eight, where a spine of six slows about ten of
/// the 64 pairs between them and several meet at a node by chance. No two of them are
/// disjoint from a third, so the rule of disjoint companions alone lets each through.
const TOR_PAIR: [Pair; 3] = [(1, 9), (1, 12), (4, 12)];

#[test]
fn pairs_slow_between_the_same_two_tors_make_no_link_verdict() {
    let (verdicts, withheld) = verdicts_placed(&TOR_PAIR, &two_tors());
    assert!(verdicts.is_empty(), "{verdicts:?}");
    assert_eq!(withheld, TOR_PAIR.into_iter().collect(), "withheld");
}

#[test]
fn pairs_slow_between_different_pairs_of_tors_make_no_link_verdict() {
    // Four ToRs of four: (1, 7) between ToRs 0 and 1, (6, 13) between 1 and 3, (1, 9)
    // between 0 and 2 (strides 6, 7 and 8 of the cycle: first seen in three rounds in a
    // row). A spine spreads over every pair of ToRs, so with small ToRs its pairs seldom
    // share one. (1, 7) and (1, 9) share an end, so each has one disjoint companion.
    let spread = [(1, 7), (6, 13), (1, 9)];
    let (verdicts, withheld) = verdicts_placed(&spread, &tors_of(4));
    assert!(verdicts.is_empty(), "{verdicts:?}");
    assert_eq!(withheld, spread.into_iter().collect(), "withheld");
    // The control: with no ToRs known the rule of disjoint companions alone judges them,
    // and lets those two through.
    let (verdicts, _) = verdicts_placed(&spread, &[]);
    assert_eq!(verdicts, [(1, 7), (1, 9)].into_iter().collect());
}

#[test]
fn the_same_pairs_with_no_topology_are_links() {
    // The control: with no ToRs known, the same pairs share ends and no candidate has two
    // disjoint companions, so each is a link (fails if the rule reads ToRs it was not given).
    let (verdicts, withheld) = verdicts_placed(&TOR_PAIR, &[]);
    assert_eq!(verdicts, TOR_PAIR.into_iter().collect());
    assert!(withheld.is_empty(), "{withheld:?}");
}

#[test]
fn one_or_two_links_between_two_tors_are_still_found() {
    // A degraded link between the ToRs both ways (its way back is the same link, no
    // companion), and two links between the same ToRs (one companion is fewer than
    // LINK_COHORT): every direction is a verdict.
    for links in [[(1, 9), (9, 1)], [(1, 9), (1, 12)]] {
        let (verdicts, withheld) = verdicts_placed(&links, &two_tors());
        assert_eq!(verdicts, links.into_iter().collect(), "{links:?}");
        assert!(withheld.is_empty(), "{links:?}: {withheld:?}");
    }
}

#[test]
fn a_link_both_ways_counts_once_among_the_pairs_between_tors() {
    // (1, 9) both ways, then (1, 12): when (1, 12) earns its verdict the link (1, 9) is
    // held both ways, its slowness begun with (1, 12)'s. One link, one companion: three
    // verdicts (fails when the two directions are counted as two links).
    let links = [(1, 9), (9, 1), (1, 12)];
    let (verdicts, withheld) = verdicts_placed(&links, &two_tors());
    assert_eq!(verdicts, links.into_iter().collect());
    assert!(withheld.is_empty(), "{withheld:?}");
}

/// A spine between ToRs seen one pair at a time, on four ToRs of four: (1, 7) slow from
/// round 20, held before the others are slow; (1, 9) and (6, 9) from round 45 (first seen
/// in rounds 52 and 47, within four turns of it). (1, 9) shares an end with each of the
/// others and (6, 9) with (1, 9), so the rule of disjoint companions finds (1, 9) none and
/// (6, 9) one (the held (1, 7), begun with it).
#[test]
fn a_held_link_begun_with_them_counts_among_the_pairs_between_tors() {
    let during = [
        ((1, 7), 20..usize::MAX),
        ((1, 9), 45..usize::MAX),
        ((6, 9), 45..usize::MAX),
    ];
    let [(_, d)]: [(HealthEngine, Decided); 1] = drive_placed(&during, 160, None, &tors_of(4))
        .try_into()
        .unwrap_or_else(|_| unreachable!("one engine without a hand-over"));
    let verdicts: BTreeSet<Pair> = d.verdicts.into_iter().map(|(_, v)| v).collect();
    // The first had no companion when it earned its verdict (the known limit above).
    assert_eq!(verdicts, [(1, 7)].into_iter().collect());
    // The other two each have the other and the held (1, 7) (fails when held links begun
    // with them are left out of the pairs between ToRs: (1, 9) is then a verdict).
    assert_eq!(d.withheld, [(1, 9), (6, 9)].into_iter().collect());
}

#[test]
fn the_pairs_between_tors_are_those_with_two_observations_healthy_ends_and_no_verdict() {
    // Eight nodes on ToRs of four: (0, 4), (5, 1), (2, 6) and (3, 7) between them, (0, 1)
    // within ToR 0, (6, 2) the way back of (2, 6), whose verdict is held.
    let tors: Vec<Option<u32>> = (0..8).map(|i| Some(i / 4)).collect();
    let mut e = watching(&[(0, 4), (5, 1), (2, 6), (6, 2), (3, 7), (0, 1)]);
    e.links.held.insert((2, 6));
    // A pair seen slow once is not yet one of them.
    e.links.watched.insert((1, 6), [0.4].into_iter().collect());
    // Without the topology, no pair runs between ToRs.
    assert!(e.slow_between_tors(&[]).is_empty());
    assert_eq!(e.slow_between_tors(&tors), vec![(0, 4), (3, 7), (5, 1)]);
    // Node 3 judged: (3, 7) is its pair.
    e.nodes.set(
        NodeIx(3),
        NodeState::Suspect,
        String::new(),
        Evidence::default(),
    );
    assert_eq!(e.slow_between_tors(&tors), vec![(0, 4), (5, 1)]);
}
