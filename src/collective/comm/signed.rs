//! Signed all-gathers on the communicator: the key hand-over when it forms, and the
//! gather that signs every block and checks every block ([`crate::collective::authorship`]).
//! Apart from `comm.rs` because it is one concept of its own, with its own wire form.

use super::{Communicator, Op, check_len};
use crate::collective::algo::ring;
use crate::collective::authorship::{
    self, Authors, Forgery, PUBLIC_LEN, RowKey, SIGNATURE_LEN, SIGNED_VERSION, Statement,
};
use rustls_pki_types::CertificateDer;

use crate::collective::dtype::DataType;
use crate::collective::error::{CollError, CollResult, HcclCode};
use crate::collective::identity::{self, IDENTITY_STEP, MemberIdentity, PROOF_MAX};

/// What a communicator signs its all-gathers with (see [`Communicator::all_gather_signed`]).
#[derive(Debug)]
pub(super) struct Signing {
    key: RowKey,
    authors: Authors,
    seq: u64,
    /// Forgeries found and not yet taken ([`Communicator::take_forgeries`]), at most
    /// [`FOUND_MAX`].
    found: Vec<Forgery>,
    /// Certificate mode: each rank's certificate, as its proof carried it.
    leaves: Option<Vec<CertificateDer<'static>>>,
}

/// Forgeries kept until taken: a caller that never takes them costs a bounded amount.
const FOUND_MAX: usize = 4096;

impl Communicator {
    /// The ranks whose builds speak no wire version as high as `v`, lowest first (every
    /// member reads every other's range in its own handshakes, so all name the same).
    pub fn peers_below(&self, v: u8) -> Vec<usize> {
        self.mesh.peers_below(v)
    }

    /// How this communicator signs its all-gathers, once its mesh is up: with keys its
    /// members' certificates vouch for (certificate mode, which needs version 4 of every
    /// member), with keys handed over directly (version 4), or not at all.
    pub(super) fn establish_signing(&mut self) -> CollResult<Option<Signing>> {
        if self.size() < 2 {
            return Ok(None);
        }
        if let Some(id) = self.cfg.identity.clone() {
            if self.wire_version() < SIGNED_VERSION {
                return Err(CollError::new(
                    HcclCode::NotSupport,
                    IDENTITY_STEP,
                    self.peers_below(SIGNED_VERSION).first().copied(),
                    format!(
                        "certificate identity needs every member to speak wire version {SIGNED_VERSION}; the group would speak {}",
                        self.wire_version()
                    ),
                ));
            }
            return self.prove_identities(&id).map(Some);
        }
        if self.wire_version() >= SIGNED_VERSION && self.cfg.sign_gathers {
            return self.hand_over_keys().map(Some);
        }
        Ok(None)
    }

    /// Makes this member's signing key and hands its public half to every other member
    /// directly (a pairwise all-to-all: block i goes over the connection to rank i, so no
    /// third member relays a key), receiving theirs the same way.
    pub(super) fn hand_over_keys(&mut self) -> CollResult<Signing> {
        let key = RowKey::generate()
            .map_err(|e| CollError::new(HcclCode::Internal, "init", None, e.to_string()))?;
        let n = self.size();
        let send: Vec<u8> = (0..n).flat_map(|_| key.public()).collect();
        let mut recv = vec![0u8; PUBLIC_LEN * n];
        self.all_to_all(&send, &mut recv, PUBLIC_LEN, DataType::Uint8)?;
        let mut keys: Vec<[u8; PUBLIC_LEN]> = recv
            .chunks_exact(PUBLIC_LEN)
            .map(|k| k.try_into().unwrap_or([0u8; PUBLIC_LEN]))
            .collect();
        keys[self.rank()] = key.public();
        Ok(Signing {
            key,
            authors: Authors::new(keys),
            seq: 0,
            found: Vec::new(),
            leaves: None,
        })
    }

