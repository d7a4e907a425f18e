//! Collective algorithms, each a sequence of [`OpCtx::exchange`] steps.
//!
//! An algorithm sees only the mesh, byte buffers and a data type; it never allocates a
//! connection or knows about bootstrap. Partition arithmetic lives here so every
//! algorithm splits `count` elements the same way: the first `count % n` parts get one
//! extra element.

pub(crate) mod bruck;
pub(crate) mod hd;
pub(crate) mod hier;
pub(crate) mod pairwise;
pub(crate) mod ring;
pub mod select;
pub(crate) mod tree;

use std::borrow::Cow;
use std::ops::Range;
use std::time::Instant;

use super::dtype::DataType;
use super::error::CollResult;
use super::transport::{Mesh, Payload, RecvMode, Seqs, Traffic, Transfer};

/// Element counts of the `n` parts of `count` elements.
pub fn part_counts(count: usize, n: usize) -> Vec<usize> {
    let n = n.max(1);
    (0..n)
        .map(|i| count / n + usize::from(i < count % n))
        .collect()
}

/// Byte ranges of the `n` parts of `count` elements of `elem` bytes.
pub fn part_ranges(count: usize, n: usize, elem: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    part_counts(count, n)
        .into_iter()
        .map(|c| {
            let r = start..start + c * elem;
            start = r.end;
            r
        })
        .collect()
}

/// Byte ranges of the consecutive slices, of at most `slice` bytes (whole elements, at
/// least one), that cover a buffer of `len` bytes. An empty buffer is one empty slice, so
/// an algorithm run per slice still runs once.
pub fn slice_ranges(len: usize, slice: usize, elem: usize) -> impl Iterator<Item = Range<usize>> {
    let elem = elem.max(1);
    let step = (slice / elem).max(1) * elem;
    let slices = len.div_ceil(step).max(1);
    (0..slices).map(move |k| (k * step).min(len)..((k + 1) * step).min(len))
}

/// Runs an all-reduce `f(src, buf, count)` over each slice of `buf` (and the same slice
/// of an out-of-place `src`) in turn; see [`slice_ranges`]. An element-wise reduction
/// sliced this way gives exactly the result of one run over the whole buffer.
pub fn per_slice(
    src: Option<&[u8]>,
    buf: &mut [u8],
    slice: usize,
    dtype: DataType,
    mut f: impl FnMut(Option<&[u8]>, &mut [u8], usize) -> CollResult<()>,
) -> CollResult<()> {
    for s in slice_ranges(buf.len(), slice, dtype.size()) {
        let count = s.len() / dtype.size();
        f(src.map(|x| &x[s.clone()]), &mut buf[s], count)?;
    }
    Ok(())
}

/// The buffers of one reducing step that sends part `send` and receives into part `recv`
/// of `buf`. With an out-of-place input `src` (as long as `buf`), a `Reduce` receive
/// becomes `ReduceFrom` the same part of `src`, and the send comes from `src` when
/// `send_from_src` (the first step, before `buf` holds anything of that part).
pub fn step_parts<'a>(
    buf: &'a mut [u8],
    src: Option<&'a [u8]>,
    send_from_src: bool,
    send: Range<usize>,
    recv: Range<usize>,
    mode: RecvMode<'a>,
) -> (&'a [u8], &'a mut [u8], RecvMode<'a>) {
    let mode = match (src, mode) {
        (Some(s), RecvMode::Reduce(op)) => RecvMode::ReduceFrom(op, &s[recv.clone()]),
        (_, m) => m,
    };
    match src {
        Some(s) if send_from_src => (&s[send], &mut buf[recv], mode),
        _ => {
            let (sb, rb) = split_pair(buf, send, recv);
            (sb, rb, mode)
        }
    }
}

/// Borrows `send` immutably and `recv` mutably from one buffer; the ranges must not
/// overlap (algorithms only ever pair distinct parts).
pub fn split_pair(buf: &mut [u8], send: Range<usize>, recv: Range<usize>) -> (&[u8], &mut [u8]) {
    assert!(
        send.end <= recv.start || recv.end <= send.start || send.is_empty() || recv.is_empty(),
        "overlapping parts"
    );
    if send.is_empty() {
        return (&[], &mut buf[recv]);
    }
    if recv.is_empty() {
        return (&buf[send], &mut []);
    }
    if send.start < recv.start {
        let (a, b) = buf.split_at_mut(recv.start);
        (&a[send], &mut b[..recv.len()])
    } else {
        let (a, b) = buf.split_at_mut(send.start);
        (&b[..send.len()], &mut a[recv])
    }
}

/// One operation's context: which mesh, which sequence numbers, the deadline, and the
/// names used in errors.
///
/// Nothing here is formatted or hashed per operation: at 8 bytes an all-reduce takes
/// about 5 µs, and the names, maps and strings it used to build cost several percent of it.
pub struct OpCtx<'a> {
    /// Connections.
    pub mesh: &'a Mesh,
    /// Element type.
    pub dtype: DataType,
    /// Execution deadline of the whole operation.
    pub deadline: Instant,
    /// Operation, for error messages.
    pub op: &'static str,
    /// Algorithm, for error messages.
    pub algo: &'static str,
    /// Control or bulk: whether the frames are always tagged.
    pub class: Payload,
    sends: Seqs,
    recvs: Seqs,
    steps: std::cell::RefCell<Vec<crate::collective::timeline::Step>>,
}

