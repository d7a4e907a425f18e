//! Nodes of two NPUs: one bad port is half the node's ports, yet it is a port, not the
//! node, and two such nodes behind one ToR are not that ToR.

use super::*;

/// Every port in `bad` recommended for quarantine, every other one healthy.
fn all_healthy_but(states: &[NodeState], bad: &[usize]) {
    for (i, s) in states.iter().enumerate() {
        let want = if bad.contains(&i) {
            NodeState::QuarantineRecommended
        } else {
            NodeState::Healthy
        };
        assert_eq!(*s, want, "port {i}: {states:?}");
    }
}

/// `bad` ports lose 30 % of their packets and show a hardware sign every round.
fn lossy_with_signs(f: &mut Fabric, bad: &[usize]) {
    f.lossy = bad.iter().map(|&p| (p, 0.3)).collect();
    f.signs = bad.iter().map(|&p| (p, Signs::FRAME_ERRORS)).collect();
}

/// Nodes of two NPUs, five of them with one port losing 30 % (each port's own hardware
/// showing a sign): one port of two is half the node's ports, but it is a port, not the
/// node. Each bad port is recommended on its own, no node verdict forms and no fabric
/// event: before, when half a node's ports made its verdict, every bad port here made one,
/// and five such nodes at once (at least 3 and a tenth of the 24) made a fabric event that
/// froze every port. Both ports of a sixth node lossy are still that node's verdict.
#[test]
fn one_bad_port_of_two_is_a_port_and_both_are_the_node() {
    let mut f = Fabric::new(24, 2);
    let bad = [2, 11, 20, 29, 38];
    lossy_with_signs(&mut f, &bad);
    let (e, outs) = run(&mut f, 60);
    // Round 0 is left out: before any port's window holds its loss, the loss is no
    // port's and the round is a fabric round (one alone holds nothing).
    for (r, o) in outs.iter().enumerate().skip(1) {
        assert!(o.node_verdicts.is_empty() && !o.fabric, "round {r}: {o:?}");
    }
    all_healthy_but(&e.states(), &bad);
    let mut f = Fabric::new(24, 2);
    f.lossy = vec![(44, 0.3), (45, 0.3)];
    only_a_node_verdict(&mut f, 22);
}

/// Six ToRs of four two-NPU nodes; one port each of two nodes behind ToR 0 loses 30 %
/// (with a hardware sign). Half of the ToR's members have half their ports elevated, but
/// each of those is one port: no ToR event (its ports would then be judged against the
/// ToR, and the ToR named for the network team), and both ports are recommended.
#[test]
fn two_bad_ports_on_two_nodes_of_a_tor_are_ports_not_the_tor() {
    let mut f = Fabric::new(24, 2);
    f.tor_size = 4;
    let bad = [2, 5];
    lossy_with_signs(&mut f, &bad);
    let (e, outs) = run(&mut f, 60);
    // No fabric event either (it would empty the ToR verdicts, and the test would prove
    // nothing); round 0 is left out as above.
    for (r, o) in outs.iter().enumerate().skip(1) {
        assert!(!o.fabric, "round {r}: a fabric event");
        assert!(o.tor_verdicts.is_empty(), "round {r}: {:?}", o.tor_verdicts);
        assert!(
            o.node_verdicts.is_empty(),
            "round {r}: {:?}",
            o.node_verdicts
        );
    }
    all_healthy_but(&e.states(), &bad);
}
