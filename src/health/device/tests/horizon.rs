//! The device plane's persistence horizon learnt from the congestion its ports' own
//! counters reported, by the host plane's rule (`crate::health::horizon`).

use super::*;

/// The persistence horizon is learnt on the device plane as on the host plane: after
/// three other ports' counters reported congestion for 300 rounds each, a port slow with
/// nothing to corroborate it waits 1.5 x 300 = 450 steady rounds, not the configured 180,
/// and its reason says the horizon was learnt; each round's output says what the horizon
/// is and how many runs it rests on.
#[test]
fn a_port_waits_the_horizon_its_fabric_congestion_taught() {
    let configured = DeviceConfig::default().uncorroborated_hold;
    let (runs, learnt) = (300, 450);
    assert!(learnt > configured);
    let mut f = Fabric::new(8, 8);
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    let onset = runs + 10;
    for r in 0..onset + learnt + 40 {
        f.congested = if r < runs { vec![3, 12, 30] } else { vec![] };
        if r == onset {
            f.slow = vec![(44, 150e-6)];
        }
        go_on(&mut e, &mut f, r..r + 1, &[], &mut outs);
    }
    let before = &outs[runs - 1].horizon;
    assert_eq!(
        (before.rounds, before.runs),
        (learnt, 3),
        "runs under way count"
    );
    let after = outs.last().expect("rounds ran").horizon;
    assert_eq!(
        after,
        crate::health::Horizon {
            rounds: learnt,
            configured,
            runs: 3
        }
    );
    assert_eq!(
        outs[runs / 20].horizon.rounds,
        configured,
        "runs under 30 teach nothing"
    );
    let suspected = outs
        .iter()
        .position(|o| o.transitions.iter().any(|t| t.port == 44))
        .expect("port 44 suspected");
    assert!(suspected >= onset, "suspected at {suspected}");
    let (at, t) = recommended(&outs, 44).expect("recommended after the learnt horizon");
    assert!(
        at >= suspected + learnt - 1 && at <= suspected + learnt + 10,
        "at {at}, suspected at {suspected}"
    );
    assert!(
        t.reason
            .contains("the horizon is 450 rounds, learnt from the congestion"),
        "{}",
        t.reason
    );
}

/// The runs are a node's, not a port's: three ports of one node congested for 300 rounds
/// are one run and teach nothing (alone they would pass the three runs needed, and one
/// node's pause storm would set every port's horizon).
#[test]
fn one_nodes_ports_are_one_run() {
    let mut f = Fabric::new(8, 8);
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    for r in 0..320 {
        f.congested = if r < 300 { vec![8, 9, 10] } else { vec![] };
        go_on(&mut e, &mut f, r..r + 1, &[], &mut outs);
    }
    let h = outs.last().expect("rounds ran").horizon;
    assert_eq!(
        (h.rounds, h.runs),
        (DeviceConfig::default().uncorroborated_hold, 1)
    );
}

/// A port's own node's run under way does not lengthen its horizon: port 44 (node 5) slow
/// while another port of node 5 reports congestion all along, beside two other nodes'
/// 300-round runs, waits the configured horizon (two runs teach nothing), though the
/// group's horizon, which counts node 5's run, is learnt.
#[test]
fn a_ports_own_node_does_not_lengthen_its_horizon() {
    let configured = DeviceConfig::default().uncorroborated_hold;
    let mut f = Fabric::new(8, 8);
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    let onset = 310;
    for r in 0..onset + configured + 40 {
        f.congested = if r < 300 { vec![12, 30, 45] } else { vec![45] };
        if r == onset {
            f.slow = vec![(44, 150e-6)];
        }
        go_on(&mut e, &mut f, r..r + 1, &[], &mut outs);
    }
    let suspected = outs
        .iter()
        .position(|o| o.transitions.iter().any(|t| t.port == 44))
        .expect("port 44 suspected");
    let (at, t) = recommended(&outs, 44).expect("recommended at the configured horizon");
    assert!(
        at + 1 >= suspected + configured && at <= suspected + configured + 10,
        "at {at}, suspected at {suspected}"
    );
    assert!(t.reason.contains("as configured"), "{}", t.reason);
    assert!(outs.last().expect("rounds ran").horizon.rounds > configured);
}

