//! The persistence horizon learnt from the congestion the group's counters report: a
//! straggler nothing corroborates waits longer in a group whose congestion lasts longer.

use super::tests::{pcie, repairings, round};
use super::*;

/// A 16-node group: node 5 steadily 30 % slow from round 0, re-paired whenever the engine
/// asks, no hardware sign and no congestion on its own counters; the counters of nodes 2, 3
/// and 4 report congestion in the rounds `congested` says (their probes are not slowed:
/// the three runs are all the engine learns from). Returns the round node 5 was recommended
/// and the reason.
fn recommended_beside(rounds: usize, congested: impl Fn(usize) -> bool) -> Option<(usize, String)> {
    let n = 16;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let mut confirm: Vec<usize> = Vec::new();
    for r in 0..rounds {
        let mut input = round(n, 1 + r % 7, &[(5, 1.3)], |i| (i % 3) as f64 * 0.002);
        repairings(&mut input, &confirm, n, |s| if s == 5 { 1.3 } else { 1.0 });
        if congested(r) {
            input.congested.extend([2, 3, 4]);
        }
        let out = e.step(&input);
        confirm = out.confirm_requests.clone();
        if let Some(t) = out
            .transitions
            .iter()
            .find(|t| t.node == 5 && t.to == NodeState::QuarantineRecommended)
        {
            return Some((r, t.reason.clone()));
        }
    }
    None
}

/// Three nodes' counters reported congestion for 300 rounds (0 to 299): congestion in this
/// group lasts that long, so node 5, slow from round 0 with nothing to corroborate it,
/// waits 1.5 times that (450 steady rounds) instead of the configured 180; runs of 100
/// rounds are shorter than the configured horizon and change nothing. The reason names the
/// horizon it waited and where it came from.
#[test]
fn a_straggler_waits_longer_than_the_congestion_its_group_reported() {
    let cfg = HealthConfig::default();
    let (alone, why) = recommended_beside(1000, |_| false).expect("alone");
    assert!(
        why.contains(&format!(
            "the horizon is {} rounds",
            cfg.uncorroborated_hold
        )),
        "{why}"
    );
    let (short, _) = recommended_beside(1000, |r| r < 100).expect("short congestion");
    assert_eq!(short, alone);
    let (long, why) = recommended_beside(1000, |r| r < 300).expect("long congestion");
    // Node 5's slow rounds count from round 0 (see the configured horizon's test): the
    // 450th is round 449, and the window's warm-up and a re-pairing follow at most.
    assert!(long + 1 >= 450 && long <= 450 + cfg.window + 2, "{long}");
    assert!(
        why.contains("the horizon is 450 rounds, learnt from the congestion"),
        "{why}"
    );
}

/// Node 5's own counters report congestion every other round for as long as it is slow,
/// and so do those of nodes 2 and 3 (their probes not slowed): node 5's own run under way
/// does not lengthen its own horizon (it waits about twice the configured one, the rounds
/// its counters did not explain, as without the learnt horizon), though the other two
/// runs would with a third.
#[test]
fn a_node_own_congestion_does_not_lengthen_its_own_horizon() {
    let n = 16;
    let cfg = HealthConfig::default();
    let mut e = HealthEngine::new(n, cfg.clone());
    let mut confirm: Vec<usize> = Vec::new();
    let mut at = None;
    for r in 0..800 {
        let mut input = round(n, 1 + r % 7, &[(5, 1.3)], |i| (i % 3) as f64 * 0.002);
        repairings(&mut input, &confirm, n, |s| if s == 5 { 1.3 } else { 1.0 });
        if r % 2 == 0 {
            input.congested.extend([2, 3, 5]);
        }
        confirm = e.step(&input).confirm_requests;
        if e.states()[5] == NodeState::QuarantineRecommended {
            at = Some(r);
            break;
        }
    }
    let at = at.expect("recommended");
    let h = cfg.uncorroborated_hold;
    assert!(at + 1 >= 2 * h && at <= 2 * h + 2 * cfg.window + 4, "{at}");
}

