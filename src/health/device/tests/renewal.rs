//! The device plane's partial-fabric base rate learnt again: a share of slow pings that
//! lasts a run of [`RATE_RENEWAL_ROUNDS`] partial events becomes the normal, once, and the
//! round it does says so (`rate_renewed`, which the daemon logs and counts).

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
