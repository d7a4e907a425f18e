//! Shared-secret mutual authentication, before any collective data is accepted.
//!
//! Both sides contribute a 32-byte random nonce and both prove knowledge of the key with
//! HMAC-SHA256 over both nonces and the connection's identity (communicator id, rank,
//! channel), so a recorded handshake cannot be replayed and neither side can be
//! impersonated by a peer that only relays.
//!
//! ```text
//! acceptor  → connector : "HCWA" nonce_a
//! connector → acceptor  : "HCWC" comm_id rank channel nonce_c HMAC(k, "C"|nonce_a|nonce_c|comm|rank|chan)
//! acceptor  → connector : "OK\0\0" HMAC(k, "A"|nonce_c|nonce_a|comm)     or "NO\0\0" and close
//! ```
//!
//! Each side's nonce also says the wire versions it speaks ([`super::wire`]): read only
//! once the proof that covers it checked out, and a peer whose range does not overlap this
//! build's is refused with both ranges named.

use std::io::{ErrorKind, Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::seal::{Handshake, Session};
use super::wire::{self, NoCommonVersion, Range};

type HmacSha256 = Hmac<Sha256>;

/// Who the connecting side claims to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Communicator id.
    pub comm_id: u64,
    /// Connector's rank.
    pub rank: u32,
    /// Channel index.
    pub channel: u32,
}

/// Reads 32 random bytes from the kernel.
pub fn nonce() -> std::io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut n)?;
    Ok(n)
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for HMAC.
    let mut m = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    for p in parts {
        m.update(p);
    }
    m
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The connection closed before the peer sent a byte: a member's liveness check (see
    /// `probe::membership`), not an attack or a misconfiguration.
    #[error("closed before the handshake (a liveness check)")]
    ClosedUnspoken,
    /// No nonce could be drawn.
    #[error("cannot read /dev/urandom: {0}")]
    Entropy(std::io::Error),
    /// Sending a handshake message failed.
    #[error("handshake write failed: {0}")]
    Write(std::io::Error),
    /// Receiving a handshake message failed (the peer closed, or the timeout passed).
    #[error("handshake read failed: {0}")]
    Read(std::io::Error),
    /// The peer sent something other than this handshake.
    #[error("peer did not speak the hcclwatch handshake")]
    NotHandshake,
    /// The connecting peer's proof does not match the key.
    #[error("peer claiming rank {rank} failed authentication (wrong key)")]
    WrongKey {
        /// The rank the peer claimed.
        rank: u32,
    },
    /// The connecting peer holds the key but is in another communicator.
    #[error("peer rank {rank} belongs to communicator {theirs:016x}, not {ours:016x}")]
    OtherCommunicator {
        /// The peer's rank.
        rank: u32,
        /// The peer's communicator id.
        theirs: u64,
        /// This side's communicator id.
        ours: u64,
    },
    /// The accepting peer refused this side's proof.
    #[error("authentication refused by peer (wrong key or communicator)")]
    Refused,
    /// The accepting peer's own proof does not match the key.
    #[error("peer could not prove it holds the key")]
    PeerUnproven,
    /// The peer holds the key but speaks no wire version this build speaks.
    #[error("{}{why}", .rank.map(|r| format!("peer rank {r}: ")).unwrap_or_default())]
    WireVersion {
        /// The peer's rank, when it said it (the connecting side).
        rank: Option<u32>,
        /// Both ranges.
        why: NoCommonVersion,
    },
}

/// Bytes of the acceptor's hello: `"HCWA"` and its nonce.
pub const ACCEPTOR_HELLO_LEN: usize = 4 + 32;
/// Bytes of the connector's message: `"HCWC"`, its [`Hello`], its nonce and its proof.
pub const CONNECT_LEN: usize = 4 + 16 + 32 + 32;
/// Bytes of the acceptor's positive reply: `"OK\0\0"` and its proof.
pub const REPLY_LEN: usize = 4 + 32;
/// The acceptor's refusal, sent before it closes.
pub const REFUSAL: [u8; 4] = *b"NO\0\0";

impl Hello {
    /// The 16 bytes that identify the connection: communicator id, rank, channel.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.comm_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.rank.to_le_bytes());
        b[12..16].copy_from_slice(&self.channel.to_le_bytes());
        b
    }
}

/// The connector's message, parsed but not yet checked against the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectMsg {
    /// Who the connector claims to be.
    pub hello: Hello,
    /// Its nonce.
    pub nonce: [u8; 32],
    /// Its proof of the key.
    pub proof: [u8; 32],
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[..N]);
    out
}

