//! Pairs that lose a share of their packets (a cable, a transceiver between two NPU ports):
//! found from their packets together, though most of their pings lose none; a packet lost
//! by chance is forgotten; loss spread over many pairs between switches (a spine's ECMP
//! hash) or over one port's pairs (its uplink) is no pair's.

use super::*;

/// Every pair verdict of `outs`.
fn pair_verdicts(outs: &[DeviceOutput]) -> BTreeSet<(usize, usize)> {
    outs.iter()
        .flat_map(|o| o.pair_verdicts.iter().copied())
        .collect()
}

/// Every pair `outs` asked to re-ping (watched, for a bad observation of its own).
fn watched(outs: &[DeviceOutput]) -> BTreeSet<(usize, usize)> {
    outs.iter()
        .flat_map(|o| o.pair_requests.iter().copied())
        .collect()
}

/// No fabric event and no ToR verdict in `outs`: a pair withheld was withheld by the pair
/// rules, not by an event.
fn no_event(outs: &[DeviceOutput]) -> bool {
    outs.iter().all(|o| !o.fabric && o.tor_verdicts.is_empty())
}

/// 8 nodes × 4 ports; ports 3 and 20 lose one packet in eight between them, so about one
/// ping in three loses a packet and hardly ever three in a row (the rule of bad pings in
/// a row alone never gave it a verdict). Their packets together do: a pair verdict on
/// (3, 20) and no other, and no port leaves healthy.
#[test]
fn a_cable_losing_one_packet_in_eight_is_a_pair_verdict() {
    let mut f = Fabric::new(8, 4);
    f.lossy_pairs = vec![((3, 20), 0.125)];
    let (e, outs) = run(&mut f, 80);
    assert_eq!(pair_verdicts(&outs), BTreeSet::from([(3, 20)]));
    assert!(
        outs.last().unwrap().pair_verdicts.contains(&(3, 20)),
        "the verdict did not hold"
    );
    assert!(e.states().iter().all(|s| *s == NodeState::Healthy));
}

/// Runs the pair (3, 20) losing `loss` of its packets until it is first watched, then
/// mended, for `after` more rounds: the outputs, the first of them the round after it was
/// first watched.
fn mended_once_watched(loss: f64, after: usize) -> Vec<DeviceOutput> {
    let mut f = Fabric::new(8, 4);
    f.lossy_pairs = vec![((3, 20), loss)];
    let mut e = DeviceEngine::new(&f.port_nodes(), DeviceConfig::default());
    let mut outs = Vec::new();
    let mut r = 0;
    while !outs
        .last()
        .is_some_and(|o: &DeviceOutput| o.pair_requests.contains(&(3, 20)))
    {
        assert!(r < 40, "the pair was never watched");
        go_on(&mut e, &mut f, r..r + 1, &[], &mut outs);
        r += 1;
    }
    f.lossy_pairs.clear();
    let mut later = Vec::new();
    go_on(&mut e, &mut f, r..r + after, &[], &mut outs);
    later.extend(outs.drain(r..));
    assert!(no_event(&later));
    later
}

/// The same pair, mended as soon as it is first watched (its window holds one ping that
/// lost one packet): it is still watched after its first clean observation (one lost
/// packet in six is unlikely enough to keep), never gets a verdict, and is dropped within
/// 25 rounds (about 17 clean observations at the fabric's floor of one in a thousand).
#[test]
fn a_packet_lost_by_chance_is_forgotten() {
    let later = mended_once_watched(0.125, 40);
    assert!(
        later[0].pair_requests.contains(&(3, 20)),
        "dropped at its first clean observation"
    );
    assert_eq!(pair_verdicts(&later), BTreeSet::new());
    assert!(
        later[25..]
            .iter()
            .all(|o| !o.pair_requests.contains(&(3, 20))),
        "still watched after 25 clean rounds"
    );
}

/// The same pair losing all three packets of the one ping that made it watched (a flap):
/// one observation with loss is no verdict from the packets, however unlikely its three
/// lost packets are (before, it was one, held for the 40 observations of the window).
#[test]
fn one_ping_that_lost_everything_is_no_pair_verdict() {
    let later = mended_once_watched(1.0, 40);
    assert!(later[0].pair_requests.contains(&(3, 20)));
    assert_eq!(pair_verdicts(&later), BTreeSet::new());
}

