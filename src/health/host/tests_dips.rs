//! Issue 26's dips and crowds: a partial dip that lasts makes no link verdict on the pairs
//! it slows, and a crowd behind one ToR blocks that ToR's members only.

use std::collections::BTreeSet;

use super::*;
use crate::health::plan::{OwnTor, confirm_pairs};

/// A deterministic jitter in [0, 0.01) for the pair `a`, `b` in round `r` (healthy noise).
fn jitter(r: usize, a: usize, b: usize) -> f64 {
    let h = (r as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((a as u64) << 20 | b as u64)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 40) as f64 / (1u64 << 24) as f64 * 0.01
}

/// What a run of [`run_dips`] produced.
#[derive(Debug, Default)]
struct DipRun {
    /// Link verdicts, with the round they were made.
    links: Vec<(usize, (usize, usize))>,
    /// Each round's `fabric_degraded`.
    fabric: Vec<bool>,
    /// Rounds in which a dip became the normal.
    dip_normals: Vec<usize>,
    /// Quarantine recommendations (round, node).
    quarantines: Vec<(usize, usize)>,
    /// Their reasons, in the same order.
    reasons: Vec<String>,
    /// The nodes the engine asked to re-pair within their own ToR.
    within: BTreeSet<usize>,
    /// Moves to suspect (round, node).
    suspects: Vec<(usize, usize)>,
    /// Moves to confirmed (round, node).
    confirmed: Vec<(usize, usize)>,
    /// Spine verdicts, with the round they were made.
    spines: Vec<(usize, SpineVerdict)>,
}

/// Runs a 64-node group in four ToRs of 16 (node i on ToR i / 16) for `rounds` rounds,
/// the pair `a`, `b` 25 % slow in round `r` when `dipped(r, a, b)`, and the pair (50, 55)
/// (inside ToR 3) 30 % slow from round `link_from` on when given; every link request is
/// re-measured the next round, every suspect re-paired with peers on other ToRs. With
/// `straggler` (node, from), that node is 30 % slow from that round on.
fn run_dips(
    rounds: usize,
    dipped: impl Fn(usize, usize, usize) -> bool,
    link_from: Option<usize>,
    straggler: Option<(usize, usize)>,
) -> DipRun {
    let n = 64;
    let seconds = |r: usize, a: usize, b: usize| {
        let mut f = 1.0 + jitter(r, a, b);
        if dipped(r, a, b) {
            f *= 1.25;
        }
        if link_from.is_some_and(|from| r >= from) && (a.min(b), a.max(b)) == (50, 55) {
            f *= 1.3;
        }
        if straggler.is_some_and(|(x, from)| r >= from && (a == x || b == x)) {
            f *= 1.3;
        }
        f
    };
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let mut requests: Vec<(usize, usize)> = Vec::new();
    let mut confirm: Vec<usize> = Vec::new();
    let mut own_tor: Vec<usize> = Vec::new();
    let mut run = DipRun::default();
    for r in 0..rounds {
        let asked = Asked {
            confirm: &confirm,
            own_tor: &own_tor,
            states: &e.states(),
            round: e.rounds(),
        };
        let input = dip_round(n, r, &seconds, &requests, asked);
        let out = e.step(&input);
        run.links.extend(out.link_verdicts.iter().map(|&p| (r, p)));
        run.fabric.push(out.fabric_degraded);
        if out.dip_new_normal {
            run.dip_normals.push(r);
        }
        run.spines.extend(out.spine_verdict.map(|v| (r, v)));
        for t in &out.transitions {
            match t.to {
                NodeState::QuarantineRecommended => {
                    run.quarantines.push((r, t.node));
                    run.reasons.push(t.reason.clone());
                }
                NodeState::Suspect => run.suspects.push((r, t.node)),
                NodeState::Confirmed => run.confirmed.push((r, t.node)),
                _ => {}
            }
        }
        requests = out.link_requests;
        confirm = out.confirm_requests;
        own_tor = out.confirm_own_tor;
        run.within.extend(own_tor.iter().copied());
    }
    run
}

/// The re-pairings the engine asked for last round.
struct Asked<'a> {
    confirm: &'a [usize],
    /// Of `confirm`, those to re-pair within their own ToR.
    own_tor: &'a [usize],
    states: &'a [NodeState],
    round: u64,
}

