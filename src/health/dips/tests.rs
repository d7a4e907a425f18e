//! Tests of the dip's and the normal's pairs: explanation, spares, horizon, drain,
//! shares, binding, wire form, remapping and new ToR numbers.

use super::*;

/// A dip's pairs are explained while it lasts, and so are the other pairs between the
/// same two ToRs; a full hold without an event forgets them, and a normal measurement
/// of a pair lets it go at once (its ToR pair still explains it while the dip is on).
#[test]
fn a_dip_explains_its_pairs_until_a_hold_passes_without_an_event() {
    let mut d = DipPairs::default();
    let places = (Some(0), Some(2));
    assert!(!d.round((true, true), 3, 100));
    d.add((1, 9), places, Some(0.2));
    d.add((4, 7), (None, None), Some(0.2));
    assert!(d.explains((9, 1), places) && d.explains((5, 12), (Some(2), Some(0))));
    assert!(!d.explains((5, 12), (Some(0), Some(1))));
    assert!(d.explains((7, 4), (None, None)) && !d.explains((4, 8), (None, None)));
    d.clean(4, 7);
    assert!(!d.explains((4, 7), (None, None)));
    for _ in 0..3 {
        d.round((false, true), 3, 100);
        assert!(d.explains((1, 9), places));
    }
    d.round((false, true), 3, 100);
    assert!(!d.explains((1, 9), places));
    assert_eq!(d, DipPairs::default());
}

/// Re-pairings within a ToR (nodes 0..4 on ToR 0, 4..8 on ToR 1): spared by a dip
/// between the ToRs once enough of the ToR's other inner pairs were measured, also
/// when the re-paired node's own pairs were tallied as the dip's; not across ToRs;
/// not once a quarter of the ToR's other inner pairs measured are the dip's (2
/// directed pairs of the 6 not touching node 0); not in a normal's ToR.
#[test]
fn a_re_pairing_within_a_tor_is_spared_unless_the_dip_reaches_inside() {
    let tors: Vec<Option<u32>> = (0..8).map(|i| Some(i / 4)).collect();
    let mut d = DipPairs::default();
    assert!(d.spares((0, 1), &tors), "no dip, no normal");
    d.round((true, true), 3, 100);
    for (a, b) in [(0, 4), (1, 5), (2, 6), (3, 7)] {
        d.add((a, b), (Some(0), Some(1)), Some(0.2));
    }
    // Nothing within ToR 0 measured yet: the dip may reach inside.
    assert!(!d.spares((0, 1), &tors), "nothing measured inside");
    // Every directed inner pair of both ToRs measured, none slow.
    for base in [0, 4] {
        for a in base..base + 4 {
            for b in (base..base + 4).filter(|&b| b != a) {
                let t = Some(base as u32 / 4);
                d.measure((a, b), (t, t), false);
            }
        }
    }
    // Node 0's own slow probes, inside its ToR, tallied before it was accused.
    d.add((0, 1), (Some(0), Some(0)), Some(0.3));
    d.add((0, 2), (Some(0), Some(0)), Some(0.3));
    assert!(d.spares((0, 1), &tors) && d.spares((0, 3), &tors));
    assert!(!d.spares((0, 4), &tors), "across ToRs");
    assert!(!d.spares((0, 0), &tors), "itself");
    assert!(!d.spares((0, 1), &[]), "no topology");
    d.add((2, 3), (Some(0), Some(0)), Some(0.2));
    assert!(
        !d.spares((0, 1), &tors),
        "2 of 6 inner pairs: the dip reaches in"
    );
    assert!(d.spares((4, 5), &tors), "ToR 1's inner pairs are untouched");
    // The normal's ToR: nothing within it is spared either.
    let mut n = DipPairs::default();
    for _ in 0..4 {
        n.round((true, true), 3, 2);
        n.add((4, 5), (Some(1), Some(1)), Some(0.2));
        n.add((6, 7), (Some(1), Some(1)), Some(0.2));
    }
    assert!(n.normal(4, 5), "the dip became the normal");
    // A new dip is on (the last event round): ToR 0's pairs measured in it, not slow.
    for (a, b) in [(1, 2), (2, 1), (2, 3), (3, 2)] {
        n.measure((a, b), (Some(0), Some(0)), false);
    }
    assert!(!n.spares((4, 6), &tors) && n.spares((0, 1), &tors));
}