/// Parses the connector's message. Pure and total: any input gives a value or an error.
pub fn parse_connect(msg: &[u8]) -> Result<ConnectMsg, AuthError> {
    if msg.len() != CONNECT_LEN || &msg[..4] != b"HCWC" {
        return Err(AuthError::NotHandshake);
    }
    let ident: [u8; 16] = array(&msg[4..20]);
    Ok(ConnectMsg {
        hello: Hello {
            comm_id: u64::from_le_bytes(array(&ident[..8])),
            rank: u32::from_le_bytes(array(&ident[8..12])),
            channel: u32::from_le_bytes(array(&ident[12..16])),
        },
        nonce: array(&msg[20..52]),
        proof: array(&msg[52..84]),
    })
}

/// Parses the acceptor's hello; returns its nonce. Pure and total.
pub fn parse_acceptor_hello(b: &[u8]) -> Result<[u8; 32], AuthError> {
    if b.len() != ACCEPTOR_HELLO_LEN || &b[..4] != b"HCWA" {
        return Err(AuthError::NotHandshake);
    }
    Ok(array(&b[4..]))
}

/// The accepting side of one handshake, without I/O: send [`hello`](Self::hello), read
/// [`CONNECT_LEN`] bytes, pass them to [`finish`](Self::finish), and send its reply (or
/// [`REFUSAL`] on an error). The accept loop drives it asynchronously, [`accept`]
/// synchronously.
#[derive(Debug, Clone)]
pub struct Acceptor {
    comm_id: u64,
    nonce: [u8; 32],
}

impl Acceptor {
    /// A handshake with a fresh nonce that says this build's wire versions.
    pub fn new(comm_id: u64) -> Result<Self, AuthError> {
        let mut n = nonce().map_err(AuthError::Entropy)?;
        Range::OURS.stamp(&mut n);
        Ok(Self::with_nonce(comm_id, n))
    }

    /// A handshake with a given nonce (tests and fuzzing; a real one must be random).
    pub fn with_nonce(comm_id: u64, nonce: [u8; 32]) -> Self {
        Self { comm_id, nonce }
    }

    /// The first message.
    pub fn hello(&self) -> [u8; ACCEPTOR_HELLO_LEN] {
        let mut hello = [0u8; ACCEPTOR_HELLO_LEN];
        hello[..4].copy_from_slice(b"HCWA");
        hello[4..].copy_from_slice(&self.nonce);
        hello
    }

    /// Checks the connector's message: returns its hello, the reply to send and the
    /// session keys (with the connector's wire versions, which must overlap this build's).
    /// Pure (no I/O) and total.
    pub fn finish(
        &self,
        key: &[u8],
        msg: &[u8],
    ) -> Result<(Hello, [u8; REPLY_LEN], Session), AuthError> {
        let m = parse_connect(msg)?;
        let ident = m.hello.encode();
        // `verify_slice` compares the tags in constant time (`subtle::ConstantTimeEq`
        // inside `digest`), so the time to refuse does not tell a forger how many bytes
        // were right.
        mac(key, &[b"C", &self.nonce, &m.nonce, &ident])
            .verify_slice(&m.proof)
            .map_err(|_| AuthError::WrongKey { rank: m.hello.rank })?;
        if m.hello.comm_id != self.comm_id {
            return Err(AuthError::OtherCommunicator {
                rank: m.hello.rank,
                theirs: m.hello.comm_id,
                ours: self.comm_id,
            });
        }
        let mut reply = [0u8; REPLY_LEN];
        reply[..4].copy_from_slice(b"OK\0\0");
        let tag = mac(
            key,
            &[b"A", &m.nonce, &self.nonce, &self.comm_id.to_le_bytes()],
        )
        .finalize()
        .into_bytes();
        reply[4..].copy_from_slice(&tag);
        let session = Handshake {
            key,
            nonce_a: &self.nonce,
            nonce_c: &m.nonce,
            ident: &ident,
        }
        .acceptor();
        wire::negotiate(session.peer).map_err(|why| AuthError::WireVersion {
            rank: Some(m.hello.rank),
            why,
        })?;
        Ok((m.hello, reply, session))
    }
}

/// Whether an I/O error means the peer went away (rather than a timeout or a fault here).
fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
    )
}

