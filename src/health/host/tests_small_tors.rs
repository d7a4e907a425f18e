//! ToRs too small for a crowd or a fitted level: every member slow at once is the ToR's.
//!
//! The worlds here are written out in the tests: a group of 16 nodes (64 in one test) in
//! ToRs of two (nodes 2k and 2k + 1; of four in one test), one probe per node per round on
//! a stride drawn afresh each round (a stride that steps by one would pair each node with
//! the same run of neighbours for a whole window), and re-pairings with three healthy peers
//! whenever the engine asks. At the shipped settings, but for the tests that turn
//! `health.tor_aware` on to show the rule holds there too.

use std::collections::{BTreeMap, BTreeSet};

use super::score::{Window, whole_tor_slow};
use super::tests::{pcie, stride_probes};
use super::*;

/// What one run gives: each node's highest state, the round each node was first
/// recommended for quarantine, the rounds each ToR had a verdict (and the last verdict's
/// excess, and the first verdict's round), the ToRs judged in every round, and every
/// transition to confirmed or recommended.
struct Run {
    highest: Vec<NodeState>,
    raised: Vec<Transition>,
    recommended: Vec<Option<usize>>,
    tor_verdicts: BTreeMap<u32, (usize, f64, usize)>,
    judged_always: Option<BTreeSet<u32>>,
}

/// A world of `n` nodes in ToRs of `tor_size` (two by default), run for `rounds` rounds.
/// From round 20 on, every probe touching a member of a ToR of `slow_tors` is that ToR's
/// factor slower (it crosses a ToR once, also between its two members), and every probe
/// touching a node of `stragglers` its own factor slower on top. `signs` nodes show a PCIe
/// sign in every round (evidence congestion cannot give, so that a straggler does not wait
/// for the persistence horizon). `topology` gives the engine the ToRs; `tor_aware` turns
/// `health.tor_aware` on.
struct World<'a> {
    n: usize,
    rounds: usize,
    slow_tors: &'a [(u32, f64)],
    stragglers: &'a [(usize, f64)],
    signs: &'a [usize],
    /// Nodes whose own counters report congestion in every round from round 20 on.
    congested: &'a [usize],
    topology: bool,
    tor_aware: bool,
    /// A fixed factor on every probe between two nodes (the links' own offsets) in
    /// round `r` (`link_offset(r, a, b)`), from round 20 on, re-pairings included.
    link_offset: fn(usize, usize, usize) -> f64,
    /// The round from which `stragglers` are no slower (they recovered).
    straggling_until: usize,
    /// Members of each ToR (node `i` is on ToR `i / tor_size`).
    tor_size: usize,
}

impl Default for World<'_> {
    fn default() -> Self {
        Self {
            n: 16,
            rounds: 200,
            slow_tors: &[],
            stragglers: &[],
            signs: &[],
            congested: &[],
            topology: true,
            tor_aware: false,
            link_offset: |_, _, _| 1.0,
            straggling_until: usize::MAX,
            tor_size: 2,
        }
    }
}

