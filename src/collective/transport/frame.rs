//! The wire format: a fixed 32-byte header before every payload, and a tag after the
//! payload of every frame whose kind carries one.
//!
//! ```text
//! 0      4     5     6      7      8          16         24        28        32
//! | magic | ver | kind | dtype | rsvd | comm_id  |   seq    |   len   |  chunk  |
//! ... len payload bytes ... [16-byte tag, see `seal`]
//! ```
//! All integers are little-endian. The receiver knows exactly what it expects (the op
//! sequence, the type, the byte count of each chunk, and the kind: control or bulk,
//! tagged or not), so every field is checked and a mismatch is an error naming the field,
//! never a silent misread. The announced length is checked against the receiver's limit
//! before anything is read or allocated for the payload.
//!
//! The version byte is the one the mesh agreed on ([`super::wire`]): a build decodes every
//! version it speaks, and a receiver expects exactly its mesh's.

/// `"HCWT"`.
pub const MAGIC: u32 = 0x5457_4348;
/// The newest wire version (see [`super::wire`] and `docs/upgrades.md`). 2: frames carry
/// a tag (control always, bulk payloads when `authenticate_payloads` is on). 3: the same
/// frames; probe rows say their own layout.
pub const VERSION: u8 = super::wire::Range::OURS.max;
/// Header length.
pub const HEADER_LEN: usize = 32;

/// Frame kinds. The kind says whether a tag follows the payload; the receiver also knows
/// which kind it expects, so a frame cannot shed its tag by claiming another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A bulk payload without a tag (`authenticate_payloads` off).
    Data = 1,
    /// The sender failed its operation or is leaving; the payload is its message (UTF-8,
    /// at most [`ABORT_MAX`] bytes), tagged, and the connection closes after it.
    Abort = 2,
    /// A control payload (anything an operation not marked bulk carries), tagged.
    Control = 3,
    /// A bulk payload with a tag (`authenticate_payloads` on).
    SealedData = 4,
}

impl Kind {
    /// Whether a tag follows the payload.
    pub fn tagged(self) -> bool {
        self != Kind::Data
    }

    /// The kind of a payload of `class`: control is always tagged, bulk only when
    /// `authenticate_payloads` is on.
    pub fn for_payload(class: Payload, authenticate_payloads: bool) -> Kind {
        match class {
            Payload::Control => Kind::Control,
            Payload::Bulk if authenticate_payloads => Kind::SealedData,
            Payload::Bulk => Kind::Data,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Data => "bulk payload",
            Kind::Abort => "abort notice",
            Kind::Control => "control payload",
            Kind::SealedData => "authenticated bulk payload",
        }
    }
}

/// What an operation's payload is, which decides whether its frames are tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Payload {
    /// Anything a receiver acts on (plans, timings, gathered rows, snapshots, member
    /// lists, the engine's own cost figures): always tagged. The default.
    #[default]
    Control,
    /// Measurement traffic whose content nobody reads (probe pings, benchmark buffers):
    /// tagged only when `authenticate_payloads` is on.
    Bulk,
}

/// Longest abort message read.
pub const ABORT_MAX: usize = 1024;

/// A header that cannot be decoded, or is not the one the receiver expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first four bytes are not [`MAGIC`].
    #[error("bad magic 0x{magic:08x} (not an hcclwatch peer, or the stream is out of sync)")]
    BadMagic {
        /// The bytes found, little-endian.
        magic: u32,
    },
    /// The peer speaks a wire version this build does not.
    #[error(
        "wire version {version} (this build speaks {}); the mesh should have agreed on a common one (docs/upgrades.md)",
        super::wire::Range::OURS
    )]
    Version {
        /// The peer's version.
        version: u8,
    },
    /// The kind byte is not a [`Kind`].
    #[error("unknown frame kind {kind}")]
    UnknownKind {
        /// The byte found.
        kind: u8,
    },
    /// The payload is longer than the receiver accepts.
    #[error("frame of {len} bytes exceeds the maximum {max}")]
    TooLarge {
        /// Payload bytes announced.
        len: u32,
        /// The receiver's limit.
        max: usize,
    },
    /// The frame is of another kind than the receiver expects.
    #[error(
        "{} where {} was expected (ranks disagree on the operation, or on authenticate_payloads?)",
        got.name(), expected.name()
    )]
    WrongKind {
        /// The kind received.
        got: Kind,
        /// The kind expected.
        expected: Kind,
    },
    /// A field differs from what the receiver expects.
    #[error("{field} {got} where {expected} was expected (ranks disagree on the operation?)")]
    Mismatch {
        /// Which field.
        field: &'static str,
        /// The value received.
        got: u64,
        /// The value expected.
        expected: u64,
    },
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Wire version (the one the mesh agreed on).
    pub version: u8,
    /// Frame kind.
    pub kind: Kind,
    /// HCCL data type code of the payload.
    pub dtype: u8,
    /// Communicator id.
    pub comm_id: u64,
    /// Operation sequence number within the communicator.
    pub seq: u64,
    /// Payload bytes.
    pub len: u32,
    /// Chunk index within the step.
    pub chunk: u32,
}

