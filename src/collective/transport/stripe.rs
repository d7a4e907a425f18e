//! The data path: one [`Transfer`] cut into segments, each segment striped over a
//! peer's channels, each stripe sent as frames of at most a chunk, and every received
//! frame checked (header, then tag) before its payload lands as its [`RecvMode`] says.

use std::io::IoSlice;
use std::time::Instant;

use super::frame::{HEADER_LEN, Header, Kind, Payload};
use super::notice::{Notice, read_abort};
use super::rawio::{Wait, ensure_timeout, read_at_least, read_exact, write_all_vectored};
use super::seal::{self, TAG_LEN};
use super::{Link, Mesh, forged, io_error, timed_out};
use crate::collective::dtype::{DataType, ReduceOp, reduce_apart, reduce_into};
use crate::collective::error::{CollError, CollResult, HcclCode};

/// The floor of the inline limit: a transfer up to half the send buffer, and up to this
/// much whatever the socket buffers, is sent without a helper thread.
pub const INLINE_FLOOR: usize = 128 * 1024;

/// Every stripe of a striped transfer carries at least this much, so a transfer is
/// striped over ⌊len / STRIPE_MIN⌋ channels (at least one, at most all): below 512 KiB it
/// is one frame sequence on channel 0, at 512 KiB two stripes, from 1 MiB all four.
/// Striping a small message only adds frames and wake-ups. Against striping everything
/// above 128 KiB (64 KiB stripes at 512 KiB), medians of ten interleaved rounds: 2-rank
/// all-reduce at 512 KiB / 1 MiB 3.41 / 3.56 → 4.00 / 3.71 GB/s busbw, 4 ranks at
/// 512 KiB / 1 / 2 MiB 1.72 / 1.80 / 1.96 → 1.90 / 1.98 / 2.06. Stripes of at least
/// 512 KiB lost (4-rank 2 MiB 2.10 → 1.47).
pub const STRIPE_MIN: usize = 256 * 1024;

/// Transfers are exchanged in segments of at most this many bytes.
pub const SEGMENT: usize = 4 << 20;

/// Point-to-point transfers above this size travel on channel 0 alone instead of
/// striped over the channels: a one-way stream of whole segments lost more than half its
/// bandwidth striped (64 MiB point-to-point 6.4 → 2.7 GB/s, three interleaved rounds on
/// the 2-core reference host). Collective steps, where every link carries traffic both
/// ways at once, stripe every segment: 2-rank all-reduce at 16 / 32 MiB 2.74 / 2.39 →
/// 3.56 / 2.89 GB/s busbw, 4-rank at 4 / 8 MiB 1.41 / 1.10 → 1.76 / 1.22.
pub const STRIPE_MAX: usize = 2 << 20;

/// Frames whose payload is at most this size are read with one call into a reused
/// buffer and copied out: one system call instead of two for a small message. Above it
/// the copy costs more than the call (64 KiB frames spent 22 % of CPU in that copy and in
/// zeroing the buffer), so the payload is read straight into its destination.
const COMBINE_MAX: usize = 4 * 1024;

/// How received bytes land in the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode<'a> {
    /// Copy.
    Copy,
    /// Reduce into the destination with this operator.
    Reduce(ReduceOp),
    /// Store `op(src, received)`, where `src` is as long as the destination. An
    /// out-of-place reduction reads its own contribution from the caller's send buffer
    /// this way instead of first copying the whole send buffer into the receive buffer:
    /// above the last-level cache that copy costs as much time as the network transfer.
    ReduceFrom(ReduceOp, &'a [u8]),
}

impl<'a> RecvMode<'a> {
    /// `Reduce(op)` in place, or `ReduceFrom(op, src)` from an out-of-place input.
    pub fn reduce(op: ReduceOp, src: Option<&'a [u8]>) -> Self {
        match src {
            Some(s) => RecvMode::ReduceFrom(op, s),
            None => RecvMode::Reduce(op),
        }
    }

    /// The mode for the bytes `range` of the destination.
    fn narrow(self, range: std::ops::Range<usize>) -> RecvMode<'a> {
        match self {
            RecvMode::ReduceFrom(op, src) => RecvMode::ReduceFrom(op, &src[range]),
            other => other,
        }
    }
}