/// Runs the acceptor side synchronously; returns the authenticated peer's hello and the
/// session keys.
pub fn accept<S: Read + Write>(
    s: &mut S,
    key: &[u8],
    comm_id: u64,
) -> Result<(Hello, Session), AuthError> {
    let acc = Acceptor::new(comm_id)?;
    s.write_all(&acc.hello()).map_err(|e| {
        if gone(&e) {
            AuthError::ClosedUnspoken
        } else {
            AuthError::Write(e)
        }
    })?;
    let mut msg = [0u8; CONNECT_LEN];
    match s.read(&mut msg[..1]) {
        Ok(0) => return Err(AuthError::ClosedUnspoken),
        Err(e) if gone(&e) => return Err(AuthError::ClosedUnspoken),
        Err(e) => return Err(AuthError::Read(e)),
        Ok(_) => {}
    }
    if msg[0] != b'H' {
        // Not worth waiting for the rest: no handshake starts with this byte.
        let _ = s.write_all(&REFUSAL);
        return Err(AuthError::NotHandshake);
    }
    s.read_exact(&mut msg[1..]).map_err(AuthError::Read)?;
    match acc.finish(key, &msg) {
        Ok((hello, reply, session)) => {
            s.write_all(&reply).map_err(AuthError::Write)?;
            Ok((hello, session))
        }
        Err(e) => {
            let _ = s.write_all(&REFUSAL);
            Err(e)
        }
    }
}

