//! Wire versions: which versions of the protocol a build speaks, how two builds agree on
//! one, and how a build's range travels in a handshake that builds before negotiation
//! (wire version 2 only) still accept.
//!
//! A DaemonSet rolling update runs two releases side by side for hours, so members of
//! adjacent releases must form one group and read each other right. Every build speaks a
//! range of versions ([`Range::OURS`]); a mesh speaks the highest version every member
//! supports (see `Mesh::establish`), and what a version means is listed in
//! `docs/upgrades.md`:
//!
//! - 2: the framing of [`super::frame`] (header, tags), and probe rows without a layout;
//! - 3: the same framing with the version byte 3, and probe rows that begin with their
//!   own layout (version and field count; see `probe::round`);
//! - 4: the same framing with the version byte 4, and signed all-gathers: every member
//!   signs the blocks it contributes and every member checks every block, whoever relayed
//!   it (see `collective::authorship`).
//!
//! **Carrying the range.** The handshake of version 2 has no room for it: every message
//! is of a fixed length and read exactly, and the first byte after it is a frame header
//! that must say 2. What a build of version 2 never looks into is the content of the
//! other side's 32-byte nonce: it only feeds it to the HMAC and the key derivation. So
//! each side writes its range into its nonce ([`Range::stamp`]: a four-byte marker and
//! the two bounds, 26 bytes staying random), where the proof covers it like the rest of
//! the nonce, and reads the other side's ([`Range::read`]); a nonce without the marker
//! is a build of version 2 only. Until both sides know each other's range nothing but
//! the handshake has been sent, so the first frame already speaks the agreed version.

/// Where the marker of a stamped nonce starts.
const MARK_AT: usize = 24;
/// The marker: `"HCWV"`.
const MARK: [u8; 4] = *b"HCWV";

/// The versions one build speaks, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Lowest version spoken.
    pub min: u8,
    /// Highest version spoken.
    pub max: u8,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

impl Range {
    /// What this build speaks: 2 (the releases before negotiation) to 4.
    pub const OURS: Range = Range { min: 2, max: 4 };
    /// What a build that does not say its range speaks: version 2 only.
    pub const LEGACY: Range = Range { min: 2, max: 2 };

    /// The highest version both ranges hold, if any.
    pub fn common(self, other: Range) -> Option<u8> {
        let (lo, hi) = (self.min.max(other.min), self.max.min(other.max));
        (lo <= hi).then_some(hi)
    }

    /// Whether this range holds `v`.
    pub fn holds(self, v: u8) -> bool {
        (self.min..=self.max).contains(&v)
    }

    /// Writes this range into a fresh random nonce (the marker, then min and max).
    pub fn stamp(self, nonce: &mut [u8; 32]) {
        nonce[MARK_AT..MARK_AT + 4].copy_from_slice(&MARK);
        nonce[MARK_AT + 4] = self.min;
        nonce[MARK_AT + 5] = self.max;
    }

    /// The range a peer's nonce says; [`Range::LEGACY`] without the marker. A stamped
    /// range whose bounds are reversed is returned as it is: it overlaps nothing, so the
    /// handshake fails naming it. (A random nonce of a build of version 2 carries the
    /// marker with probability 2⁻³²; that handshake fails the same way and the next
    /// formation, with a fresh nonce, succeeds.)
    pub fn read(nonce: &[u8; 32]) -> Range {
        if nonce[MARK_AT..MARK_AT + 4] != MARK {
            return Range::LEGACY;
        }
        Range {
            min: nonce[MARK_AT + 4],
            max: nonce[MARK_AT + 5],
        }
    }
}

/// The peer's range and this build's do not overlap: the handshake fails with this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "peer speaks wire versions {theirs}, this build {ours}: no version in common; upgrade \
     one release at a time (docs/upgrades.md)"
)]
pub struct NoCommonVersion {
    /// The peer's range.
    pub theirs: Range,
    /// This build's range.
    pub ours: Range,
}

/// The version to speak with a peer of range `theirs`, or the error naming both ranges.
pub fn negotiate(theirs: Range) -> Result<u8, NoCommonVersion> {
    Range::OURS.common(theirs).ok_or(NoCommonVersion {
        theirs,
        ours: Range::OURS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_common_version_is_spoken_and_disjoint_ranges_name_both() {
        assert_eq!(negotiate(Range::LEGACY), Ok(2));
        assert_eq!(negotiate(Range { min: 2, max: 3 }), Ok(3));
        assert_eq!(negotiate(Range::OURS), Ok(4));
        assert_eq!(negotiate(Range { min: 2, max: 9 }), Ok(4));
        assert_eq!(negotiate(Range { min: 3, max: 4 }), Ok(4));
        let e = negotiate(Range { min: 5, max: 6 }).unwrap_err();
        assert_eq!(
            e.to_string(),
            "peer speaks wire versions 5..=6, this build 2..=4: no version in common; \
             upgrade one release at a time (docs/upgrades.md)"
        );
        assert!(
            negotiate(Range { min: 3, max: 2 }).is_err(),
            "reversed bounds"
        );
        assert!(negotiate(Range { min: 0, max: 1 }).is_err());
    }

    #[test]
    fn a_stamped_nonce_says_its_range_and_a_plain_one_is_version_2() {
        let mut n = [0xa5u8; 32];
        assert_eq!(Range::read(&n), Range::LEGACY);
        Range::OURS.stamp(&mut n);
        assert_eq!(Range::read(&n), Range::OURS);
        // The stamp keeps the first 24 and the last 2 bytes (random) as they were.
        assert!(n[..24].iter().chain(&n[30..]).all(|b| *b == 0xa5));
        n[MARK_AT] = b'X';
        assert_eq!(Range::read(&n), Range::LEGACY);
    }
}