/// The runs the counters reported are in the engine's state: an engine that takes over
/// after the three 300-round runs ended waits the same 450 rounds for node 5 as the
/// engine that saw them; a state with an impossible run is refused, naming it.
#[test]
fn a_restored_engine_keeps_the_runs_it_learnt_from() {
    let n = 16;
    let step = |e: &mut HealthEngine, r: usize, confirm: &[usize]| {
        let mut input = round(n, 1 + r % 7, &[(5, 1.3)], |i| (i % 3) as f64 * 0.002);
        repairings(&mut input, confirm, n, |s| if s == 5 { 1.3 } else { 1.0 });
        if r < 300 {
            input.congested.extend([2, 3, 4]);
        }
        e.step(&input)
    };
    let mut old = HealthEngine::new(n, HealthConfig::default());
    let mut confirm = Vec::new();
    for r in 0..350 {
        confirm = step(&mut old, r, &confirm).confirm_requests;
    }
    let wire: serde_json::Value = serde_json::from_slice(&old.snapshot()).unwrap();
    assert_eq!(wire["congestion_ended"], serde_json::json!([300, 300, 300]));
    let mut new = HealthEngine::new(n, HealthConfig::default());
    new.restore(&old.snapshot()).unwrap();
    let mut at = None;
    for r in 350..500 {
        let a = step(&mut old, r, &confirm);
        let b = step(&mut new, r, &confirm);
        assert_eq!(a, b, "round {r}");
        confirm = a.confirm_requests;
        if new.states()[5] == NodeState::QuarantineRecommended {
            at.get_or_insert(r);
        }
    }
    let window = HealthConfig::default().window;
    assert!(
        at.is_some_and(|r| r + 1 >= 450 && r <= 450 + window + 2),
        "{at:?}"
    );
    let round = old.rounds();
    for (field, bad) in [
        ("episodes_ended", serde_json::json!([10])),
        ("episodes_ended", serde_json::json!([round + 1])),
        ("episodes_ended", serde_json::json!(vec![40; 200])),
        ("congestion_ended", serde_json::json!([0])),
        ("congestion_ended", serde_json::json!([10])),
        ("congestion_ended", serde_json::json!([round + 1])),
        ("congestion_ended", serde_json::json!(vec![40; 200])),
        ("congestion_open", serde_json::json!([[3, 50, 40]])),
        ("congestion_open", serde_json::json!([[3, 50, round + 1]])),
        (
            "congestion_open",
            serde_json::json!([[3, 1, 40], [3, 50, 60]]),
        ),
        ("congestion_open", serde_json::json!([[99, 1, 2]])),
    ] {
        let mut v: serde_json::Value = serde_json::from_slice(&old.snapshot()).unwrap();
        v[field] = bad.clone();
        let mut fresh = HealthEngine::new(n, HealthConfig::default());
        let err = fresh
            .restore(&serde_json::to_vec(&v).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{bad}: {err}");
        assert_eq!(fresh.rounds(), 0);
    }
}

/// Congestion reported for a node index outside the group (a caller's mistake) is not
/// remembered: the engine's state stays one it takes back.
#[test]
fn a_run_outside_the_group_is_not_remembered() {
    let n = 4;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    for r in 0..40 {
        let mut input = round(n, 1 + r % 3, &[], |_| 0.0);
        input.congested = vec![1, 9];
        e.step(&input);
    }
    let wire: serde_json::Value = serde_json::from_slice(&e.snapshot()).unwrap();
    assert_eq!(wire["congestion_open"], serde_json::json!([[1, 1, 40]]));
    HealthEngine::new(n, HealthConfig::default())
        .restore(&e.snapshot())
        .unwrap();
}

/// Each round's output says the horizon a straggler without a run of its own waits, and
/// how many runs it rests on: the configured one while the three runs are under 30
/// rounds, then 1.5 times the longest run (300 rounds after the 300th round: 450), and
/// still 450 after they ended.
#[test]
fn each_round_says_what_the_horizon_is() {
    let (n, cfg) = (16, HealthConfig::default());
    let mut e = HealthEngine::new(n, cfg.clone());
    let mut outs = Vec::new();
    for r in 0..320 {
        let mut input = round(n, 1 + r % 7, &[], |i| (i % 3) as f64 * 0.002);
        if r < 300 {
            input.congested.extend([2, 3, 4]);
        }
        outs.push(e.step(&input).horizon);
    }
    let configured = cfg.uncorroborated_hold;
    let h = |rounds, runs| crate::health::Horizon {
        rounds,
        configured,
        runs,
    };
    assert_eq!(outs[20], h(configured, 0));
    assert_eq!(outs[299], h(450, 3));
    assert_eq!(outs[319], h(450, 3));
}

/// A 16-node group in which nodes 2, 3 and 4 are each steadily 30 % slow for `episode`
/// rounds, one after another from round 0 (gaps of 20 rounds), with nothing on their
/// counters and, when `signs`, a trained-down PCIe link in every slow round; then node 5
/// is slow from round [`ONSET`] (each episode over by then, its node cleared after
/// `exit_rounds`) as in [`recommended_beside`]. Returns the round node 5 was recommended,
/// its reason, and the horizon the group reported before node 5 slowed.
fn after_episodes(
    episode: usize,
    signs: bool,
) -> (Option<(usize, String)>, crate::health::Horizon) {
    let n = 16;
    let onset = ONSET;
    let mut e = HealthEngine::new(n, HealthConfig::default());
    let mut confirm: Vec<usize> = Vec::new();
    let mut before = None;
    for r in 0..onset + 400 {
        let mut slow: Vec<(usize, f64)> = (0..3)
            .filter(|k| (k * (episode + 20)..k * (episode + 20) + episode).contains(&r))
            .map(|k| (2 + k, 1.3))
            .collect();
        if r >= onset {
            slow.push((5, 1.3));
        }
        let mut input = round(n, 1 + r % 7, &slow, |i| (i % 3) as f64 * 0.002);
        if signs {
            for &(node, _) in slow.iter().filter(|(x, _)| *x != 5) {
                pcie(&mut input, node);
            }
        }
        repairings(&mut input, &confirm, n, |s| {
            slow.iter().find(|(x, _)| *x == s).map_or(1.0, |(_, f)| *f)
        });
        let out = e.step(&input);
        if r + 1 == onset {
            before = Some(out.horizon);
        }

        confirm = out.confirm_requests.clone();
        if let Some(t) = out
            .transitions
            .iter()
            .find(|t| t.node == 5 && t.to == NodeState::QuarantineRecommended)
        {
            return (Some((r, t.reason.clone())), before.expect("reported"));
        }
    }
    (None, before.expect("reported"))
}

/// Round node 5 slows in [`after_episodes`].
const ONSET: usize = 700;

/// Slow episodes that nothing explained or corroborated and that ended by themselves
/// teach the horizon as the counters' runs do: after three of 150 rounds (each shorter
/// than the configured horizon, so none was recommended), node 5 waits 1.5 times their
/// slow rounds (150, and the few a window's median stays up after: 225 to 1.5 × (150 +
/// window)), not the configured 180, and the reason says the horizon was learnt from them.
/// The same episodes with a hardware sign were faults, not congestion: they teach nothing,
/// and node 5 waits the configured horizon. Episodes of 250 rounds, each recommended at
/// the configured horizon before it ended, teach nothing either (a recommended node may
/// recover by a repair).
#[test]
fn slow_episodes_that_ended_by_themselves_teach_the_horizon() {
    let cfg = HealthConfig::default();
    assert!(150 < cfg.uncorroborated_hold && 225 > cfg.uncorroborated_hold);
    let (at, horizon) = after_episodes(150, false);
    let most = (1.5 * (150 + cfg.window) as f64).ceil() as usize;
    assert!(
        (225..=most).contains(&horizon.rounds) && horizon.runs == 3,
        "{horizon:?}"
    );
    let h = horizon.rounds;
    let (at, why) = at.expect("recommended after the learnt horizon");
    assert!(
        at + 1 >= ONSET + h && at <= ONSET + h + cfg.window + 2,
        "{at}"
    );
    assert!(
        why.contains(&format!(
            "the horizon is {h} rounds, learnt from the group's slow episodes that ended by themselves"
        )),
        "{why}"
    );

    let (at, horizon) = after_episodes(150, true);
    assert_eq!((horizon.rounds, horizon.runs), (cfg.uncorroborated_hold, 0));
    let (at, why) = at.expect("recommended after the configured horizon");
    let h = cfg.uncorroborated_hold;
    assert!(
        at + 1 >= ONSET + h && at <= ONSET + h + cfg.window + 2,
        "{at}"
    );
    assert!(why.contains("as configured"), "{why}");

    assert!(250 > cfg.uncorroborated_hold + cfg.window);
    let (_, horizon) = after_episodes(250, false);
    assert_eq!((horizon.rounds, horizon.runs), (h, 0), "recommended first");
}

/// The episodes that ended are in the engine's state: node 2 slow for 150 rounds, nothing
/// on its counters, then back within bounds until it is healthy; the state carries its
/// episode, and an engine that takes over gives the same outputs round by round, its
/// horizon included, while nodes 3 and 4 go through episodes of their own.
#[test]
fn a_restored_engine_keeps_the_episodes_it_learnt_from() {
    let n = 16;
    let slow_in = |r: usize| -> Vec<(usize, f64)> {
        [(2, 0..150), (3, 400..550), (4, 570..720)]
            .into_iter()
            .filter(|(_, span)| span.contains(&r))
            .map(|(node, _)| (node, 1.3))
            .collect()
    };
    let step = |e: &mut HealthEngine, r: usize, confirm: &[usize]| {
        let slow = slow_in(r);
        let mut input = round(n, 1 + r % 7, &slow, |i| (i % 3) as f64 * 0.002);
        repairings(&mut input, confirm, n, |s| {
            slow.iter().find(|(x, _)| *x == s).map_or(1.0, |(_, f)| *f)
        });
        e.step(&input)
    };
    let mut old = HealthEngine::new(n, HealthConfig::default());
    let mut confirm = Vec::new();
    for r in 0..380 {
        confirm = step(&mut old, r, &confirm).confirm_requests;
    }
    assert_eq!(old.states()[2], NodeState::Healthy);
    let wire: serde_json::Value = serde_json::from_slice(&old.snapshot()).unwrap();
    let episodes = wire["episodes_ended"]
        .as_array()
        .expect("episodes in the state");
    assert_eq!(episodes.len(), 1, "{episodes:?}");
    assert!(
        // Its steadily slow rounds: the 150, less those before its window called it slow
        // (it slowed in the engine's first rounds), plus those after, until it did not.
        episodes[0]
            .as_u64()
            .is_some_and(|l| (130..=160).contains(&l)),
        "{episodes:?}"
    );
    let mut new = HealthEngine::new(n, HealthConfig::default());
    new.restore(&old.snapshot()).unwrap();
    let mut last = None;
    for r in 380..1000 {
        let a = step(&mut old, r, &confirm);
        let b = step(&mut new, r, &confirm);
        assert_eq!(a, b, "round {r}");
        confirm = a.confirm_requests.clone();
        last = Some(a.horizon);
    }
    let h = last.expect("rounds ran");
    assert_eq!(h.runs, 3, "{h:?}");
    assert!(h.learnt(), "{h:?}");
}