/// The share is of the inner pairs measured since the dip began, not of all: in a ToR
/// of eight (42 directed pairs not touching node 0), a dip that slowed both of the
/// two pairs measured reaches inside, however many were not measured, and a pair
/// measured slow once stays slow (a later quick measurement of it does not undo it);
/// the same two among eight measured (a quarter: not fewer) still do, among nine they
/// do not. A dip that ends forgets what it measured.
#[test]
fn the_inner_share_is_of_the_pairs_measured_since_the_dip_began() {
    let tors: Vec<Option<u32>> = (0..16).map(|i| Some(i / 8)).collect();
    let t = (Some(0), Some(0));
    let mut d = DipPairs::default();
    d.round((true, true), 3, 100);
    // Measured slow (in rounds that were no event: not among the dip's pairs).
    d.measure((2, 3), t, true);
    d.measure((3, 2), t, true);
    d.measure((2, 3), t, false);
    assert!(!d.spares((0, 1), &tors), "2 slow of 2 measured");
    for (a, b) in [(4, 5), (5, 4), (6, 7), (7, 6), (4, 6), (6, 4)] {
        d.measure((a, b), t, false);
    }
    assert!(!d.spares((0, 1), &tors), "2 slow of 8 measured: a quarter");
    d.measure((5, 7), t, false);
    assert!(d.spares((0, 1), &tors), "2 slow of 9 measured");
    // Quiet past the hold: the dip is over, and what it measured with it.
    for _ in 0..4 {
        d.round((false, false), 3, 100);
    }
    d.round((true, true), 3, 100);
    assert!(
        !d.spares((0, 1), &tors),
        "a new dip has measured nothing inside"
    );
}

/// A dip on for more than the horizon (here 5 rounds, an event every other round)
/// becomes the normal in its first event round after the horizon (its seventh), once.
/// Its pairs are then the normal's (left out of the tally, no link verdict) with no
/// event at all; a later dip on other pairs is a dip of its own, judged from the
/// start.
#[test]
fn a_dip_that_lasts_the_horizon_becomes_the_normal() {
    let mut d = DipPairs::default();
    let (ab, cd) = ((Some(0), Some(2)), (Some(1), Some(3)));
    let renewed: Vec<bool> = (0..7)
        .map(|r| {
            let was = d.round((r % 2 == 0, true), 3, 5);
            if r == 0 {
                d.add((1, 9), ab, Some(0.2));
                d.add((2, 10), ab, Some(0.2));
            }
            was
        })
        .collect();
    assert_eq!(renewed, [false, false, false, false, false, false, true]);
    assert!(d.normal(1, 9) && d.normal(9, 1) && !d.normal(5, 12));
    // Explained with no event for far longer than the hold, and the ToR pair too.
    for _ in 0..20 {
        assert!(!d.round((false, true), 3, 5));
    }
    assert!(d.explains((1, 9), ab) && d.explains((5, 12), ab));
    // A new dip: not the normal's, and explained only while it is on.
    d.round((true, true), 3, 5);
    d.add((4, 20), cd, Some(0.2));
    assert!(!d.normal(4, 20) && d.explains((4, 20), cd));
    for _ in 0..4 {
        d.round((false, true), 3, 5);
    }
    assert!(!d.explains((4, 20), cd) && d.explains((1, 9), ab));
}

/// With a hold longer than the horizon, one event and the quiet rounds after it never
/// make a normal; nor do events while no fabric verdict holds.
#[test]
fn only_a_lasting_dip_with_a_verdict_becomes_the_normal() {
    let mut d = DipPairs::default();
    let ab = (Some(0), Some(2));
    d.round((true, true), 50, 5);
    d.add((1, 9), ab, Some(0.2));
    d.add((2, 10), ab, Some(0.2));
    for _ in 0..40 {
        assert!(!d.round((false, true), 50, 5));
    }
    assert!(!d.normal(1, 9));
    for _ in 0..40 {
        assert!(!d.round((true, false), 50, 5));
    }
    assert!(!d.normal(1, 9));
    assert!(d.round((true, true), 50, 5));
    assert!(d.normal(1, 9));
}