impl<'a> Asked<'a> {
    /// Every suspect in `confirm` re-paired with peers on other ToRs.
    fn across(confirm: &'a [usize]) -> Self {
        Asked {
            confirm,
            own_tor: &[],
            states: &[],
            round: 0,
        }
    }
}

/// Round `r`'s input for `n` nodes on ToRs of 16 with the probe times `seconds`: a
/// permutation, the link `requests` (8 at most) re-measured and every suspect `asked`
/// re-paired with peers on other ToRs, or within its own ToR as the daemon's plan picks
/// them ([`confirm_pairs`]) when the engine asked for that.
fn dip_round(
    n: usize,
    r: usize,
    seconds: &impl Fn(usize, usize, usize) -> f64,
    requests: &[(usize, usize)],
    asked: Asked<'_>,
) -> RoundInput {
    let tors: Vec<Option<u32>> = (0..n).map(|i| Some((i / 16) as u32)).collect();
    let own = OwnTor {
        tors: &tors,
        nodes: asked.own_tor,
        round: asked.round,
    };
    let within = confirm_pairs(asked.own_tor, asked.states, &vec![true; n], 3, own);
    let across = asked
        .confirm
        .iter()
        .filter(|s| !asked.own_tor.contains(s))
        .flat_map(|&s| [13, 29, 41].map(|k| (s, (s + k) % n)));
    let stride = 1 + r % (n - 1);
    let both = |a: usize, b: usize| Probe {
        src: a,
        dst: b,
        seconds: seconds(r, a, b).max(seconds(r, b, a)),
    };
    RoundInput {
        confirmations: within
            .into_iter()
            .chain(across)
            .map(|(a, b)| both(a, b))
            .collect(),
        probes: super::tests::stride_probes(n, stride, |a, b| seconds(r, a, b)),
        link_probes: requests.iter().take(8).map(|&(a, b)| both(a, b)).collect(),
        tors,
        ..RoundInput::default()
    }
}

/// [`run_dips`] with the pairs `dipped` says slow from round 40 to `dip_end`: the link
/// verdicts.
fn run_dip(
    rounds: usize,
    dip_end: usize,
    dipped: impl Fn(usize, usize) -> bool,
    link_from: Option<usize>,
) -> Vec<(usize, (usize, usize))> {
    run_dips(
        rounds,
        |r, a, b| (40..dip_end).contains(&r) && dipped(a, b),
        link_from,
        None,
    )
    .links
}

/// Which pairs a dip slows.
type PairSet<'a> = dyn Fn(usize, usize) -> bool + 'a;

/// A fixed quarter of the pairs between ToRs (drawn by `salt`): one spine's share, about.
fn spine_pairs(salt: usize) -> impl Fn(usize, usize) -> bool {
    move |a, b| {
        let (x, y) = (a.min(b), a.max(b));
        a / 16 != b / 16 && jitter(salt, x, y) < 0.0025
    }
}

/// Issue 26 item 2: a dip on one spine's pairs (a quarter of the pairs between ToRs, none
/// within one) is a spine verdict on the four ToRs for most of the rounds it lasts, and
/// ends with it; the same share of random pairs (within ToRs too), one ToR's uplinks and
/// the pairs between two ToRs are partial events of the same weight with no spine verdict.
/// No node is recommended in any of them.
#[test]
fn a_spine_dip_is_a_spine_verdict_and_the_other_dips_are_not() {
    let tor = |x: usize| x / 16;
    let run = |dipped: &PairSet| {
        run_dips(
            360,
            |r, a, b| (40..260).contains(&r) && dipped(a, b),
            None,
            None,
        )
    };
    let spine = run(&spine_pairs(0));
    let rounds: Vec<usize> = spine.spines.iter().map(|(r, _)| *r).collect();
    let during = rounds.iter().filter(|r| (100..260).contains(*r)).count();
    assert!(during >= 120, "{during} of rounds 100-259: {rounds:?}");
    assert!(rounds.iter().all(|r| (40..300).contains(r)), "{rounds:?}");
    let (_, v) = &spine.spines[spine.spines.len() / 2];
    assert_eq!(v.tors, [0, 1, 2, 3]);
    assert_eq!((v.tor_pairs, v.inner_share), (6, 0.0));
    assert!((0.15..0.35).contains(&v.cross_share), "{v:?}");
    assert!(spine.quarantines.is_empty(), "{:?}", spine.quarantines);
    let others: [(&str, &PairSet); 3] = [
        ("random", &|a, b| jitter(1, a.min(b), a.max(b)) < 0.0025),
        ("uplinks", &|a, b| {
            tor(a) != tor(b) && (tor(a) == 2 || tor(b) == 2)
        }),
        ("tor pair", &|a, b| {
            [tor(a).min(tor(b)), tor(a).max(tor(b))] == [0, 2]
        }),
    ];
    for (name, dipped) in others {
        let other = run(dipped);
        let events = other.fabric[40..260].iter().filter(|f| **f).count();
        assert!(events >= 50, "{name}: a partial event ({events} rounds)");
        assert!(other.spines.is_empty(), "{name}: {:?}", other.spines);
        assert!(
            other.quarantines.is_empty(),
            "{name}: {:?}",
            other.quarantines
        );
    }
}

