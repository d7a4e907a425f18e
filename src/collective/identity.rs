//! Per-node identity: certificates that bind a member's slot, and the key its blocks are
//! signed with, to the node.
//!
//! With the shared key alone, any key holder can claim any rank at an acceptor and hand
//! the others a signing key of its own for that rank ([`super::authorship`] then proves
//! only that the rank's blocks come from whoever holds the slot). In certificate mode each
//! member also holds a certificate and key of its own, issued by the cluster's CA (files,
//! as cert-manager or a SPIFFE provider writes them), and when a communicator forms:
//!
//! 1. every member all-gathers a fresh 32-byte challenge;
//! 2. every member all-gathers a proof: its certificate chain, and its certificate key's
//!    signature over the communicator id, its rank, every member's challenge and the
//!    public half of its fresh signing key ([`statement`]);
//! 3. every member checks every other member's proof: the chain leads to the CA, the
//!    certificate is valid for the subject the member list gives that rank (its node name,
//!    else its probe address: [`Subject`]), and the signature checks out with the
//!    certificate's key over the statement with *this* member's own challenge in it.
//!
//! A proof cannot be replayed (it signs this member's fresh challenge) and a relay cannot
//! alter one unnoticed (it is signed), so the signing key each member then uses for a rank
//! is the one the rank's certificate holder chose. A rank whose proof fails is named, and
//! the communicator does not form with it.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::SignatureScheme;
use rustls::crypto::ring::default_provider;
use rustls::sign::SigningKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use webpki::{EndEntityCert, KeyUsage};

use super::authorship::PUBLIC_LEN;

/// Largest certificate in a proof.
const CERT_MAX: usize = 16 << 10;
/// Most certificates in a chain.
const CHAIN_MAX: usize = 8;
/// Largest proof on the wire (what [`Identity::prove`] makes fits well within it).
pub const PROOF_MAX: usize = 64 << 10;
/// Domain separation: a signature over a statement can be nothing else.
const DOMAIN: &[u8] = b"hcclwatch 2026 probe member identity\0";

/// The step name of a formation whose member did not prove its identity: its error names
/// that member's rank (`CollError::peer`), so the others can form without it.
pub const IDENTITY_STEP: &str = "init: identity";

/// Certificate mode for one communicator: this member's identity, and what each rank's
/// certificate must be valid for (index = rank).
#[derive(Debug, Clone)]
pub struct MemberIdentity {
    /// This member's certificate, key and the CA.
    pub identity: Arc<Identity>,
    /// What each rank's certificate must be valid for.
    pub subjects: Vec<Subject>,
}

/// What a rank's certificate must be valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The node's name (a DNS name in the certificate's subject alternative names).
    Name(String),
    /// The member's probe address (an IP address in them).
    Ip(IpAddr),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Name(n) => write!(f, "name {n}"),
            Subject::Ip(ip) => write!(f, "address {ip}"),
        }
    }
}

/// Why an identity cannot be used or a proof does not hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IdentityError {
    /// The private key is of a kind this build cannot sign with.
    #[error("the private key cannot sign: {0}")]
    Key(String),
    /// The private key does not belong to the certificate.
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    /// No CA certificate, or one that is not a CA certificate.
    #[error("the CA certificate is unusable: {0}")]
    Ca(String),
    /// The chain does not lead to the CA (expired, wrong issuer, malformed).
    #[error("the certificate does not chain to the CA: {0}")]
    Chain(String),
    /// The certificate is not valid for the subject its rank must have.
    #[error("the certificate is not valid for {subject}: {reason}")]
    Subject {
        /// What it had to be valid for.
        subject: Subject,
        /// webpki's reason.
        reason: String,
    },
    /// The proof is not in the wire form.
    #[error("malformed proof: {0}")]
    Malformed(&'static str),
    /// The signature over the statement does not check out.
    #[error("the certificate key's signature over this formation does not check out")]
    Signature,
}

/// This member's certificate, key and the cluster's CA.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<dyn SigningKey>,
    roots: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("chain", &self.chain.len())
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

/// The signature schemes a member signs with, most preferred first.
const SCHEMES: [SignatureScheme; 6] = [
    SignatureScheme::ED25519,
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
];