/// Runs `w`.
fn run(w: &World) -> Run {
    let n = w.n;
    let (slow_tors, stragglers, topology) = (w.slow_tors, w.stragglers, w.topology);
    let tor = |i: usize| (i / w.tor_size) as u32;
    let seconds = |r: usize, a: usize, b: usize| {
        let mut f = 1.0 + (a % 3) as f64 * 0.002;
        if r >= 20 {
            f *= (w.link_offset)(r, a, b);
            for &(t, x) in slow_tors {
                if tor(a) == t || tor(b) == t {
                    f *= x;
                }
            }
            for &(s, x) in stragglers.iter().filter(|_| r < w.straggling_until) {
                if a == s || b == s {
                    f *= x;
                }
            }
        }
        f
    };
    let cfg = HealthConfig {
        tor_aware: w.tor_aware,
        ..HealthConfig::default()
    };
    let mut e = HealthEngine::new(n, cfg);
    let mut confirm: Vec<usize> = Vec::new();
    let mut got = Run {
        highest: vec![NodeState::Healthy; n],
        raised: Vec::new(),
        recommended: vec![None; n],
        tor_verdicts: BTreeMap::new(),
        judged_always: None,
    };
    let rank = |s: NodeState| match s {
        NodeState::QuarantineRecommended => 3,
        NodeState::Confirmed => 2,
        NodeState::Suspect => 1,
        _ => 0,
    };
    for r in 0..w.rounds {
        let stride = 1 + draw(r as u64) % (n - 1);
        let mut input = RoundInput {
            probes: stride_probes(n, stride, |a, b| seconds(r, a, b)),
            tors: if topology {
                (0..n).map(|i| Some(tor(i))).collect()
            } else {
                Vec::new()
            },
            ..RoundInput::default()
        };
        for &s in w.signs {
            pcie(&mut input, s);
        }
        if r >= 20 {
            input.congested.extend_from_slice(w.congested);
        }
        // Re-pairing peers are known-good, as the daemon picks them: the first three
        // healthy nodes 4, 8, 12, … places on.
        let states = e.states();
        for &s in &confirm {
            let peers = (1..n / 4)
                .map(|k| (s + 4 * k) % n)
                .filter(|&p| states[p] == NodeState::Healthy)
                .take(3);
            for p in peers {
                input.confirmations.push(Probe {
                    src: s,
                    dst: p,
                    seconds: seconds(r, s, p),
                });
            }
        }
        let out = e.step(&input);
        confirm = out.confirm_requests.clone();
        record(&mut got, &out, r);
        for (i, s) in e.states().into_iter().enumerate() {
            if rank(s) > rank(got.highest[i]) {
                got.highest[i] = s;
            }
            if s == NodeState::QuarantineRecommended && got.recommended[i].is_none() {
                got.recommended[i] = Some(r);
            }
        }
    }
    got
}

/// Adds round `r`'s transitions to confirmed or recommended, its ToR verdicts and the
/// ToRs it judged to `got`.
fn record(got: &mut Run, out: &RoundOutput, r: usize) {
    let raised = [NodeState::Confirmed, NodeState::QuarantineRecommended];
    got.raised.extend(
        out.transitions
            .iter()
            .filter(|t| raised.contains(&t.to))
            .cloned(),
    );
    for v in &out.tor_verdicts {
        let t = got.tor_verdicts.entry(v.tor).or_insert((0, 0.0, r));
        *t = (t.0 + 1, v.excess, t.2);
    }
    let judged: BTreeSet<u32> = out.tors_judged.iter().copied().collect();
    got.judged_always = Some(match got.judged_always.take() {
        Some(all) => all.intersection(&judged).copied().collect(),
        None => judged,
    });
}

/// A fixed pseudo-random draw from `seed` (splitmix64): the same worlds on every run.
pub(super) fn draw(seed: u64) -> usize {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as usize
}

/// Rounds enough for the persistence horizon twice over after the slowdown starts.
const LONG: usize = 20 + 2 * UNCORROBORATED_HOLD + 40;

/// Whether `node` never went past suspect.
fn kept(got: &Run, node: usize) -> bool {
    matches!(got.highest[node], NodeState::Healthy | NodeState::Suspect)
}

#[test]
fn both_members_of_a_slow_tor_of_two_are_never_recommended_however_long_it_lasts() {
    for tor_aware in [false, true] {
        let got = run(&World {
            rounds: LONG,
            slow_tors: &[(3, 1.3)],
            tor_aware,
            ..World::default()
        });
        for i in 0..16 {
            assert!(
                kept(&got, i),
                "tor_aware {tor_aware}: node {i} reached {:?}",
                got.highest[i]
            );
        }
    }
}