/// The pairs between ToR 0 and ToR 2 slow for 400 rounds (the "ToR pair" dip):
/// an event only in the rounds whose stride crosses them, and their pairs, re-measured in
/// the rounds between, make no link verdict (before issue 26 item 5 they did, from round
/// 122 on).
#[test]
fn a_lasting_tor_pair_dip_makes_no_link_verdict() {
    let tor = |x: usize| x / 16;
    let verdicts = run_dip(
        500,
        440,
        |a, b| [tor(a), tor(b)] == [0, 2] || [tor(a), tor(b)] == [2, 0],
        None,
    );
    assert!(verdicts.is_empty(), "{verdicts:?}");
}

/// A fixed fifth of the pairs between ToRs slow for 400 rounds (one spine of four, about):
/// it makes suspects of the nodes whose recent peers it slowed most, and must stay an event
/// all the same (its pairs make no link verdict); a degraded link inside ToR 3 from round
/// 100 is found once the dip is over. (The engine before issue 26 item 5 passes this one
/// too, in this small world; it guards the link's recall against the dip's memory.)
#[test]
fn a_lasting_spine_dip_makes_no_link_verdict_and_a_real_link_is_found_after_it() {
    let verdicts = run_dip(700, 440, spine_pairs(0), Some(100));
    let wrong: Vec<_> = verdicts
        .iter()
        .filter(|(_, p)| *p != (50, 55) && *p != (55, 50))
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    assert!(
        verdicts.iter().any(|(r, _)| *r >= 440),
        "the degraded link is found after the dip: {verdicts:?}"
    );
}

/// Issue 26 item 3 for dips: a spine dip that lasts past the shipped horizon
/// (`new_normal_rounds`, 360 rounds) becomes the normal once, and its fabric verdict ends
/// while the dip goes on; its pairs make no link verdict then or after it ends, no node is
/// recommended, and a second dip on other pairs while the first is the normal is an event
/// again. Before, the fabric verdict lasted as long as the dip did.
#[test]
fn a_dip_that_outlasts_the_horizon_becomes_the_normal_and_a_new_dip_still_shows() {
    let first = spine_pairs(0);
    let second = spine_pairs(1);
    // The first dip from round 40 to 900 (horizon 360 from its first event round), the
    // second, on pairs the first does not slow, from 650 to 800, while the first is the
    // normal and still on.
    let dipped = |r: usize, a: usize, b: usize| {
        (40..900).contains(&r) && first(a, b)
            || (650..800).contains(&r) && second(a, b) && !first(a, b)
    };
    let run = run_dips(1000, dipped, None, None);
    let horizon = HealthConfig::default().new_normal_rounds;
    assert_eq!(horizon, 360, "the shipped horizon this test is written for");
    assert!(
        run.fabric[100..400].iter().filter(|f| **f).count() > 150,
        "the dip is a fabric event before the horizon"
    );
    assert_eq!(run.dip_normals.len(), 1, "{:?}", run.dip_normals);
    let renewed = run.dip_normals[0];
    assert!(
        (40 + horizon..40 + horizon + 30).contains(&renewed),
        "renewed in round {renewed}"
    );
    let after: Vec<usize> = (renewed + 1..650).filter(|&r| run.fabric[r]).collect();
    assert!(
        after.is_empty(),
        "fabric verdict after the normal changed: {after:?}"
    );
    assert!(
        run.fabric[650..800].iter().filter(|f| **f).count() > 30,
        "the second dip is an event, judged against the rest"
    );
    assert!(run.links.is_empty(), "{:?}", run.links);
    assert!(run.quarantines.is_empty(), "{:?}", run.quarantines);
}

