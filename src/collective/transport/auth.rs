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

use std::io::{ErrorKind, Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

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
}

/// Runs the acceptor side; returns the authenticated peer's hello.
pub fn accept<S: Read + Write>(s: &mut S, key: &[u8], comm_id: u64) -> Result<Hello, AuthError> {
    let na = nonce().map_err(AuthError::Entropy)?;
    let mut hello = [0u8; 4 + 32];
    hello[..4].copy_from_slice(b"HCWA");
    hello[4..].copy_from_slice(&na);
    let unspoken = |e: &std::io::Error| {
        matches!(
            e.kind(),
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
        )
    };
    s.write_all(&hello).map_err(|e| {
        if unspoken(&e) {
            AuthError::ClosedUnspoken
        } else {
            AuthError::Write(e)
        }
    })?;
    let mut msg = [0u8; 4 + 8 + 4 + 4 + 32 + 32];
    match s.read(&mut msg[..1]) {
        Ok(0) => return Err(AuthError::ClosedUnspoken),
        Err(e) if unspoken(&e) => return Err(AuthError::ClosedUnspoken),
        Err(e) => return Err(AuthError::Read(e)),
        Ok(_) => {}
    }
    s.read_exact(&mut msg[1..]).map_err(AuthError::Read)?;
    if &msg[..4] != b"HCWC" {
        let _ = s.write_all(b"NO\0\0");
        return Err(AuthError::NotHandshake);
    }
    let peer = Hello {
        comm_id: u64::from_le_bytes(msg[4..12].try_into().unwrap_or_default()),
        rank: u32::from_le_bytes(msg[12..16].try_into().unwrap_or_default()),
        channel: u32::from_le_bytes(msg[16..20].try_into().unwrap_or_default()),
    };
    let nc: [u8; 32] = msg[20..52].try_into().unwrap_or_default();
    let proof = &msg[52..84];
    // `verify_slice` compares the tags in constant time (`subtle::ConstantTimeEq` inside
    // `digest`), so the time to refuse does not tell a forger how many bytes were right.
    let ok = mac(key, &[b"C", &na, &nc, &msg[4..20]])
        .verify_slice(proof)
        .is_ok();
    if !ok {
        let _ = s.write_all(&[b'N', b'O', 0, 0]);
        return Err(AuthError::WrongKey { rank: peer.rank });
    }
    if peer.comm_id != comm_id {
        let _ = s.write_all(&[b'N', b'O', 0, 0]);
        return Err(AuthError::OtherCommunicator {
            rank: peer.rank,
            theirs: peer.comm_id,
            ours: comm_id,
        });
    }
    let mut reply = [0u8; 4 + 32];
    reply[..4].copy_from_slice(b"OK\0\0");
    let tag = mac(key, &[b"A", &nc, &na, &comm_id.to_le_bytes()])
        .finalize()
        .into_bytes();
    reply[4..].copy_from_slice(&tag);
    s.write_all(&reply).map_err(AuthError::Write)?;
    Ok(peer)
}

/// Runs the connector side.
pub fn connect<S: Read + Write>(s: &mut S, key: &[u8], me: Hello) -> Result<(), AuthError> {
    let mut first = [0u8; 36];
    s.read_exact(&mut first).map_err(AuthError::Read)?;
    if &first[..4] != b"HCWA" {
        return Err(AuthError::NotHandshake);
    }
    let na: [u8; 32] = first[4..].try_into().unwrap_or_default();
    let nc = nonce().map_err(AuthError::Entropy)?;
    let mut ident = [0u8; 16];
    ident[..8].copy_from_slice(&me.comm_id.to_le_bytes());
    ident[8..12].copy_from_slice(&me.rank.to_le_bytes());
    ident[12..16].copy_from_slice(&me.channel.to_le_bytes());
    let proof = mac(key, &[b"C", &na, &nc, &ident]).finalize().into_bytes();
    let mut msg = Vec::with_capacity(84);
    msg.extend_from_slice(b"HCWC");
    msg.extend_from_slice(&ident);
    msg.extend_from_slice(&nc);
    msg.extend_from_slice(&proof);
    s.write_all(&msg).map_err(AuthError::Write)?;
    // The status word is public (the acceptor's verdict), not a secret: a plain comparison.
    let mut status = [0u8; 4];
    s.read_exact(&mut status).map_err(|_| AuthError::Refused)?;
    if &status != b"OK\0\0" {
        return Err(AuthError::Refused);
    }
    let mut tag = [0u8; 32];
    s.read_exact(&mut tag).map_err(AuthError::Read)?;
    // Constant-time, as in `accept`.
    mac(key, &[b"A", &nc, &na, &me.comm_id.to_le_bytes()])
        .verify_slice(&tag)
        .map_err(|_| AuthError::PeerUnproven)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(
        key_a: &'static [u8],
        key_c: &'static [u8],
        comm_c: u64,
    ) -> (Result<Hello, AuthError>, Result<(), AuthError>) {
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
        assert_eq!(
            a.unwrap(),
            Hello {
                comm_id: 7,
                rank: 3,
                channel: 1
            }
        );
        c.unwrap();
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