/// Runs the connector side; returns the session keys.
pub fn connect<S: Read + Write>(s: &mut S, key: &[u8], me: Hello) -> Result<Session, AuthError> {
    let mut first = [0u8; ACCEPTOR_HELLO_LEN];
    s.read_exact(&mut first).map_err(AuthError::Read)?;
    let na = parse_acceptor_hello(&first)?;
    let mut nc = nonce().map_err(AuthError::Entropy)?;
    Range::OURS.stamp(&mut nc);
    let ident = me.encode();
    let proof = mac(key, &[b"C", &na, &nc, &ident]).finalize().into_bytes();
    let mut msg = [0u8; CONNECT_LEN];
    msg[..4].copy_from_slice(b"HCWC");
    msg[4..20].copy_from_slice(&ident);
    msg[20..52].copy_from_slice(&nc);
    msg[52..].copy_from_slice(&proof);
    s.write_all(&msg).map_err(AuthError::Write)?;
    // The status word is public (the acceptor's verdict), not a secret: a plain comparison.
    let mut status = [0u8; 4];
    s.read_exact(&mut status).map_err(AuthError::Read)?;
    if status != *b"OK\0\0" {
        // An acceptor whose range has nothing in common with ours refuses for that reason:
        // say so (its nonce is not proven here, but it only explains a refusal).
        if let Err(why) = wire::negotiate(Range::read(&na)) {
            return Err(AuthError::WireVersion { rank: None, why });
        }
        return Err(AuthError::Refused);
    }
    let mut tag = [0u8; 32];
    s.read_exact(&mut tag).map_err(AuthError::Read)?;
    // Constant-time, as in `Acceptor::finish`.
    mac(key, &[b"A", &nc, &na, &me.comm_id.to_le_bytes()])
        .verify_slice(&tag)
        .map_err(|_| AuthError::PeerUnproven)?;
    let session = Handshake {
        key,
        nonce_a: &na,
        nonce_c: &nc,
        ident: &ident,
    }
    .connector();
    wire::negotiate(session.peer).map_err(|why| AuthError::WireVersion { rank: None, why })?;
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(
        key_a: &'static [u8],
        key_c: &'static [u8],
        comm_c: u64,
    ) -> (
        Result<(Hello, Session), AuthError>,
        Result<Session, AuthError>,
    ) {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || accept(&mut a, key_a, 7));
        let rc = connect(
            &mut c,
            key_c,
            Hello {
                comm_id: comm_c,
                rank: 3,
                channel: 1,
            },
        );
        (t.join().unwrap(), rc)
    }

    #[test]
    fn same_key_authenticates_both_ways() {
        let (a, c) = pair(b"secret", b"secret", 7);
        let (hello, sa) = a.unwrap();
        assert_eq!(
            hello,
            Hello {
                comm_id: 7,
                rank: 3,
                channel: 1
            }
        );
        let sc = c.unwrap();
        assert_eq!(sa.send, sc.recv, "both ends derive the same frame keys");
        assert_eq!(sa.recv, sc.send);
        assert_eq!((sa.peer, sc.peer), (Range::OURS, Range::OURS));
    }

    /// The connector's message with nonce `nc`, proved with key `k` against `acc`.
    fn connect_msg(acc: &Acceptor, me: Hello, nc: [u8; 32]) -> Vec<u8> {
        let na = parse_acceptor_hello(&acc.hello()).unwrap();
        let proof = mac(b"k", &[b"C", &na, &nc, &me.encode()])
            .finalize()
            .into_bytes();
        [&b"HCWC"[..], &me.encode(), &nc, &proof].concat()
    }

    #[test]
    fn a_peer_that_says_no_range_speaks_2_and_a_disjoint_range_is_refused_naming_both() {
        let acc = Acceptor::new(7).unwrap();
        let me = Hello {
            comm_id: 7,
            rank: 5,
            channel: 0,
        };
        // A build before negotiation: its nonce is all random, no marker.
        let (_, _, s) = acc.finish(b"k", &connect_msg(&acc, me, [9; 32])).unwrap();
        assert_eq!(s.peer, Range::LEGACY);
        assert_eq!(wire::negotiate(s.peer), Ok(2));
        // A later build that dropped 2 to 4.
        let mut nc = [9u8; 32];
        Range { min: 5, max: 7 }.stamp(&mut nc);
        let e = acc
            .finish(b"k", &connect_msg(&acc, me, nc))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "peer rank 5: peer speaks wire versions 5..=7, this build 2..=4: no version in \
             common; upgrade one release at a time (docs/upgrades.md)"
        );
    }

    #[test]
    fn every_handshake_has_its_own_session_keys() {
        let (a1, _) = pair(b"secret", b"secret", 7);
        let (a2, _) = pair(b"secret", b"secret", 7);
        assert_ne!(a1.unwrap().1.recv, a2.unwrap().1.recv);
    }

    #[test]
    fn a_connector_refused_by_an_acceptor_without_a_common_version_says_both_ranges() {
        let (mut a, mut c) = UnixStream::pair().unwrap();
        // A later build that speaks 5 to 7 only: it says so in its nonce and refuses.
        let t = std::thread::spawn(move || {
            let mut n = [7u8; 32];
            Range { min: 5, max: 7 }.stamp(&mut n);
            a.write_all(&Acceptor::with_nonce(7, n).hello()).unwrap();
            let mut msg = [0u8; CONNECT_LEN];
            a.read_exact(&mut msg).unwrap();
            a.write_all(&REFUSAL).unwrap();
        });
        let me = Hello {
            comm_id: 7,
            rank: 1,
            channel: 0,
        };
        let e = connect(&mut c, b"k", me).unwrap_err().to_string();
        t.join().unwrap();
        assert_eq!(
            e,
            "peer speaks wire versions 5..=7, this build 2..=4: no version in common; \
             upgrade one release at a time (docs/upgrades.md)"
        );
    }

    #[test]
    fn the_acceptor_finishes_from_bytes_alone() {
        let acc = Acceptor::with_nonce(7, [1; 32]);
        let na = parse_acceptor_hello(&acc.hello()).unwrap();
        assert_eq!(na, [1; 32]);
        let me = Hello {
            comm_id: 7,
            rank: 2,
            channel: 0,
        };
        let nc = [2u8; 32];
        let proof = mac(b"k", &[b"C", &na, &nc, &me.encode()])
            .finalize()
            .into_bytes();
        let mut msg = b"HCWC".to_vec();
        msg.extend_from_slice(&me.encode());
        msg.extend_from_slice(&nc);
        msg.extend_from_slice(&proof);
        let (hello, reply, _) = acc.finish(b"k", &msg).unwrap();
        assert_eq!(hello, me);
        assert_eq!(&reply[..4], b"OK\0\0");
        msg[60] ^= 1;
        assert!(matches!(
            acc.finish(b"k", &msg),
            Err(AuthError::WrongKey { rank: 2 })
        ));
        assert!(matches!(
            acc.finish(b"k", &msg[..40]),
            Err(AuthError::NotHandshake)
        ));
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_connect(&bytes);
            let _ = parse_acceptor_hello(&bytes);
            let _ = Acceptor::with_nonce(1, [0; 32]).finish(b"k", &bytes);
        }
    }

    #[test]
    fn wrong_key_is_refused_and_reported_on_both_sides() {
        let (a, c) = pair(b"secret", b"guess", 7);
        assert!(a.unwrap_err().to_string().contains("failed authentication"));
        assert!(
            c.unwrap_err()
                .to_string()
                .contains("authentication refused")
        );
    }

    #[test]
    fn a_connection_closed_unspoken_is_a_liveness_check_not_a_failure() {
        let (mut a, c) = UnixStream::pair().unwrap();
        drop(c);
        assert!(matches!(
            accept(&mut a, b"k", 7),
            Err(AuthError::ClosedUnspoken)
        ));
    }

    #[test]
    fn other_communicator_is_refused() {
        let (a, c) = pair(b"k", b"k", 8);
        assert!(
            a.unwrap_err()
                .to_string()
                .contains("belongs to communicator")
        );
        assert!(c.is_err());
    }
}