/// What kind of operation a transfer belongs to, which decides how it is striped. Both
/// ends of a transfer run the same kind of operation (a collective on every rank, or a
/// send matched by a receive), so they agree on the layout without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// A step of a collective: striped over the channels, [`STRIPE_MIN`] or more each.
    Collective,
    /// Point-to-point send and receive: striped only up to [`STRIPE_MAX`].
    PointToPoint,
}

/// One exchange's context, shared by both of its directions and by every segment,
/// stripe and frame of it: everything [`Mesh::exchange`] needs besides the buffers.
#[derive(Debug, Clone, Copy)]
pub struct Transfer<'a> {
    /// The operation, for errors.
    pub op: &'a str,
    /// The sequence number the operation claimed on the link it sends on (0 if it sends
    /// nothing).
    pub send_seq: u64,
    /// The sequence number the operation claimed on the link it receives on (0 if it
    /// receives nothing).
    pub recv_seq: u64,
    /// Element type: stripes and chunks hold whole elements; a reduction needs it.
    pub dtype: DataType,
    /// How segments are striped over the channels.
    pub traffic: Traffic,
    /// Whether the frames are tagged (see [`Kind::for_payload`]).
    pub class: Payload,
    /// When the whole operation must be done.
    pub deadline: Instant,
}

/// The number of channels a transfer of `len` bytes is striped over: as many as give
/// every stripe [`STRIPE_MIN`] bytes or more (a small message is one frame sequence on
/// channel 0), and one above [`STRIPE_MAX`] for point-to-point. It depends only on the
/// transfer's own size and kind, which both ends know.
fn lanes(streams: usize, len: usize, traffic: Traffic) -> usize {
    if traffic == Traffic::PointToPoint && len > STRIPE_MAX {
        return 1;
    }
    (len / STRIPE_MIN).clamp(1, streams.max(1))
}

/// Splits `len` bytes into `n` contiguous ranges aligned to `elem`, as even as possible.
pub fn stripes(len: usize, n: usize, elem: usize) -> Vec<std::ops::Range<usize>> {
    let elems = len / elem;
    let n = n.max(1).min(elems.max(1));
    let (base, extra) = (elems / n, elems % n);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let size = (base + usize::from(i < extra)) * elem;
        out.push(start..start + size);
        start += size;
    }
    out
}

/// The sending side of an exchange: the peer and the bytes.
type Outgoing<'d> = Option<(usize, &'d [u8])>;

/// The receiving side of an exchange: the peer, the destination and how bytes land.
type Incoming<'d, 'm> = Option<(usize, &'d mut [u8], RecvMode<'m>)>;