    /// Certificate mode: makes this member's signing key, and proves to every other member
    /// that its certificate's holder chose it, checking every other member's proof the same
    /// way ([`identity`]). Every challenge and every proof goes over the connection between
    /// the two members it is for (pairwise all-to-alls), so no third member can alter one
    /// and have its author blamed. A rank whose proof fails is named in the error
    /// ([`IDENTITY_STEP`], `peer`).
    pub(super) fn prove_identities(&mut self, id: &MemberIdentity) -> CollResult<Signing> {
        let internal = |e: String| CollError::new(HcclCode::Internal, IDENTITY_STEP, None, e);
        let key = RowKey::generate().map_err(|e| internal(e.to_string()))?;
        let (n, me) = (self.size(), self.rank());
        // A fresh challenge for each member, and each member's for this one.
        let mut asked = vec![0u8; 32 * n];
        ::ring::rand::SecureRandom::fill(&::ring::rand::SystemRandom::new(), &mut asked)
            .map_err(|_| internal("cannot draw a challenge".into()))?;
        let mut given = vec![0u8; 32 * n];
        self.all_to_all(&asked, &mut given, 32, DataType::Uint8)?;
        let comm_id = self.cfg.transport.comm_id;
        let mut proofs = vec![Vec::new(); n];
        for (p, proof) in proofs.iter_mut().enumerate().filter(|(p, _)| *p != me) {
            let said =
                identity::statement(comm_id, me, p, &given[32 * p..32 * (p + 1)], &key.public());
            proof.extend_from_slice(&key.public());
            proof.extend(
                id.identity
                    .prove(&said)
                    .map_err(|e| internal(e.to_string()))?,
            );
        }
        let width = self.proof_width(proofs.iter().map(Vec::len).max().unwrap_or(0))?;
        let block = 4 + width;
        let mut send = vec![0u8; block * n];
        for (p, proof) in proofs.iter().enumerate() {
            let at = &mut send[p * block..(p + 1) * block];
            at[..4].copy_from_slice(&(proof.len() as u32).to_le_bytes());
            at[4..4 + proof.len()].copy_from_slice(proof);
        }
        let mut recv = vec![0u8; block * n];
        self.all_to_all(&send, &mut recv, block, DataType::Uint8)?;
        let now = rustls_pki_types::UnixTime::now();
        let mut keys = vec![key.public(); n];
        let mut leaves = vec![id.identity.leaf(); n];
        for (r, b) in recv
            .chunks_exact(block)
            .enumerate()
            .filter(|(r, _)| *r != me)
        {
            let refuse = |why: String| {
                let at = self.addrs[r];
                let message = format!("rank {r} ({at}) did not prove its identity: {why}");
                CollError::new(HcclCode::Para, IDENTITY_STEP, Some(r), message)
            };
            let subject = id
                .subjects
                .get(r)
                .ok_or_else(|| refuse("no subject is configured for it".into()))?;
            let len = u32::from_le_bytes(b[..4].try_into().unwrap_or_default()) as usize;
            let (public, proof) = b[4..]
                .get(..len)
                .and_then(|d| d.split_at_checked(PUBLIC_LEN))
                .ok_or_else(|| refuse("its proof is malformed".into()))?;
            let public: [u8; PUBLIC_LEN] = public.try_into().unwrap_or([0u8; PUBLIC_LEN]);
            let said = identity::statement(comm_id, r, me, &asked[32 * r..32 * (r + 1)], &public);
            leaves[r] = id
                .identity
                .check(proof, &said, subject, now)
                .map_err(|e| refuse(format!("as {subject}: {e}")))?;
            keys[r] = public;
        }
        Ok(Signing {
            key,
            authors: Authors::new(keys),
            seq: 0,
            found: Vec::new(),
            leaves: Some(leaves),
        })
    }

    /// The width of the proofs' all-to-all: the longest proof any member makes (all-gathered;
    /// a width past the bound fails on every member, blaming no one, as a relay may have
    /// inflated it).
    fn proof_width(&mut self, longest: usize) -> CollResult<usize> {
        let n = self.size();
        let mut all = vec![0u8; 8 * n];
        self.all_gather(
            &(longest as u64).to_le_bytes(),
            &mut all,
            1,
            DataType::Uint64,
        )?;
        let width = all
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .max()
            .unwrap_or(0);
        let bound = (PUBLIC_LEN + PROOF_MAX) as u64;
        if width > bound {
            let e = format!("a member's identity proof is {width} bytes, more than {bound}");
            return Err(CollError::new(
                HcclCode::Para,
                "init: identity width",
                None,
                e,
            ));
        }
        Ok(width as usize)
    }

    /// Whether this communicator's members proved who they are with certificates
    /// (certificate mode).
    pub fn certificate_mode(&self) -> bool {
        self.signing.as_ref().is_some_and(|s| s.leaves.is_some())
    }

    /// Certificate mode: whether `rank`'s certificate is valid for `name`. None in shared-key
    /// mode, where nothing vouches for a name.
    pub fn certifies(&self, rank: usize, name: &str) -> Option<bool> {
        let leaves = self.signing.as_ref()?.leaves.as_ref()?;
        let subject = identity::Subject::Name(name.to_string());
        Some(
            leaves
                .get(rank)
                .is_some_and(|l| identity::certifies(l, &subject)),
        )
    }

    /// Whether this communicator's all-gathers are signed (wire version 4 and more than
    /// one member).
    pub fn signs_gathers(&self) -> bool {
        self.signing.is_some()
    }