/// A dip on about two pairs in seven (within ToRs as well as between them, in every
/// stride), so that nearly every round of it is a partial event, lasting past the horizon: it becomes the normal once,
/// and its fabric verdict ends while it goes on, with no link verdict and no node
/// recommended. The partial-fabric base rate is learnt again then, over the rest of the
/// pairs (from a review: a separate renewal of the rate after the same horizon of events
/// in a row fired one round before the dip's, so the dip never became the normal and its
/// pairs went back into the link watch).
#[test]
fn a_dip_on_every_round_becomes_the_normal_and_the_rate_is_learnt_again() {
    // About two pairs in seven, in every stride (a third of each round's probes or so).
    let dipped =
        |r: usize, a: usize, b: usize| (40..900).contains(&r) && (a * 37 + b * 101) % 7 < 2;
    let run = run_dips(1000, dipped, None, None);
    let horizon = HealthConfig::default().new_normal_rounds;
    assert_eq!(horizon, 360, "the shipped horizon this test is written for");
    let during = run.fabric[100..400].iter().filter(|f| **f).count();
    assert!(
        during > 100,
        "the dip is a fabric event before the horizon: {during} of 300"
    );
    assert_eq!(run.dip_normals.len(), 1, "{:?}", run.dip_normals);
    let renewed = run.dip_normals[0];
    assert!(
        (40 + horizon..40 + horizon + 30).contains(&renewed),
        "renewed in round {renewed}"
    );
    let after: Vec<usize> = (renewed + 1..1000).filter(|&r| run.fabric[r]).collect();
    assert!(
        after.is_empty(),
        "fabric verdict after the normal changed: {after:?}"
    );
    assert!(run.links.is_empty(), "{:?}", run.links);
    assert!(run.quarantines.is_empty(), "{:?}", run.quarantines);
}

/// Inside a dip that became the normal (a spine's quarter of the pairs between ToRs,
/// slow from round 40 to the end), a 30 % straggler from round 600 (node 5, on ToR 0) is
/// still recommended, and no other node is; the nodes the dip touched are judged against
/// the new normal, so they stop being suspected (fewer new suspects per round after the
/// dip became the normal than before it did).
#[test]
fn a_straggler_inside_a_dip_that_became_the_normal_is_still_recommended() {
    let spine = spine_pairs(0);
    let run = run_dips(1100, |r, a, b| r >= 40 && spine(a, b), None, Some((5, 600)));
    assert_eq!(run.dip_normals.len(), 1, "{:?}", run.dip_normals);
    let renewed = run.dip_normals[0];
    assert!(renewed < 600, "renewed in round {renewed}");
    assert_eq!(
        run.quarantines.iter().map(|q| q.1).collect::<Vec<_>>(),
        [5],
        "{:?}",
        run.quarantines
    );
    let others = |from: usize, to: usize| {
        run.suspects
            .iter()
            .filter(|(r, n)| *n != 5 && (from..to).contains(r))
            .count() as f64
            / (to - from) as f64
    };
    let (before, after) = (others(60, renewed), others(renewed + 20, 1100));
    assert!(
        after < before / 2.0,
        "new suspects per round before the normal changed {before:.3}, after {after:.3}"
    );
}

/// Nodes 0 and 1 slow to every peer but each other from round 40 on (the two members of
/// a small ToR whose uplinks dipped, as the held-out world ood-1000052 has them), inside a
/// spine dip on 45 % of the pairs between ToRs that keeps the group's partial events on
/// until both became the normal (round 400). Suspects from round 46 and confirmed, their
/// slowness and the dip's cannot be told apart: frozen while the dip was an event, they
/// stay frozen once it is the normal. Without `DipPairs::binds` both were recommended two
/// rounds after the normal changed (as 56 and 57 were in ood-1000052).
#[test]
fn the_members_a_lasting_dip_slows_on_every_probe_are_not_recommended_after_it_becomes_the_normal()
{
    let spine = |a: usize, b: usize| a / 16 != b / 16 && jitter(0, a.min(b), a.max(b)) < 0.0045;
    let uplinks = |a: usize, b: usize| (a < 2) != (b < 2);
    let run = run_dips(
        1100,
        |r, a, b| r >= 40 && (spine(a, b) || uplinks(a, b)),
        None,
        None,
    );
    assert!(!run.dip_normals.is_empty(), "the dip became the normal");
    let first = |x: usize| run.suspects.iter().find(|s| s.1 == x).map(|s| s.0);
    assert!(
        first(0).is_some_and(|r| r < 100) && first(1).is_some_and(|r| r < 100),
        "both are suspects early: {:?}",
        run.suspects
    );
    // Confirmed, so that only a freeze holds them: since the rule of a ToR's slow uplinks
    // they are held before the normal changes and confirmed a few rounds after it (round
    // 404 of 400), so within a window of it.
    let renewed = run.dip_normals[0];
    let confirmed = |x: usize| run.confirmed.iter().any(|c| c.1 == x && c.0 < renewed + 10);
    assert!(
        confirmed(0) && confirmed(1),
        "both confirmed by the time the normal changed (so only a freeze holds them): {:?}",
        run.confirmed
    );
    assert!(run.quarantines.is_empty(), "{:?}", run.quarantines);
}