thread_local! {
    /// Reduction scratch and small-frame buffer of the receiving thread.
    static RECV_BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

impl Mesh {
    /// Sends `send.1` to `send.0`, and receives `recv.1.len()` bytes from `recv.0` into
    /// `recv.1`, concurrently. Either side may be absent or empty.
    ///
    /// Transfers are cut into [`SEGMENT`]-byte segments exchanged one after another (both
    /// directions cut the same way, so the wire layout depends only on sizes). A segment
    /// that fits in the local socket buffers goes inline without a helper thread, which
    /// on a small host is faster than threads competing for the cores; only one segment
    /// per direction is ever in flight. `t.traffic` decides how segments are striped over
    /// the channels, `t.class` whether the frames are tagged (see [`Kind::for_payload`]).
    pub fn exchange(
        &self,
        t: &Transfer<'_>,
        send: Outgoing<'_>,
        recv: Incoming<'_, '_>,
    ) -> CollResult<()> {
        if let Some((_, dst, RecvMode::ReduceFrom(_, src))) = &recv
            && src.len() != dst.len()
        {
            return Err(CollError::para(
                t.op,
                format!(
                    "reduce source holds {} bytes but the destination {}",
                    src.len(),
                    dst.len()
                ),
            ));
        }
        let seg = (SEGMENT / t.dtype.size()).max(1) * t.dtype.size();
        let send_len = send.as_ref().map_or(0, |(_, d)| d.len());
        let recv_len = recv.as_ref().map_or(0, |(_, d, _)| d.len());
        if send_len <= seg && recv_len <= seg {
            return self.exchange_segment(t, send, recv);
        }
        let (send, mut recv) = (send, recv);
        let mut k = 0;
        loop {
            let s_part = send.as_ref().and_then(|(p, d)| {
                let lo = (k * seg).min(d.len());
                let hi = ((k + 1) * seg).min(d.len());
                (lo < hi).then(|| (*p, &d[lo..hi]))
            });
            let r_part = match recv.as_mut() {
                Some((p, d, m)) => {
                    let lo = (k * seg).min(d.len());
                    let hi = ((k + 1) * seg).min(d.len());
                    (lo < hi).then(|| (*p, &mut d[lo..hi], m.narrow(lo..hi)))
                }
                None => None,
            };
            if s_part.is_none() && r_part.is_none() {
                break;
            }
            self.exchange_segment(t, s_part, r_part)?;
            k += 1;
        }
        Ok(())
    }

    /// The frame kind of `t`'s payloads on this mesh.
    fn kind(&self, t: &Transfer<'_>) -> Kind {
        Kind::for_payload(t.class, self.cfg.authenticate_payloads)
    }

    fn exchange_segment(
        &self,
        t: &Transfer<'_>,
        send: Outgoing<'_>,
        recv: Incoming<'_, '_>,
    ) -> CollResult<()> {
        let send = send.filter(|(_, d)| !d.is_empty());
        let recv = recv.filter(|(_, d, _)| !d.is_empty());
        // Wire layout depends only on each transfer's own size (see `lanes`), which both
        // of its ends know; never on the other direction of an exchange, which only one
        // end knows. Whether a rank sends from its own thread or from a helper thread is
        // its own business (it depends on its socket buffers), not the peer's.
        let elem = t.dtype.size();
        let fits = send
            .as_ref()
            .is_none_or(|(_, d)| d.len() <= self.inline_max);
        if fits {
            // The whole send fits in the kernel's socket buffers, so it completes without
            // the peer reading: send inline, then receive, with no helper thread competing
            // for the CPU.
            if let Some((to, data)) = send {
                let n = lanes(self.peer(to, t.op)?.links.len(), data.len(), t.traffic);
                for (ch, part) in stripes(data.len(), n, elem).into_iter().enumerate() {
                    self.send_stripe(t, to, ch, &data[part])?;
                }
            }
            if let Some((from, buf, mode)) = recv {
                self.recv_stripes(t, from, buf, mode, Wait::Spin)?;
            }
            return Ok(());
        }
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            if let Some((to, data)) = send {
                let n = lanes(self.peer(to, t.op)?.links.len(), data.len(), t.traffic);
                for (ch, part) in stripes(data.len(), n, elem).into_iter().enumerate() {
                    let d = &data[part];
                    handles.push(scope.spawn(move || self.send_stripe(t, to, ch, d)));
                }
            }
            // Receive every stripe on this thread, in channel order: the senders run on
            // their own threads, so a stripe waiting in its socket buffer never blocks
            // another channel's sender, and no receive thread needs spawning.
            let mut result = match recv {
                Some((from, buf, mode)) => self.recv_stripes(t, from, buf, mode, Wait::Block),
                None => Ok(()),
            };
            for h in handles {
                let r = h.join().unwrap_or_else(|_| {
                    Err(CollError::new(
                        HcclCode::Internal,
                        t.op,
                        None,
                        "transfer thread panicked",
                    ))
                });
                if result.is_ok() {
                    result = r;
                }
            }
            result
        })
    }

    /// Sends one stripe to `to` on channel `ch`, chunk by chunk, each chunk one frame
    /// (header, payload and, when tagged, tag) after the peer's fault injection.
    fn send_stripe(&self, t: &Transfer<'_>, to: usize, ch: usize, data: &[u8]) -> CollResult<()> {
        let (op, kind) = (t.op, self.kind(t));
        let peer = self.peer(to, op)?;
        let link = &peer.links[ch];
        let s = &link.stream;
        let chunk = self.chunk_bytes(t.dtype);
        for (i, part) in data.chunks(chunk).enumerate() {
            if let Some(sh) = &peer.shaper {
                self.shape(sh, part.len(), to, op, t.deadline)?;
            }
            let remaining = t.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(timed_out(op, to));
            }
            ensure_timeout(&link.timeouts, s, false, remaining)
                .map_err(|e| io_error(op, to, &e, false))?;
            let h = Header {
                version: self.version,
                kind,
                dtype: t.dtype.code(),
                comm_id: self.cfg.comm_id,
                seq: t.send_seq,
                len: part.len() as u32,
                chunk: i as u32,
            };
            // Header, payload and tag in one call: a small frame is one TCP segment and
            // one wake-up at the receiver, and no payload is copied in user space. Every
            // frame takes a number, tagged or not, so both ends count alike.
            let head = h.encode();
            let counter = link.tx.claim();
            let written = if kind.tagged() {
                let tag = seal::tag(link.tx.key(), counter, &head, part);
                let mut bufs = [IoSlice::new(&head), IoSlice::new(part), IoSlice::new(&tag)];
                write_all_vectored(s, &mut bufs)
            } else {
                write_all_vectored(s, &mut [IoSlice::new(&head), IoSlice::new(part)])
            };
            written.map_err(|e| io_error(op, to, &e, false))?;
        }
        Ok(())
    }

    /// Receives a transfer from `from` on this thread, stripe by stripe in channel order.
    fn recv_stripes(
        &self,
        t: &Transfer<'_>,
        from: usize,
        buf: &mut [u8],
        mode: RecvMode<'_>,
        wait: Wait,
    ) -> CollResult<()> {
        let peer = self.peer(from, t.op)?;
        let n = lanes(peer.links.len(), buf.len(), t.traffic);
        let mut rest = buf;
        for (ch, part) in stripes(rest.len(), n, t.dtype.size())
            .into_iter()
            .enumerate()
        {
            let (head, tail) = rest.split_at_mut(part.len());
            rest = tail;
            let m = mode.narrow(part);
            let stripe = Inbound {
                mesh: self,
                t,
                link: &peer.links[ch],
                from,
                ch,
                kind: self.kind(t),
                wait,
            };
            stripe.receive(head, m)?;
        }
        Ok(())
    }

    fn chunk_bytes(&self, dtype: DataType) -> usize {
        let e = dtype.size();
        (self.cfg.chunk_bytes.min(self.cfg.max_frame) / e).max(1) * e
    }
}