/// The sequence number claimed for `peer` (0, which no frame carries, if none was).
fn seq_of(seqs: &[(usize, u64)], peer: usize) -> u64 {
    seqs.iter().find(|(p, _)| *p == peer).map_or(0, |(_, s)| *s)
}

impl<'a> OpCtx<'a> {
    /// A context for one operation; `sends`/`recvs` list every peer the operation will
    /// send to / receive from (their per-link sequence numbers are claimed now).
    pub fn new(
        mesh: &'a Mesh,
        (dtype, class): (DataType, Payload),
        deadline: Instant,
        (op, algo): (&'static str, &'static str),
        sends: &[usize],
        recvs: &[usize],
    ) -> Self {
        let (sends, recvs) = mesh.next_seqs(sends, recvs);
        Self {
            mesh,
            dtype,
            deadline,
            op,
            algo,
            class,
            sends,
            recvs,
            steps: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// The steps taken so far (for the timeline).
    pub fn take_steps(&self) -> Vec<crate::collective::timeline::Step> {
        std::mem::take(&mut self.steps.borrow_mut())
    }

    /// One step of a collective: send `send.1` to `send.0` while receiving into `recv.1`
    /// from `recv.0`. The step is recorded (name, peers, bytes, start and end) for the
    /// timeline, failed or not.
    pub fn exchange(
        &self,
        step: impl Into<Cow<'static, str>>,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, &mut [u8], RecvMode)>,
    ) -> CollResult<()> {
        self.transfer(step, Traffic::Collective, send, recv)
    }

    /// A point-to-point send and/or receive, recorded like [`exchange`](Self::exchange);
    /// its peer must use the point-to-point calls too (the striping differs).
    pub fn point_to_point(
        &self,
        step: impl Into<Cow<'static, str>>,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, &mut [u8], RecvMode)>,
    ) -> CollResult<()> {
        self.transfer(step, Traffic::PointToPoint, send, recv)
    }

    fn transfer(
        &self,
        step: impl Into<Cow<'static, str>>,
        traffic: Traffic,
        send: Option<(usize, &[u8])>,
        recv: Option<(usize, &mut [u8], RecvMode)>,
    ) -> CollResult<()> {
        let step = step.into();
        let s = send.as_ref().map_or(0, |(p, _)| seq_of(&self.sends, *p));
        let r = recv.as_ref().map_or(0, |(p, _, _)| seq_of(&self.recvs, *p));
        let sent = send.as_ref().map(|(p, d)| (*p, d.len()));
        let received = recv.as_ref().map(|(p, d, _)| (*p, d.len()));
        let start = Instant::now();
        // The step's full name only matters in an error, so it is formatted only then
        // (a string per step is measurable at 8 B).
        let transfer = Transfer {
            op: self.op,
            send_seq: s,
            recv_seq: r,
            dtype: self.dtype,
            traffic,
            class: self.class,
            deadline: self.deadline,
        };
        let result = self.mesh.exchange(&transfer, send, recv).map_err(|mut e| {
            e.step = format!("{} ({}) {step}", self.op, self.algo);
            e
        });
        self.steps
            .borrow_mut()
            .push(crate::collective::timeline::Step {
                name: step,
                send: sent,
                recv: received,
                start,
                end: Instant::now(),
            });
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parts_cover_count(count in 0usize..100_000, n in 1usize..64) {
            let c = part_counts(count, n);
            prop_assert_eq!(c.len(), n);
            prop_assert_eq!(c.iter().sum::<usize>(), count);
            prop_assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1);
            let r = part_ranges(count, n, 4);
            prop_assert_eq!(r.last().unwrap().end, count * 4);
            for w in r.windows(2) { prop_assert_eq!(w[0].end, w[1].start); }
        }

        #[test]
        fn slices_cover_the_buffer_in_whole_elements(
            count in 0usize..10_000,
            slice in 0usize..5_000,
            elem in proptest::sample::select(vec![1usize, 2, 4, 8]),
        ) {
            let len = count * elem;
            let s: Vec<Range<usize>> = slice_ranges(len, slice, elem).collect();
            prop_assert_eq!(s[0].start, 0);
            prop_assert_eq!(s.last().unwrap().end, len);
            for w in s.windows(2) { prop_assert_eq!(w[0].end, w[1].start); }
            let step = (slice / elem).max(1) * elem;
            for (k, r) in s.iter().enumerate() {
                prop_assert_eq!(r.start % elem, 0);
                prop_assert_eq!(r.len() % elem, 0);
                prop_assert!(r.len() <= step.max(elem));
                // Only the last slice may be short, and only an empty buffer has an empty one.
                if k + 1 < s.len() { prop_assert_eq!(r.len(), step); }
                prop_assert_eq!(r.is_empty(), len == 0);
            }
        }

        #[test]
        fn split_pair_gives_the_asked_parts(len in 2usize..200, a in 0usize..200, b in 0usize..200) {
            let (a, b) = (a % len, b % len);
            let (lo, hi) = (a.min(b), a.max(b));
            let mut buf: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let expect_send: Vec<u8> = buf[0..lo].to_vec();
            let (s, r) = split_pair(&mut buf, 0..lo, lo..hi);
            prop_assert_eq!(s, &expect_send[..]);
            prop_assert_eq!(r.len(), hi - lo);
        }
    }
}