/// A 30 % straggler from round 200 (node 5, alone in its slowness on ToR 0) inside the
/// spine dip of the test above, which keeps the partial events on until it becomes the
/// normal (about round 400): frozen while the dip is an event, it is recommended once the
/// dip is the normal, and no other node is. Slow on every probe, most of its pairs are
/// in the normal, but it is slow to its own ToR's members as well: a straggler, not a
/// ToR's uplinks (binding it too kept doubled-noise's straggler waiting 1,199 rounds).
#[test]
fn a_straggler_that_turned_slow_during_a_dip_is_recommended_once_the_dip_is_the_normal() {
    let (run, renewed) = straggler_in_spine_dip(1100, 200);
    assert!(
        (renewed..renewed + 200).contains(&run.quarantines[0].0),
        "recommended in round {} (normal from {renewed})",
        run.quarantines[0].0
    );
}

/// A 30 % straggler (node 5, on ToR 0) from round `from` inside the spine dip above, over
/// `rounds`: the run and the round the dip became the normal, once node 5 is checked to
/// be the only node recommended.
fn straggler_in_spine_dip(rounds: usize, from: usize) -> (DipRun, usize) {
    let spine = |a: usize, b: usize| a / 16 != b / 16 && jitter(0, a.min(b), a.max(b)) < 0.0045;
    let run = run_dips(
        rounds,
        |r, a, b| r >= 40 && spine(a, b),
        None,
        Some((5, from)),
    );
    let renewed = *run.dip_normals.first().expect("the dip became the normal");
    assert_eq!(
        run.quarantines.iter().map(|q| q.1).collect::<Vec<_>>(),
        [5],
        "{:?}",
        run.quarantines
    );
    (run, renewed)
}

/// The same, with the straggler slow from 20 rounds before the dip becomes the normal.
/// Node 5 was a suspect from the dip itself (its own score the dip's share of it), so
/// the pairs measured after it turned slow carry its slowness as the dip's; each share is
/// capped at the dip's median share when the normal forms, and it is recommended (before
/// the cap it stayed confirmed to the end).
#[test]
fn a_straggler_that_turned_slow_just_before_the_normal_changed_is_still_recommended() {
    let spine = |a: usize, b: usize| a / 16 != b / 16 && jitter(0, a.min(b), a.max(b)) < 0.0045;
    let dipped = |r: usize, a: usize, b: usize| r >= 40 && spine(a, b);
    let without = run_dips(600, dipped, None, None);
    let renewed = *without
        .dip_normals
        .first()
        .expect("the dip became the normal");
    let run = run_dips(1100, dipped, None, Some((5, renewed - 20)));
    assert_eq!(
        run.quarantines.iter().map(|q| q.1).collect::<Vec<_>>(),
        [5],
        "normal from {renewed}: {:?}",
        run.quarantines
    );
}