/// One stripe being received: the link it arrives on and what its frames must say.
struct Inbound<'a> {
    mesh: &'a Mesh,
    t: &'a Transfer<'a>,
    link: &'a Link,
    from: usize,
    ch: usize,
    kind: Kind,
    wait: Wait,
}

/// A frame header that passed its checks, and the frame number it was given.
struct Head {
    bytes: [u8; HEADER_LEN],
    counter: u64,
    /// How many bytes of the small-frame buffer the header read filled (0 when the frame
    /// is read straight into its destination).
    have: usize,
}

impl Inbound<'_> {
    /// Receives the stripe chunk by chunk, checking every header (its length before
    /// anything else) and every tag, and landing the payload as `mode` says. A tagged
    /// payload is checked before it is reduced; a copied one lands in the destination
    /// first (the operation fails if its tag does not match, and the destination is then
    /// undefined, as after any failure).
    fn receive(&self, buf: &mut [u8], mode: RecvMode<'_>) -> CollResult<()> {
        let chunk = self.mesh.chunk_bytes(self.t.dtype);
        // Reused across calls on this thread: a fresh zeroed buffer per stripe cost a
        // memset of up to a chunk each time.
        RECV_BUFFERS.with_borrow_mut(|(scratch, small)| {
            if matches!(mode, RecvMode::Reduce(_) | RecvMode::ReduceFrom(..)) {
                scratch.resize(chunk.min(buf.len()).max(scratch.len()), 0);
            }
            for (i, dst) in buf.chunks_mut(chunk).enumerate() {
                let at = i * chunk;
                let mode = mode.narrow(at..at + dst.len());
                let remaining = self.t.deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    return Err(timed_out(self.t.op, self.from));
                }
                let s = &self.link.stream;
                ensure_timeout(&self.link.timeouts, s, true, remaining).map_err(|e| self.io(e))?;
                // A small frame usually arrives whole, so it is read with one call into a
                // buffer sized by what this rank expects (never by what the peer
                // announces); the header is checked as soon as its 32 bytes are in,
                // before waiting for or using the payload.
                if dst.len() <= COMBINE_MAX {
                    small.resize(HEADER_LEN + dst.len() + self.tag_len(), 0);
                    let head = self.header(i, dst.len(), Some(&mut *small))?;
                    self.land_small(&head, small, dst, mode)?;
                } else {
                    let head = self.header(i, dst.len(), None)?;
                    self.land_large(&head, scratch, dst, mode)?;
                }
            }
            Ok(())
        })
    }

    fn tag_len(&self) -> usize {
        if self.kind.tagged() { TAG_LEN } else { 0 }
    }

    fn io(&self, e: std::io::Error) -> CollError {
        io_error(self.t.op, self.from, &e, false)
    }

    /// Reads and checks the header of chunk `i` (`len` payload bytes): into `small` when
    /// given (with whatever follows it), else on its own. An abort notice from the peer
    /// becomes the error the operation returns.
    fn header(&self, i: usize, len: usize, small: Option<&mut Vec<u8>>) -> CollResult<Head> {
        let s = &self.link.stream;
        let mut hb = [0u8; HEADER_LEN];
        let mut have = 0;
        let combined = small.is_some();
        let small = match small {
            Some(small) => {
                have = read_at_least(s, small, HEADER_LEN, self.wait).map_err(|e| self.io(e))?;
                hb.copy_from_slice(&small[..HEADER_LEN]);
                &small[..]
            }
            None => {
                read_exact(s, &mut hb, self.wait).map_err(|e| self.io(e))?;
                &[][..]
            }
        };
        let counter = self.link.rx.claim();
        let comm_id = self.mesh.cfg.comm_id;
        let want = Header {
            version: self.mesh.version,
            kind: self.kind,
            dtype: self.t.dtype.code(),
            comm_id,
            seq: self.t.recv_seq,
            len: len as u32,
            chunk: i as u32,
        };
        if let Ok(h) = Header::decode(&hb)
            && h.kind == Kind::Abort
            && h.comm_id == comm_id
        {
            let already = if combined {
                &small[HEADER_LEN..have]
            } else {
                &[][..]
            };
            let notice = Notice {
                from: self.from,
                ch: self.ch,
                header: &hb,
                len: h.len as usize,
                counter,
                already,
            };
            return Err(read_abort(self.link, self.t.op, notice));
        }
        Header::decode(&hb)
            .and_then(|h| h.expect(&want, self.mesh.cfg.max_frame))
            .map_err(|m| {
                CollError::new(
                    HcclCode::TcpTransfer,
                    self.t.op,
                    Some(self.from),
                    format!("bad frame: {m}"),
                )
            })?;
        Ok(Head {
            bytes: hb,
            counter,
            have,
        })
    }

    /// Checks a payload's tag (nothing to check on an untagged frame).
    fn check(&self, head: &Head, payload: &[u8], tag: &[u8]) -> CollResult<()> {
        if self.tag_len() == 0
            || seal::verify(self.link.rx.key(), head.counter, &head.bytes, payload, tag)
        {
            Ok(())
        } else {
            Err(forged(self.t.op, self.from, self.ch, &self.link.stream))
        }
    }

    /// Lands a small frame read into `small` (header, payload, tag) after reading the
    /// rest of it.
    fn land_small(
        &self,
        head: &Head,
        small: &mut [u8],
        dst: &mut [u8],
        mode: RecvMode<'_>,
    ) -> CollResult<()> {
        if head.have < small.len() {
            read_exact(&self.link.stream, &mut small[head.have..], Wait::Block)
                .map_err(|e| self.io(e))?;
        }
        let (payload, tag) = small[HEADER_LEN..].split_at(dst.len());
        self.check(head, payload, tag)?;
        let dtype = self.t.dtype;
        match mode {
            RecvMode::Copy => dst.copy_from_slice(payload),
            RecvMode::Reduce(rop) => reduce_into(rop, dtype, dst, payload),
            RecvMode::ReduceFrom(rop, src) => reduce_apart(rop, dtype, dst, src, payload),
        }
        Ok(())
    }

    /// Reads a large frame's payload straight into `dst` (a copy) or into `scratch` (a
    /// reduction), then its tag, and lands it.
    fn land_large(
        &self,
        head: &Head,
        scratch: &mut [u8],
        dst: &mut [u8],
        mode: RecvMode<'_>,
    ) -> CollResult<()> {
        let s = &self.link.stream;
        let dtype = self.t.dtype;
        let mut tag = [0u8; TAG_LEN];
        let tag = &mut tag[..self.tag_len()];
        let read = |buf: &mut [u8], tag: &mut [u8]| -> CollResult<()> {
            read_exact(s, buf, Wait::Block).map_err(|e| self.io(e))?;
            read_exact(s, tag, Wait::Block).map_err(|e| self.io(e))
        };
        match mode {
            RecvMode::Copy => {
                read(dst, tag)?;
                self.check(head, dst, tag)?;
            }
            // The same operand order as `Reduce` (own value first), so max and min
            // treat NaN and signed zeros identically in and out of place.
            RecvMode::ReduceFrom(rop, src) => {
                let tmp = &mut scratch[..dst.len()];
                read(tmp, tag)?;
                self.check(head, tmp, tag)?;
                reduce_apart(rop, dtype, dst, src, tmp);
            }
            RecvMode::Reduce(rop) => {
                let tmp = &mut scratch[..dst.len()];
                read(tmp, tag)?;
                self.check(head, tmp, tag)?;
                reduce_into(rop, dtype, dst, tmp);
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
        fn stripes_cover_exactly_and_align(elems in 0usize..10_000, n in 1usize..9, esize in prop::sample::select(vec![1usize, 2, 4, 8])) {
            let len = elems * esize;
            let s = stripes(len, n, esize);
            prop_assert!(!s.is_empty() && s.len() <= n);
            let mut pos = 0;
            for r in &s {
                prop_assert_eq!(r.start, pos);
                prop_assert_eq!(r.len() % esize, 0);
                pos = r.end;
            }
            prop_assert_eq!(pos, len);
            let sizes: Vec<usize> = s.iter().map(|r| r.len()).collect();
            let (mn, mx) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(mx - mn <= esize);
        }

        #[test]
        fn striped_transfers_give_every_stripe_its_minimum(
            len in 0usize..(16 << 20),
            streams in 1usize..9,
            esize in prop::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            let len = len / esize * esize;
            let n = lanes(streams, len, Traffic::Collective);
            prop_assert!((1..=streams).contains(&n));
            let s = stripes(len, n, esize);
            if s.len() > 1 {
                for r in &s {
                    prop_assert!(r.len() + esize > STRIPE_MIN, "{} of {len}", r.len());
                }
            }
            // Not striped only where one more stripe would be under the minimum.
            if n < streams {
                prop_assert!(len < (n + 1) * STRIPE_MIN);
            }
        }
    }

    #[test]
    fn lanes_by_size_and_kind() {
        let coll = |len| lanes(4, len, Traffic::Collective);
        assert_eq!(coll(0), 1);
        assert_eq!(coll(128 << 10), 1);
        assert_eq!(coll((512 << 10) - 4), 1);
        assert_eq!(coll(512 << 10), 2);
        assert_eq!(coll(768 << 10), 3);
        assert_eq!(coll(1 << 20), 4);
        assert_eq!(coll(64 << 20), 4);
        let p2p = |len| lanes(4, len, Traffic::PointToPoint);
        assert_eq!(p2p(1 << 20), 4);
        assert_eq!(p2p(STRIPE_MAX), 4);
        assert_eq!(p2p(STRIPE_MAX + 4), 1);
    }
}
