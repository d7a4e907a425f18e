//! Hardware evidence: what a node's own network interface shows that congestion cannot.
//!
//! Probes alone cannot tell a slow component from steady congestion that the node's
//! counters happen to miss: both slow every probe through the node by a constant. Only
//! their length differs, so a slowness nothing else vouches for waits a persistence
//! horizon (`health.uncorroborated_hold`) longer than congestion lasts. Some readings,
//! though, congestion can never produce, however heavy: a link that trained below its
//! rate, a PCIe link that retrained narrower or slower than it ran before, frames that
//! arrive corrupted. A node that shows one of them while it is slow has its slowness
//! explained by its own hardware, and is recommended after the short hold
//! (`health.confirm_hold`). Each member reads its own and tells the group with its
//! timings (one byte of flags, [`Signs::bits`]).

use crate::snapshot::probe::HARDWARE_SIGNS;

/// Slow (or elevated) rounds with a hardware sign an episode needs before the signs
/// corroborate it, and at least a quarter of its slow rounds: failing hardware shows its
/// sign all the time, while a stray corrupted frame now and then on a healthy, busy link
/// must not turn a long congestion episode into a quarantine. Measured on the held-out
/// batch (docs/detection.md): with any single sign, stray frames corroborated 56 more
/// congested NPU ports.
pub const SIGN_ROUNDS: usize = 3;

/// Whether an episode's hardware corroborates it: signs in `sign_rounds` of its
/// `slow_rounds`, at least [`SIGN_ROUNDS`] and a quarter of them.
pub fn corroborates(sign_rounds: usize, slow_rounds: usize) -> bool {
    sign_rounds >= SIGN_ROUNDS && sign_rounds.saturating_mul(4) >= slow_rounds
}

/// The hardware signs a node showed in a round, as a set of flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Signs(u8);

impl Signs {
    /// No sign.
    pub const NONE: Signs = Signs(0);
    /// The uplink's negotiated speed is below its expected rate (configured, or the
    /// highest seen since the daemon started): a link that renegotiated down.
    pub const LINK_SPEED: Signs = Signs(1);
    /// The uplink NIC's PCIe link trained narrower or slower than its maximum.
    pub const PCIE: Signs = Signs(2);
    /// The uplink received corrupted frames (CRC or framing errors) or lost carrier since
    /// the last round.
    pub const FRAME_ERRORS: Signs = Signs(4);
    /// Every flag this version knows.
    const ALL: u8 = 7;

    /// The flags from their wire form; flags this version does not know are dropped (a
    /// newer member may send more).
    pub fn from_bits(bits: u8) -> Self {
        Signs(bits & Self::ALL)
    }

    /// The wire form.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether no sign is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every sign of `other` is set here.
    pub fn contains(self, other: Signs) -> bool {
        self.0 & other.0 == other.0
    }

    /// The signs of both.
    pub fn union(self, other: Signs) -> Self {
        Signs(self.0 | other.0)
    }

    /// The signs' label values ([`HARDWARE_SIGNS`], in that order), for the metrics and
    /// the state API.
    pub fn labels(self) -> Vec<&'static str> {
        self.known().map(|(_, label, _)| label).collect()
    }

    /// The signs with these labels ([`HARDWARE_SIGNS`]); others are ignored (the
    /// configuration checks them).
    pub fn from_labels(labels: &[String]) -> Self {
        KNOWN
            .into_iter()
            .filter(|(_, l, _)| labels.iter().any(|x| x == l))
            .fold(Signs::NONE, |a, (s, _, _)| a.union(s))
    }

    /// The signs' names, in a fixed order, for reasons and logs.
    pub fn names(self) -> Vec<&'static str> {
        self.known().map(|(_, _, name)| name).collect()
    }

    /// The rows of [`KNOWN`] set here.
    fn known(self) -> impl Iterator<Item = (Signs, &'static str, &'static str)> {
        KNOWN.into_iter().filter(move |(s, _, _)| self.contains(*s))
    }
}

/// Every sign this version knows: its flag, its label ([`HARDWARE_SIGNS`], in that
/// order) and its name in reasons and logs.
const KNOWN: [(Signs, &str, &str); 3] = [
    (
        Signs::LINK_SPEED,
        HARDWARE_SIGNS[0],
        "link speed below its rate",
    ),
    (Signs::PCIE, HARDWARE_SIGNS[1], "PCIe link degraded"),
    (Signs::FRAME_ERRORS, HARDWARE_SIGNS[2], "corrupted frames"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_flags_are_dropped_and_names_follow_the_flags() {
        let s = Signs::from_bits(0b1111_0110);
        assert_eq!(s, Signs::PCIE.union(Signs::FRAME_ERRORS));
        assert_eq!(s.names(), ["PCIe link degraded", "corrupted frames"]);
        assert_eq!(s.labels(), ["pcie", "frame_errors"]);
        assert_eq!(Signs::from_bits(7).labels(), HARDWARE_SIGNS);
        let labels = ["frame_errors".to_string(), "bogus".to_string()];
        assert_eq!(Signs::from_labels(&labels), Signs::FRAME_ERRORS);
        assert!(Signs::from_bits(0).is_empty());
        assert!(!s.contains(Signs::LINK_SPEED));
        assert_eq!(
            Signs::from_bits(Signs::LINK_SPEED.bits()),
            Signs::LINK_SPEED
        );
    }
}