impl Identity {
    /// An identity from a chain (leaf first), its private key and the CA certificates.
    /// Checks now what would otherwise fail at every formation: the key can sign and
    /// belongs to the leaf, and the chain leads to the CA today.
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: &PrivateKeyDer<'_>,
        roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, IdentityError> {
        let key = rustls::crypto::ring::sign::any_supported_type(key)
            .map_err(|e| IdentityError::Key(e.to_string()))?;
        if chain.is_empty() || chain.len() > CHAIN_MAX {
            return Err(IdentityError::Chain(format!(
                "{} certificates (1 to {CHAIN_MAX})",
                chain.len()
            )));
        }
        if roots.is_empty() {
            return Err(IdentityError::Ca("no certificate".into()));
        }
        let me = Self { chain, key, roots };
        me.verified_leaf(&me.chain, UnixTime::now())?;
        let probe = b"hcclwatch identity key check";
        let (scheme, sig) = me.sign(probe)?;
        me.check_signature(&me.chain[0], scheme, probe, &sig)
            .map_err(|_| IdentityError::KeyMismatch)?;
        let size = me.prove(probe)?.len();
        if size > PROOF_MAX {
            return Err(IdentityError::Chain(format!(
                "the chain makes a proof of {size} bytes, more than the {PROOF_MAX} a member accepts"
            )));
        }
        Ok(me)
    }

    /// Whether this member's own certificate is valid for `subject` (for `check-config`).
    pub fn valid_for(&self, subject: &Subject) -> Result<(), IdentityError> {
        let leaf = self.verified_leaf(&self.chain, UnixTime::now())?;
        valid_for(&leaf, subject)
    }

    /// The proof of `statement`: the chain and the key's signature, in the wire form.
    pub fn prove(&self, statement: &[u8]) -> Result<Vec<u8>, IdentityError> {
        let (scheme, sig) = self.sign(statement)?;
        let mut out = vec![self.chain.len() as u8];
        for c in &self.chain {
            out.extend_from_slice(&(c.len() as u32).to_le_bytes());
            out.extend_from_slice(c);
        }
        out.extend_from_slice(&u16::from(scheme).to_le_bytes());
        out.extend_from_slice(&(sig.len() as u16).to_le_bytes());
        out.extend_from_slice(&sig);
        Ok(out)
    }