/// The normal drains pair by pair: a ToR pair leaves it when fewer than two of its
/// pairs are left, with the one left (a link slow on its own); a pair without known
/// ToRs leaves it on its own.
#[test]
fn the_normal_drains_as_its_pairs_measure_normal() {
    let mut d = DipPairs::default();
    let ab = (Some(0), Some(2));
    d.round((true, true), 1, 1);
    for (a, b) in [(1, 9), (2, 10), (3, 11)] {
        d.add((a, b), ab, Some(0.2));
    }
    d.add((3, 4), (None, None), Some(0.2));
    assert!(d.round((true, true), 1, 1));
    d.clean(9, 1);
    assert!(
        !d.normal(1, 9) && d.explains((1, 9), ab),
        "two pairs keep ToRs 0-2"
    );
    d.clean(2, 10);
    assert!(
        !d.normal(3, 11),
        "the last pair of ToRs 0-2 leaves with them"
    );
    assert!(!d.explains((3, 11), ab) && !d.explains((6, 12), ab));
    assert!(d.normal(4, 3));
    d.clean(3, 4);
    assert_eq!(d, DipPairs::default());
}

/// A lone slow pair of its ToR pair (a link that turned slow during a dip) is not
/// taken into the normal; the dip's pairs around it are.
#[test]
fn a_lone_pair_of_its_tor_pair_is_not_taken_into_the_normal() {
    let mut d = DipPairs::default();
    let (ab, cc) = ((Some(0), Some(2)), (Some(3), Some(3)));
    d.round((true, true), 1, 1);
    d.add((1, 9), ab, Some(0.2));
    d.add((2, 10), ab, Some(0.2));
    d.add((50, 55), cc, Some(0.2));
    assert!(d.round((true, true), 1, 1));
    assert!(d.normal(1, 9) && d.normal(10, 2));
    assert!(!d.normal(50, 55) && !d.explains((50, 55), cc));
}

/// The normal's share of a pair is the average of its slow measurements' shares,
/// taken out of the pair's probes only once the dip is the normal; a pair whose end
/// was accused further (share unknown), or that left the normal, has none.
#[test]
fn the_normal_takes_out_the_dip_s_share_of_its_pairs() {
    let mut d = DipPairs::default();
    let ab = (Some(0), Some(2));
    d.round((true, true), 1, 1);
    d.add((1, 9), ab, Some(0.2));
    d.add((9, 1), ab, Some(0.3));
    d.add((1, 9), ab, Some(0.7));
    d.add((2, 10), ab, Some(0.2));
    d.add((2, 10), ab, None);
    d.add((2, 10), ab, Some(0.2));
    d.add((3, 11), ab, Some(-0.1));
    assert_eq!(d.excess(1, 9), 0.0, "not the normal yet");
    assert!(d.round((true, true), 1, 1));
    // The mean of 0.2, 0.3 and 0.7: every measurement weighs alike.
    assert!((d.excess(1, 9) - 0.4).abs() < 1e-12 && d.excess(9, 1) == d.excess(1, 9));
    assert_eq!((d.excess(2, 10), d.excess(3, 11)), (0.0, 0.0));
    d.clean(1, 9);
    assert_eq!(d.excess(1, 9), 0.0);
}

/// A share above the dip's median share is capped at it when the normal forms.
#[test]
fn a_pair_s_share_is_capped_at_the_dip_s_median() {
    let mut d = DipPairs::default();
    d.round((true, true), 1, 1);
    for (b, e) in [(1, 0.2), (2, 0.2), (3, 0.1), (4, 0.6)] {
        d.add((0, b), (None, None), Some(e));
    }
    assert!(d.round((true, true), 1, 1));
    assert!((d.excess(0, 4) - 0.2).abs() < 1e-12);
    assert!((d.excess(0, 3) - 0.1).abs() < 1e-12);
}

/// Nodes 0 and 1 share ToR 0 and are slow to the four others on ToRs 1 and 2 but not
/// to each other: both are bound. Node 2, alone on ToR 1 with most of its pairs in the
/// normal, is not (a lone straggler), nor is either when the pair between them is in
/// the normal, when their ToRs are unknown, or while the dip is only an event.
#[test]
fn the_members_of_a_tor_slow_on_all_but_each_other_are_bound_to_the_normal() {
    let tors = [Some(0), Some(0), Some(1), Some(2), Some(2), Some(2)];
    let mut d = DipPairs::default();
    d.round((true, true), 1, 1);
    for a in 0..2 {
        for b in 2..6 {
            d.add((a, b), (None, None), Some(0.2));
        }
    }
    d.add((2, 3), (None, None), Some(0.2));
    assert!(!d.binds(0, &tors), "not the normal yet");
    d.round((true, true), 1, 1);
    assert!(d.binds(0, &tors) && d.binds(1, &tors));
    assert!(!d.binds(2, &tors) && !d.binds(3, &tors));
    assert!(!d.binds(0, &[None; 6]));
    let mut e = d.clone();
    e.round((true, true), 1, 1);
    e.add((0, 1), (None, None), Some(0.2));
    e.round((true, true), 1, 1);
    assert!(
        !e.binds(0, &tors),
        "slow to its ToR's member too: a straggler"
    );
}

