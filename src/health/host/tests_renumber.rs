//! ToRs numbered afresh between rounds, as the daemon does at a formation that gains or
//! loses a switch's name: what the engine learnt of each ToR follows the switch, not the
//! number.
//!
//! The world is written out here: 24 nodes in six ToRs of four (world ToR `i / 4`), one
//! probe per node per round on a stride drawn afresh each round, probes touching a member
//! of a slow ToR that ToR's factor slower. The engine is told the ToRs under the world's
//! numbers, and from `renumber_at` under numbers moved down by one (ToR 0 last), as a
//! formation that lost a switch name sorting before them numbers them. Shipped settings.

use std::collections::BTreeSet;

use super::tests::stride_probes;
use super::tests_small_tors::draw;
use super::*;

const N: usize = 24;
const TORS: u32 = 6;

/// The world's ToR of node `i`.
fn world_tor(i: usize) -> u32 {
    (i / 4) as u32
}

/// The number the engine is told for world ToR `t` in round `r`.
fn told(t: u32, r: usize, renumber_at: usize) -> u32 {
    if r < renumber_at {
        t
    } else {
        (t + TORS - 1) % TORS
    }
}

/// Runs `rounds` rounds with each `(tor, from)` of `slow` slowing the probes touching
/// its members by 30 % from round `from` on. Returns, per round, the world ToRs with a
/// verdict (the engine's numbers read back through the numbering it was told).
fn run(rounds: usize, slow: &[(u32, usize)], renumber_at: usize) -> Vec<BTreeSet<u32>> {
    let mut e = HealthEngine::new(N, HealthConfig::default());
    let mut got = Vec::new();
    for r in 0..rounds {
        let seconds = |a: usize, b: usize| {
            let crossed: BTreeSet<u32> = [world_tor(a), world_tor(b)].into();
            slow.iter()
                .filter(|(t, from)| r >= *from && crossed.contains(t))
                .fold(1.0 + (a % 3) as f64 * 0.002, |f, _| f * 1.3)
        };
        let input = RoundInput {
            probes: stride_probes(N, 1 + draw(r as u64) % (N - 1), seconds),
            tors: (0..N)
                .map(|i| Some(told(world_tor(i), r, renumber_at)))
                .collect(),
            ..RoundInput::default()
        };
        let out = e.step(&input);
        let back = |engine: u32| (0..TORS).find(|&t| told(t, r, renumber_at) == engine);
        got.push(
            out.tor_verdicts
                .iter()
                .filter_map(|v| back(v.tor))
                .collect(),
        );
    }
    got
}

/// ToR 2 slow from round 20 is a verdict, then (after `new_normal_rounds` slow rounds)
/// the normal. Renumbered after that, it keeps its normal: no verdict anywhere (without
/// carrying the tracks over, its new number's healthy normal made it a verdict again).
/// ToR 3 turning slow after the renumbering is a verdict on ToR 3 (without, ToR 2's old
/// number handed it ToR 2's raised normal, and its slowdown was no verdict).
#[test]
fn what_a_tor_learnt_follows_it_to_its_new_number() {
    let cfg = HealthConfig::default();
    // The normal comes `new_normal_rounds` after the level turns (within a window of
    // round 20); a window more and the verdict is over.
    let normal_by = 20 + cfg.new_normal_rounds + 2 * cfg.window;
    let renumber_at = normal_by + 20;
    let third_from = renumber_at + 40;
    let got = run(third_from + 60, &[(2, 20), (3, third_from)], renumber_at);
    let rounds_of = |t: u32, span: std::ops::Range<usize>| {
        span.filter(|&r| got[r].contains(&t)).collect::<Vec<_>>()
    };
    assert!(
        rounds_of(2, 20..normal_by).len() > cfg.new_normal_rounds / 2,
        "the slow ToR was a verdict before it became the normal"
    );
    let quiet = normal_by..third_from;
    let any: Vec<(usize, &BTreeSet<u32>)> = quiet
        .clone()
        .map(|r| (r, &got[r]))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    assert!(
        any.is_empty(),
        "no verdict between the normal and ToR 3's slowdown, across the renumbering at {renumber_at}: {any:?}"
    );
    let third = rounds_of(3, third_from..third_from + 60);
    assert!(
        third
            .first()
            .is_some_and(|&r| r < third_from + 2 * cfg.window),
        "ToR 3's slowdown after the renumbering is its verdict within two windows: {third:?}"
    );
    assert!(rounds_of(2, third_from..third_from + 60).is_empty());
}

/// A remap (members joined or left) carries the numbers last seen to the nodes' new
/// indices, so the next round's numbering is read against the same switches: a node gone
/// takes its number with it, a node new has none.
#[test]
fn a_remap_carries_the_numbers_last_seen_to_the_new_indices() {
    let mut e = HealthEngine::new(4, HealthConfig::default());
    let tors = vec![Some(0), Some(0), Some(1), Some(1)];
    e.step(&RoundInput {
        tors: tors.clone(),
        ..RoundInput::default()
    });
    // Node 0 left; the others move down by one; a fourth node joins at the end.
    e.remap(&[None, Some(0), Some(1), Some(2)], 4);
    assert_eq!(e.tor_seen, vec![Some(0), Some(1), Some(1), None]);
    // Every node gone: nothing is left to read a numbering against.
    e.remap(&[None, None, None, None], 2);
    assert!(e.tor_seen.is_empty());
}
