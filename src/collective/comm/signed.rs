//! Signed all-gathers on the communicator: the key hand-over when it forms, and the
//! gather that signs every block and checks every block ([`crate::collective::authorship`]).
//! Apart from `comm.rs` because it is one concept of its own, with its own wire form.

use super::{Communicator, Op, check_len};
use crate::collective::algo::ring;
use crate::collective::authorship::{
    self, Authors, Forgery, PUBLIC_LEN, RowKey, SIGNATURE_LEN, Statement,
};
use crate::collective::dtype::DataType;
use crate::collective::error::{CollError, CollResult, HcclCode};

/// What a communicator signs its all-gathers with (see [`Communicator::all_gather_signed`]).
#[derive(Debug)]
pub(super) struct Signing {
    key: RowKey,
    authors: Authors,
    seq: u64,
    /// Forgeries found and not yet taken ([`Communicator::take_forgeries`]), at most
    /// [`FOUND_MAX`].
    found: Vec<Forgery>,
}

/// Forgeries kept until taken: a caller that never takes them costs a bounded amount.
const FOUND_MAX: usize = 4096;

impl Communicator {
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
        })
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

    /// The forgeries every signed all-gather found since the last call (every kind of
    /// block: the caller counts them in one place).
    pub fn take_forgeries(&mut self) -> Vec<Forgery> {
        self.signing
            .as_mut()
            .map(|s| std::mem::take(&mut s.found))
            .unwrap_or_default()
    }
}
