//! Stragglers whose slowdown varies from round to round: held by hardware evidence, or
//! after the persistence horizon when their sending and receiving probes move as one;
//! never when each probe is slowed by its own amount, as queueing does.

use super::tests::{pcie, recommended_with, repairings, round};
use super::*;

/// How [`scattered_run`] treats node 5 in each round.
struct Scattered {
    /// Its hardware sign in every round.
    signs: bool,
    /// Its counters report congestion in round r.
    congested: fn(usize) -> bool,
    /// Its first this many re-pairing rounds while it is confirmed land in a quick moment
    /// (unslowed), whatever its window.
    quick_confirmed: usize,
    /// Each of its permutation probes slowed by its own factor (the probe it receives
    /// takes the factor three places further along the cycle), as queueing behind other
    /// traffic slows them; otherwise both by the round's, as a component does.
    per_probe: bool,
}

/// Node 5 of 16 slow by a different amount each round, by the cycle of factors below
/// (a straggler that varies, or queueing behind other traffic), for `rounds` rounds,
/// re-paired whenever the engine asks, as `how` says. Returns the round it was
/// recommended for quarantine in and the reason, and whether it was ever sent from
/// confirmed back to healthy.
fn scattered_run(rounds: usize, how: Scattered) -> (Option<(usize, String)>, bool) {
    let n = 16;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let cycle = [1.15, 1.6, 1.2, 1.5, 1.3, 1.9, 1.12];
    let mut confirm = Vec::new();
    let mut cleared = false;
    let mut quick_left = how.quick_confirmed;
    for r in 0..rounds {
        let f = cycle[r % cycle.len()];
        let mut input = if how.per_probe {
            let mut input = round(n, 1 + r % 7, &[], |i| (i % 3) as f64 * 0.002);
            for p in &mut input.probes {
                if p.src == 5 {
                    p.seconds *= f;
                } else if p.dst == 5 {
                    p.seconds *= cycle[(r + 3) % cycle.len()];
                }
            }
            input
        } else {
            round(n, 1 + r % 7, &[(5, f)], |i| (i % 3) as f64 * 0.002)
        };
        if how.signs {
            pcie(&mut input, 5);
        }
        if (how.congested)(r) {
            input.congested.push(5);
        }
        let quick = !confirm.is_empty() && e.states()[5] == NodeState::Confirmed && quick_left > 0;
        quick_left -= usize::from(quick);
        repairings(&mut input, &confirm, n, |s| {
            if quick {
                1.0
            } else {
                cycle[(r + s) % cycle.len()]
            }
        });
        let out = e.step(&input);
        cleared |= out
            .transitions
            .iter()
            .any(|t| t.node == 5 && t.from == NodeState::Confirmed && t.to == NodeState::Healthy);
        if let Some(t) = out
            .transitions
            .iter()
            .find(|t| t.node == 5 && t.to == NodeState::QuarantineRecommended)
        {
            return (Some((r, t.reason.clone())), cleared);
        }
        confirm = out.confirm_requests;
    }
    (None, cleared)
}

/// [`scattered_run`]'s recommendation, with signs or not and congestion as `congested`
/// says, re-pairings never quick, its probes slowed alike in each round.
fn scattered_recommended_at(
    rounds: usize,
    signs: bool,
    congested: fn(usize) -> bool,
) -> Option<(usize, String)> {
    let how = Scattered {
        signs,
        congested,
        quick_confirmed: 0,
        per_probe: false,
    };
    scattered_run(rounds, how).0
}

/// [`scattered_run`]'s recommendation without signs, each probe slowed by its own factor
/// (`per_probe`) or both by the round's.
fn unsigned_recommended_at(rounds: usize, per_probe: bool) -> Option<(usize, String)> {
    let how = Scattered {
        signs: false,
        congested: |_| false,
        quick_confirmed: 0,
        per_probe,
    };
    scattered_run(rounds, how).0
}