/// The slow ToR of two is named: a ToR verdict on ToR 3 from 8 rounds of its event (each
/// after the slowdown starts at round 20, so not before round 27) to the end, its excess
/// the members' slowdown (ln 1.3), and no verdict on any other ToR. Every ToR of the group is judged in
/// every round (its `hcclwatch_tor_degraded` series is always there), and without the
/// topology no ToR is named.
#[test]
fn a_slow_tor_of_two_is_named() {
    let got = run(&World {
        slow_tors: &[(3, 1.3)],
        ..World::default()
    });
    let (rounds, excess, first) = got.tor_verdicts[&3];
    assert!(first >= 27, "ToR 3 named from round {first}");
    // The members' windows (10 rounds) hold a majority of slow rounds from about round 26.
    assert!(rounds >= 200 - 26 - 8 - 2, "ToR 3 named in {rounds} rounds");
    assert!((excess - 1.3f64.ln()).abs() < 0.03, "excess {excess}");
    assert_eq!(got.tor_verdicts.keys().collect::<Vec<_>>(), vec![&3]);
    assert_eq!(got.judged_always, Some((0..8).collect()));
    let blind = run(&World {
        slow_tors: &[(3, 1.3)],
        topology: false,
        ..World::default()
    });
    assert!(blind.tor_verdicts.is_empty());
}

/// Two causes at once are not the ToR: its two members slow by 30 % and 60 % (a straggler
/// and a congested uplink, say: they differ by more than the entry threshold), or slow
/// alike while one's own counters report congestion, make no ToR verdict.
#[test]
fn two_members_slow_for_two_causes_are_not_their_tor() {
    let apart = run(&World {
        stragglers: &[(6, 1.3), (7, 1.6)],
        ..World::default()
    });
    assert!(apart.tor_verdicts.is_empty(), "{:?}", apart.tor_verdicts);
    let counted = run(&World {
        slow_tors: &[(3, 1.3)],
        congested: &[7],
        ..World::default()
    });
    assert!(
        counted.tor_verdicts.is_empty(),
        "{:?}",
        counted.tor_verdicts
    );
}

#[test]
fn without_the_topology_the_same_slow_tor_costs_both_members_their_node() {
    // The control for the test above: the same world with the ToRs unknown. Two slow
    // nodes are too few for a crowd, so both are recommended once the slowdown outlasts
    // the persistence horizon; what keeps them in service above is their ToR.
    let got = run(&World {
        rounds: LONG,
        slow_tors: &[(3, 1.3)],
        topology: false,
        ..World::default()
    });
    for i in [6, 7] {
        assert_eq!(got.highest[i], NodeState::QuarantineRecommended, "node {i}");
        assert!(got.recommended[i].unwrap() >= 20 + UNCORROBORATED_HOLD);
    }
}

#[test]
fn a_straggler_inside_a_slow_tor_of_two_is_judged_against_its_partner() {
    // ToR 3 is 20 % slow and node 6 a further 30 %: 30 % slower than the member that
    // shares its ToR, beyond the 8 % entry threshold, so it is its own, and is recommended
    // about as soon as the same straggler behind a ToR that is not slow.
    let inside = World {
        rounds: LONG,
        slow_tors: &[(3, 1.2)],
        stragglers: &[(6, 1.3)],
        signs: &[6],
        ..World::default()
    };
    let got = run(&inside);
    let alone = run(&World {
        slow_tors: &[],
        ..inside
    });
    let (at, alone_at) = (got.recommended[6].unwrap(), alone.recommended[6].unwrap());
    assert!(at <= alone_at + 5, "{at} against {alone_at} alone");
    // Its partner, slow with the ToR, is never beyond suspect, also once node 6 is
    // recommended (a recommended member still counts as a member of its ToR).
    assert!(at < LONG - UNCORROBORATED_HOLD);
    assert!(kept(&got, 7), "node 7 reached {:?}", got.highest[7]);
    // The control: without the topology the partner is a lone slow node, recommended
    // once its slowdown outlasts the persistence horizon.
    let blind = run(&World {
        topology: false,
        ..inside
    });
    assert_eq!(blind.highest[7], NodeState::QuarantineRecommended);
}