    /// Checks another member's `proof` of `statement`, whose certificate must be valid for
    /// `subject` at `now`; returns that certificate.
    pub fn check(
        &self,
        proof: &[u8],
        statement: &[u8],
        subject: &Subject,
        now: UnixTime,
    ) -> Result<CertificateDer<'static>, IdentityError> {
        let (chain, scheme, sig) = parse(proof)?;
        let leaf = self.verified_leaf(&chain, now)?;
        valid_for(&leaf, subject)?;
        self.check_signature(&chain[0], scheme, statement, sig)?;
        Ok(chain[0].clone().into_owned())
    }

    /// [`Self::check`] at the current time.
    pub fn check_now(
        &self,
        proof: &[u8],
        statement: &[u8],
        subject: &Subject,
    ) -> Result<CertificateDer<'static>, IdentityError> {
        self.check(proof, statement, subject, UnixTime::now())
    }

    /// This member's own certificate.
    pub fn leaf(&self) -> CertificateDer<'static> {
        self.chain[0].clone()
    }

    fn sign(&self, msg: &[u8]) -> Result<(SignatureScheme, Vec<u8>), IdentityError> {
        let signer = self
            .key
            .choose_scheme(&SCHEMES)
            .ok_or_else(|| IdentityError::Key("no supported signature scheme".into()))?;
        let sig = signer
            .sign(msg)
            .map_err(|e| IdentityError::Key(e.to_string()))?;
        Ok((signer.scheme(), sig))
    }

    fn check_signature(
        &self,
        leaf: &CertificateDer<'_>,
        scheme: SignatureScheme,
        msg: &[u8],
        sig: &[u8],
    ) -> Result<(), IdentityError> {
        let cert =
            EndEntityCert::try_from(leaf).map_err(|e| IdentityError::Chain(e.to_string()))?;
        let algs = default_provider().signature_verification_algorithms;
        let candidates = algs
            .mapping
            .iter()
            .find(|(s, _)| *s == scheme)
            .map(|(_, a)| *a)
            .ok_or(IdentityError::Signature)?;
        candidates
            .iter()
            .any(|alg| cert.verify_signature(*alg, msg, sig).is_ok())
            .then_some(())
            .ok_or(IdentityError::Signature)
    }

    /// The leaf of `chain`, once the chain is verified to lead to the CA at `now`.
    fn verified_leaf<'a>(
        &self,
        chain: &'a [CertificateDer<'a>],
        now: UnixTime,
    ) -> Result<EndEntityCert<'a>, IdentityError> {
        let anchors = self
            .roots
            .iter()
            .map(|r| {
                webpki::anchor_from_trusted_cert(r).map_err(|e| IdentityError::Ca(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let leaf =
            EndEntityCert::try_from(&chain[0]).map_err(|e| IdentityError::Chain(e.to_string()))?;
        let algs = default_provider().signature_verification_algorithms.all;
        // A node's certificate authenticates it both ways (it accepts and connects), so
        // either purpose will do; a certificate without the extension serves any.
        let mut last = None;
        for usage in [KeyUsage::client_auth(), KeyUsage::server_auth()] {
            match leaf.verify_for_usage(algs, &anchors, &chain[1..], now, usage, None, None) {
                Ok(_) => return Ok(leaf),
                Err(e) => last = Some(e),
            }
        }
        Err(IdentityError::Chain(
            last.map_or_else(String::new, |e| e.to_string()),
        ))
    }
}

/// Whether `leaf` (a certificate whose chain was checked when its proof was) is valid for
/// `subject`: a name a member announces is taken only when its certificate says it.
pub fn certifies(leaf: &CertificateDer<'_>, subject: &Subject) -> bool {
    EndEntityCert::try_from(leaf).is_ok_and(|c| valid_for(&c, subject).is_ok())
}

fn valid_for(leaf: &EndEntityCert<'_>, subject: &Subject) -> Result<(), IdentityError> {
    let name = match subject {
        Subject::Name(n) => ServerName::try_from(n.as_str())
            .map(|s| s.to_owned())
            .map_err(|e| IdentityError::Subject {
                subject: subject.clone(),
                reason: e.to_string(),
            })?,
        Subject::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    leaf.verify_is_valid_for_subject_name(&name)
        .map_err(|e| IdentityError::Subject {
            subject: subject.clone(),
            reason: e.to_string(),
        })
}

/// A proof's chain, scheme and signature, every length bounded before it is used.
fn parse(b: &[u8]) -> Result<(Vec<CertificateDer<'_>>, SignatureScheme, &[u8]), IdentityError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], IdentityError> {
        let end = at
            .checked_add(n)
            .filter(|e| *e <= b.len())
            .ok_or(IdentityError::Malformed("truncated"))?;
        let s = &b[at..end];
        at = end;
        Ok(s)
    };
    let count = take(1)?[0] as usize;
    if count == 0 || count > CHAIN_MAX {
        return Err(IdentityError::Malformed("chain length out of range"));
    }
    let mut chain = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into().unwrap_or_default()) as usize;
        if len == 0 || len > CERT_MAX {
            return Err(IdentityError::Malformed("certificate length out of range"));
        }
        chain.push(CertificateDer::from(take(len)?));
    }
    let scheme = SignatureScheme::from(u16::from_le_bytes(take(2)?.try_into().unwrap_or_default()));
    let len = u16::from_le_bytes(take(2)?.try_into().unwrap_or_default()) as usize;
    let sig = take(len)?;
    Ok((chain, scheme, sig))
}

