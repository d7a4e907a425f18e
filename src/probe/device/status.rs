//! What each local NPU port's own counters say between two readings: congestion (pause
//! frames or congestion notifications received) and hardware signs (corrupted frames, a
//! link below its speed).
//!
//! Pings cannot tell a port whose link is saturated by training traffic from a failing
//! one: both are steadily slow or lossy. The port's own counters can. A switch that runs
//! out of buffer pauses the port (PFC or MAC pause frames it receives) and the receivers
//! of its ECN-marked traffic send it congestion notifications (CNPs); a failing module or
//! cable corrupts frames (FCS errors, bad packets) and a degraded link trains below the
//! speed it ran at, goes down or flaps. The device engine counts no congested round towards a quarantine and
//! recommends a port whose hardware corroborates its episode after the short hold, others
//! only after the persistence horizon (see `health::device`).
//!
//! The port poller reads the counters (`hccn_tool -stat -g`, `-speed -g`) on its own
//! schedule, not each device round, so a status describes the latest interval between two
//! of its passes and repeats until the poller passes again (a pass is known by its end
//! time; one in which a read failed does not count as a new pass). A port with no reading, or
//! with only one so far, shows no congestion and no sign (unknown is not evidence either
//! way; such a port waits the horizon). A counter that went down (the driver restarted)
//! gives no growth for that interval.

use std::collections::BTreeMap;

use crate::health::hardware::Signs;

/// The counters of one port as the poller last read them (`None`: not read).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortReading {
    /// Pause frames received: `mac_rx_pfc_pkt_num` plus `mac_rx_mac_pause_num`.
    pub pause_rx: Option<u64>,
    /// Congestion notifications received: `roce_rx_cnp_pkt_num`.
    pub cnp_rx: Option<u64>,
    /// Corrupted frames received: `mac_rx_fcs_err_pkt_num` plus `mac_rx_bad_pkt_num`.
    pub errors: Option<u64>,
    /// Negotiated link speed, bits per second.
    pub speed_bps: Option<f64>,
    /// Whether the link is up (`-link -g`).
    pub link_up: Option<bool>,
    /// Link state changes so far: up count plus down count (`-link_stat -g`).
    pub link_changes: Option<u64>,
    /// When the poller's pass that read it ended (its last successful pass): a reading
    /// with the same time is the same interval, one with another time a new one, even
    /// when no counter moved.
    pub read_at: Option<std::time::SystemTime>,
}

impl PortReading {
    /// The reading from `hccn_tool -stat -g` counters (by the tool's names; a sum is
    /// present when any of its counters is) and the link's speed, state and change count.
    pub fn from_readings(
        counters: Option<&BTreeMap<String, u64>>,
        (speed_bps, link_up, link_changes): (Option<f64>, Option<bool>, Option<u64>),
        read_at: Option<std::time::SystemTime>,
    ) -> Self {
        let sum = |keys: &[&str]| -> Option<u64> {
            let c = counters?;
            let present: Vec<u64> = keys.iter().filter_map(|k| c.get(*k).copied()).collect();
            (!present.is_empty()).then(|| present.iter().fold(0u64, |a, b| a.saturating_add(*b)))
        };
        PortReading {
            pause_rx: sum(&["mac_rx_pfc_pkt_num", "mac_rx_mac_pause_num"]),
            cnp_rx: sum(&["roce_rx_cnp_pkt_num"]),
            errors: sum(&["mac_rx_fcs_err_pkt_num", "mac_rx_bad_pkt_num"]),
            speed_bps,
            link_up,
            link_changes,
            read_at,
        }
    }
}

/// What one port's counters say about the latest interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCondition {
    /// Pause frames or congestion notifications arrived.
    pub congested: bool,
    /// Hardware signs.
    pub signs: Signs,
}

impl PortCondition {
    /// The condition as one byte on the wire: bit 0 congestion, the signs above it.
    pub fn flags(self) -> u8 {
        u8::from(self.congested) | (self.signs.bits() << 1)
    }