/// A normal written and read back is the normal it was: the same pairs both ways, the
/// same shares and ToR pairs, under the same ToR numbers; with no dip on and nothing
/// else, the whole `DipPairs` is equal. No normal writes nothing.
#[test]
fn the_normal_survives_its_wire_form() {
    let mut d = DipPairs::default();
    assert_eq!(d.normal_wire(), None);
    let tors: Vec<Option<u32>> = (0..12).map(|i| Some(i / 4)).collect();
    d.topology(&tors);
    d.round((true, true), 1, 1);
    // Two pairs between ToRs 0 and 2 (a ToR pair of the normal), one with unknown
    // places, one whose end's own share was unknown (no share).
    d.add((1, 9), (Some(0), Some(2)), Some(0.2));
    d.add((2, 10), (Some(0), Some(2)), Some(0.3));
    d.add((5, 6), (None, None), None);
    assert!(d.round((true, true), 1, 1), "the dip becomes the normal");
    let w = d.normal_wire().expect("a normal");
    assert_eq!(w.pairs.len(), 3, "each pair once: {w:?}");
    assert_eq!(w.tor_pairs, [((0, 2), 4)]);
    let json = serde_json::to_vec(&w).unwrap();
    let back: NormalWire = serde_json::from_slice(&json).unwrap();
    let r = DipPairs::with_normal(back, 12).unwrap();
    assert_eq!(r, d);
    assert!(r.normal(9, 1) && r.normal(6, 5) && !r.normal(1, 10));
    // The shares as the dip left them: capped at the median of the four directions'
    // shares (0.3) when it became the normal, which moves neither.
    assert!((r.excess(1, 9) - 0.2).abs() < 1e-12 && (r.excess(10, 2) - 0.3).abs() < 1e-12);
    assert_eq!(r.excess(5, 6), 0.0);
    // The ToR pair explains a pair the dip was never seen on.
    assert!(r.explains((3, 11), (Some(0), Some(2))));
}

/// A normal no engine over the group could have written is refused, with why.
#[test]
fn a_normal_no_engine_could_write_is_refused() {
    let pair = |a: usize, b: usize| NormalPairWire {
        pair: (a, b),
        tors: None,
        shares: Some((0.2, 1)),
    };
    let good = NormalWire {
        pairs: vec![pair(0, 1), pair(0, 2)],
        tor_pairs: vec![],
        tors: vec![],
    };
    assert!(DipPairs::with_normal(good.clone(), 4).is_ok());
    let pairs = |pairs: Vec<NormalPairWire>| NormalWire {
        pairs,
        ..good.clone()
    };
    let tor_pairs = |tor_pairs: Vec<(TorPair, usize)>| NormalWire {
        tor_pairs,
        ..good.clone()
    };
    let tors = |tors: Vec<Option<u32>>| NormalWire {
        tors,
        ..good.clone()
    };
    let nan = NormalPairWire {
        shares: Some((f64::NAN, 1)),
        ..pair(0, 1)
    };
    let of_nothing = NormalPairWire {
        shares: Some((0.2, 0)),
        ..pair(0, 1)
    };
    let tor_higher_first = NormalPairWire {
        tors: Some((2, 1)),
        ..pair(0, 1)
    };
    let cases = [
        ("beyond the group", pairs(vec![pair(0, 4)])),
        ("higher first", pairs(vec![pair(2, 1)])),
        ("a node with itself", pairs(vec![pair(1, 1)])),
        ("twice", pairs(vec![pair(0, 1), pair(0, 1)])),
        ("out of order", pairs(vec![pair(0, 2), pair(0, 1)])),
        ("a share that is not finite", pairs(vec![nan])),
        ("a share of no measurement", pairs(vec![of_nothing])),
        ("a ToR pair higher first", pairs(vec![tor_higher_first])),
        ("ToR numbers for another group", tors(vec![Some(0); 3])),
        ("a ToR beyond the group", tors(vec![Some(4); 4])),
        ("more pairs counted than held", tor_pairs(vec![((0, 1), 5)])),
        ("ToR pairs twice", tor_pairs(vec![((0, 1), 2), ((0, 1), 2)])),
    ];
    for (what, w) in cases {
        let err = DipPairs::with_normal(w, 4).expect_err(what);
        assert!(!err.is_empty(), "{what}");
    }
}

