//! Issue 26's dips and crowds: a partial dip that lasts makes no link verdict on the pairs
//! it slows, and a crowd behind one ToR blocks that ToR's members only.

use std::collections::BTreeSet;

use super::*;

/// A deterministic jitter in [0, 0.01) for the pair `a`, `b` in round `r` (healthy noise).
fn jitter(r: usize, a: usize, b: usize) -> f64 {
    let h = (r as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((a as u64) << 20 | b as u64)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 40) as f64 / (1u64 << 24) as f64 * 0.01
}

/// Runs a 64-node group in four ToRs of 16 (node i on ToR i / 16) for `rounds` rounds,
/// the pairs `dipped` says 25 % slow from round 40 to `dip_end`, and the pair (50, 55)
/// (inside ToR 3) 30 % slow from round `link_from` on when given; every link request is
/// re-measured the next round, every suspect re-paired with peers on other ToRs. Returns
/// the link verdicts, with the round they were made.
fn run_dip(
    rounds: usize,
    dip_end: usize,
    dipped: impl Fn(usize, usize) -> bool,
    link_from: Option<usize>,
) -> Vec<(usize, (usize, usize))> {
    let n = 64;
    let seconds = |r: usize, a: usize, b: usize| {
        let mut f = 1.0 + jitter(r, a, b);
        if (40..dip_end).contains(&r) && dipped(a, b) {
            f *= 1.25;
        }
        if link_from.is_some_and(|from| r >= from) && (a.min(b), a.max(b)) == (50, 55) {
            f *= 1.3;
        }
        f
    };
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let mut requests: Vec<(usize, usize)> = Vec::new();
    let mut confirm: Vec<usize> = Vec::new();
    let mut verdicts = Vec::new();
    for r in 0..rounds {
        let stride = 1 + r % (n - 1);
        let confirmations = confirm
            .iter()
            .flat_map(|&s| [13, 29, 41].map(|k| (s, (s + k) % n)))
            .map(|(a, b)| Probe {
                src: a,
                dst: b,
                seconds: seconds(r, a, b).max(seconds(r, b, a)),
            })
            .collect();
        let input = RoundInput {
            confirmations,
            probes: (0..n)
                .map(|i| {
                    let j = (i + stride) % n;
                    Probe {
                        src: i,
                        dst: j,
                        seconds: seconds(r, i, j),
                    }
                })
                .collect(),
            link_probes: requests
                .iter()
                .take(8)
                .map(|&(a, b)| Probe {
                    src: a,
                    dst: b,
                    seconds: seconds(r, a, b).max(seconds(r, b, a)),
                })
                .collect(),
            tors: (0..n).map(|i| Some((i / 16) as u32)).collect(),
            ..RoundInput::default()
        };
        let out = e.step(&input);
        verdicts.extend(out.link_verdicts.iter().map(|&p| (r, p)));
        requests = out.link_requests;
        confirm = out.confirm_requests;
    }
    verdicts
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
    let spine = |a: usize, b: usize| {
        let (x, y) = (a.min(b), a.max(b));
        a / 16 != b / 16 && jitter(0, x, y) < 0.0025
    };
    let verdicts = run_dip(700, 440, spine, Some(100));
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