    /// The condition from its wire byte; unknown sign bits are dropped.
    pub fn from_flags(flags: u8) -> Self {
        PortCondition {
            congested: flags & 1 == 1,
            signs: Signs::from_bits(flags >> 1),
        }
    }
}

/// Each local port's last reading and condition, and the best speed it has shown.
#[derive(Debug, Clone, Default)]
pub struct StatusTracker {
    last: BTreeMap<u32, (PortReading, PortCondition)>,
    best_speed: BTreeMap<u32, f64>,
}

impl StatusTracker {
    /// The condition of each port in `now` (by physical id), against its previous
    /// reading. Ports missing from `now` are forgotten.
    pub fn update(&mut self, now: &[(u32, PortReading)]) -> BTreeMap<u32, PortCondition> {
        let mut next = BTreeMap::new();
        for &(phy, reading) in now {
            let best = self.best_speed.entry(phy).or_insert(0.0);
            let slow = match reading.speed_bps {
                Some(s) if s.is_finite() && s > 0.0 => {
                    let slow = s < *best;
                    *best = best.max(s);
                    slow
                }
                _ => false,
            };
            let mut cond = match self.last.get(&phy) {
                // The poller has not read again: the interval is the same one.
                Some((was, cond)) if *was == reading => *cond,
                Some((was, _)) => PortCondition {
                    congested: grew(was.pause_rx, reading.pause_rx)
                        || grew(was.cnp_rx, reading.cnp_rx),
                    signs: sign_if(grew(was.errors, reading.errors), Signs::FRAME_ERRORS).union(
                        sign_if(
                            grew(was.link_changes, reading.link_changes),
                            Signs::LINK_SPEED,
                        ),
                    ),
                },
                None => PortCondition::default(),
            };
            // A link that is down now, or below its best speed, is below its rate.
            let slow = slow || reading.link_up == Some(false);
            // (A condition carried over from the same pass was computed from this very
            // reading, so adding the sign again changes nothing.)
            if slow {
                cond.signs = cond.signs.union(Signs::LINK_SPEED);
            }
            next.insert(phy, (reading, cond));
        }
        self.best_speed.retain(|phy, _| next.contains_key(phy));
        let out = next.iter().map(|(phy, (_, c))| (*phy, *c)).collect();
        self.last = next;
        out
    }
}

/// `sign` when `yes`.
fn sign_if(yes: bool, sign: Signs) -> Signs {
    if yes { sign } else { Signs::NONE }
}

