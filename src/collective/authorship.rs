//! Who wrote a gathered block: signed all-gathers.
//!
//! An all-gather's blocks travel through relays (on a ring, the block of rank a reaches
//! rank m through every rank between them). Each hop is authenticated with the session
//! keys of its own connection ([`super::transport::seal`]), but that proves only who sent
//! the frame, not who wrote the block inside it: a member that holds the key could rewrite
//! another member's block as it relays it, and every member downstream would take the
//! rewritten block as the author's.
//!
//! From wire version 4 ([`SIGNED_VERSION`]) every member of a communicator makes an
//! Ed25519 key pair of its own when the communicator forms and hands its public key to
//! every other member **directly**, in a pairwise all-to-all over their own connection,
//! so no third member relays a key. A signed all-gather then carries each block with its
//! author's signature over the communicator id, the gather's sequence number on this
//! communicator, what the block is (its context), the author's rank and the block; every
//! member checks every block it receives against the key its author handed it. A block
//! that fails is a [`Forgery`]: the caller leaves it out, as a member whose block is
//! unknown, and counts it.
//!
//! Signed gathers always run as a ring, so that a forged block can be traced to a stretch
//! of relays (see [`Forgery::relay`]). What this does not stop is written in
//! `docs/security.md`: a member with the key that can also sit on the path of a
//! connection between two others (and so derive its session keys) can replace a key as
//! it is handed over.

use ring::rand::SystemRandom;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

/// The first wire version whose all-gathers are signed.
pub const SIGNED_VERSION: u8 = 4;
/// Bytes of an Ed25519 public key.
pub const PUBLIC_LEN: usize = 32;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;
/// Domain separation: a signature over a gathered block can be nothing else.
const DOMAIN: &[u8] = b"hcclwatch 2026 signed all-gather block\0";

/// A test-only fault (`probe.inject_forge_relayed`): what this member does to a block it
/// relays in a signed all-gather, given the block's context and author. It runs on the
/// block with its signature removed, so a forger can rewrite the block as it likes and
/// the signature it forwards is the author's, for the old block.
#[derive(Clone)]
pub struct RelayFault(pub std::sync::Arc<RelayFn>);

/// The rewrite of a [`RelayFault`]: `(context, author, block)`.
pub type RelayFn = dyn Fn(&str, usize, &mut [u8]) + Send + Sync;

impl std::fmt::Debug for RelayFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayFault")
    }
}

/// Why this member cannot sign (no key pair could be made).
#[derive(Debug, thiserror::Error)]
#[error("cannot make an Ed25519 key pair for signed all-gathers: {0}")]
pub struct KeyError(String);

/// This member's signing key for one communicator. Made fresh for every communicator: a
/// key outlives nothing it could be stolen from.
pub struct RowKey {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for RowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only the public half: the private half never reaches a log.
        f.debug_struct("RowKey")
            .field("public", &self.public())
            .finish()
    }
}

impl RowKey {
    /// A fresh key pair from the system's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|e| KeyError(e.to_string()))?;
        let pair =
            Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|e| KeyError(e.to_string()))?;
        Ok(Self { pair })
    }

    /// The public half, as handed to the other members.
    pub fn public(&self) -> [u8; PUBLIC_LEN] {
        let mut k = [0u8; PUBLIC_LEN];
        k.copy_from_slice(self.pair.public_key().as_ref());
        k
    }

    /// Signs `block` as `what` says it is.
    pub fn sign(&self, what: &Statement<'_>, block: &[u8]) -> [u8; SIGNATURE_LEN] {
        let mut s = [0u8; SIGNATURE_LEN];
        s.copy_from_slice(self.pair.sign(&what.message(block)).as_ref());
        s
    }
}

/// What a signature says about a block besides its bytes: which communicator, which
/// gather on it, what the block is and who wrote it. A block replayed from another gather,
/// another communicator or another author fails.
#[derive(Debug, Clone, Copy)]
pub struct Statement<'a> {
    /// The communicator's id.
    pub comm_id: u64,
    /// The signed gathers run on this communicator before this one.
    pub seq: u64,
    /// What the block is (`"probe row"`, `"plan"`, ...).
    pub context: &'a str,
    /// The author's rank.
    pub author: usize,
}

impl Statement<'_> {
    fn message(&self, block: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(DOMAIN.len() + 32 + self.context.len() + block.len());
        m.extend_from_slice(DOMAIN);
        m.extend_from_slice(&self.comm_id.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&(self.context.len() as u64).to_le_bytes());
        m.extend_from_slice(self.context.as_bytes());
        m.extend_from_slice(&(self.author as u64).to_le_bytes());
        m.extend_from_slice(&(block.len() as u64).to_le_bytes());
        m.extend_from_slice(block);
        m
    }
}