/// 64 nodes in eight ToRs of eight (ToR-aware judging off, the shipped default): four of
/// ToR 0's members steadily 30 % slow together (a crowd), and node 60, on ToR 7, slow by
/// a different amount each round (queueing: a suspect, but never steady, so no part of a
/// crowd), its re-pairings normal. With the topology known the crowd is ToR 0's event:
/// node 60 is judged as usual (its re-pairings do not reproduce: healthy again), the
/// crowd's members are neither confirmed nor recommended, and they are named. Without
/// the topology the crowd blocks the group, node 60 included (it stays a suspect).
#[test]
fn a_crowd_behind_one_tor_blocks_that_tor_only() {
    let cycle = [1.15, 1.6, 1.2, 1.5, 1.3, 1.9, 1.12];
    let run = |topology: bool| {
        let n = 64;
        let mut e = HealthEngine::new(n, HealthConfig::default());
        let (mut confirm, mut named) = (Vec::new(), BTreeSet::new());
        let mut cleared = false;
        for r in 0..60 {
            let slow: Vec<(usize, f64)> = (0..4)
                .map(|i| (i, 1.3))
                .chain([(60, cycle[r % 7])])
                .collect();
            let mut input =
                super::tests::round(n, 1 + r % (n - 1), &slow, |i| (i % 3) as f64 * 0.002);
            if topology {
                input.tors = (0..n).map(|i| Some((i / 8) as u32)).collect();
            }
            for &s in &confirm {
                for k in [13, 21, 29] {
                    input.confirmations.push(Probe {
                        src: s,
                        dst: (s + k) % n,
                        seconds: if s < 4 { 1.3 } else { 1.0 },
                    });
                }
            }
            let out = e.step(&input);
            named.extend(out.crowd);
            cleared |= out
                .transitions
                .iter()
                .any(|t| t.node == 60 && t.to == NodeState::Healthy);
            for t in &out.transitions {
                assert!(
                    t.node >= 4 || matches!(t.to, NodeState::Suspect | NodeState::Healthy),
                    "round {r}: {t:?}"
                );
            }
            confirm = out.confirm_requests;
        }
        (cleared, named)
    };
    let (cleared, named) = run(true);
    assert!(cleared, "node 60 is judged while ToR 0's crowd lasts");
    assert_eq!(named, (0..4).collect::<BTreeSet<usize>>());
    let (cleared, _) = run(false);
    assert!(
        !cleared,
        "without the topology the crowd blocks node 60 too"
    );
}

/// Four of sixteen nodes are suspects (their windows about normal, as a dip's share of a
/// node's probes leaves them), and this round's slow probes are the four they send: a
/// quarter of the links slow at once, a partial event. The
/// tally counts probes touching a suspect less its own score (about zero here); leaving
/// them out, as before issue 26 item 5, counted only the probes the dip spared and saw
/// no event.
#[test]
fn a_dip_on_the_suspects_probes_is_still_a_partial_event() {
    let n = 16;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let quiet = |r: usize| super::tests::round(n, 1 + r % 7, &[], |i| (i % 3) as f64 * 0.002);
    for r in 0..30 {
        e.step(&quiet(r));
    }
    let mut out = RoundOutput::default();
    for i in 0..4 {
        e.set(
            NodeIx(i),
            NodeState::Suspect,
            "test".into(),
            Evidence::default(),
            &mut out,
        );
    }
    let mut input = quiet(30);
    for p in &mut input.probes {
        if p.src < 4 {
            p.seconds *= 1.25;
        }
    }
    let r = e.score_round(&input);
    assert!(r.partial.now, "the dip on the suspects' probes is an event");
}