#[test]
fn a_member_within_the_entry_threshold_of_its_partner_is_the_tors_not_its_own() {
    // ToR 3 20 % slow; node 6 a further 5 % (within the 8 % entry threshold of its
    // partner) with a hardware sign in every round: its ToR's, never recommended. A
    // further 12 % (beyond it) is its own, and is.
    let near = World {
        slow_tors: &[(3, 1.2)],
        stragglers: &[(6, 1.05)],
        signs: &[6],
        ..World::default()
    };
    assert!(kept(&run(&near), 6));
    let beyond = run(&World {
        stragglers: &[(6, 1.12)],
        ..near
    });
    assert_eq!(beyond.highest[6], NodeState::QuarantineRecommended);
    // The control: without the topology the 5 % one is recommended on its sign.
    let blind = run(&World {
        topology: false,
        ..near
    });
    assert_eq!(blind.highest[6], NodeState::QuarantineRecommended);
}

#[test]
fn a_member_that_stands_out_of_its_slow_tor_is_confirmed_only_beyond_the_tor() {
    // ToR 3 (nodes 6, 7) 30 % slow; node 7's links to every node but the three its
    // re-pairings meet (11, 15 and 3: the harness pairs a suspect with nodes 4, 8, 12
    // places on) carry 25 % of their own, so its window stands out of its partner's by
    // far more than the entry threshold, while its re-pairings show the ToR's 30 % and
    // nothing beyond. With a hardware sign in every round (no horizon to wait), it is
    // never confirmed: the ToR explains what the re-pairings reproduce. Before, they
    // reproduced anything above the entry threshold, the ToR's slowdown included, and
    // it was recommended (held out, members of slow ToRs were cordoned so).
    let offsets = World {
        slow_tors: &[(3, 1.3)],
        signs: &[7],
        link_offset: |_, a, b| offset_but_where_re_paired(a, b),
        ..World::default()
    };
    let got = run(&offsets);
    assert!(kept(&got, 7), "node 7 reached {:?}", got.highest[7]);
    // The control: the same 25 % on every probe of node 7, its re-pairings included, is
    // a straggler inside the slow ToR, and is recommended.
    let straggler = run(&World {
        stragglers: &[(7, 1.25)],
        link_offset: |_, _, _| 1.0,
        ..offsets
    });
    assert_eq!(straggler.highest[7], NodeState::QuarantineRecommended);
}

#[test]
fn a_verdict_beyond_a_slow_tor_names_the_tors_level_in_its_reason_and_evidence() {
    // ToR 3 (nodes 6, 7) 30 % slow, node 7 a further 25 % with a hardware sign: its
    // re-pairings show about 62.5 % (1.3 × 1.25), of which the ToR's 30 % is the event's
    // (its partner, the typical member, is that slow). Its confirmation and quarantine
    // say so: the level, ln 1.3, in `tor_event_log_level`, and in the reason the share
    // beyond it. The control, the same straggler behind a ToR that is not slow, has
    // neither.
    let inside = World {
        slow_tors: &[(3, 1.3)],
        stragglers: &[(7, 1.25)],
        signs: &[7],
        ..World::default()
    };
    let got = run(&inside);
    let raised: Vec<&Transition> = got.raised.iter().filter(|t| t.node == 7).collect();
    let states: Vec<NodeState> = raised.iter().map(|t| t.to).collect();
    assert_eq!(
        states,
        [NodeState::Confirmed, NodeState::QuarantineRecommended]
    );
    for t in &raised {
        let level = tor_event_level(t).unwrap_or_else(|| panic!("no level: {t:?}"));
        assert!((level - 1.3f64.ln()).abs() < 0.05, "{level}: {t:?}");
        // "…, N% beyond the M% its ToR's event leaves in them": M is the ToR's 30 %.
        let said: f64 = t
            .reason
            .split("% its ToR's event leaves in them")
            .next()
            .and_then(|head| head.rsplit("beyond the ").next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("no event in the reason: {}", t.reason));
        assert!((25.0..35.0).contains(&said), "{}", t.reason);
    }
    let alone = run(&World {
        slow_tors: &[],
        ..inside
    });
    let raised: Vec<&Transition> = alone.raised.iter().filter(|t| t.node == 7).collect();
    assert_eq!(raised.len(), 2, "{raised:?}");
    for t in raised {
        assert_eq!(tor_event_level(t), None, "{t:?}");
        assert!(!t.reason.contains("ToR's event"), "{}", t.reason);
    }
}