/// A node slow by different amounts from round to round scatters its residuals as
/// queueing behind other traffic does. Without hardware evidence: slowed by its own
/// amount in each probe (queueing), it is never recommended, however long it lasts;
/// slowed alike in the probes of one round (a component), after the persistence horizon
/// of such rounds, as a steady straggler is, and the reason says why. With hardware signs
/// in its slow rounds it is recommended within the short hold, and the reason says it
/// varied; rounds its counters explain do not count, and when they explain most of them
/// the hold is `congested_hold`; explained in every round, never.
#[test]
fn scattered_slowness_needs_evidence_congestion_cannot_give() {
    let cfg = HealthConfig::default();
    let h = cfg.uncorroborated_hold;
    assert_eq!(unsigned_recommended_at(3 * h, true), None);
    let (at, why) = unsigned_recommended_at(3 * h, false).expect("moving as one");
    // Its window is full after `window` rounds, its gaps after half a window more at the
    // latest; from then every round agrees, and the horizon's rounds follow. Not before.
    assert!(at >= h && at <= h + 2 * cfg.window + 10, "{at}");
    assert!(
        why.contains("in which its sending and receiving probes moved as one")
            && why.contains("the horizon is 180 rounds, as configured"),
        "{why}"
    );
    assert!(recommended_with(3 * h, |_| false, |_| false).is_some());
    let (quick, why) = scattered_recommended_at(80, true, |_| false).expect("with signs");
    // Slow from round 0: its window is full after `window` rounds; then `confirm_rounds`
    // rounds of re-pairings (each answered the round after it is asked) to be confirmed,
    // and one more asked and answered before the recommendation. Its `confirm_hold`
    // unexplained slow rounds are long past by then.
    let earliest = cfg.window + cfg.confirm_rounds;
    assert!(quick >= earliest && quick <= earliest + 10, "{quick}");
    assert!(why.contains("varying from round to round"), "{why}");
    assert!(
        why.contains("corroborated by its own hardware in ")
            && why.ends_with("slow rounds: PCIe link degraded"),
        "{why}"
    );
    // Its counters explain two rounds of three: most of its run is congestion, so it
    // waits for `congested_hold` rounds they did not explain, about three times as many
    // rounds (more than `earliest` allows).
    let (most, _) = scattered_recommended_at(400, true, |r| r % 3 != 0).expect("mostly congested");
    assert!(most + 1 >= 3 * cfg.congested_hold, "{most}");
    // Its counters explain every round: never, however long, with signs or without.
    assert_eq!(scattered_recommended_at(3 * h, true, |_| true), None);
    assert_eq!(scattered_recommended_at(3 * h, false, |_| true), None);
}

/// A varying straggler held by its hardware whose re-pairings land in one of its quick
/// moments, its window still slow, stays confirmed (is not cleared to healthy), is asked
/// again at once, and is recommended when a later re-pairing reproduces: one round later
/// for each quick one.
#[test]
fn a_varying_stragglers_quick_moment_does_not_clear_it() {
    let (base, _) = scattered_recommended_at(200, true, |_| false).expect("baseline");
    for k in [1, 3] {
        let how = Scattered {
            signs: true,
            congested: |_| false,
            quick_confirmed: k,
            per_probe: false,
        };
        let (rec, cleared) = scattered_run(200, how);
        assert!(!cleared, "cleared to healthy on a quick moment ({k})");
        let (at, _) = rec.expect("recommended");
        assert_eq!(at, base + k, "{k} quick moments");
    }
}

/// The episode's count of rounds that moved as one is in the engine's state, is carried
/// by a restore, and a state that counts more of them than unexplained slow rounds is
/// refused, naming the field.
#[test]
fn the_agreeing_count_travels_and_is_checked() {
    let n = 16;
    let mut src = HealthEngine::new(n, HealthConfig::default());
    let cycle = [1.15, 1.6, 1.2, 1.5, 1.3, 1.9, 1.12];
    for r in 0..40 {
        let f = cycle[r % cycle.len()];
        src.step(&round(n, 1 + r % 7, &[(5, f)], |i| (i % 3) as f64 * 0.002));
    }
    let mut v: serde_json::Value = serde_json::from_slice(&src.snapshot()).unwrap();
    let agreeing = v["nodes"][5]["agreeing"].as_u64().expect("counted");
    let unexplained = v["nodes"][5]["unexplained"].as_u64().unwrap();
    // Slow from round 0, its window full (and so slow) from round 10, when half a window
    // of gaps is long there: both its probes of a round slowed alike, every slow round
    // agrees, and none is explained by counters.
    assert!(agreeing > 20, "{agreeing}");
    assert_eq!(agreeing, unexplained);
    assert!(
        v["nodes"][0].get("agreeing").is_none(),
        "a healthy node's is left out"
    );
    let mut dst = HealthEngine::new(n, HealthConfig::default());
    dst.restore(&serde_json::to_vec(&v).unwrap())
        .expect("taken");
    let back: serde_json::Value = serde_json::from_slice(&dst.snapshot()).unwrap();
    assert_eq!(back["nodes"][5]["agreeing"].as_u64(), Some(agreeing));
    v["nodes"][5]["agreeing"] = serde_json::json!(unexplained + 1);
    let err = HealthEngine::new(n, HealthConfig::default())
        .restore(&serde_json::to_vec(&v).unwrap())
        .expect_err("more agreeing than unexplained rounds");
    assert!(err.to_string().contains("nodes.agreeing"), "{err}");
}