/// A member that takes over the group's engine state after a dip became the normal takes
/// the normal with it: stepped through the same rounds, it reaches the holder's verdicts
/// (no fabric event from the dip, no link verdict, the same transitions), where the same
/// state without the normal (as a release before it was carried writes it) sees the dip
/// as an event again.
#[test]
fn a_member_that_takes_over_the_state_takes_the_dip_normal_with_it() {
    let n = 64;
    let spine = spine_pairs(0);
    let seconds = |r: usize, a: usize, b: usize| {
        let f = 1.0 + jitter(r, a, b);
        if r >= 40 && spine(a, b) { f * 1.25 } else { f }
    };
    let mut holder = HealthEngine::new(n, HealthConfig::default());
    let (mut requests, mut confirm) = (Vec::new(), Vec::new());
    let mut renewed = None;
    let mut r = 0;
    while renewed.is_none_or(|at| r < at + 20) {
        assert!(r < 1000, "the dip never became the normal");
        let out = holder.step(&dip_round(
            n,
            r,
            &seconds,
            &requests,
            Asked::across(&confirm),
        ));
        if out.dip_new_normal {
            renewed = Some(r);
        }
        requests = out.link_requests;
        confirm = out.confirm_requests;
        r += 1;
    }
    let state = holder.snapshot();
    assert!(
        String::from_utf8_lossy(&state).contains("\"dip_normal\""),
        "the state carries the normal"
    );
    let mut joined = HealthEngine::new(n, HealthConfig::default());
    joined.restore(&state).unwrap();
    assert!(
        joined.snapshot() == state,
        "the state reads back as written"
    );
    let mut without: serde_json::Value = serde_json::from_slice(&state).unwrap();
    without.as_object_mut().unwrap().remove("dip_normal");
    // A normal no engine over these nodes could hold is refused, naming the field, and
    // leaves the engine as it was.
    let mut forged = without.clone();
    forged["dip_normal"] = serde_json::json!({
        "pairs": [{"pair": [3, n], "tors": null, "shares": [0.2, 1]}],
        "tor_pairs": [],
        "tors": []
    });
    let mut taker = HealthEngine::new(n, HealthConfig::default());
    let before = taker.snapshot();
    let err = taker
        .restore(&serde_json::to_vec(&forged).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dip_normal") && err.contains("(3, 64)"),
        "{err}"
    );
    assert!(
        taker.snapshot() == before,
        "a refused state changes nothing"
    );
    let mut older = HealthEngine::new(n, HealthConfig::default());
    older
        .restore(&serde_json::to_vec(&without).unwrap())
        .unwrap();
    let (mut holder_fabric, mut older_fabric) = (0, 0);
    for r in r..r + 200 {
        let input = dip_round(n, r, &seconds, &requests, Asked::across(&confirm));
        let out = holder.step(&input);
        let j = joined.step(&input);
        older_fabric += usize::from(older.step(&input).fabric_degraded);
        holder_fabric += usize::from(out.fabric_degraded);
        assert_eq!(j.fabric_degraded, out.fabric_degraded, "round {r}");
        assert_eq!(j.link_verdicts, out.link_verdicts, "round {r}");
        assert_eq!(j.transitions, out.transitions, "round {r}");
        requests = out.link_requests;
        confirm = out.confirm_requests;
    }
    assert_eq!(holder_fabric, 0, "the dip is the normal");
    assert!(
        older_fabric >= 20,
        "without the normal the dip is an event again: {older_fabric} of 200 rounds"
    );
    // A member joins (DNS membership): the engine is renumbered and its state handed over
    // before any round of the new group; the newcomer takes it, normal and all.
    let same: Vec<Option<usize>> = (0..n).map(Some).collect();
    holder.remap(&same, n + 1);
    let grown = holder.snapshot();
    assert!(String::from_utf8_lossy(&grown).contains("\"dip_normal\""));
    let mut newcomer = HealthEngine::new(n + 1, HealthConfig::default());
    newcomer.restore(&grown).unwrap();
    assert!(
        newcomer.snapshot() == grown,
        "the grown state reads back as written"
    );
}

/// A normal that would push the state past the hand-over's size bound (the bound of the
/// releases before it was carried too) is left out of the state, so that no member refuses
/// the sender; the rest of the state is written as without a normal.
#[test]
fn a_normal_too_large_for_the_handover_is_left_out() {
    let n = 200;
    let cfg = HealthConfig::default();
    let bare = HealthEngine::new(n, cfg.clone()).snapshot();
    let bound = max_state_bytes(n, cfg.window);
    // Every pair of 200 nodes in the normal, between the same two ToRs: 19,900 pairs of
    // about 75 bytes, past the bound.
    let pairs: Vec<serde_json::Value> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .map(|(a, b)| {
            serde_json::json!({"pair": [a, b], "tors": [198, 199], "shares": [0.123_456_789_012_3, 3]})
        })
        .collect();
    let count = 2 * pairs.len();
    let mut state: serde_json::Value = serde_json::from_slice(&bare).unwrap();
    state["dip_normal"] = serde_json::json!({
        "pairs": pairs,
        "tor_pairs": [[[198, 199], count]],
        "tors": []
    });
    let big = serde_json::to_vec(&state).unwrap();
    assert!(big.len() > bound, "{} bytes against {bound}", big.len());
    let mut e = HealthEngine::new(n, cfg.clone());
    e.restore(&big).unwrap();
    assert!(
        e.snapshot() == bare,
        "the normal is left out, the rest as it was"
    );
    // One pair's normal fits and is written.
    state["dip_normal"]["pairs"] =
        serde_json::json!([{"pair": [0, 1], "tors": [198, 199], "shares": [0.25, 3]}]);
    state["dip_normal"]["tor_pairs"] = serde_json::json!([[[198, 199], 2]]);
    let small = serde_json::to_vec(&state).unwrap();
    let mut e = HealthEngine::new(n, cfg);
    e.restore(&small).unwrap();
    // (Compared as JSON values: a `Value` writes its keys in another order.)
    let written: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    assert_eq!(written, state, "a normal within the bound is written");
}