/// The level of the ToR event a transition's re-pairings were judged beyond, from its
/// evidence (`tor_event_log_level`).
fn tor_event_level(t: &Transition) -> Option<f64> {
    t.evidence
        .iter()
        .find(|(k, _)| k == "tor_event_log_level")
        .map(|(_, v)| *v)
}

/// 25 % on node 7's links to every node but the three its re-pairings meet (11, 15, 3).
fn offset_but_where_re_paired(a: usize, b: usize) -> f64 {
    let other = if a == 7 { b } else { a };
    if (a == 7 || b == 7) && ![11, 15, 3].contains(&other) {
        1.25
    } else {
        1.0
    }
}

#[test]
fn a_confirmed_member_of_a_slow_tor_is_recommended_only_beyond_the_tor() {
    // ToR 3 30 % slow from round 20; node 7 a straggler (25 % more on every probe) until
    // round 60, confirmed on it; from then on it is no slower itself, but its links but
    // those its re-pairings meet carry 25 %, so its window still stands out of its
    // partner's. No hardware sign: it waits the persistence horizon, and the second
    // re-pairing then shows the ToR's 30 % and nothing beyond: not recommended (before,
    // anything above the entry threshold reproduced, and it was).
    let got = run(&World {
        rounds: LONG,
        slow_tors: &[(3, 1.3)],
        stragglers: &[(7, 1.25)],
        straggling_until: 60,
        link_offset: |r, a, b| {
            if r >= 60 {
                offset_but_where_re_paired(a, b)
            } else {
                1.0
            }
        },
        ..World::default()
    });
    assert!(
        matches!(got.highest[7], NodeState::Confirmed),
        "node 7 reached {:?}",
        got.highest[7]
    );
}

#[test]
fn a_straggler_whose_partner_is_fine_is_recommended_as_without_topology() {
    // A guard against the rule reaching too far (it passes without the rule too): a
    // straggler whose partner is not slow is judged exactly as before.
    let w = World {
        stragglers: &[(6, 1.3)],
        signs: &[6],
        ..World::default()
    };
    let with = run(&w);
    let without = run(&World {
        topology: false,
        ..w
    });
    assert_eq!(with.highest[6], NodeState::QuarantineRecommended);
    assert_eq!(with.recommended[6], without.recommended[6]);
    assert_eq!(with.highest[7], NodeState::Healthy);
}

#[test]
fn two_stragglers_that_are_their_tors_only_members_wait_while_both_are_slow() {
    // The rule's documented price: two equally slow members of one ToR of two look like
    // their ToR and are not recommended while both are slow, hardware signs or not.
    let w = World {
        stragglers: &[(6, 1.3), (7, 1.3)],
        signs: &[6, 7],
        ..World::default()
    };
    let got = run(&w);
    for i in [6, 7] {
        assert!(kept(&got, i), "node {i} reached {:?}", got.highest[i]);
    }
    // The ToRs unknown, both are recommended on their signs.
    let without = run(&World {
        topology: false,
        ..w
    });
    for i in [6, 7] {
        assert!(without.recommended[i].is_some(), "node {i}");
    }
}

#[test]
fn slow_tors_of_two_do_not_make_a_crowd_that_hides_a_straggler_elsewhere() {
    // In a group of 64, two ToRs of two slow at once (four nodes: with the straggler,
    // more than 5 % of the group and at least three) and a straggler behind a third, with
    // a hardware sign. The four are their ToRs' events, not a crowd of the group: the
    // straggler is recommended about as soon as without them.
    let w = World {
        n: 64,
        slow_tors: &[(1, 1.3), (4, 1.3)],
        stragglers: &[(10, 1.3)],
        signs: &[10],
        ..World::default()
    };
    let got = run(&w);
    let alone = run(&World {
        slow_tors: &[],
        ..w
    });
    let (at, alone_at) = (got.recommended[10].unwrap(), alone.recommended[10].unwrap());
    assert!(at <= alone_at + 5, "{at} against {alone_at} alone");
    for i in [2, 3, 8, 9] {
        assert!(kept(&got, i), "node {i} reached {:?}", got.highest[i]);
    }
    // Without the topology the five slow nodes are a crowd of the group, and the straggler
    // waits for it to end (here it never does).
    let blind = run(&World {
        topology: false,
        ..w
    });
    assert_eq!(blind.recommended[10], None);
}