/// A new port table carries the nodes' runs under way to their new numbers: node 0 leaves
/// at round 300 while nodes 1, 2 and 3 report congestion from round 0 to 499; after it
/// their runs go on under numbers 0, 1 and 2, three runs of 500 rounds (a horizon of
/// 750), not three ended at 300 and three new ones.
#[test]
fn a_new_port_table_carries_the_runs() {
    let mut f = Fabric::new(8, 8);
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    f.congested = vec![8, 16, 24];
    go_on(&mut e, &mut f, 0..300, &[], &mut outs);
    let map: Vec<Option<usize>> = (0..64usize).map(|p| p.checked_sub(8)).collect();
    let mut f = Fabric::new(7, 8);
    e.remap(&map, &f.port_nodes());
    f.congested = vec![0, 8, 16];
    let mut outs = Vec::new();
    go_on(&mut e, &mut f, 300..500, &[], &mut outs);
    let h = outs.last().expect("rounds ran").horizon;
    assert_eq!((h.rounds, h.runs), (750, 3));
}

/// Ports of three nodes (12, 30 and 52) each steadily 2.5× slow for `episode` rounds, one
/// after another from round 0 (gaps of 20 rounds), their counters silent and, when
/// `signs`, a link below its speed in every slow round; port 44 slow from round
/// [`ONSET`] (each episode over by then, its port cleared after `exit_rounds`). Returns
/// the round port 44 was recommended, its reason, and the horizon before it slowed.
fn after_episodes(
    episode: usize,
    signs: bool,
) -> (Option<(usize, String)>, crate::health::Horizon) {
    let mut f = Fabric::new(8, 8);
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    let mut before = None;
    for r in 0..ONSET + 400 {
        f.slow = [12, 30, 52]
            .into_iter()
            .enumerate()
            .filter(|(k, _)| (k * (episode + 20)..k * (episode + 20) + episode).contains(&r))
            .map(|(_, p)| (p, 150e-6))
            .collect();
        f.signs = if signs {
            f.slow
                .iter()
                .map(|&(p, _)| (p, Signs::LINK_SPEED))
                .collect()
        } else {
            vec![]
        };
        if r >= ONSET {
            f.slow.push((44, 150e-6));
        }
        go_on(&mut e, &mut f, r..r + 1, &[], &mut outs);
        if r + 1 == ONSET {
            before = outs.last().map(|o| o.horizon);
        }
    }
    let at = recommended(&outs, 44).map(|(r, t)| (r, t.reason.clone()));
    (at, before.expect("reported"))
}

/// Round port 44 slows in [`after_episodes`].
const ONSET: usize = 800;

/// Slow episodes that nothing explained or corroborated and that ended by themselves
/// teach the device plane's horizon as its counters' runs do: after three of 150 rounds
/// (none recommended: each shorter than the configured 180), port 44 waits 1.5 times
/// their steady rounds (225 to 1.5 × (150 + window)), and its reason says the horizon was
/// learnt from them. With a hardware sign the episodes were faults: they teach nothing,
/// and port 44 waits the configured horizon. Episodes of 250 rounds, each recommended at
/// the configured horizon before it ended, teach nothing either (a recommended port may
/// recover by a repair).
#[test]
fn slow_episodes_that_ended_by_themselves_teach_the_horizon() {
    let cfg = DeviceConfig::default();
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
        at + 1 >= ONSET + h && at <= ONSET + h + cfg.window + 10,
        "{at}"
    );
    assert!(
        why.contains(&format!(
            "the horizon is {h} rounds, learnt from the ports' slow episodes that ended by themselves"
        )),
        "{why}"
    );

    let (at, horizon) = after_episodes(150, true);
    let configured = cfg.uncorroborated_hold;
    assert_eq!((horizon.rounds, horizon.runs), (configured, 0));
    let (at, why) = at.expect("recommended after the configured horizon");
    assert!(
        at + 1 >= ONSET + configured && at <= ONSET + configured + cfg.window + 10,
        "{at}"
    );
    assert!(why.contains("as configured"), "{why}");

    assert!(250 > configured + cfg.window);
    let (_, horizon) = after_episodes(250, false);
    assert_eq!(
        (horizon.rounds, horizon.runs),
        (configured, 0),
        "recommended first"
    );
}
