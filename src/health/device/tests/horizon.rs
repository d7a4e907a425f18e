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