    /// All-gather of `send` (the same length on every rank) into `recv` (`size` blocks),
    /// where every block is signed by its author and checked by every member, whoever
    /// relayed it ([`authorship`]). `context` says what the blocks are and `dtype` their
    /// elements (`send` a whole number of them); every member passes the same. Returns the blocks that failed their check: their place in `recv` is
    /// zeroed, and the caller must treat them as unknown. Below wire version 4 this is a
    /// plain all-gather and nothing is checked.
    ///
    /// It always runs as a ring, whatever `HCCL_ALGO` says: a forged block can then be
    /// traced to the relays it passed ([`Forgery::relay`]).
    pub fn all_gather_signed(
        &mut self,
        context: &'static str,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
    ) -> CollResult<Vec<Forgery>> {
        let (n, me) = (self.size(), self.rank());
        if send.is_empty() {
            // Every member passes the same length: nothing to gather, nothing to sign.
            return Ok(Vec::new());
        }
        let Some(signing) = &self.signing else {
            // Unsigned, as releases before version 4 gather: the element type is in every
            // frame's header, so it must be theirs.
            let count = send.len() / dtype.size().max(1);
            self.all_gather(send, recv, count, dtype)?;
            return Ok(Vec::new());
        };
        check_len(
            "all_gather_signed",
            "recv",
            recv.len(),
            send.len() * n,
            DataType::Uint8,
        )?;
        let comm_id = self.cfg.transport.comm_id;
        let what = |author| Statement {
            comm_id,
            seq: signing.seq,
            context,
            author,
        };
        let len = send.len();
        let block = len + SIGNATURE_LEN;
        let mut buf = vec![0u8; block * n];
        let own = &mut buf[me * block..(me + 1) * block];
        own[..len].copy_from_slice(send);
        own[len..].copy_from_slice(&signing.key.sign(&what(me), send));
        let fault = self.cfg.relay_fault.clone();
        let hook = move |author: usize, part: &mut [u8]| {
            if let Some(f) = &fault {
                f.0(context, author, &mut part[..len]);
            }
        };
        let relay: Option<&ring::RelayHook<'_>> = match self.cfg.relay_fault {
            Some(_) => Some(&hook),
            None => None,
        };
        self.run(
            Op::new("all_gather", "ring", buf.len(), DataType::Uint8),
            &[ring::neighbours(me, n).1],
            &[ring::neighbours(me, n).0],
            |ctx| ring::all_gather_relaying(ctx, &mut buf, block * n, 0, relay),
        )?;
        let Some(signing) = &mut self.signing else {
            return Ok(Vec::new());
        };
        let what = |author| Statement {
            comm_id,
            seq: signing.seq,
            context,
            author,
        };
        let mut failed = Vec::new();
        for (author, (b, out)) in buf
            .chunks_exact(block)
            .zip(recv.chunks_exact_mut(len))
            .enumerate()
        {
            let (data, sig) = b.split_at(len);
            if author == me || signing.authors.verify(&what(author), data, sig) {
                out.copy_from_slice(data);
            } else {
                out.fill(0);
                failed.push(author);
            }
        }
        signing.seq += 1;
        let forged = authorship::forgeries(me, n, &failed);
        let room = FOUND_MAX.saturating_sub(signing.found.len());
        signing.found.extend(forged.iter().take(room));
        Ok(forged)
    }

    /// [`all_gather_signed`](Self::all_gather_signed) for blocks every member must read
    /// alike (plans, names, places, port tables, digests, widths): only the members
    /// downstream of a forger see its forgery, so going on would split the group. Any
    /// failed block breaks the communicator instead, naming its author and relay (every
    /// member then re-forms); the forgery is kept for [`take_forgeries`](Self::take_forgeries).
    pub fn all_gather_agreed(
        &mut self,
        context: &'static str,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
    ) -> CollResult<()> {
        let forged = self.all_gather_signed(context, send, recv, dtype)?;
        let Some(f) = forged.first() else {
            return Ok(());
        };
        let e = CollError::new(
            HcclCode::Remote,
            "all_gather_agreed",
            Some(f.relay),
            format!(
                "the {context} of rank {} failed its author's signature (relayed from rank {} on): re-forming",
                f.author, f.relay
            ),
        );
        Err(self.poison(e))
    }

    /// The forgeries every signed all-gather found since the last call (every kind of
    /// block: the caller counts them in one place).
    pub fn take_forgeries(&mut self) -> Vec<Forgery> {
        self.signing
            .as_mut()
            .map(|s| std::mem::take(&mut s.found))
            .unwrap_or_default()
    }
}