/// Renumbering keeps both the dip's and the normal's pairs, and drops a gone node's.
#[test]
fn remapping_carries_the_normal() {
    let mut d = DipPairs::default();
    d.round((true, true), 1, 1);
    d.add((1, 2), (None, None), Some(0.2));
    d.add((0, 2), (None, None), Some(0.2));
    d.round((true, true), 1, 1);
    d.remap(&[None, Some(0), Some(1)]);
    assert!(d.normal(0, 1) && d.normal(1, 0));
    assert_eq!(d.normal.pairs.len(), 2);
    // ToR pairs are numbers of the old formation's table: dropped on renumbering,
    // the pairs themselves still explained.
    let mut e = DipPairs::default();
    let ab = (Some(0), Some(2));
    e.round((true, true), 1, 1);
    for (a, b) in [(1, 9), (2, 10), (3, 11)] {
        e.add((a, b), ab, Some(0.2));
    }
    e.round((true, true), 1, 1);
    e.remap(&(0..12).map(Some).collect::<Vec<_>>());
    assert!(e.explains((1, 9), ab) && !e.explains((4, 12), ab));
    e.clean(1, 9);
    e.clean(2, 10);
    assert!(e.normal(3, 11), "no ToR pair left to prune it with");
}

/// ToR numbers made again at a formation that kept every member (16 nodes, ToRs of four):
/// where the members say which ToR is which (0 and 3 swapped, 1 and 2), the ToR pairs of
/// the dip and of the normal follow their switches; a round without topology changes
/// nothing; where a member moved (node 4 to the ToR numbered 1), the ToR pairs with an end
/// on either of the two ToRs it left and joined are dropped, the pairs themselves staying
/// explained, and one between two ToRs carried stays. (Before, any change of numbers
/// dropped every ToR pair.)
#[test]
fn new_tor_numbers_carry_the_tor_pairs_the_members_tell() {
    let old: Vec<Option<u32>> = (0..16).map(|i| Some(i / 4)).collect();
    let swapped: Vec<Option<u32>> = (0..16).map(|i| Some(3 - i / 4)).collect();
    let mut d = DipPairs::default();
    d.topology(&old);
    d.round((true, true), 5, 100);
    d.add((1, 9), (Some(0), Some(2)), Some(0.2));
    d.add((1, 5), (Some(0), Some(1)), Some(0.2));
    d.add((1, 13), (Some(0), Some(3)), Some(0.2));
    d.topology(&old);
    assert!(d.explains((2, 10), (Some(0), Some(2))), "the same numbers");
    d.topology(&swapped);
    d.topology(&[]);
    // Nodes 2 and 10 are on ToRs 3 and 1 now: still the dip's ToR pair; the old numbers
    // (ToRs 0 and 2 now hold nodes 12-15 and 4-7) name nothing of the dip.
    assert!(d.explains((2, 10), (Some(3), Some(1))));
    assert!(d.explains((2, 6), (Some(3), Some(2))));
    assert!(!d.explains((14, 6), (Some(0), Some(2))), "the old numbers");
    let mut moved = swapped.clone();
    moved[4] = Some(1);
    d.topology(&moved);
    // ToRs 3 and 0 (nodes 0-3, 12-15) are carried as themselves; 2 and 1 are not.
    assert!(
        d.explains((2, 14), (Some(3), Some(0))),
        "between two carried"
    );
    assert!(!d.explains((2, 10), (Some(3), Some(1))));
    assert!(!d.explains((2, 6), (Some(3), Some(2))));
    assert!(d.explains((1, 9), (None, None)) && d.explains((1, 5), (None, None)));
    // The normal's ToR pairs follow too, in its wire form as well.
    let mut n = DipPairs::default();
    n.topology(&old);
    n.round((true, true), 1, 1);
    n.add((1, 9), (Some(0), Some(2)), Some(0.2));
    n.add((2, 10), (Some(0), Some(2)), Some(0.2));
    n.round((true, true), 1, 1);
    assert_eq!(n.normal_wire().unwrap().tor_pairs, [((0, 2), 4)]);
    n.topology(&swapped);
    let w = n.normal_wire().unwrap();
    assert_eq!((w.tor_pairs, w.tors), (vec![((1, 3), 4)], swapped));
    assert!(n.explains((3, 11), (Some(3), Some(1))));
}
