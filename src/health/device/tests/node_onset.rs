//! A node fault's onset: its ports cross the thresholds a round or two apart, so the first
//! ones are suspected, or even confirmed, before the node verdict forms. The verdict then
//! withdraws them; a port confirmed well before it was its own fault and keeps its verdict.

use super::*;

/// Node 3's ports 24 and 25 lose 20 % from round 0, its other six from round `lead`:
/// every output of 30 rounds, the engine, and the first round with a node verdict (which
/// must then hold to the end).
fn node_onset(lead: usize) -> (Vec<DeviceOutput>, DeviceEngine, usize) {
    let mut f = Fabric::new(8, 8);
    f.lossy = vec![(24, 0.2), (25, 0.2)];
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    go_on(&mut e, &mut f, 0..lead, &[], &mut outs);
    f.lossy = (24..32).map(|p| (p, 0.2)).collect();
    go_on(&mut e, &mut f, lead..30, &[], &mut outs);
    let first = outs
        .iter()
        .position(|o| o.node_verdicts == vec![3])
        .expect("no node verdict");
    assert!(outs[first..].iter().all(|o| o.node_verdicts == vec![3]));
    (outs, e, first)
}

/// Node 3's port transitions: (round, port, to, reason).
fn node_3_transitions(outs: &[DeviceOutput]) -> Vec<(usize, usize, NodeState, String)> {
    outs.iter()
        .enumerate()
        .flat_map(|(r, o)| o.transitions.iter().map(move |t| (r, t)))
        .filter(|(_, t)| t.port / 8 == 3)
        .map(|(r, t)| (r, t.port, t.to, t.reason.clone()))
        .collect()
}

/// From the node verdict's first round no port of the node is confirmed or recommended,
/// every one cleared is cleared in that round because the node is judged as a whole, and
/// at the end every port is healthy.
fn assert_withdrawn_at_verdict(outs: &[DeviceOutput], e: &DeviceEngine, first: usize) {
    for (r, port, to, reason) in node_3_transitions(outs) {
        if r >= first {
            assert!(
                !matches!(to, NodeState::Confirmed | NodeState::QuarantineRecommended),
                "round {r}: port {port} went to {to:?}: {reason}"
            );
        }
        if to == NodeState::Healthy {
            assert_eq!(r, first, "port {port} cleared in round {r}");
            assert!(reason.contains("node is judged as a whole"), "{reason}");
        }
    }
    assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
}

/// A node whose ports go bad a few rounds apart: the first two are suspected (and
/// re-pinged) before most of the node is, then the node verdict forms. From that round the
/// node is the cause: its suspects are withdrawn, saying why, and none of its ports is
/// confirmed, however well their re-pings reproduce the node's loss.
#[test]
fn ports_suspected_before_their_nodes_verdict_are_withdrawn_not_confirmed() {
    let (outs, e, first) = node_onset(3);
    let ts = node_3_transitions(&outs);
    let early: Vec<usize> = ts
        .iter()
        .filter(|(r, _, to, _)| *r < first && *to == NodeState::Suspect)
        .map(|(_, port, _, _)| *port)
        .collect();
    assert!(
        early.contains(&24) && early.contains(&25),
        "the lead ports were not suspected before the node verdict: {early:?}"
    );
    // Still suspects when the verdict forms: this case is the suspects' withdrawal.
    assert!(
        ts.iter()
            .all(|(r, _, to, _)| *r >= first || *to == NodeState::Suspect),
        "{ts:?}"
    );
    assert_withdrawn_at_verdict(&outs, &e, first);
}

/// The same with the node's other ports later: the lead two are confirmed by their
/// re-pings (a two-port fault, so far) before the node verdict forms. Confirmed at most
/// `NODE_ONSET_ROUNDS` rounds before it, their confirmation may be the node's fault, and
/// they are withdrawn; confirmed earlier, they were their own fault and keep their
/// verdict (not escalated while the node's verdict lasts).
#[test]
fn ports_confirmed_just_before_their_nodes_verdict_are_withdrawn_older_ones_kept() {
    for lead in [4, 6] {
        let (outs, e, first) = node_onset(lead);
        let ts = node_3_transitions(&outs);
        for port in [24, 25] {
            let confirmed = ts
                .iter()
                .find(|(r, p, to, _)| *p == port && *to == NodeState::Confirmed && *r < first)
                .map(|(r, ..)| *r)
                .unwrap_or_else(|| panic!("lead {lead}: port {port} not confirmed: {ts:?}"));
            let recent = (first - confirmed) as u64 <= NODE_ONSET_ROUNDS;
            assert_eq!(recent, lead == 4, "lead {lead}: {ts:?}");
            if recent {
                assert_withdrawn_at_verdict(&outs, &e, first);
            } else {
                assert!(
                    ts.iter().all(|(r, p, ..)| *p != port || *r < first),
                    "{ts:?}"
                );
                assert_eq!(e.states()[port], NodeState::Confirmed);
            }
        }
        // The node's other six ports are never judged on their own.
        assert!(ts.iter().all(|(_, p, ..)| *p < 26), "lead {lead}: {ts:?}");
    }
}