/// What a member's certificate key signs for one other member when a communicator forms:
/// the communicator, its own rank, the rank it proves itself to, that member's challenge
/// and the public half of its signing key.
pub fn statement(
    comm_id: u64,
    rank: usize,
    verifier: usize,
    challenge: &[u8],
    row_key: &[u8; PUBLIC_LEN],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + 32 + challenge.len() + PUBLIC_LEN);
    m.extend_from_slice(DOMAIN);
    m.extend_from_slice(&comm_id.to_le_bytes());
    m.extend_from_slice(&(rank as u64).to_le_bytes());
    m.extend_from_slice(&(verifier as u64).to_le_bytes());
    m.extend_from_slice(&(challenge.len() as u64).to_le_bytes());
    m.extend_from_slice(challenge);
    m.extend_from_slice(row_key);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, IsCa, Issuer, KeyPair};

    /// A CA, and a function issuing a leaf for the given subject alternative names.
    struct Ca {
        cert: CertificateDer<'static>,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap().der().clone();
        Ca {
            cert,
            issuer: Issuer::new(params, key),
        }
    }

    impl Ca {
        fn leaf(&self, sans: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
            let key = KeyPair::generate().unwrap();
            let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
            let cert = CertificateParams::new(sans)
                .unwrap()
                .signed_by(&key, &self.issuer)
                .unwrap();
            (
                cert.der().clone(),
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
        }

        fn identity(&self, sans: &[&str]) -> Identity {
            let (cert, key) = self.leaf(sans);
            Identity::new(vec![cert], &key, vec![self.cert.clone()]).unwrap()
        }
    }

    fn name(n: &str) -> Subject {
        Subject::Name(n.into())
    }

    #[test]
    fn a_proof_holds_only_for_its_statement_its_subject_and_its_ca() {
        let ca = ca();
        let a = ca.identity(&["node-a", "10.0.0.1"]);
        let b = ca.identity(&["node-b"]);
        let now = UnixTime::now();
        let said = statement(7, 1, 0, &[1u8; 32], &[9u8; PUBLIC_LEN]);
        let proof = a.prove(&said).unwrap();
        b.check(&proof, &said, &name("node-a"), now).unwrap();
        b.check(
            &proof,
            &said,
            &Subject::Ip("10.0.0.1".parse().unwrap()),
            now,
        )
        .unwrap();
        // Another statement: another communicator, rank, verifier, challenge or signing
        // key.
        for other in [
            statement(8, 1, 0, &[1u8; 32], &[9u8; PUBLIC_LEN]),
            statement(7, 2, 0, &[1u8; 32], &[9u8; PUBLIC_LEN]),
            statement(7, 1, 2, &[1u8; 32], &[9u8; PUBLIC_LEN]),
            statement(7, 1, 0, &[2u8; 32], &[9u8; PUBLIC_LEN]),
            statement(7, 1, 0, &[1u8; 32], &[8u8; PUBLIC_LEN]),
        ] {
            assert_eq!(
                b.check(&proof, &other, &name("node-a"), now),
                Err(IdentityError::Signature)
            );
        }
        // Valid, but for another node: the slot of node-b is not node-a's to take.
        assert!(matches!(
            b.check(&proof, &said, &name("node-b"), now),
            Err(IdentityError::Subject { .. })
        ));
        assert!(matches!(
            b.check(
                &proof,
                &said,
                &Subject::Ip("10.0.0.2".parse().unwrap()),
                now
            ),
            Err(IdentityError::Subject { .. })
        ));
        // A certificate from another CA, even for the right name.
        let rogue = ca_other_identity("node-a");
        let forged = rogue.prove(&said).unwrap();
        assert!(matches!(
            b.check(&forged, &said, &name("node-a"), now),
            Err(IdentityError::Chain(_))
        ));
    }

    fn ca_other_identity(n: &str) -> Identity {
        ca().identity(&[n])
    }

    #[test]
    fn a_key_of_another_certificate_and_a_foreign_ca_are_refused_when_loaded() {
        let ca = ca();
        let (cert, _) = ca.leaf(&["node-a"]);
        let (_, other_key) = ca.leaf(&["node-a"]);
        assert_eq!(
            Identity::new(vec![cert.clone()], &other_key, vec![ca.cert.clone()]).unwrap_err(),
            IdentityError::KeyMismatch
        );
        let (cert, key) = ca.leaf(&["node-a"]);
        assert!(matches!(
            Identity::new(vec![cert], &key, vec![self::ca().cert]),
            Err(IdentityError::Chain(_))
        ));
    }

    #[test]
    fn malformed_proofs_are_refused_without_a_panic() {
        let ca = ca();
        let a = ca.identity(&["node-a"]);
        let said = statement(7, 1, 0, &[1u8; 32], &[9u8; PUBLIC_LEN]);
        let proof = a.prove(&said).unwrap();
        let now = UnixTime::now();
        // Every truncation, an empty proof, a chain of 0 or 200, a huge length.
        for cut in 0..proof.len() {
            assert!(a.check(&proof[..cut], &said, &name("node-a"), now).is_err());
        }
        let mut p = proof.clone();
        p[0] = 0;
        assert!(a.check(&p, &said, &name("node-a"), now).is_err());
        p[0] = 200;
        assert!(a.check(&p, &said, &name("node-a"), now).is_err());
        let mut p = proof;
        p[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            a.check(&p, &said, &name("node-a"), now),
            Err(IdentityError::Malformed("certificate length out of range"))
        );
    }
}