/// Issue 26 item 3, a straggler judged inside a partial event: a 30 % straggler from round
/// 60 (node 5, on ToR 0) inside the spine dip above, which keeps the partial fabric
/// verdict on until it becomes the normal (about round 400). Once its persistence horizon
/// has passed it is re-paired within its own ToR, which the dip does not reach, and
/// recommended on that evidence while the dip is still an event (before the re-pairings
/// within the ToR it waited for the normal: round 443). No other node is recommended.
#[test]
fn a_straggler_inside_a_lasting_dip_is_recommended_by_re_pairings_within_its_tor() {
    let (run, renewed) = straggler_in_spine_dip(600, 60);
    let at = run.quarantines[0].0;
    assert!(
        at < renewed,
        "recommended in round {at}, the normal from {renewed}"
    );
    assert!(run.fabric[at], "under the fabric verdict");
    assert!(run.reasons[0].contains("own ToR"), "{}", run.reasons[0]);
}

/// Two 30 % stragglers on one ToR (nodes 5 and 6, from round 60) inside the spine dip
/// above: each is confirmed while the other is, which is also how two members whose
/// paths beyond the ToR slowed look when the topology lumps them with others, so
/// neither is re-paired within the ToR nor recommended while the dip is an event; both
/// are once it is the normal.
#[test]
fn two_stragglers_on_one_tor_wait_for_the_dips_end() {
    let spine = |a: usize, b: usize| a / 16 != b / 16 && jitter(0, a.min(b), a.max(b)) < 0.0045;
    let slow = |a: usize, b: usize| [5, 6].contains(&a) || [5, 6].contains(&b);
    let dipped = |r: usize, a: usize, b: usize| r >= 40 && spine(a, b) || r >= 60 && slow(a, b);
    let run = run_dips(800, dipped, None, None);
    let renewed = *run.dip_normals.first().expect("the dip became the normal");
    let confirmed = |x: usize| run.confirmed.iter().any(|c| c.1 == x && c.0 < renewed);
    assert!(confirmed(5) && confirmed(6), "{:?}", run.confirmed);
    assert!(run.within.is_empty(), "{:?}", run.within);
    let mut nodes: Vec<usize> = run.quarantines.iter().map(|q| q.1).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, [5, 6], "{:?}", run.quarantines);
    assert!(
        run.quarantines.iter().all(|q| q.0 > renewed),
        "normal from {renewed}: {:?}",
        run.quarantines
    );
}

/// The answers a confirmed node collects within its ToR inside a dip belong to that stay
/// in the state: the straggler of the spine dip above is taken by a hard fault in the
/// round after its first answers arrived, and keeps none of them (a later episode inside
/// another dip would have mixed them with its own).
#[test]
fn answers_collected_within_the_tor_do_not_outlive_the_confirmed_state() {
    let n = 64;
    let spine = |a: usize, b: usize| a / 16 != b / 16 && jitter(0, a.min(b), a.max(b)) < 0.0045;
    let seconds = |r: usize, a: usize, b: usize| {
        let mut f = 1.0 + jitter(r, a, b);
        if r >= 40 && spine(a, b) {
            f *= 1.25;
        }
        if r >= 60 && (a == 5 || b == 5) {
            f *= 1.3;
        }
        f
    };
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let (mut requests, mut confirm, mut own_tor) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..600 {
        let asked = Asked {
            confirm: &confirm,
            own_tor: &own_tor,
            states: &e.states(),
            round: e.rounds(),
        };
        let mut input = dip_round(n, r, &seconds, &requests, asked);
        let collecting = !e.nodes[NodeIx(5)].data.within.is_empty();
        if collecting {
            input.hard_faults.push((5, "device lost".into()));
        }
        let out = e.step(&input);
        if collecting {
            assert_eq!(e.states()[5], NodeState::QuarantineRecommended);
            assert!(e.nodes[NodeIx(5)].data.within.is_empty());
            return;
        }
        (requests, confirm, own_tor) =
            (out.link_requests, out.confirm_requests, out.confirm_own_tor);
    }
    panic!("node 5 never collected answers within its ToR");
}
