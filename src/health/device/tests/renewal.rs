//! The device plane's normals learnt again: a share of slow pings that lasts a run of
//! [`RATE_RENEWAL_ROUNDS`] partial events becomes the normal, once, and the round it does
//! says so (`rate_renewed`, which the daemon logs and counts); so does a round median that
//! stays above its normal for as many rounds in a row (`median_renewed`).

use super::*;
use crate::health::device::localise::RATE_RENEWAL_ROUNDS;

/// From round 30 a tenth of all pings (spread over every port by a hash) is twice as slow,
/// for good. Against the quiet warm-up's rate those rounds are partial fabric events until
/// a run of the horizon's worth renews the rate: `rate_renewed` in one round only, not
/// before the horizon has passed, and once the rate has warmed up at the new level there
/// is no fabric event. The quiet rounds before never report a renewal.
#[test]
fn a_lasting_share_of_slow_pings_renews_the_rate_once_and_says_so() {
    let mut f = Fabric::new(8, 8);
    let (mut e, mut outs) = run(&mut f, 30);
    f.noisy = 0.1;
    let end = 30 + 2 * RATE_RENEWAL_ROUNDS;
    go_on(&mut e, &mut f, 30..end, &[], &mut outs);
    let renewed: Vec<usize> = (0..end).filter(|&r| outs[r].rate_renewed).collect();
    assert_eq!(renewed.len(), 1, "renewed in rounds {renewed:?}");
    let at = renewed[0];
    assert!(at >= 30 + RATE_RENEWAL_ROUNDS - 1, "renewed at {at}");
    // The change was an event first: most of the rounds up to the renewal.
    let events = outs[30..at].iter().filter(|o| o.fabric).count();
    assert!(
        events * 10 >= (at - 30) * 9,
        "{events} of {} rounds",
        at - 30
    );
    // And the normal afterwards, once the warm-up at the new level is over.
    let late: Vec<usize> = (at + 30..end).filter(|&r| outs[r].fabric).collect();
    assert!(late.is_empty(), "fabric events after the renewal: {late:?}");
    // No port or node took the blame for the slow pings.
    let states = e.states();
    assert!(
        states
            .iter()
            .all(|s| *s != NodeState::QuarantineRecommended)
    );
}

/// From round 30 every ping is twice as slow, for good (a fleet-wide step): the round
/// median is far above its learnt normal, a fabric event. After [`RATE_RENEWAL_ROUNDS`]
/// such rounds in a row that level is the normal, `median_renewed` in that round only,
/// and once the event's hold has passed there is no fabric event; a port that then
/// loses 20 % of its packets (with a hardware sign) is found and recommended. Before, the
/// normal was never learnt during the event, and the fabric verdict (which freezes every
/// port) lasted as long as the step.
#[test]
fn a_lasting_step_of_the_round_median_becomes_the_normal() {
    let mut f = Fabric::new(8, 8);
    let (mut e, mut outs) = run(&mut f, 30);
    assert!(outs.iter().all(|o| !o.fabric && !o.median_renewed));
    f.slow_node_pairs = |_, _| true;
    let end = 30 + RATE_RENEWAL_ROUNDS + 20;
    go_on(&mut e, &mut f, 30..end, &[], &mut outs);
    let renewed: Vec<usize> = (0..outs.len())
        .filter(|&r| outs[r].median_renewed)
        .collect();
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert!(renewed[0] >= 30 + RATE_RENEWAL_ROUNDS, "{renewed:?}");
    assert!(
        outs[32..renewed[0]].iter().all(|o| o.fabric),
        "a fabric event until then"
    );
    let hold = DeviceConfig::default().window;
    assert!(outs[renewed[0] + hold + 1..].iter().all(|o| !o.fabric));
    f.lossy = vec![(19, 0.2)];
    f.signs = vec![(19, Signs::FRAME_ERRORS)];
    go_on(&mut e, &mut f, end..end + 40, &[], &mut outs);
    assert_eq!(e.states()[19], NodeState::QuarantineRecommended);
    assert!(outs[end..].iter().all(|o| !o.fabric && !o.median_renewed));
}