/// Whether a counter went up between two readings (both read, and not reset).
fn grew(was: Option<u64>, now: Option<u64>) -> bool {
    matches!((was, now), (Some(a), Some(b)) if b > a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading of pass `pass`.
    fn reading(pass: u64, (pause, cnp, errors): (u64, u64, u64), speed: f64) -> PortReading {
        PortReading {
            pause_rx: Some(pause),
            cnp_rx: Some(cnp),
            errors: Some(errors),
            speed_bps: Some(speed),
            link_up: None,
            link_changes: None,
            read_at: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(pass)),
        }
    }

    const G200: f64 = 200e9;

    #[test]
    fn growth_between_readings_is_congestion_or_a_sign_and_repeats_until_the_next() {
        let mut t = StatusTracker::default();
        // First pass: nothing to compare with.
        let c = t.update(&[
            (0, reading(1, (10, 0, 0), G200)),
            (1, reading(1, (0, 0, 5), G200)),
        ]);
        assert_eq!(c[&0], PortCondition::default());
        assert_eq!(c[&1], PortCondition::default());
        // Port 0 was paused; port 1 received 2 corrupted frames.
        let c = t.update(&[
            (0, reading(2, (15, 0, 0), G200)),
            (1, reading(2, (0, 0, 7), G200)),
        ]);
        assert!(c[&0].congested && c[&0].signs.is_empty());
        assert!(!c[&1].congested && c[&1].signs == Signs::FRAME_ERRORS);
        // The poller has not passed again: the same interval, the same condition.
        let c = t.update(&[
            (0, reading(2, (15, 0, 0), G200)),
            (1, reading(2, (0, 0, 7), G200)),
        ]);
        assert!(c[&0].congested);
        assert_eq!(c[&1].signs, Signs::FRAME_ERRORS);
        // A new pass in which nothing moved is a quiet interval; then CNPs alone are
        // congestion too.
        let c = t.update(&[(0, reading(3, (15, 0, 0), G200))]);
        assert_eq!(c[&0], PortCondition::default());
        assert!(!c.contains_key(&1), "a port no longer read is forgotten");
        let c = t.update(&[(0, reading(4, (15, 3, 0), G200))]);
        assert!(c[&0].congested);
    }

    #[test]
    fn a_link_below_its_best_speed_is_a_sign_while_it_lasts() {
        let mut t = StatusTracker::default();
        t.update(&[(3, reading(1, (0, 0, 0), G200))]);
        let c = t.update(&[(3, reading(2, (0, 0, 0), 100e9))]);
        assert_eq!(c[&3].signs, Signs::LINK_SPEED);
        let c = t.update(&[(3, reading(3, (0, 0, 0), 100e9))]);
        assert_eq!(c[&3].signs, Signs::LINK_SPEED, "still below");
        let c = t.update(&[(3, reading(4, (0, 0, 0), G200))]);
        assert!(c[&3].signs.is_empty());
    }

    #[test]
    fn a_link_that_is_down_or_changed_state_is_below_its_rate() {
        let mut t = StatusTracker::default();
        let link = |pass: u64, up: bool, changes: u64| PortReading {
            link_up: Some(up),
            link_changes: Some(changes),
            ..reading(pass, (0, 0, 0), G200)
        };
        t.update(&[(5, link(1, true, 4))]);
        let c = t.update(&[(5, link(2, false, 5))]);
        assert_eq!(c[&5].signs, Signs::LINK_SPEED, "down");
        let c = t.update(&[(5, link(3, true, 6))]);
        assert_eq!(c[&5].signs, Signs::LINK_SPEED, "came back up: it flapped");
        let c = t.update(&[(5, link(4, true, 6))]);
        assert!(c[&5].signs.is_empty(), "up and steady");
    }

    #[test]
    fn a_reset_or_a_missing_counter_is_no_growth() {
        let mut t = StatusTracker::default();
        t.update(&[(0, reading(1, (100, 100, 100), G200))]);
        let c = t.update(&[(0, reading(2, (1, 1, 1), G200))]);
        assert_eq!(c[&0], PortCondition::default());
        let c = t.update(&[(0, PortReading::default())]);
        assert_eq!(c[&0], PortCondition::default());
        let c = t.update(&[(0, reading(3, (5, 5, 5), G200))]);
        assert_eq!(
            c[&0],
            PortCondition::default(),
            "no previous value to grow from"
        );
    }

    #[test]
    fn readings_come_from_the_tools_counter_names_and_flags_round_trip() {
        let counters: BTreeMap<String, u64> = [
            ("mac_rx_pfc_pkt_num", 4),
            ("mac_rx_mac_pause_num", 1),
            ("mac_rx_fcs_err_pkt_num", 2),
            ("mac_rx_bad_pkt_num", 3),
            ("mac_tx_pfc_pkt_num", 1000),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let r = PortReading::from_readings(Some(&counters), (Some(G200), None, None), None);
        assert_eq!(r.pause_rx, Some(5));
        assert_eq!(r.cnp_rx, None, "not printed: not read");
        assert_eq!(r.errors, Some(5));
        assert_eq!(
            PortReading::from_readings(None, (None, None, None), None),
            PortReading::default()
        );
        let c = PortCondition {
            congested: true,
            signs: Signs::FRAME_ERRORS.union(Signs::LINK_SPEED),
        };
        assert_eq!(c.flags(), 0b1011);
        assert_eq!(PortCondition::from_flags(c.flags()), c);
        assert_eq!(
            PortCondition::from_flags(0xff).signs,
            Signs::from_bits(0x7f)
        );
    }
}
