//! ToRs of two on the device plane: a switch with two members behind it is judged as a
//! ToR, and one bad member of the two is that member, not its switch.

use super::*;

/// Twelve ToRs of two four-NPU nodes; ToR 3 (nodes 6 and 7) loses 5 % of the packets
/// that cross it from round 20 for 60 rounds. Before ToRs of two were judged, its eight
/// ports were left to the node and port rules (its two members a node verdict each, or
/// their ports accused one by one). Now it is a ToR verdict naming ToR 3 and both
/// members, no node verdict forms, and no port goes beyond suspect; once it heals the
/// verdict ends and every port is healthy.
#[test]
fn a_lossy_tor_of_two_is_a_tor_verdict() {
    let mut f = Fabric::new(24, 4);
    f.tor_size = 2;
    let (mut e, mut outs) = run(&mut f, 20);
    f.lossy_tors = vec![(3, 0.05)];
    go_on(&mut e, &mut f, 20..80, &[], &mut outs);
    let during = &outs[20..80];
    let first = during
        .iter()
        .position(|o| !o.tor_verdicts.is_empty())
        .expect("a ToR verdict");
    // Two event rounds make a verdict; the windows need a few more to show the loss.
    assert!(first <= 10, "first verdict at round {}", first + 20);
    let v = &during[first].tor_verdicts[0];
    assert_eq!((v.tor, v.members.clone(), v.ports), (3, vec![6, 7], 8));
    assert!(
        during
            .iter()
            .flat_map(|o| &o.tor_verdicts)
            .all(|v| v.tor == 3),
        "only ToR 3"
    );
    assert!(
        outs.iter().all(|o| o.node_verdicts.is_empty() && !o.fabric),
        "a node verdict or a fabric event"
    );
    let moved: Vec<&PortTransition> = outs
        .iter()
        .flat_map(|o| &o.transitions)
        .filter(|t| !matches!(t.to, NodeState::Healthy | NodeState::Suspect))
        .collect();
    assert!(moved.is_empty(), "{moved:?}");
    // The ToR heals: its verdict ends, and every port is healthy again.
    f.lossy_tors.clear();
    go_on(&mut e, &mut f, 80..200, &[], &mut outs);
    assert!(outs[100..].iter().all(|o| o.tor_verdicts.is_empty()));
    assert!(
        outs[80..]
            .iter()
            .all(|o| o.node_verdicts.is_empty() && !o.fabric)
    );
    let moved: Vec<&PortTransition> = outs[80..]
        .iter()
        .flat_map(|o| &o.transitions)
        .filter(|t| !matches!(t.to, NodeState::Healthy | NodeState::Suspect))
        .collect();
    assert!(moved.is_empty(), "while it heals: {moved:?}");
    assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
}

/// The same twelve ToRs of two; every port of node 7 (ToR 3) loses 20 %: half of its
/// ToR's ports, but all on one member. That is the node's verdict, never its ToR's
/// (which would explain the node's ports away and name a healthy switch to the network
/// team).
#[test]
fn one_bad_member_of_a_tor_of_two_is_the_node_not_the_tor() {
    let mut f = Fabric::new(24, 4);
    f.tor_size = 2;
    f.lossy = (28..32).map(|p| (p, 0.2)).collect();
    let (e, outs) = run(&mut f, 30);
    for (r, o) in outs.iter().enumerate() {
        assert!(o.tor_verdicts.is_empty(), "round {r}: {:?}", o.tor_verdicts);
        assert!(!o.fabric, "round {r}: a fabric event");
    }
    assert!(outs.iter().skip(10).all(|o| o.node_verdicts == vec![7]));
    assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
}

/// Node 7's ports all lossy, and one port of node 6 (its partner behind ToR 3) lossy too,
/// with a hardware sign: five of the ToR's eight ports, on both members, yet without
/// node 7 one of four. Node 7 is a node verdict, port 25 (node 6's) is recommended on its
/// own, and ToR 3 is no event (it would explain both away and name a healthy switch).
#[test]
fn a_bad_member_and_a_bad_port_of_its_partner_are_not_their_tor() {
    let mut f = Fabric::new(24, 4);
    f.tor_size = 2;
    // Clean rounds first, so that the ToR's normal share is learnt at none.
    let (mut e, mut outs) = run(&mut f, 20);
    f.lossy = (28..32).map(|p| (p, 0.2)).chain([(25, 0.3)]).collect();
    f.signs = vec![(25, Signs::FRAME_ERRORS)];
    go_on(&mut e, &mut f, 20..80, &[], &mut outs);
    for (r, o) in outs.iter().enumerate() {
        assert!(o.tor_verdicts.is_empty(), "round {r}: {:?}", o.tor_verdicts);
        assert!(!o.fabric, "round {r}: a fabric event");
    }
    assert!(outs[30..].iter().all(|o| o.node_verdicts == vec![7]));
    for (i, s) in e.states().iter().enumerate() {
        let want = if i == 25 {
            NodeState::QuarantineRecommended
        } else {
            NodeState::Healthy
        };
        assert_eq!(*s, want, "port {i}");
    }
}

/// The lossy ToR 3 of two again, a verdict; then node 7 is absent for 15 rounds (its
/// pings gone): one member is no ToR to judge, so no verdict, and the switch keeps no
/// event but its hold. When node 7 is back the event starts again: its first round back
/// is one event round, no verdict yet (two make one), the second is a verdict. Were the
/// run kept through the absence, the first round back would be a verdict on evidence
/// from before it.
#[test]
fn a_tor_of_two_with_a_member_absent_keeps_no_event() {
    let mut f = Fabric::new(24, 4);
    f.tor_size = 2;
    f.lossy_tors = vec![(3, 0.05)];
    let (mut e, mut outs) = run(&mut f, 30);
    assert!(outs[10..].iter().all(|o| o.tor_verdicts.len() == 1));
    let away = |input: &mut DeviceInput| {
        input.absent_nodes = vec![7];
        input.probes.retain(|p| p.src / 4 != 7 && p.dst / 4 != 7);
    };
    go_on_with(&mut e, &mut f, 30..45, &[], &mut outs, away);
    assert!(outs[30..45].iter().all(|o| o.tor_verdicts.is_empty()));
    go_on(&mut e, &mut f, 45..47, &[], &mut outs);
    assert!(
        outs[45].tor_verdicts.is_empty(),
        "{:?}",
        outs[45].tor_verdicts
    );
    assert_eq!(outs[46].tor_verdicts.len(), 1, "{:?}", outs[46]);
}
