//! Frame authentication after the handshake: per-connection session keys and a MAC on
//! every frame that carries one.
//!
//! The handshake ([`super::auth`]) proves that both ends hold the shared key; this module
//! makes the frames that follow unforgeable too. Both ends derive two 32-byte keys, one
//! per direction, from the shared key, both handshake nonces and the connection's
//! identity (communicator id, connecting rank, channel), with BLAKE3's key derivation
//! mode. A tagged frame ends in a 16-byte tag, keyed BLAKE3 over
//!
//! ```text
//! counter (u64 LE) | header (32 bytes) | payload
//! ```
//!
//! where `counter` is the number of frames sent before it on that connection in that
//! direction. The counter is never sent: each end counts, and TCP delivers in order, so a
//! replayed, reordered, dropped or injected frame (or one copied from another connection,
//! whose keys differ) fails its tag. Untagged frames (bulk payloads with
//! `authenticate_payloads` off) still advance the counter, so the tags of the control
//! frames around them also vouch for how many frames came between.
//!
//! Why BLAKE3: keyed BLAKE3 needs no nonce (a GMAC or Poly1305 tag is forgeable once a
//! nonce repeats) and was the fastest of the candidates measured on the reference host
//! (see `docs/engine.md`, "Authentication").

use std::sync::atomic::{AtomicU64, Ordering};

use subtle::ConstantTimeEq;

use super::frame::HEADER_LEN;

/// Bytes of a frame's tag. 128 bits: a forger's chance per attempt is 2^-128, and every
/// failed attempt drops the connection.
pub const TAG_LEN: usize = 16;

/// BLAKE3 key-derivation contexts (globally unique strings, as BLAKE3 asks), one per
/// direction so a frame cannot be reflected back to its sender.
const CONTEXT_C2A: &str = "hcclwatch 2026 transport frames, connector to acceptor";
const CONTEXT_A2C: &str = "hcclwatch 2026 transport frames, acceptor to connector";

/// A 32-byte key for the frames of one direction of one connection. Its `Debug` does not
/// print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkKey([u8; 32]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// The keys of one authenticated connection, as seen from one end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Key of the frames this end sends.
    pub send: LinkKey,
    /// Key of the frames this end receives.
    pub recv: LinkKey,
    /// The wire versions the other end speaks, as its nonce says ([`super::wire`]).
    pub peer: super::wire::Range,
}

/// The inputs of the key derivation: everything both ends know after the handshake.
#[derive(Debug, Clone, Copy)]
pub struct Handshake<'a> {
    /// The shared secret.
    pub key: &'a [u8],
    /// The acceptor's nonce.
    pub nonce_a: &'a [u8; 32],
    /// The connector's nonce.
    pub nonce_c: &'a [u8; 32],
    /// Communicator id, connecting rank and channel, as sent in the hello (16 bytes).
    pub ident: &'a [u8; 16],
}

impl Handshake<'_> {
    fn derive(&self, context: &str) -> LinkKey {
        let mut h = blake3::Hasher::new_derive_key(context);
        // The key is the only variable-length input: its length goes first so no two
        // different (key, nonces, identity) tuples hash the same bytes.
        h.update(&(self.key.len() as u64).to_le_bytes());
        h.update(self.key);
        h.update(self.nonce_a);
        h.update(self.nonce_c);
        h.update(self.ident);
        LinkKey(*h.finalize().as_bytes())
    }

    /// The session of the connecting end.
    pub fn connector(&self) -> Session {
        Session {
            send: self.derive(CONTEXT_C2A),
            recv: self.derive(CONTEXT_A2C),
            peer: super::wire::Range::read(self.nonce_a),
        }
    }

    /// The session of the accepting end.
    pub fn acceptor(&self) -> Session {
        let c = self.connector();
        Session {
            send: c.recv,
            recv: c.send,
            peer: super::wire::Range::read(self.nonce_c),
        }
    }
}