/// 8 nodes on 4 ToRs of 2: three pairs between ToRs with no end in common lose one packet
/// in eight at once (a spine's ECMP hash): no pair verdict. Each of them alone is one
/// (the control: the rule withholds what others share, not every pair between ToRs).
#[test]
fn loss_on_three_pairs_between_tors_at_once_is_no_pair_verdict() {
    let pairs = [(1, 9), (4, 20), (13, 29)];
    let fabric = |lossy: &[(usize, usize)]| {
        let mut f = Fabric::new(8, 4);
        f.tor_size = 2;
        f.lossy_pairs = lossy.iter().map(|p| (*p, 0.125)).collect();
        f
    };
    let (_, outs) = run(&mut fabric(&pairs), 80);
    assert_eq!(pair_verdicts(&outs), BTreeSet::new());
    assert!(
        pairs.iter().all(|p| watched(&outs).contains(p)),
        "not all watched"
    );
    assert!(no_event(&outs));
    for p in pairs {
        let (_, outs) = run(&mut fabric(&[p]), 80);
        assert_eq!(pair_verdicts(&outs), BTreeSet::from([p]), "{p:?} alone");
    }
}

/// Port 1's pairs with ports 9 and 20 both lose one packet in eight (its own uplink, with
/// counters that do not say so): neither is a pair verdict.
#[test]
fn loss_on_two_pairs_of_one_port_is_no_pair_verdict() {
    let mut f = Fabric::new(8, 4);
    f.lossy_pairs = vec![((1, 9), 0.125), ((1, 20), 0.125)];
    let (_, outs) = run(&mut f, 80);
    assert_eq!(pair_verdicts(&outs), BTreeSet::new());
    assert!(watched(&outs).contains(&(1, 9)) && watched(&outs).contains(&(1, 20)));
    assert!(no_event(&outs));
}

/// A lossy pair with an end whose counters show congestion every round: its loss is the
/// congestion's, no pair verdict (its observations count for nothing, so it is never
/// watched); the same pair without the congestion is one.
#[test]
fn a_lossy_pair_at_a_congested_port_is_no_pair_verdict() {
    let verdicts = |congested: Vec<usize>| {
        let mut f = Fabric::new(8, 4);
        f.lossy_pairs = vec![((3, 20), 0.125)];
        f.congested = congested;
        let (_, outs) = run(&mut f, 80);
        assert!(no_event(&outs));
        pair_verdicts(&outs)
    };
    assert_eq!(verdicts(vec![3]), BTreeSet::new());
    assert_eq!(verdicts(vec![]), BTreeSet::from([(3, 20)]));
}

/// Port 3 loses one packet in a hundred with every peer (its uplink, congested with
/// counters that do not say so: below `loss_min`, so neither the port nor its loss with
/// its other peers passes a threshold). Its watched pairs, re-pinged every round, each
/// collected enough of those losses for a verdict from their packets against the
/// fabric's rate (before: pairs (3, 8) and (3, 22), no cable on either): what the end
/// loses with everyone explains them, so no pair verdict. A cable losing one packet in
/// eight on the same end still is one (the control: the end's loss raises the bar, it
/// does not hide the pair).
#[test]
fn pairs_losing_what_their_end_loses_with_every_peer_are_no_pair_verdict() {
    let verdicts = |cable: Option<f64>| {
        let mut f = Fabric::new(8, 4);
        f.lossy = vec![(3, 0.01)];
        f.lossy_pairs = cable.map(|l| ((3, 20), l)).into_iter().collect();
        let (e, outs) = run(&mut f, 120);
        assert!(no_event(&outs));
        assert_eq!(
            e.states()[3],
            NodeState::Healthy,
            "port 3 itself was judged"
        );
        let watched = watched(&outs)
            .iter()
            .filter(|p| p.0 == 3 || p.1 == 3)
            .count();
        (pair_verdicts(&outs), watched)
    };
    let (none, watched) = verdicts(None);
    assert!(watched >= 2, "only {watched} pairs of port 3 were watched");
    assert_eq!(none, BTreeSet::new());
    assert_eq!(verdicts(Some(0.125)).0, BTreeSet::from([(3, 20)]));
}