/// Windows of the given scores, full; each `large` when above `entry`.
fn windows(scores: &[f64], entry: f64) -> Vec<Window> {
    scores
        .iter()
        .map(|&score| Window {
            score,
            zmed: 10.0,
            spread: 0.0,
            elevated: score > entry,
            large: score > entry,
            agrees: false,
        })
        .collect()
}

#[test]
fn whole_tors_are_judged_against_their_typical_member_among_the_judged_ones() {
    let entry = 1.08f64.ln();
    let all = |_: usize| true;
    // ToR 0: four members, the least slow spared a little by the event: against the
    // lower median (0.25), all four are the ToR's (against the least slow, 0.10, the
    // other three would be exposed).
    let w = windows(&[0.10, 0.25, 0.27, 0.30], entry);
    let places = [Some(0); 4];
    assert_eq!(
        whole_tor_slow(&w, &places, &all, entry),
        (0..4).collect::<BTreeSet<_>>()
    );
    // A fifth member 0.45 slow, beyond the lower median (0.27) by more than the entry
    // threshold: its own.
    let w = windows(&[0.10, 0.25, 0.27, 0.30, 0.45], entry);
    let got = whole_tor_slow(&w, &[Some(0); 5], &all, entry);
    assert_eq!(got, (0..4).collect::<BTreeSet<_>>());
    // One member not slow: no ToR event.
    let w = windows(&[0.25, 0.02, 0.27], entry);
    assert!(whole_tor_slow(&w, &[Some(0); 3], &all, entry).is_empty());
    // A member not judged (absent, a hard fault) leaves one judged member: no ToR event;
    // and nodes past the end of `places` have no ToR.
    let w = windows(&[0.25, 0.30, 0.25, 0.30], entry);
    let places = [Some(0), Some(0), Some(1)];
    assert!(whole_tor_slow(&w, &places, &|i| i != 1, entry).is_empty());
    // Two ToRs, both whole: each judged on its own members.
    let places = [Some(0), Some(0), Some(1), Some(1)];
    assert_eq!(
        whole_tor_slow(&w, &places, &all, entry),
        (0..4).collect::<BTreeSet<_>>()
    );
}

/// A ToR holding more than half of the counted nodes is not judged as a small ToR: every
/// member slow against the round is what it cannot be (the round's median is its own),
/// and one holding the whole group is the group, whose slowdown is the fabric verdict's.
/// Four counted nodes behind ToR 0 and every one slow: no ToR judged; with two more
/// behind ToR 1, ToR 0 (four of six) still is not, and ToR 1 (two of six) is, its event
/// this round (both members slow).
#[test]
fn a_tor_holding_most_of_the_group_is_no_small_tor() {
    let slow: BTreeSet<usize> = (0..6).collect();
    let scores = [0.3; 6];
    let judge = |places: &[Option<u32>]| {
        let got = super::score::small_tors(places, &|_| true, &|_| false, &scores, &slow, &[]);
        got.into_iter()
            .map(|(v, m, event)| (v.tor, m, event))
            .collect::<Vec<_>>()
    };
    assert!(judge(&[Some(0); 4]).is_empty());
    let two = [Some(0), Some(0), Some(0), Some(0), Some(1), Some(1)];
    assert_eq!(judge(&two), vec![(1, vec![4, 5], true)]);
}