/// The tag of the frame numbered `counter` in its direction.
pub fn tag(
    key: &LinkKey,
    counter: u64,
    header: &[u8; HEADER_LEN],
    payload: &[u8],
) -> [u8; TAG_LEN] {
    let mut h = blake3::Hasher::new_keyed(&key.0);
    h.update(&counter.to_le_bytes());
    h.update(header);
    h.update(payload);
    let mut out = [0u8; TAG_LEN];
    h.finalize_xof().fill(&mut out);
    out
}

/// Whether `got` is the tag of that frame, compared in constant time (how many bytes
/// matched must not show in the time taken to refuse).
pub fn verify(
    key: &LinkKey,
    counter: u64,
    header: &[u8; HEADER_LEN],
    payload: &[u8],
    got: &[u8],
) -> bool {
    got.len() == TAG_LEN && bool::from(tag(key, counter, header, payload).ct_eq(got))
}

/// One direction of one connection: its key and the number of the next frame.
///
/// Only one thread sends (or receives) on a connection at a time, so the counter order
/// is the wire order; an atomic keeps the type `Sync` without a lock per frame.
#[derive(Debug)]
pub struct Direction {
    key: LinkKey,
    next: AtomicU64,
}

impl Direction {
    /// Frame 0 next.
    pub fn new(key: LinkKey) -> Self {
        Self {
            key,
            next: AtomicU64::new(0),
        }
    }

    /// Claims the number of the frame about to be sent or read.
    pub fn claim(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The key.
    pub fn key(&self) -> &LinkKey {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs<'a>(
        key: &'a [u8],
        na: &'a [u8; 32],
        nc: &'a [u8; 32],
        id: &'a [u8; 16],
    ) -> Handshake<'a> {
        Handshake {
            key,
            nonce_a: na,
            nonce_c: nc,
            ident: id,
        }
    }

    #[test]
    fn both_ends_derive_mirrored_keys_and_directions_differ() {
        let (na, nc, id) = ([1u8; 32], [2u8; 32], [3u8; 16]);
        let c = hs(b"k", &na, &nc, &id).connector();
        let a = hs(b"k", &na, &nc, &id).acceptor();
        assert_eq!(c.send, a.recv);
        assert_eq!(c.recv, a.send);
        assert_ne!(c.send, c.recv, "a frame must not verify when reflected");
    }

    #[test]
    fn every_input_changes_the_keys() {
        let (na, nc, id) = ([1u8; 32], [2u8; 32], [3u8; 16]);
        let base = hs(b"key", &na, &nc, &id).connector();
        let (na2, nc2, mut id2) = ([9u8; 32], [9u8; 32], id);
        id2[12] = 4; // another channel
        for other in [
            hs(b"kez", &na, &nc, &id),
            hs(b"key", &na2, &nc, &id),
            hs(b"key", &na, &nc2, &id),
            hs(b"key", &na, &nc, &id2),
        ] {
            assert_ne!(other.connector().send, base.send);
        }
    }

    #[test]
    fn a_tag_binds_key_counter_header_and_payload() {
        let k = LinkKey([5; 32]);
        let h = [7u8; HEADER_LEN];
        let t = tag(&k, 3, &h, b"payload");
        assert!(verify(&k, 3, &h, b"payload", &t));
        assert!(
            !verify(&k, 4, &h, b"payload", &t),
            "replayed at another position"
        );
        assert!(!verify(&LinkKey([6; 32]), 3, &h, b"payload", &t));
        let mut h2 = h;
        h2[20] ^= 1;
        assert!(!verify(&k, 3, &h2, b"payload", &t));
        assert!(!verify(&k, 3, &h, b"paylaod", &t));
        assert!(!verify(&k, 3, &h, b"payload", &t[..15]));
    }

    #[test]
    fn counters_count_from_zero() {
        let d = Direction::new(LinkKey([0; 32]));
        assert_eq!((d.claim(), d.claim(), d.claim()), (0, 1, 2));
    }
}