impl Header {
    /// Serialises the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.version;
        b[5] = self.kind as u8;
        b[6] = self.dtype;
        b[8..16].copy_from_slice(&self.comm_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.len.to_le_bytes());
        b[28..32].copy_from_slice(&self.chunk.to_le_bytes());
        b
    }

    /// Parses a header, checking magic, version (one this build speaks) and kind.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if magic != MAGIC {
            return Err(FrameError::BadMagic { magic });
        }
        if !super::wire::Range::OURS.holds(b[4]) {
            return Err(FrameError::Version { version: b[4] });
        }
        let kind = match b[5] {
            1 => Kind::Data,
            2 => Kind::Abort,
            3 => Kind::Control,
            4 => Kind::SealedData,
            kind => return Err(FrameError::UnknownKind { kind }),
        };
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        Ok(Header {
            version: b[4],
            kind,
            dtype: b[6],
            comm_id: u64_at(8),
            seq: u64_at(16),
            len: u32_at(24),
            chunk: u32_at(28),
        })
    }

    /// Checks a received header against what the receiver expects. The length comes
    /// first: nothing of a frame longer than `max_frame` is read.
    pub fn expect(&self, want: &Header, max_frame: usize) -> Result<(), FrameError> {
        if self.len as usize > max_frame {
            return Err(FrameError::TooLarge {
                len: self.len,
                max: max_frame,
            });
        }
        if self.kind != want.kind {
            return Err(FrameError::WrongKind {
                got: self.kind,
                expected: want.kind,
            });
        }
        for (field, got, exp) in [
            (
                "wire version",
                u64::from(self.version),
                u64::from(want.version),
            ),
            ("communicator id", self.comm_id, want.comm_id),
            ("op sequence", self.seq, want.seq),
            ("data type", u64::from(self.dtype), u64::from(want.dtype)),
            ("byte count", u64::from(self.len), u64::from(want.len)),
            ("chunk index", u64::from(self.chunk), u64::from(want.chunk)),
        ] {
            if got != exp {
                return Err(FrameError::Mismatch {
                    field,
                    got,
                    expected: exp,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(
            version in 2u8..=VERSION,
            kind in prop::sample::select(vec![Kind::Data, Kind::Abort, Kind::Control, Kind::SealedData]),
            dtype in any::<u8>(), comm in any::<u64>(), seq in any::<u64>(), len in any::<u32>(), chunk in any::<u32>(),
        ) {
            let h = Header { version, kind, dtype, comm_id: comm, seq, len, chunk };
            prop_assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN)) {
            let arr: [u8; HEADER_LEN] = bytes.try_into().unwrap();
            let _ = Header::decode(&arr);
        }
    }

    #[test]
    fn mismatches_name_the_field() {
        let want = Header {
            version: 2,
            kind: Kind::Data,
            dtype: 4,
            comm_id: 7,
            seq: 3,
            len: 16,
            chunk: 0,
        };
        let mut got = want;
        got.seq = 4;
        assert!(
            got.expect(&want, 1 << 20)
                .unwrap_err()
                .to_string()
                .contains("op sequence 4 where 3")
        );
        let mut got = want;
        got.len = 1 << 30;
        assert!(
            got.expect(&want, 1 << 20)
                .unwrap_err()
                .to_string()
                .contains("exceeds the maximum")
        );
        let mut b = want.encode();
        b[0] = b'X';
        assert!(
            Header::decode(&b)
                .unwrap_err()
                .to_string()
                .contains("bad magic")
        );
        let mut got = want;
        got.kind = Kind::Data;
        let control = Header {
            kind: Kind::Control,
            ..want
        };
        assert!(
            got.expect(&control, 1 << 20)
                .unwrap_err()
                .to_string()
                .contains("bulk payload where control payload was expected"),
            "an untagged frame cannot stand in for a tagged one"
        );
        let mut b = want.encode();
        b[4] = 1;
        assert!(
            Header::decode(&b)
                .unwrap_err()
                .to_string()
                .contains("wire version 1 (this build speaks 2..=4)")
        );
        let mut b = want.encode();
        b[4] = 5;
        assert!(
            Header::decode(&b).is_err(),
            "a version this build does not speak"
        );
        let mut got = want;
        got.version = 3;
        assert!(
            got.expect(&want, 1 << 20)
                .unwrap_err()
                .to_string()
                .contains("wire version 3 where 2 was expected"),
            "a frame of another version than the mesh agreed on"
        );
        let mut b = want.encode();
        b[5] = 9;
        assert!(
            Header::decode(&b)
                .unwrap_err()
                .to_string()
                .contains("unknown frame kind 9")
        );
    }
}