/// The levels a member's re-pairings are judged beyond, worked out by hand: the whole
/// ToR's typical member (the lower median), and its uplinks' mark less what `tor_aware`
/// took out of the probes already. A re-pairing with a peer behind another ToR crosses
/// both (the larger); one within the ToR only the first. A node not judged, or behind a
/// ToR with neither, has none.
#[test]
fn the_tor_event_levels_are_the_typical_member_and_the_uplinks_less_what_was_taken() {
    let entry = 1.08f64.ln();
    // ToR 0 (nodes 0-2) slow as a whole (typical member 0.24), its uplinks marked 0.30 of
    // which 0.05 was taken out (0.25 left); ToR 1 (nodes 3-5) marked 0.20 and 0.32, of
    // which 0.25 was taken (the larger counts: 0.07 left); ToR 2 (node 6 alone) marked
    // 0.10 with 0.30 taken (never below zero); ToR 3 (node 7 alone, slow) nothing; node
    // 8 behind ToR 0 but not judged.
    let w = windows(&[0.20, 0.24, 0.50, 0.0, 0.30, 0.0, 0.4, 0.4, 0.4], entry);
    let places = [0, 0, 0, 1, 1, 1, 2, 3, 0].map(Some);
    let uplinks = [(0, 0.30), (1, 0.20), (1, 0.32), (2, 0.10)];
    let taken = BTreeMap::from([(0, 0.05), (1, 0.25), (2, 0.30)]);
    let levels = super::score::tor_event_levels(&w, &places, &|i| i != 8, (&uplinks, &taken));
    let near = |x: Option<f64>, y: f64| x.is_some_and(|x| (x - y).abs() < 1e-12);
    for (i, l) in levels.iter().enumerate().take(3) {
        assert!(
            l.whole == Some(0.24) && near(l.uplinks, 0.25),
            "node {i}: {l:?}"
        );
        assert!(near(Some(l.across()), 0.25) && l.within() == 0.24, "{l:?}");
    }
    for (i, l) in levels.iter().enumerate().take(6).skip(3) {
        assert!(
            l.whole.is_none() && near(l.uplinks, 0.07),
            "node {i}: {l:?}"
        );
        assert!(near(Some(l.across()), 0.07) && l.within() == 0.0, "{l:?}");
    }
    assert!(levels[6].whole.is_none() && near(levels[6].uplinks, 0.0));
    // Node 7 is slow, but its ToR's only member: no ToR event; node 8 is not judged.
    for l in &levels[7..] {
        assert_eq!(*l, Default::default());
        assert_eq!(l.across(), 0.0);
    }
}

#[test]
fn a_straggler_behind_slow_uplinks_names_the_events_level_in_its_reason() {
    // ToRs of four; ToR 3's uplinks (nodes 12-15 to every other node) 30 % slow from
    // round 20 on, the pairs among them not; node 15 a further 25 % with a hardware sign.
    // Its re-pairings leave the ToR, so they cross the uplinks: its confirmation and
    // quarantine are judged beyond the event's level and say so. Here every member's
    // window is slow (most of their probes leave the ToR), so the level is the typical
    // member's as well as the uplinks' mark; the larger is taken, whichever it is. The
    // control without the straggler: nobody is raised past suspect.
    let w = World {
        stragglers: &[(15, 1.25)],
        signs: &[15],
        link_offset: |_, a, b| {
            if (a / 4 == 3) != (b / 4 == 3) {
                1.3
            } else {
                1.0
            }
        },
        tor_size: 4,
        ..World::default()
    };
    let got = run(&w);
    let raised: Vec<&Transition> = got.raised.iter().filter(|t| t.node == 15).collect();
    let states: Vec<NodeState> = raised.iter().map(|t| t.to).collect();
    assert_eq!(
        states,
        [NodeState::Confirmed, NodeState::QuarantineRecommended]
    );
    for t in &raised {
        let level = tor_event_level(t).unwrap_or_else(|| panic!("no level: {t:?}"));
        // Residuals are against the round median, which the probes through the slow
        // uplinks (two fifths of them) move up: the level is part of the 30 %. (Measured
        // here: about 22 % and 14 %; the bound only says it is there and no more.)
        assert!(level > 0.05 && level <= 1.3f64.ln(), "{level}: {t:?}");
        assert!(
            t.reason.contains("its ToR's event leaves in them"),
            "{}",
            t.reason
        );
    }
    let alone = run(&World {
        stragglers: &[],
        signs: &[],
        ..w
    });
    for i in 12..16 {
        assert!(kept(&alone, i), "node {i} reached {:?}", alone.highest[i]);
    }
}