/// Every member's public key, as each handed it over directly (index = rank).
#[derive(Debug, Clone)]
pub struct Authors {
    keys: Vec<[u8; PUBLIC_LEN]>,
}

impl Authors {
    /// The keys in rank order.
    pub fn new(keys: Vec<[u8; PUBLIC_LEN]>) -> Self {
        Self { keys }
    }

    /// Whether `signature` is the author's over `block` as `what` says.
    pub fn verify(&self, what: &Statement<'_>, block: &[u8], signature: &[u8]) -> bool {
        let Some(key) = self.keys.get(what.author) else {
            return false;
        };
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&what.message(block), signature)
            .is_ok()
    }
}

/// A block whose signature did not check out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forgery {
    /// The rank the block claims as its author.
    pub author: usize,
    /// The first member that relayed the forged blocks this member received, as far as it
    /// can tell: on the ring every block of author a passed a + 1, ..., this member − 1,
    /// so the forger lies on the stretch after the forged author nearest upstream, and
    /// this is that stretch's first member. It is the forger when the forger rewrites
    /// every block it relays, or when its victim is its left neighbour; otherwise the
    /// forger is further along. A block from this member's left neighbour came without a relay: `relay` is
    /// then its author (its connection, not a relay, was forged).
    pub relay: usize,
}

/// The forgeries among the blocks `me` received in a ring all-gather of `n` ranks, given
/// which authors' blocks failed (see [`Forgery::relay`]).
pub fn forgeries(me: usize, n: usize, failed: &[usize]) -> Vec<Forgery> {
    let upstream = |a: usize| (me + n - a) % n;
    let Some(nearest) = failed.iter().copied().min_by_key(|a| upstream(*a)) else {
        return Vec::new();
    };
    let first = (nearest + 1) % n;
    let relay = if first == me { nearest } else { first };
    failed
        .iter()
        .map(|&author| Forgery { author, relay })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what(author: usize, seq: u64) -> Statement<'static> {
        Statement {
            comm_id: 7,
            seq,
            context: "probe row",
            author,
        }
    }

    #[test]
    fn a_block_checks_out_only_as_its_author_signed_it() {
        let keys: Vec<RowKey> = (0..3).map(|_| RowKey::generate().unwrap()).collect();
        let authors = Authors::new(keys.iter().map(RowKey::public).collect());
        let block = b"timings of rank 1";
        let sig = keys[1].sign(&what(1, 5), block);
        assert!(authors.verify(&what(1, 5), block, &sig));
        // Another byte, another gather, another context, another author, another
        // communicator, another signer: each fails.
        assert!(!authors.verify(&what(1, 5), b"timings of rank 2", &sig));
        assert!(!authors.verify(&what(1, 6), block, &sig));
        let plan = Statement {
            context: "plan",
            ..what(1, 5)
        };
        assert!(!authors.verify(&plan, block, &sig));
        assert!(!authors.verify(&what(2, 5), block, &sig));
        let other_comm = Statement {
            comm_id: 8,
            ..what(1, 5)
        };
        assert!(!authors.verify(&other_comm, block, &sig));
        let by_zero = keys[0].sign(&what(1, 5), block);
        assert!(!authors.verify(&what(1, 5), block, &by_zero));
        // A rank with no key, and a truncated signature, fail without a panic.
        assert!(!authors.verify(&what(9, 5), block, &sig));
        assert!(!authors.verify(&what(1, 5), block, &sig[..10]));
    }

    #[test]
    fn a_forged_stretch_names_the_first_relay_after_the_nearest_forged_author() {
        // Ring of 8, this member is 5; blocks of 2 reach it through 3 and 4.
        // A forger at 3 rewriting everything it relays: authors 2, 1, 0, 7, 6 fail
        // (every one whose path crosses 3), and 3 is named for all.
        let f = forgeries(5, 8, &[6, 7, 0, 1, 2]);
        assert!(f.iter().all(|x| x.relay == 3), "{f:?}");
        assert_eq!(f.len(), 5);
        // A forger rewriting only its victim 2's blocks, at 3: named.
        assert_eq!(
            forgeries(5, 8, &[2]),
            vec![Forgery {
                author: 2,
                relay: 3
            }]
        );
        // The left neighbour's own block came straight over its connection.
        assert_eq!(forgeries(5, 8, &[4])[0].relay, 4);
        // Wrapping: this member 1, forged author 6 (path 7, 0).
        assert_eq!(forgeries(1, 8, &[6])[0].relay, 7);
        assert!(forgeries(1, 8, &[]).is_empty());
    }
}
